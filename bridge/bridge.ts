// The bridge: shared watches per kind, one work queue per Reconciler, deliveries to functions.
//
//   Watcher (one per kind) ──events──▶ route() ──keys──▶ WorkQueue (per Reconciler)
//        store of objects                                  │  Workers (maxConcurrentReconciles)
//   ResyncSchedule ─────────────── low-priority keys ──────┘        │
//                                                                   ▼
//        encodeReconcileEvent() ─▶ sendReconcileEvent() ─▶ outcome: forget / requeue / backoff / terminal
//
// What a key's delivery says is decided when it is sent, from the newest state: the primary
// as the watcher holds it now (or its last known version, if it was deleted) and the reason
// recorded for the key's most recent observation. A retry of an unchanged observation has
// the same event id.
import { hostname } from 'node:os';
import { kindId, watchedKinds, type ReconcilerConfig, type WatchNeed } from './config.ts';
import type { DeliveryResult } from './delivery.ts';
import type { BridgeMetrics } from './metrics.ts';
import { journalEntryOf, settle, type Settlement } from './outcome.ts';
import { ResyncSchedule } from './resync.ts';
import { ReferenceIndex, route, SelectorIndex } from './routing.ts';
import { Sink } from './sink.ts';
import { Watcher, type WatchEvent, type WatcherOptions } from './watcher.ts';
import { WorkQueue, Workers, type Priority } from './workqueue.ts';
import type { HttpMessage } from '../core/authentication.ts';
import { systemClock, type Clock } from '../core/clock.ts';
import { encodeReconcileEvent, type Observation, type ReconcileReason } from '../core/event.ts';
import type { Journal } from '../core/journal.ts';
import { objectKey, refOf, sameKind, type KindRef, type ObjectRef } from '../core/objects.ts';
import { ApiError, recordEvent, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';

export interface Logger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

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
  /**
   * Sharding: whether this bridge delivers `key` (an object key, as the store's). Asked when a
   * key is observed; the keys of other shards are neither queued nor delivered here. Default:
   * every key.
   */
  owns?: (key: string) => boolean;
}

/** The sink a Reconciler names cannot take deliveries; the message says which object and why. */

/** Why the bridge wants a key delivered, and what caused it. */
interface PendingObservation {
  reason: ReconcileReason;
  trigger?: ObjectRef;
  observedAt: number;
}

/** One shared watch of a kind, with the Reconcilers that listen to it. */
interface SharedWatch {
  ref: KindRef;
  watcher: Watcher;
  full: boolean;
  /** Reconcilers using it; events go to them alone. */
  users: Set<string>;
  unsubscribe: () => void;
  /** Why it cannot work right now (kind not served, forbidden), if so. */
  problem?: string;
}

/** A watch's identity: kind, namespace ('' = all) and label selector. */
function watchId(ref: KindRef, namespace: string | undefined, labelSelector: string | undefined): string {
  return `${kindId(ref)}|${namespace ?? ''}|${labelSelector ?? ''}`;
}

class Controller {
  readonly config: ReconcilerConfig;
  readonly queue: WorkQueue;
  private readonly workers: Workers;
  private readonly resync: ResyncSchedule;
  private readonly pending = new Map<string, PendingObservation>();
  // Last known version of deleted primaries, until their `deleted` delivery succeeds.
  private readonly tombstones = new Map<string, KubeObject>();
  // Keys whose last delivery timed out, until its deadline plus a grace: the function may still
  // be finishing it (the SDK stops at the deadline), so nothing is delivered for them before.
  private readonly heldUntil = new Map<string, number>();
  // The primaries' selectors, by the field a selector-mapped watch names.
  private readonly selectors = new Map<string, SelectorIndex>();
  // The primaries' references, by the field a reference-mapped watch names.
  private readonly references = new Map<string, ReferenceIndex>();
  // Both kinds of index, kept up to date from the primary's events.
  private readonly primaryIndexes: (SelectorIndex | ReferenceIndex)[] = [];
  private readonly bridge: Bridge;
  private readonly sink: Sink;

  constructor(bridge: Bridge, config: ReconcilerConfig) {
    this.bridge = bridge;
    this.config = config;
    this.sink = new Sink(config, bridge.options.api, bridge.options.log, (problem) => bridge.options.onProblem?.(config.name, 'sink', problem));
    const metrics = bridge.options.metrics;
    this.queue = new WorkQueue({ clock: bridge.clock, backoff: config.backoff, rateLimit: config.rateLimit, observer: metrics?.queueObserver(config.name) });
    this.resync = new ResyncSchedule({
      periodMs: config.resyncPeriodSeconds * 1000,
      clock: bridge.clock,
      enqueue: (key) => this.observe(key, { reason: 'resync', observedAt: bridge.clock.now() }, 'low', false),
    });
    for (const w of config.watches) {
      if ('selectorField' in w.mapping) this.selectors.set(w.mapping.selectorField, new SelectorIndex(w.mapping.selectorField));
      if ('referenceField' in w.mapping) this.references.set(w.mapping.referenceField, new ReferenceIndex(w.mapping.referenceField));
    }
    this.primaryIndexes.push(...this.selectors.values(), ...this.references.values());
    metrics?.maxConcurrent.set({ controller: config.name }, config.maxConcurrentReconciles);
    this.workers = new Workers(this.queue, config.maxConcurrentReconciles, (key) => this.deliver(key), bridge.clock);
    this.resync.start();
  }

  /** The Reconciler's primary watches (one per namespace it names, or one for all). */
  primaryWatches: Watcher[] = [];

  /** The primary's last known state, from whichever of its watches holds it. */
  private primaryOf(key: string): KubeObject | undefined {
    for (const w of this.primaryWatches) {
      const obj = w.store.get(key);
      if (obj) return obj;
    }
    return undefined;
  }

  /** Records why `key` needs a delivery and queues it. A resync never overrides a real reason. */
  private observe(key: string, obs: PendingObservation, priority: Priority, override = true): void {
    if (!this.owns(key)) return; // another shard's
    if (override || !this.pending.has(key)) this.pending.set(key, obs);
    this.queue.add(key, priority);
  }

  private owns(key: string): boolean {
    return this.bridge.options.owns?.(key) ?? true;
  }

  /** Queues every primary `which` selects (a shard just taken over), as a resync would. */
  redeliver(which: (key: string) => boolean): number {
    const now = this.bridge.clock.now();
    let n = 0;
    for (const w of this.primaryWatches) {
      for (const [key, obj] of w.store) {
        if (!which(key) || !this.inNamespaces(obj)) continue;
        this.observe(key, { reason: 'resync', observedAt: now }, 'low', false);
        n++;
      }
    }
    return n;
  }

  onEvent(kind: KindRef, event: WatchEvent, initial: boolean): void {
    if (event.type === 'synced') return;
    if (sameKind(kind, this.config.for)) {
      // The watch's own key string when it gives one: the resync schedule then shares it.
      const key = event.key ?? objectKey(event.object.metadata);
      if (event.type === 'delete') {
        // Kept until its `deleted` delivery succeeds; only for objects this Reconciler serves
        // (and this shard delivers).
        if (this.inNamespaces(event.object) && this.owns(key)) this.tombstones.set(key, event.object);
        this.resync.untrack(key);
        for (const index of this.primaryIndexes) index.delete(key);
      } else {
        this.tombstones.delete(key);
        if (this.inNamespaces(event.object)) this.resync.track(key);
        for (const index of this.primaryIndexes) index.set(key, event.object);
      }
    }
    const now = this.bridge.clock.now();
    const primaryWatch = this.primaryWatches[0];
    for (const e of route(this.config, kind, event, { initial, selectors: (field) => this.selectors.get(field), references: (field) => this.references.get(field), primaryNamespaced: primaryWatch?.resource.namespaced ?? true })) {
      this.observe(e.key, { reason: e.reason, trigger: e.trigger, observedAt: now }, e.priority);
    }
  }

  private inNamespaces(obj: KubeObject): boolean {
    return this.config.namespaces.length === 0 || !obj.metadata.namespace || this.config.namespaces.includes(obj.metadata.namespace);
  }

  /**
   * One delivery of `key`: what it says is decided now, from the newest state (the primary as
   * the watch holds it, or its tombstone), then sent, journaled and settled (bridge/outcome.ts).
   */
  private async deliver(key: string): Promise<void> {
    if (this.heldBack(key)) return;
    const pending = this.pending.get(key) ?? { reason: 'resync' as const, observedAt: this.bridge.clock.now() };
    const live = this.primaryOf(key);
    const primary = live ?? this.tombstones.get(key);
    if (!primary) {
      // Mapped or child events for a primary that does not exist (or no longer): nothing to do.
      this.finish(key, pending);
      this.queue.forget(key);
      return;
    }
    let reason: ReconcileReason = live ? pending.reason : 'deleted';
    if (live && reason === 'deleted') reason = 'created';
    const observation: Observation = {
      reconciler: this.config.name,
      primary: refOf(primary),
      reason,
      trigger: reason === 'child' || reason === 'mapped' ? pending.trigger : undefined,
      observedAt: pending.observedAt,
    };
    const attempt = this.queue.retries(key) + 1;
    const deadline = this.bridge.clock.now() + this.config.timeoutSeconds * 1000;
    const { event, message } = encodeReconcileEvent(observation, attempt, this.bridge.source, deadline);
    const { result, sink } = await this.send(message, reason);
    const now = this.bridge.clock.now();
    this.bridge.options.journal?.append(journalEntryOf({ id: event.id, key, attempt, observation, sink, result, now }));
    const delay = this.carryOut(key, pending, reason === 'deleted', settle(result, now, deadline));
    const { outcome } = result;
    if (outcome.kind === 'retry') {
      this.bridge.options.log.warn({ reconciler: this.config.name, key, reason, attempt, why: outcome.why, retryInMs: delay }, 'delivery failed; will retry');
    } else if (outcome.kind === 'terminal') {
      this.bridge.options.log.error({ reconciler: this.config.name, key, reason, why: outcome.why }, 'function refused the event; waiting for the next change or resync');
      if (live) void this.bridge.recordWarning(primary, 'ReconcileRejected', `kfn: the ${this.config.name} function refused the ${reason} event: ${outcome.why}`);
    }
  }

  /** True when the key's last delivery may still be running (it timed out): it is queued for later. */
  private heldBack(key: string): boolean {
    const held = this.heldUntil.get(key);
    if (held === undefined) return false;
    const wait = held - this.bridge.clock.now();
    if (wait > 0) {
      this.queue.addAfter(key, wait);
      return true;
    }
    this.heldUntil.delete(key);
    return false;
  }

  /** Sends one event to the sink with the Reconciler's credentials; never throws. */
  private async send(message: HttpMessage, reason: ReconcileReason): Promise<{ result: DeliveryResult; sink: string }> {
    const metrics = this.bridge.options.metrics;
    const controller = this.config.name;
    metrics?.activeWorkers.inc({ controller });
    const sent = await this.sink.send(message, this.config.timeoutSeconds * 1000).finally(() => metrics?.activeWorkers.dec({ controller }));
    metrics?.reconcileTime.observe({ controller }, sent.result.durationMs / 1000);
    metrics?.deliveries.inc({ controller, reason, code: sent.result.status === undefined ? 'none' : String(sent.result.status) });
    return sent;
  }

  /** Carries out what settle() decided for the key; answers the backoff's delay when it chose one. */
  private carryOut(key: string, pending: PendingObservation, deleted: boolean, s: Settlement): number | undefined {
    const metrics = this.bridge.options.metrics;
    const controller = this.config.name;
    metrics?.reconcileTotal.inc({ controller, result: s.result });
    if (s.error === 'retry') metrics?.reconcileErrors.inc({ controller });
    if (s.error === 'terminal') metrics?.terminalErrors.inc({ controller });
    if (s.finished) this.finish(key, pending, deleted);
    if (s.requeue && (!s.requeue.ifNone || !this.pending.has(key))) this.pending.set(key, { reason: 'requeue', observedAt: s.requeue.observedAt });
    if (s.holdUntil !== undefined) this.heldUntil.set(key, s.holdUntil);
    switch (s.queue.kind) {
      case 'forget':
        this.queue.forget(key);
        return undefined;
      case 'backoff':
        return this.queue.addRateLimited(key, s.queue.atLeastMs);
      case 'after':
        this.queue.forget(key);
        this.queue.addAfter(key, s.queue.ms);
        return undefined;
    }
  }

  /** Drops the pending observation if no newer one arrived meanwhile. */
  private finish(key: string, pending: PendingObservation, deleted = false): void {
    if (this.pending.get(key) === pending) this.pending.delete(key);
    if (deleted) this.tombstones.delete(key);
  }

  async stop(timeoutMs: number): Promise<boolean> {
    this.resync.stop();
    const finished = await this.workers.stop(timeoutMs);
    this.queue.shutDown();
    return finished;
  }
}

export class Bridge {
  readonly options: BridgeOptions;
  readonly clock: Clock;
  readonly source: string;
  private readonly runtimes = new Map<string, Controller>();
  private readonly watches = new Map<string, SharedWatch>();
  private stopTimeoutMs = 30_000;

  constructor(options: BridgeOptions) {
    this.options = options;
    this.clock = options.clock ?? systemClock;
    this.source = options.source ?? `kfn://${hostname()}/bridge`;
  }

  /** Queues, in every Reconciler, the primaries `which` selects (a shard just taken over); answers how many. */
  redeliver(which: (key: string) => boolean): number {
    let n = 0;
    for (const runtime of this.runtimes.values()) n += runtime.redeliver(which);
    return n;
  }

  /** A watch of `ref` (the first, when there are several: per namespace or per selector). */
  watchOf(ref: KindRef): Watcher | undefined {
    for (const w of this.watches.values()) if (sameKind(w.ref, ref)) return w.watcher;
    return undefined;
  }

  /** Every watch the bridge runs: kind, namespace, selector, and who uses it. */
  watchList(): { kind: string; namespace?: string; labelSelector?: string; users: string[]; objects: number; problem?: string }[] {
    return [...this.watches.entries()].map(([id, w]) => {
      const [, namespace, labelSelector] = id.split('|');
      return { kind: kindId(w.ref), ...(namespace ? { namespace } : {}), ...(labelSelector ? { labelSelector } : {}), users: [...w.users], objects: w.watcher.store.size, ...(w.problem ? { problem: w.problem } : {}) };
    });
  }

  reconcilers(): ReconcilerConfig[] {
    return [...this.runtimes.values()].map((r) => r.config);
  }

  runtime(name: string): { queue: WorkQueue } | undefined {
    return this.runtimes.get(name);
  }

  /** True once every watch has completed its first list. */
  get ready(): boolean {
    return [...this.watches.values()].every((w) => w.watcher.hasSynced);
  }

  /**
   * Brings the running Reconcilers in line with `configs`: starts, restarts (when changed) and
   * stops them. Returns the ones that could not start (e.g. a kind the API does not serve),
   * by name; the others run regardless.
   */
  async setReconcilers(configs: ReconcilerConfig[]): Promise<Map<string, Error>> {
    const wanted = new Map(configs.map((c) => [c.name, c]));
    for (const [name, runtime] of this.runtimes) {
      const next = wanted.get(name);
      // An edited Reconciler keeps the watches its new spec still needs: no restart, no relist.
      if (!next) await this.removeReconciler(name);
      else if (JSON.stringify(next) !== JSON.stringify(runtime.config)) await this.removeReconciler(name, await this.watchIdsOf(next));
    }
    const failed = new Map<string, Error>();
    for (const config of configs) {
      if (this.runtimes.has(config.name)) continue;
      try {
        await this.addReconciler(config);
      } catch (err) {
        failed.set(config.name, err as Error);
        await this.removeReconciler(config.name);
      }
    }
    return failed;
  }

  /** The ids of the watches `config` needs (the namespace dropped for cluster-scoped kinds). */
  private async watchIdsOf(config: ReconcilerConfig): Promise<Set<string>> {
    const ids = new Set<string>();
    for (const need of watchedKinds(config)) {
      const resource = await this.options.api.resource(need.ref.apiVersion, need.ref.kind).catch(() => undefined);
      ids.add(watchId(need.ref, resource?.namespaced === false ? undefined : need.namespace, need.labelSelector));
    }
    return ids;
  }

  private async addReconciler(config: ReconcilerConfig): Promise<void> {
    const runtime = new Controller(this, config);
    this.runtimes.set(config.name, runtime);
    for (const need of watchedKinds(config)) {
      const shared = await this.acquireWatch(need, config.name);
      if (sameKind(need.ref, config.for) && !runtime.primaryWatches.includes(shared.watcher)) runtime.primaryWatches.push(shared.watcher);
      if (shared.problem) this.options.onProblem?.(config.name, `watch ${kindId(need.ref)}`, shared.problem);
      // Replay what the shared watch already knows, as a new informer handler would see it —
      // also while its first list is still being applied: the pages applied before this
      // Reconciler joined reach it only this way (the later ones come as events).
      for (const [key, object] of shared.watcher.store) runtime.onEvent(need.ref, { type: 'apply', object, key }, true);
    }
    this.options.log.info({ reconciler: config.name, for: kindId(config.for), sink: config.sink.uri ?? config.sink.ref, namespaces: config.namespaces.length ? config.namespaces : 'all' }, 'reconciler started');
  }

  /** Stops a Reconciler and lets go of its watches, except those in `keep` (its next spec's). */
  private async removeReconciler(name: string, keep: Set<string> = new Set()): Promise<void> {
    const runtime = this.runtimes.get(name);
    if (!runtime) return;
    this.runtimes.delete(name);
    await runtime.stop(this.stopTimeoutMs);
    for (const [id, shared] of this.watches) {
      if (keep.has(id) || !shared.users.has(name)) continue;
      shared.users.delete(name);
      if (shared.users.size === 0) {
        shared.unsubscribe();
        await shared.watcher.stop();
        this.watches.delete(id);
      }
    }
    this.options.log.info({ reconciler: name }, 'reconciler stopped');
  }

  private async acquireWatch(need: WatchNeed, user: string): Promise<SharedWatch> {
    const resource = await this.options.api.resource(need.ref.apiVersion, need.ref.kind);
    const namespace = resource.namespaced ? need.namespace : undefined;
    const id = watchId(need.ref, namespace, need.labelSelector);
    let shared = this.watches.get(id);
    if (shared && need.full && !shared.full) {
      // A new user needs whole objects: replace the metadata-only watch.
      shared.unsubscribe();
      await shared.watcher.stop();
      this.watches.delete(id);
      const { users, watcher: old } = shared;
      const replaced = await this.startWatch(id, need.ref, resource, { full: true, namespace, labelSelector: need.labelSelector });
      for (const u of users) {
        replaced.users.add(u);
        const runtime = this.runtimes.get(u);
        if (runtime) runtime.primaryWatches = runtime.primaryWatches.map((w) => (w === old ? replaced.watcher : w));
      }
      shared = replaced;
    }
    shared ??= await this.startWatch(id, need.ref, resource, { full: need.full, namespace, labelSelector: need.labelSelector });
    shared.users.add(user);
    return shared;
  }

  private async startWatch(id: string, ref: KindRef, resource: ResourceInfo, o: { full: boolean; namespace?: string; labelSelector?: string }): Promise<SharedWatch> {
    const log = this.options.log;
    const metrics = this.options.metrics;
    // Registered before it starts, so that its first problem already reaches its users.
    const shared = { ref, full: o.full, users: new Set<string>() } as SharedWatch;
    this.watches.set(id, shared);
    const watcher = new Watcher(this.options.api, resource, {
      clock: this.clock,
      projection: o.full ? 'full' : 'metadata',
      namespace: o.namespace,
      labelSelector: o.labelSelector,
      log: (level, msg, fields) => log[level](fields ?? {}, msg),
      onProblem: (problem) => {
        shared.problem = problem;
        for (const user of shared.users) this.options.onProblem?.(user, `watch ${kindId(ref)}`, problem);
      },
      ...this.options.watcher,
    });
    const unsubscribe = watcher.subscribe((event) => {
      const initial = !watcher.hasSynced;
      if (event.type === 'synced') {
        if (event.relist) metrics?.relists.inc({ kind: ref.kind });
      } else {
        metrics?.watchEvents.inc({ kind: ref.kind, type: event.type });
      }
      for (const user of shared.users) this.runtimes.get(user)?.onEvent(ref, event, initial);
    });
    shared.watcher = watcher;
    shared.unsubscribe = unsubscribe;
    watcher.start();
    return shared;
  }

  /** Writes a Warning Event on an object; failures are logged, never thrown. */
  async recordWarning(obj: KubeObject, reason: string, message: string): Promise<void> {
    try {
      await recordEvent(this.options.api, obj, { type: 'Warning', reason, message, component: 'kfn-bridge', now: new Date(this.clock.now()) });
    } catch (err) {
      this.options.log.warn({ object: `${obj.kind}/${objectKey(obj.metadata)}`, reason, error: err instanceof ApiError ? err.message : String(err) }, 'could not write a Kubernetes Event');
    }
  }

  /** Stops taking work, lets in-flight deliveries finish (bounded), stops the watches. */
  async stop(timeoutMs = 30_000): Promise<void> {
    this.stopTimeoutMs = timeoutMs;
    await Promise.all([...this.runtimes.values()].map((r) => r.stop(timeoutMs)));
    this.runtimes.clear();
    await Promise.all([...this.watches.values()].map((w) => (w.unsubscribe(), w.watcher.stop())));
    this.watches.clear();
  }
}
