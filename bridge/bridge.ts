// The bridge: one Controller per Reconciler (bridge/controller.ts), each told of the events of
// the watches it uses, and one shared watch per kind (and namespace, and label selector),
// whatever number of Reconcilers need it (bridge/watches.ts).
//
//   Watcher (one per kind) ──events──▶ Controller (per Reconciler): route ─▶ queue ─▶ deliver
//        store of objects                  ▲
//   setReconcilers: Controllers added, changed, removed; watches shared, started and stopped
//
import { hostname } from 'node:os';
import { Activator, sinkAccepts } from './activator.ts';
import { kindId, scaleTargetOf, watchedKinds, type ReconcilerConfig } from './config.ts';
import { Controller, type ControllerContext } from './controller.ts';
import { Holds } from './holds.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics, WatchState } from './metrics.ts';
import type { Watcher, WatcherOptions } from './watcher.ts';
import { SharedWatches } from './watches.ts';
import type { WorkQueue } from './workqueue.ts';
import { RbacChanges } from './rbac-changes.ts';
import { systemClock, type Clock } from '../core/clock.ts';
import type { Journal } from '../core/journal.ts';
import { objectKey, sameKind, type KindRef } from '../core/objects.ts';
import { ApiError, recordEvent, type KubeApi, type KubeObject } from '../kube/api.ts';

export interface BridgeOptions {
  api: KubeApi;
  log: Logger;
  /** CloudEvent `source` (default kfn://<host>/bridge). */
  source?: string;
  clock?: Clock;
  journal?: Journal;
  metrics?: BridgeMetrics;
  watcher?: Partial<WatcherOptions>;
  /**
   * Called when something a Reconciler depends on cannot work, with what is wrong, and with
   * undefined once it works again. `source` is `sink` (its sink ref is missing, not Ready,
   * without an address) or `watch <apiVersion>/<kind>` (the kind is not served — its CRD was
   * deleted — or the watch is forbidden).
   */
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** Told when a Reconciler's deliveries in flight at once (its adaptive limit, bridge/concurrency.ts) change. */
  onConcurrency?: (reconciler: string, concurrency: number) => void;
  /**
   * Sharding: whether this bridge delivers `key` (an object key, as the store's). Asked when a
   * key is observed; the keys of other shards are neither queued nor delivered here. Default:
   * every key.
   */
  owns?: (key: string) => boolean;
  /**
   * Sharding: the primary keys whose records this bridge keeps (those of the shards it holds and
   * of the one it goes for first; bridge/shards.ts). Its stores then keep only what those
   * primaries need — themselves, their children, the objects naming them — and relistWatches()
   * brings in more once it keeps more. Default: every store keeps everything.
   */
  keeps?: (primaryKey: string) => boolean;
  /**
   * Whether this bridge delivers anything now (default: yes). A warm standby does not until it
   * leads, and meanwhile scales no function to zero: the leader may be using it.
   */
  delivering?: () => boolean;
  /**
   * Whether a Reconciler must name an identity (spec.serviceAccount) to be delivered for: yes for
   * Reconcilers from the cluster, which anyone allowed to create one may write (bridge/identity.ts).
   * A Reconciler that names one is held to it either way.
   */
  requireIdentity?: boolean;
  /** Whether a woken sink takes connections yet (default: a TCP connection to it, sinkAccepts); a test's stand-in keeps its clock its own. */
  sinkReachable?: (uri: string) => Promise<boolean>;
  /** How often each Reconciler's rights are reviewed again (default identityRecheckMs). */
  identityRecheckMs?: number;
  /** How long the first watch of a kind waits for discovery to serve it (default discoveryWaitMs). */
  discoveryWaitMs?: number;
}

/** How soon the watches of a Reconciler just allowed are started again after they could not be. */
const attachRetryMs = 5_000;

export class Bridge {
  readonly options: BridgeOptions;
  readonly clock: Clock;
  readonly source: string;
  /** The keys whose deliveries may still be running, whichever controller (or replica) sent them. */
  readonly holds: Holds;
  private readonly runtimes = new Map<string, Controller>();
  /** What every Controller of this bridge uses of it. */
  private readonly context: ControllerContext;
  /** The watches, shared by the Reconcilers that use them. */
  private readonly watches: SharedWatches;
  private stopTimeoutMs = 30_000;
  /** The watches of RBAC, once a Reconciler has an identity to review. */
  private rbac: RbacChanges | undefined;
  /** One activator per Deployment scaled to zero, shared by the Reconcilers it serves (a shared host's). */
  private readonly activators = new Map<string, { activator: Activator; users: number }>();

  constructor(options: BridgeOptions) {
    this.options = options;
    this.clock = options.clock ?? systemClock;
    this.source = options.source ?? `kfn://${hostname()}/bridge`;
    this.holds = new Holds(this.clock);
    // A delivery of a controller since replaced (an edit) answered: its successor need not wait.
    this.holds.onReleased = (reconciler, key, by) => {
      const runtime = this.runtimes.get(reconciler);
      if (runtime && runtime !== by) runtime.wake(key);
    };
    this.context = {
      ...options,
      clock: this.clock,
      source: this.source,
      holds: this.holds,
      recordWarning: (obj, reason, message) => this.recordWarning(obj, reason, message),
      rbacWatched: () => this.rbac?.watching ?? false,
      accessChanged: (runtime, allowed) => this.accessChanged(runtime, allowed),
      activator: (config) => this.activatorFor(config),
    };
    const keeps = options.keeps;
    this.watches = new SharedWatches({ ...options, clock: this.clock }, {
      onEvent: (user, ref, event, initial) => this.runtimes.get(user)?.onEvent(ref, event, initial),
      replaced: (user, old, replaced) => this.runtimes.get(user)?.replaceWatch(old, replaced),
      ...(keeps ? { needs: (users, ref, object) => this.needed(users, ref, object, keeps) } : {}),
    });
    options.metrics?.trackWatches(() => this.watchStates());
  }

  /** Each watch's kind and state, for kfn_bridge_watches. */
  watchStates(): Iterable<{ kind: string; state: WatchState; records: number }> {
    return this.watches.states();
  }

  /** Whether any of `users` needs `object` (of `ref`) kept when only the primaries `keeps` says are. */
  private needed(users: Iterable<string>, ref: KindRef, object: KubeObject, keeps: (primaryKey: string) => boolean): boolean {
    for (const user of users) if (this.runtimes.get(user)?.needs(ref, object, keeps)) return true;
    return false;
  }

  /** Lists every watch again: `keeps` now keeps more (a shard taken over); what it lists anew is queued at low priority. */
  relistWatches(): void {
    this.watches.relistAll();
  }

  /** Queues, in every Reconciler, the primaries `which` selects (a shard just taken over); answers how many. */
  redeliver(which: (key: string) => boolean): number {
    let n = 0;
    for (const runtime of this.runtimes.values()) n += runtime.redeliver(which);
    return n;
  }

  /**
   * After taking objects over from another holder: no Reconciler vouches for its watches until
   * they have reached what the cluster holds now (Controller.fenceSnapshots). A failure to ask
   * leaves the Reconciler unfenced, and says so.
   */
  async fenceSnapshots(): Promise<void> {
    await Promise.all(
      [...this.runtimes.values()].map((runtime) =>
        runtime.fenceSnapshots().catch((err: Error) => this.options.log.warn({ reconciler: runtime.config.name, error: err.message }, "could not read the cluster's resourceVersion after a take-over; its watches are vouched for as they are")),
      ),
    );
  }

  /** A watch of `ref` (the first, when there are several: per namespace or per selector). */
  watchOf(ref: KindRef): Watcher | undefined {
    return this.watches.of(ref);
  }

  /** Every watch the bridge runs: kind, namespace, selector, and who uses it. */
  watchList(): { kind: string; namespace?: string; labelSelector?: string; users: string[]; objects: number; problem?: string }[] {
    return this.watches.list();
  }

  reconcilers(): ReconcilerConfig[] {
    return [...this.runtimes.values()].map((r) => r.config);
  }

  runtime(name: string): { queue: WorkQueue } | undefined {
    return this.runtimes.get(name);
  }

  /** True once every watch has completed its first list. */
  get ready(): boolean {
    return this.watches.ready;
  }

  /**
   * Brings the running Reconcilers in line with `configs`: starts, restarts (when changed) and
   * stops them. Returns the ones that could not start (e.g. a kind the API does not serve),
   * by name; the others run regardless.
   */
  async setReconcilers(configs: ReconcilerConfig[]): Promise<Map<string, Error>> {
    const wanted = new Map(configs.map((c) => [c.name, c]));
    if (configs.length) this.holds.longestTimeoutMs = Math.max(...configs.map((c) => c.timeoutSeconds * 1000));
    const replaced = new Map<string, Controller>();
    for (const [name, runtime] of this.runtimes) {
      const next = wanted.get(name);
      // An edited Reconciler keeps the watches its new spec still needs: no restart, no relist.
      // Its deliveries in flight are not waited for: they hold their keys (bridge/holds.ts), so
      // the new spec applies to every other key at once; the writes they wait for carry over.
      if (!next) await this.removeReconciler(name);
      else if (JSON.stringify(next) !== JSON.stringify(runtime.config)) {
        replaced.set(name, runtime);
        await this.removeReconciler(name, await this.watches.idsOf(next), 0);
      }
    }
    const failed = new Map<string, Error>();
    for (const config of configs) {
      if (this.runtimes.has(config.name)) continue;
      try {
        await this.addReconciler(config, replaced.get(config.name));
      } catch (err) {
        failed.set(config.name, err as Error);
        await this.removeReconciler(config.name);
      }
    }
    return failed;
  }

  private async addReconciler(config: ReconcilerConfig, previous?: Controller): Promise<void> {
    // The first Reconciler with an identity: RBAC changes are watched from now on, and each one
    // has every Reconciler's rights reviewed again.
    if ((config.serviceAccount || this.options.requireIdentity) && !this.rbac) {
      this.rbac = new RbacChanges(this.options.api, this.clock, this.options.log, () => {
        for (const runtime of this.runtimes.values()) runtime.reviewSoon();
      }, this.options.watcher);
      void this.rbac.start();
    }
    // A kind the API does not serve fails the Reconciler now (it is retried), before anything runs.
    for (const need of watchedKinds(config)) await this.watches.resourceToWatch(need.ref);
    const runtime = new Controller(this.context, config);
    if (previous) runtime.inherit(previous);
    this.runtimes.set(config.name, runtime);
    // One with an identity to review watches nothing until it is allowed (accessChanged).
    if (runtime.allowed) await this.attachWatches(runtime);
    this.options.log.info({ reconciler: config.name, for: kindId(config.for), sink: config.sink.uri ?? config.sink.ref, namespaces: config.namespaces.length ? config.namespaces : 'all' }, 'reconciler started');
  }

  /** A Reconciler's identity was allowed (its watches start) or refused (they are let go). */
  private async accessChanged(runtime: Controller, allowed: boolean): Promise<void> {
    const name = runtime.config.name;
    if (this.runtimes.get(name) !== runtime) return;
    if (!allowed) {
      await this.watches.release(name);
      return;
    }
    try {
      await this.attachWatches(runtime);
      this.options.onProblem?.(name, 'watches', undefined);
    } catch (err) {
      // A kind served a moment ago may be gone again (its CRD deleted): said, and tried again.
      this.options.onProblem?.(name, 'watches', `its watches could not start: ${(err as Error).message}`);
      this.clock.setTimer(() => {
        if (this.runtimes.get(name) === runtime && runtime.allowed) void this.accessChanged(runtime, true);
      }, attachRetryMs);
    }
  }

  /** Starts (or joins) the watches a Reconciler needs and tells it what they already hold. */
  private async attachWatches(runtime: Controller): Promise<void> {
    const { config } = runtime;
    for (const need of watchedKinds(config)) {
      const shared = await this.watches.acquire(need, config.name);
      if (this.runtimes.get(config.name) !== runtime) {
        // Removed (or replaced) while its watches were starting: what it took is given back.
        if (!this.runtimes.has(config.name)) await this.watches.release(config.name);
        return;
      }
      if (sameKind(need.ref, config.for) && !runtime.primaryWatches.includes(shared.watcher)) runtime.primaryWatches.push(shared.watcher);
      else if (!sameKind(need.ref, config.for)) runtime.addWatch(need.ref, shared.watcher);
      if (shared.problem) this.options.onProblem?.(config.name, `watch ${kindId(need.ref)}`, shared.problem);
      // Replay what the shared watch already knows, as a new informer handler would see it —
      // also while its first list is still being applied: the pages applied before this
      // Reconciler joined reach it only this way (the later ones come as events).
      for (const [key, object] of shared.watcher.store) runtime.onEvent(need.ref, { type: 'apply', object, key }, true);
    }
  }

  /**
   * Stops a Reconciler (waiting up to `waitMs` for its deliveries in flight) and lets go of its
   * watches, except those in `keep` (its next spec's).
   */
  private async removeReconciler(name: string, keep: Set<string> = new Set(), waitMs = this.stopTimeoutMs): Promise<void> {
    const runtime = this.runtimes.get(name);
    if (!runtime) return;
    this.runtimes.delete(name);
    await runtime.stop(waitMs);
    await this.watches.release(name, keep);
    this.options.log.info({ reconciler: name }, 'reconciler stopped');
  }

  /** The activator of the Deployment a Reconciler's sink runs as, if the bridge scales it; `release` when the Reconciler stops. */
  private activatorFor(config: ReconcilerConfig): { activator: Activator; release: () => void } | undefined {
    const target = scaleTargetOf(config);
    if (!target) return undefined;
    const id = `${target.namespace}/${target.name}`;
    let entry = this.activators.get(id);
    if (!entry) this.activators.set(id, (entry = { activator: new Activator(target, this.options.api, this.clock, this.options.log, config.sink.uri ? () => (this.options.sinkReachable ?? sinkAccepts)(config.sink.uri!) : undefined, this.options.delivering), users: 0 }));
    entry.users++;
    const held = entry;
    let released = false;
    return {
      activator: held.activator,
      release: () => {
        if (released) return;
        released = true;
        if (--held.users > 0 || this.activators.get(id) !== held) return;
        held.activator.stop();
        this.activators.delete(id);
      },
    };
  }

  /** Writes a Warning Event on an object; failures are logged, never thrown. */
  async recordWarning(obj: KubeObject, reason: string, message: string): Promise<void> {
    try {
      await recordEvent(this.options.api, obj, { type: 'Warning', reason, message, component: 'kfn-bridge', now: new Date(this.clock.wall()) });
    } catch (err) {
      this.options.log.warn({ object: `${obj.kind}/${objectKey(obj.metadata)}`, reason, error: err instanceof ApiError ? err.message : String(err) }, 'could not write a Kubernetes Event');
    }
  }

  /** Stops taking work, lets in-flight deliveries finish (bounded), stops the watches. */
  async stop(timeoutMs = 30_000): Promise<void> {
    this.stopTimeoutMs = timeoutMs;
    await Promise.all([...this.runtimes.values()].map((r) => r.stop(timeoutMs)));
    this.runtimes.clear();
    await this.watches.stop();
    await this.rbac?.stop();
    this.rbac = undefined;
  }
}
