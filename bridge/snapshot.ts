// Contract 2: what a delivery carries of the bridge's watches (the primary, the children it
// controls, which children are as kfn last applied them), and read-your-writes — a key is not
// delivered again until the watches have seen the writes its last reconcile reported.
//
//   answer ─▶ noteAnswer: writes to wait for (by resourceVersion; pruned children gone;
//             stale snapshots newer), and each wanted child's hash with its version
//   deliver ─▶ readiness(key): ready | wait (poll again soon) | give up waiting on lagging kinds
//          ─▶ observed(primary): the primary, each owned kind's children, `applied`
//
// Pure bookkeeping over the watches' stores: SnapshotWaits (bridge/snapshot-waits.ts) passes the watches in.
import type { ReconcilerConfig } from './config.ts';
import type { Watcher } from './watcher.ts';
import type { WatchEvent } from './store.ts';
import { projectObject, type ObservedKind, type ObservedObject, type ObservedState } from '../core/event.ts';
import type { Change, ReconcileResponse } from '../core/response.ts';
import { controllerUid, groupKind, objectId, objectKey, sameKind, type KindRef, type ObjectRef } from '../core/objects.ts';
import type { KubeObject } from '../kube/api.ts';

/**
 * Compares two resourceVersions: negative, zero or positive as `a` is older, the same or newer
 * than `b`; undefined when they are not comparable. Kubernetes 1.35 made them comparable
 * (KEP-5504): decimal integers without leading zeros, so the longer is the newer.
 */
export function compareResourceVersions(a: string, b: string): number | undefined {
  if (!/^[1-9][0-9]*$/.test(a) || !/^[1-9][0-9]*$/.test(b)) return a === b ? 0 : undefined;
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Something the next delivery of a key must not be built without. */
type Wait =
  /** A write: the object's watch has reached this resourceVersion. */
  | { kind: KindRef; namespace?: string; name: string; resourceVersion: string; type: 'write' }
  /** A pruned child: its watch no longer holds it (or holds another object of its name, or it is being deleted). */
  | { kind: KindRef; namespace?: string; name: string; uid: string; type: 'gone' }
  /** A stale snapshot: the watch holds a newer version than this one. */
  | { kind: KindRef; namespace?: string; name: string; resourceVersion: string; type: 'newer' };

/** A child as kfn last applied (or found) it: the hash the function reported, at which version. */
interface Baseline {
  hash: string;
  resourceVersion?: string;
  generation?: number;
  /** The owned kind (the config's own object, shared) and store key it is of, for the sweep. */
  kind: KindRef;
  key: string;
  /** When an answer last reported it. */
  at: number;
}

/** The watches of one kind (one per namespace, or one for all), as the Reconciler hears them (WatchSet, bridge/intake.ts). */
export type WatchesOf = (kind: KindRef) => Watcher[];

export type Readiness =
  | { kind: 'ready' }
  /** Deliver later: a watch has not yet seen the writes. */
  | { kind: 'wait'; first: boolean; since: number }
  /** Waited long enough: deliver, reading these kinds (group/Kind) from the apiserver. */
  | { kind: 'lagging'; kinds: Set<string> };

/** How long a key waits for lagging watches before its delivery goes without their snapshot. */
export const maxSnapshotWaitMs = 10_000;

/**
 * How long a baseline is kept for a child no watch holds: longer than any watch takes to see a
 * write it is not lagging on (past maxSnapshotWaitMs a lagging kind is not vouched for anyway).
 */
export const unseenBaselineMs = 6 * maxSnapshotWaitMs;

export class Snapshots {
  private readonly config: ReconcilerConfig;
  /** Children by their controller owner's uid: group/Kind → store keys. */
  private readonly children = new Map<string, Map<string, Set<string>>>();
  /** What each wanted child was when kfn last applied or found it, by objectId. */
  private readonly baselines = new Map<string, Baseline>();
  /** Per key: what its next delivery waits for, since when, and whether the wait was counted. */
  private readonly waits = new Map<string, { since: number; waits: Wait[]; counted: boolean }>();
  /** The keys waiting on each object (group/Kind/namespace/name): the watch seeing it wakes them. */
  private readonly waitingOn = new Map<string, Set<string>>();

  private setWaits(key: string, entry: { since: number; waits: Wait[]; counted: boolean }): void {
    this.deleteWaits(key);
    this.waits.set(key, entry);
    for (const w of entry.waits) {
      const id = waitedObject(w.kind, w.namespace, w.name);
      let keys = this.waitingOn.get(id);
      if (!keys) this.waitingOn.set(id, (keys = new Set()));
      keys.add(key);
    }
  }

  private deleteWaits(key: string): void {
    const entry = this.waits.get(key);
    if (!entry) return;
    this.waits.delete(key);
    for (const w of entry.waits) {
      const id = waitedObject(w.kind, w.namespace, w.name);
      const keys = this.waitingOn.get(id);
      keys?.delete(key);
      if (keys?.size === 0) this.waitingOn.delete(id);
    }
  }

  /** The keys whose next delivery waits on this object: a watch event for it may let them go. */
  waitingFor(kind: KindRef, obj: KubeObject): Iterable<string> {
    return this.waitingOn.get(waitedObject(kind, obj.metadata.namespace, obj.metadata.name)) ?? [];
  }

  constructor(config: ReconcilerConfig) {
    this.config = config;
  }

  /** The owned kind `kind` is, if it is one. */
  private owned(kind: KindRef) {
    return this.config.owns.find((o) => sameKind(o, kind));
  }

  /** Keeps the owner index and the baselines in step with a watch of any kind. */
  onEvent(kind: KindRef, event: WatchEvent): void {
    if (event.type === 'synced' || !this.owned(kind)) return;
    const gk = groupKind(kind);
    const key = event.key ?? objectKey(event.object.metadata);
    const before = event.type === 'apply' ? event.old : event.object;
    const beforeOwner = before ? controllerUid(before) : undefined;
    // A child the watch does not keep (another shard's owner): not indexed, as if gone.
    const afterOwner = event.type === 'apply' && event.kept !== false ? controllerUid(event.object) : undefined;
    if (beforeOwner && beforeOwner !== afterOwner) {
      const kinds = this.children.get(beforeOwner);
      kinds?.get(gk)?.delete(key);
      if (kinds?.get(gk)?.size === 0) kinds.delete(gk);
      if (kinds?.size === 0) this.children.delete(beforeOwner);
    }
    if (afterOwner) {
      let kinds = this.children.get(afterOwner);
      if (!kinds) this.children.set(afterOwner, (kinds = new Map()));
      let keys = kinds.get(gk);
      if (!keys) kinds.set(gk, (keys = new Set()));
      keys.add(key);
    }
    if (event.type === 'delete') this.baselines.delete(objectId({ ...kind, namespace: event.object.metadata.namespace, name: event.object.metadata.name }));
  }

  /**
   * Takes over what the Snapshots of the Reconciler's previous spec knew (an edit replaces the
   * controller): the writes each key's next delivery waits for, and the children's baselines.
   * An edit does not make a watch see a write sooner.
   */
  adopt(previous: Snapshots): void {
    for (const [key, entry] of previous.waits) if (!this.waits.has(key)) this.setWaits(key, entry);
    for (const [id, base] of previous.baselines) if (!this.baselines.has(id)) this.baselines.set(id, base);
    if (previous.fence !== undefined) this.fence = previous.fence;
  }

  /**
   * A take-over's fence: the resourceVersion the cluster had when this bridge took over objects
   * another held. The other holder's last deliveries may have written past what this bridge's
   * watches have seen, and it handed over no waits: until every watch of the Reconciler has
   * reached the fence, nothing is vouched for (events carry no observed state; the function
   * reads for itself, as in contract 1).
   */
  private fence: string | undefined | 'pending';

  /** A take-over happened: nothing is vouched for until its fence is known (fenceAt) and passed. */
  fencePending(): void {
    if (this.fence === undefined) this.fence = 'pending';
  }

  fenceAt(resourceVersion: string | undefined): void {
    if (resourceVersion === undefined) {
      if (this.fence === 'pending') this.fence = undefined;
      return;
    }
    if (this.fence === undefined || this.fence === 'pending' || (compareResourceVersions(resourceVersion, this.fence) ?? 1) > 0) this.fence = resourceVersion;
  }

  /** Whether the watches have all passed the take-over's fence (and forgets it once they have). */
  private pastFence(watchesOf: WatchesOf): boolean {
    if (this.fence === undefined) return true;
    if (this.fence === 'pending') return false;
    const kinds = [this.config.for, ...this.config.owns];
    // A watch not synced, or failing, is not vouched for anyway (observed() leaves its kind out):
    // it must not hold back the others.
    const behind = kinds.some((k) => watchesOf(k).some((w) => w.hasSynced && !w.failing && (compareResourceVersions(w.resourceVersion, this.fence as string) ?? -1) < 0));
    if (!behind) this.fence = undefined;
    return !behind;
  }

  /** Forgets a key (its primary is gone, or another shard delivers it). */
  forget(key: string): void {
    this.deleteWaits(key);
  }

  /**
   * What a failed delivery's function says it wrote before failing: the retry waits for those
   * writes too, besides what the last answer asked for.
   */
  noteWrites(key: string, changes: Change[], now: number): void {
    const waits = this.waitsOf({ result: 'done', changes });
    if (!waits.length) return;
    const entry = this.waits.get(key);
    this.setWaits(key, { since: now, waits: [...(entry?.waits ?? []), ...waits], counted: false });
  }

  /** What a contract-2 answer says the next delivery of `key` must see, and what the children are. */
  noteAnswer(key: string, response: ReconcileResponse | undefined, now: number): void {
    if (!response) return;
    const waits = this.waitsOf(response);
    if (waits.length) this.setWaits(key, { since: now, waits, counted: false });
    else this.deleteWaits(key);
    for (const child of response.children ?? []) {
      if (!this.owned(child.ref) || typeof child.hash !== 'string') continue;
      const kind = this.owned(child.ref)!;
      this.baselines.set(objectId(child.ref), {
        hash: child.hash,
        ...(child.ref.resourceVersion ? { resourceVersion: child.ref.resourceVersion } : {}),
        ...(child.ref.generation !== undefined ? { generation: child.ref.generation } : {}),
        kind,
        key: objectKey({ namespace: child.ref.namespace, name: child.ref.name }),
        at: now,
      });
    }
  }

  /**
   * Releases what the bridge would otherwise keep forever: the baseline of a child no watch has
   * held for unseenBaselineMs (an answer reported it, but it was deleted before the watch saw it,
   * or it does not match the kind's selector), and owner-index entries of children no watch
   * holds (their deletion was never seen as such). Only where every watch of the kind has listed
   * and is not failing: a store that may lag proves nothing gone.
   */
  sweep(watchesOf: WatchesOf, now: number): { baselines: number; children: number } {
    const settled = new Map<string, Watcher[] | undefined>();
    const watchesFor = (kind: KindRef) => {
      const gk = groupKind(kind);
      if (!settled.has(gk)) {
        const watches = watchesOf(kind);
        settled.set(gk, watches.length && watches.every((w) => w.hasSynced && !w.failing) ? watches : undefined);
      }
      return settled.get(gk);
    };
    const held = (watches: Watcher[], key: string) => watches.some((w) => w.store.has(key));
    let baselines = 0;
    for (const [id, base] of this.baselines) {
      if (now - base.at < unseenBaselineMs) continue;
      const watches = watchesFor(base.kind);
      if (watches && !held(watches, base.key)) {
        this.baselines.delete(id);
        baselines++;
      }
    }
    let children = 0;
    for (const [uid, kinds] of this.children) {
      for (const [gk, keys] of kinds) {
        const owned = this.config.owns.find((o) => groupKind(o) === gk);
        const watches = owned ? watchesFor(owned) : undefined;
        if (owned && !watches) continue;
        for (const key of keys) {
          if (watches && held(watches, key)) continue;
          keys.delete(key);
          children++;
        }
        if (!keys.size) kinds.delete(gk);
      }
      if (!kinds.size) this.children.delete(uid);
    }
    return { baselines, children };
  }

  /** How much the bookkeeping holds: what the tests read to see the sweep work. */
  held(): { baselines: number; children: number; waits: number } {
    let children = 0;
    for (const kinds of this.children.values()) for (const keys of kinds.values()) children += keys.size;
    return { baselines: this.baselines.size, children, waits: this.waits.size };
  }

  /** The waits an answer's writes (and stale snapshots) make. */
  private waitsOf(response: ReconcileResponse): Wait[] {
    const waits: Wait[] = [];
    const watched = (ref: ObjectRef) => sameKind(ref, this.config.for) || this.owned(ref) !== undefined;
    const where = (ref: ObjectRef) => ({ kind: { apiVersion: ref.apiVersion, kind: ref.kind }, ...(ref.namespace ? { namespace: ref.namespace } : {}), name: ref.name });
    for (const { action, ref } of response.changes ?? []) {
      if (!ref || !watched(ref)) continue;
      if (action === 'pruned' && ref.uid) waits.push({ ...where(ref), uid: ref.uid, type: 'gone' });
      else if (action !== 'pruned' && action !== 'event' && ref.resourceVersion) waits.push({ ...where(ref), resourceVersion: ref.resourceVersion, type: 'write' });
    }
    for (const ref of response.stale ?? []) if (watched(ref) && ref.resourceVersion) waits.push({ ...where(ref), resourceVersion: ref.resourceVersion, type: 'newer' });
    return waits;
  }

  /** Whether `key` can be delivered now, given what its last answer wrote. */
  readiness(key: string, watchesOf: WatchesOf, now: number): Readiness {
    const entry = this.waits.get(key);
    if (!entry) return { kind: 'ready' };
    const open = entry.waits.filter((w) => !seen(w, watchesOf(w.kind)));
    if (!open.length) {
      this.deleteWaits(key);
      return { kind: 'ready' };
    }
    if (now - entry.since < maxSnapshotWaitMs) {
      const first = !entry.counted;
      entry.counted = true;
      return { kind: 'wait', first, since: entry.since };
    }
    this.deleteWaits(key);
    return { kind: 'lagging', kinds: new Set(open.map((w) => groupKind(w.kind))) };
  }

  /**
   * The observed state for a delivery of `primary`: the primary as its watch holds it, and for
   * each owned kind whose watch has synced (and is not in `lagging`) every child the primary
   * controls, projected to the kind's fields. Undefined when the primary's own kind lags: the
   * function then reads everything, as in contract 1.
   */
  observed(primary: KubeObject, watchesOf: WatchesOf, lagging: Set<string> = new Set()): ObservedState | undefined {
    if (lagging.has(groupKind(this.config.for))) return undefined;
    // The primary's own watch failing: the primary may be stale; the function reads everything.
    if (watchesOf(this.config.for).some((w) => w.failing)) return undefined;
    if (!this.pastFence(watchesOf)) return undefined;
    const uid = primary.metadata.uid;
    const namespace = primary.metadata.namespace;
    const kinds: ObservedKind[] = [];
    const children: ObservedObject[] = [];
    const applied: Record<string, string> = {};
    const byKind = uid ? this.children.get(uid) : undefined;
    for (const owned of this.config.owns) {
      const gk = groupKind(owned);
      if (lagging.has(gk)) continue;
      const watches = watchesOf(owned).filter((w) => !w.namespace || w.namespace === namespace);
      // A watch not synced yet, or failing (its store may lag behind the cluster): not vouched for.
      if (!watches.length || !watches.every((w) => w.hasSynced && !w.failing)) continue;
      // A cluster-scoped primary's namespaced children could be claimed from any namespace
      // (anyone may write an owner reference): the bridge vouches for none of them, and the
      // function lists that kind itself.
      if (!namespace && watches[0]!.resource?.namespaced) continue;
      const oldest = watches.map((w) => w.resourceVersion).reduce((a, b) => ((compareResourceVersions(a, b) ?? 0) <= 0 ? a : b));
      // Its resource, so that the function need not ask discovery for it (ObservedKind.plural).
      const resource = watches[0]!.resource;
      kinds.push({ apiVersion: owned.apiVersion, kind: owned.kind, resourceVersion: oldest, ...(owned.fields ? { fields: owned.fields } : {}), ...(resource ? { plural: resource.plural, namespaced: resource.namespaced } : {}) });
      for (const storeKey of byKind?.get(gk) ?? []) {
        const child = watches.map((w) => w.store.get(storeKey)).find((c) => c !== undefined);
        // A child only in its owner's namespace: an object elsewhere naming the primary as its
        // controller is someone's forgery (an owner reference cannot cross namespaces).
        if (!child || controllerUid(child) !== uid || child.metadata.namespace !== namespace) continue;
        const carried = projectObject(child as ObservedObject, owned.fields);
        children.push(carried);
        const id = objectId({ apiVersion: owned.apiVersion, kind: owned.kind, namespace: child.metadata.namespace, name: child.metadata.name });
        const base = this.baselines.get(id);
        if (base && unchangedSince(child, base)) applied[id] = base.hash;
      }
    }
    return { primary: primary as ObservedObject, kinds, children, ...(Object.keys(applied).length ? { applied } : {}) };
  }
}

/**
 * True when a child is provably as kfn last applied it: the same resourceVersion, or — for a
 * kind with a generation (its spec) — the same generation: metadata and status written by
 * others since do not matter (the SDK checks the labels it sets itself).
 */
function unchangedSince(child: KubeObject, base: Baseline): boolean {
  if (base.resourceVersion !== undefined && child.metadata.resourceVersion === base.resourceVersion) return true;
  return base.generation !== undefined && child.metadata.generation === base.generation;
}

/** An object a wait is on, as one string: group/Kind, namespace and name. */
const waitedObject = (kind: KindRef, namespace: string | undefined, name: string) => `${groupKind(kind)}|${namespace ?? ''}|${name}`;

/** Whether the watches of a kind have seen what `wait` waits for. */
function seen(wait: Wait, watches: Watcher[]): boolean {
  const relevant = watches.filter((w) => !w.namespace || w.namespace === wait.namespace);
  if (!relevant.length) return true; // not watched (any more): nothing to wait for
  const key = objectKey({ namespace: wait.namespace, name: wait.name });
  return relevant.some((w) => {
    const held = w.store.get(key);
    switch (wait.type) {
      case 'write': {
        const reached = compareResourceVersions(w.resourceVersion, wait.resourceVersion);
        if (reached !== undefined && reached >= 0) return true;
        const own = held?.metadata.resourceVersion;
        if (own === undefined) return false;
        const c = compareResourceVersions(own, wait.resourceVersion);
        return c !== undefined && c >= 0;
      }
      case 'gone':
        return !held || held.metadata.uid !== wait.uid || held.metadata.deletionTimestamp !== undefined;
      case 'newer':
        return !held || held.metadata.resourceVersion !== wait.resourceVersion;
    }
  });
}
