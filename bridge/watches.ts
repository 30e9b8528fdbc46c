// The bridge's shared watches: one per kind, namespace and label selector, whatever number of
// Reconcilers use it. A watch starts with its first user and stops with its last; a user that
// needs more of each object than a watch keeps has it replaced by one that keeps what all need.
// Each event goes to the watch's users alone.
import { kindId, watchedKinds, type ReconcilerConfig, type WatchNeed } from './config.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics, WatchState } from './metrics.ts';
import { Watcher, type WatcherOptions } from './watcher.ts';
import type { WatchEvent } from './store.ts';
import type { Clock } from '../core/clock.ts';
import { sameKind, type KindRef } from '../core/objects.ts';
import { ApiError, servedResource, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';

/**
 * How long the first watch of a kind waits for the apiserver's discovery to list it. A CRD's
 * kind is listed a moment after the CRD is Established, longer on a busy apiserver; a Reconciler
 * started in that moment would otherwise wait for the next retry (bridge/reconcilers.ts).
 */
export const discoveryWaitMs = 5_000;

/** What the shared watches use of the bridge they run in. */
export interface WatchesContext {
  api: KubeApi;
  log: Logger;
  clock: Clock;
  metrics?: BridgeMetrics;
  watcher?: Partial<WatcherOptions>;
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** How long the first watch of a kind waits for discovery to serve it (default discoveryWaitMs). */
  discoveryWaitMs?: number;
}

/** The Reconcilers a watch tells, by name. */
export interface WatchUsers {
  onEvent(user: string, ref: KindRef, event: WatchEvent, initial: boolean): void;
  /**
   * Present when the stores keep only what their users need (a sharded replica's records):
   * whether any of `users` needs `object` of `ref` kept. Absent, every store keeps everything.
   */
  needs?(users: Iterable<string>, ref: KindRef, object: KubeObject, key: string): boolean;
  /** A watch `user` uses was replaced by one that keeps more of each object. */
  replaced(user: string, old: Watcher, replaced: Watcher): void;
}

/** One shared watch of a kind, with the Reconcilers that listen to it. */
export interface SharedWatch {
  ref: KindRef;
  watcher: Watcher;
  full: boolean;
  /** With full: the fields kept besides the metadata record; undefined, whole objects. */
  fields?: string[];
  /** Reconcilers using it; events go to them alone. */
  users: Set<string>;
  unsubscribe: () => void;
  /** Why it cannot work right now (kind not served, forbidden), if so. */
  problem?: string;
}

/** Whether a watch keeps everything `need` asks of each object. */
function covers(shared: SharedWatch, need: WatchNeed): boolean {
  if (!need.full) return true;
  if (!shared.full) return false;
  if (!shared.fields) return true;
  return need.fields !== undefined && need.fields.every((f) => shared.fields!.includes(f));
}

/** A watch's identity: kind, namespace ('' = all) and label selector. */
function watchId(ref: KindRef, namespace: string | undefined, labelSelector: string | undefined): string {
  return `${kindId(ref)}|${namespace ?? ''}|${labelSelector ?? ''}`;
}

export class SharedWatches {
  private readonly watches = new Map<string, SharedWatch>();
  /**
   * Kinds still not served after a whole wait (discoveryWaitMs): looked up once, not waited for
   * again, until served. Their Reconcilers are retried every few seconds anyway, and a CRD that
   * is missing must not hold up the start of every other Reconciler at each retry.
   */
  private readonly unserved = new Set<string>();
  private readonly options: WatchesContext;
  private readonly users: WatchUsers;

  constructor(options: WatchesContext, users: WatchUsers) {
    this.options = options;
    this.users = users;
  }

  /** Each watch's kind and state, for kfn_bridge_watches. */
  *states(): Iterable<{ kind: string; state: WatchState; records: number }> {
    for (const shared of this.watches.values()) {
      const state: WatchState = shared.problem ? 'failing' : shared.watcher?.hasSynced ? 'synced' : 'listing';
      yield { kind: shared.ref.kind, state, records: shared.watcher?.store.size ?? 0 };
    }
  }

  /** A watch of `ref` (the first, when there are several: per namespace or per selector). */
  of(ref: KindRef): Watcher | undefined {
    for (const w of this.watches.values()) if (sameKind(w.ref, ref)) return w.watcher;
    return undefined;
  }

  /** Every watch: kind, namespace, selector, and who uses it. */
  list(): { kind: string; namespace?: string; labelSelector?: string; users: string[]; objects: number; problem?: string }[] {
    return [...this.watches.entries()].map(([id, w]) => {
      const [, namespace, labelSelector] = id.split('|');
      return { kind: kindId(w.ref), ...(namespace ? { namespace } : {}), ...(labelSelector ? { labelSelector } : {}), users: [...w.users], objects: w.watcher.store.size, ...(w.problem ? { problem: w.problem } : {}) };
    });
  }

  /** True once every watch has completed its first list. */
  get ready(): boolean {
    return [...this.watches.values()].every((w) => w.watcher.hasSynced);
  }

  /** The ids of the watches `config` needs (the namespace dropped for cluster-scoped kinds). */
  async idsOf(config: ReconcilerConfig): Promise<Set<string>> {
    const ids = new Set<string>();
    for (const need of watchedKinds(config)) {
      const resource = await this.options.api.resource(need.ref.apiVersion, need.ref.kind).catch(() => undefined);
      ids.add(watchId(need.ref, resource?.namespaced === false ? undefined : need.namespace, need.labelSelector));
    }
    return ids;
  }

  /** Lets go of the watches `name` uses, except those in `keep`; one nobody uses any more stops. */
  async release(name: string, keep: Set<string> = new Set()): Promise<void> {
    for (const [id, shared] of this.watches) {
      if (keep.has(id) || !shared.users.has(name)) continue;
      shared.users.delete(name);
      if (shared.users.size === 0) {
        shared.unsubscribe();
        await shared.watcher.stop();
        this.watches.delete(id);
      }
    }
  }

  /** The resource of a kind to watch: a kind not served yet is waited for (bounded) the first time, in case its CRD has just been Established. */
  async resourceToWatch(ref: KindRef): Promise<ResourceInfo> {
    const kind = kindId(ref);
    const timeoutMs = this.unserved.has(kind) ? 0 : (this.options.discoveryWaitMs ?? discoveryWaitMs);
    try {
      const resource = await servedResource(this.options.api, ref.apiVersion, ref.kind, { timeoutMs, clock: this.options.clock });
      this.unserved.delete(kind);
      return resource;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) this.unserved.add(kind);
      throw err;
    }
  }

  async acquire(need: WatchNeed, user: string): Promise<SharedWatch> {
    const resource = await this.resourceToWatch(need.ref);
    const namespace = resource.namespaced ? need.namespace : undefined;
    const id = watchId(need.ref, namespace, need.labelSelector);
    let shared = this.watches.get(id);
    if (shared && !covers(shared, need)) {
      // A new user needs more of each object: replace the watch with one that keeps what both need.
      shared.unsubscribe();
      await shared.watcher.stop();
      this.watches.delete(id);
      const { users, watcher: old } = shared;
      const fields = shared.full && shared.fields && need.fields ? [...new Set([...shared.fields, ...need.fields])] : shared.full && !shared.fields ? undefined : need.fields;
      // Its first list is compared with what the old one knew: a deletion between the two is delivered.
      const replaced = await this.startWatch(id, need.ref, resource, { full: true, ...(fields ? { fields } : {}), namespace, labelSelector: need.labelSelector, inherit: { store: old.store, users: new Set(users) } });
      for (const u of users) {
        replaced.users.add(u);
        this.users.replaced(u, old, replaced.watcher);
      }
      shared = replaced;
    }
    if (shared && !shared.users.has(user) && this.users.needs) {
      // Its store keeps only what its users so far need: a list brings in what this one needs too.
      shared.users.add(user);
      shared.watcher.relist();
    }
    shared ??= await this.startWatch(id, need.ref, resource, { full: need.full, ...(need.fields ? { fields: need.fields } : {}), namespace, labelSelector: need.labelSelector });
    shared.users.add(user);
    return shared;
  }

  /** Lists every watch again: the stores keep more than they did (a sharded replica took a shard over). */
  relistAll(): void {
    for (const shared of this.watches.values()) shared.watcher.relist();
  }

  private async startWatch(id: string, ref: KindRef, resource: ResourceInfo, o: { full: boolean; fields?: string[]; namespace?: string; labelSelector?: string; inherit?: { store: Map<string, KubeObject>; users: Set<string> } }): Promise<SharedWatch> {
    const log = this.options.log;
    const metrics = this.options.metrics;
    // Registered before it starts, so that its first problem already reaches its users.
    const shared = { ref, full: o.full, ...(o.fields ? { fields: o.fields } : {}), users: new Set<string>() } as SharedWatch;
    this.watches.set(id, shared);
    const watcher = new Watcher(this.options.api, resource, {
      clock: this.options.clock,
      projection: o.full ? 'full' : 'metadata',
      ...(o.fields ? { fields: o.fields } : {}),
      namespace: o.namespace,
      labelSelector: o.labelSelector,
      ...(o.inherit ? { inherit: o.inherit.store } : {}),
      ...(this.users.needs ? { keeps: (object: KubeObject, key: string) => this.users.needs!(shared.users, ref, object, key) } : {}),
      log: (level, msg, fields) => log[level](fields ?? {}, msg),
      onProblem: (problem) => {
        shared.problem = problem;
        for (const user of shared.users) this.options.onProblem?.(user, `watch ${kindId(ref)}`, problem);
      },
      ...this.options.watcher,
    });
    metrics?.watchStarted(ref.kind);
    const unsubscribe = watcher.subscribe((event) => {
      const initial = watcher.listingWhatIs;
      if (event.type === 'synced') {
        if (event.relist) metrics?.relists.inc({ kind: ref.kind });
        metrics?.lists.inc({ kind: ref.kind, mode: event.streamed ? 'stream' : 'pages' });
      } else {
        metrics?.watchEvents.inc({ kind: ref.kind, type: event.type });
      }
      for (const user of shared.users) {
        // A deletion seen by comparing with the replaced watch: news only to those that knew it.
        if (event.type === 'delete' && event.fromReplaced && !o.inherit?.users.has(user)) continue;
        this.users.onEvent(user, ref, event, initial);
      }
    });
    shared.watcher = watcher;
    shared.unsubscribe = unsubscribe;
    watcher.start();
    return shared;
  }

  /** Stops every watch. */
  async stop(): Promise<void> {
    await Promise.all([...this.watches.values()].map((w) => (w.unsubscribe(), w.watcher.stop())));
    this.watches.clear();
  }
}
