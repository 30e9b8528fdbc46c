// What makes one Reconciler's keys want a delivery — controller-runtime's sources and event
// handler: the watches it hears (WatchSet), their events routed to keys (route,
// bridge/routing.ts), the resync schedule, and redeliveries (an identity allowed again, a shard
// taken over). Each is recorded as the key's observation (bridge/pending.ts) and queued; the
// primary's own events also keep its indexes, its tombstone and its time to Ready up to date.
//
//   watch event ─▶ onEvent ─▶ route() ─▶ observe(key) ─▶ Observations + WorkQueue
//   ResyncSchedule ──────── low-priority keys ──┘
import { servesNamespace, watchedKinds, type ReconcilerConfig } from './config.ts';
import type { BridgeMetrics } from './metrics.ts';
import type { Observations, PendingObservation } from './pending.ts';
import { TimeToReady } from './ready-time.ts';
import { ResyncSchedule } from './resync.ts';
import { needs, ReferenceIndex, route, SelectorIndex } from './routing.ts';
import type { TraceCause } from './traces.ts';
import type { Watcher } from './watcher.ts';
import type { WatchEvent } from './store.ts';
import type { Priority, WorkQueue } from './workqueue.ts';
import type { Clock } from '../core/clock.ts';
import { groupKind, objectKey, sameKind, type KindRef } from '../core/objects.ts';
import type { KubeObject } from '../kube/api.ts';

/** What the intake uses of the bridge it runs in. */
export interface IntakeContext {
  clock: Clock;
  metrics?: BridgeMetrics;
  /** Sharding: whether this bridge delivers `key`; another shard's keys are neither queued nor delivered here. */
  owns?: (key: string) => boolean;
}

/** The watches one Reconciler hears, shared with the other Reconcilers (bridge/bridge.ts). */
export class WatchSet {
  /** The Reconciler's primary watches (one per namespace it names, or one for all). */
  primary: Watcher[] = [];
  /** Its other watches (owned and watched kinds), by group/Kind. */
  private readonly others = new Map<string, Watcher[]>();
  private readonly primaryKind: KindRef;

  constructor(primaryKind: KindRef) {
    this.primaryKind = primaryKind;
  }

  /** A watch of an owned or watched kind this Reconciler uses. */
  add(kind: KindRef, watcher: Watcher): void {
    const list = this.others.get(groupKind(kind)) ?? [];
    if (!list.includes(watcher)) list.push(watcher);
    this.others.set(groupKind(kind), list);
  }

  /** A shared watch replaced by one that keeps more of each object. */
  replace(old: Watcher, replaced: Watcher): void {
    this.primary = this.primary.map((w) => (w === old ? replaced : w));
    for (const [gk, list] of this.others) this.others.set(gk, list.map((w) => (w === old ? replaced : w)));
  }

  /** The watches of a kind, for the snapshots. */
  readonly of = (kind: KindRef): Watcher[] => (sameKind(kind, this.primaryKind) ? this.primary : (this.others.get(groupKind(kind)) ?? []));

  /** The primary's last known state, from whichever of its watches holds it. */
  primaryOf(key: string): KubeObject | undefined {
    for (const w of this.primary) {
      const obj = w.store.get(key);
      if (obj) return obj;
    }
    return undefined;
  }

  /** Lets go of every watch (the identity was refused). */
  clear(): void {
    this.primary = [];
    this.others.clear();
  }
}

export class Intake {
  /** The watches it hears. */
  readonly watches: WatchSet;
  private readonly resync: ResyncSchedule;
  /** How long its primaries take from a change to Ready (kfn_bridge_change_to_ready_seconds). */
  private readonly readyTime: TimeToReady | undefined;
  // The primaries' selectors, by the field a selector-mapped watch names.
  private readonly selectors = new Map<string, SelectorIndex>();
  // The primaries' references, by the field a reference-mapped watch names.
  private readonly references = new Map<string, ReferenceIndex>();
  // Both kinds of index, kept up to date from the primary's events.
  private readonly primaryIndexes: (SelectorIndex | ReferenceIndex)[] = [];
  private readonly bridge: IntakeContext;
  private readonly config: ReconcilerConfig;
  private readonly queue: WorkQueue;
  private readonly observations: Observations;

  constructor(bridge: IntakeContext, config: ReconcilerConfig, queue: WorkQueue, observations: Observations) {
    this.bridge = bridge;
    this.config = config;
    this.queue = queue;
    this.observations = observations;
    this.watches = new WatchSet(config.for);
    // Only where the primary's watch keeps its status (contract 2, or a field-mapped watch).
    this.readyTime = watchedKinds(config)[0]?.full ? new TimeToReady((seconds) => bridge.metrics?.changeToReady.observe({ controller: config.name }, seconds)) : undefined;
    this.resync = new ResyncSchedule({
      periodMs: config.resyncPeriodSeconds * 1000,
      clock: bridge.clock,
      enqueue: (key) => this.observe(key, { reason: 'resync', observedAt: bridge.clock.now() }, 'low', false),
      batch: config.resyncBatch,
    });
    for (const w of config.watches) {
      if ('selectorField' in w.mapping) this.selectors.set(w.mapping.selectorField, new SelectorIndex(w.mapping.selectorField));
      if ('referenceField' in w.mapping) this.references.set(w.mapping.referenceField, new ReferenceIndex(w.mapping.referenceField));
    }
    this.primaryIndexes.push(...this.selectors.values(), ...this.references.values());
  }

  start(): void {
    this.resync.start();
  }

  stop(): void {
    this.resync.stop();
  }

  /**
   * Records why `key` needs a delivery and queues it; with tracing on, the observation starts a
   * trace (core/tracing.ts), linked to the write that caused it when `cause` is one of this
   * bridge's. A resync never overrides a real reason. Another shard's key is left alone.
   */
  private observe(key: string, observed: Omit<PendingObservation, 'trace'>, priority: Priority, override = true, cause?: TraceCause): void {
    if (!this.owns(key)) return;
    this.observations.record(key, observed, override, cause);
    this.queue.add(key, priority);
  }

  private owns(key: string): boolean {
    return this.bridge.owns?.(key) ?? true;
  }

  /** Queues `key` again now: a hold on it ended early (the controller this one replaced got its answer). */
  wake(key: string): void {
    if (this.owns(key)) this.queue.add(key);
  }

  /** Queues every primary `which` selects (a shard just taken over), as a resync would. */
  redeliver(which: (key: string) => boolean): number {
    const now = this.bridge.clock.now();
    let n = 0;
    for (const w of this.watches.primary) {
      for (const [key, obj] of w.store) {
        if (!which(key) || !this.inNamespaces(obj)) continue;
        this.observe(key, { reason: 'resync', observedAt: now }, 'low', false);
        n++;
      }
    }
    return n;
  }

  /** Every object again once its identity may see it: the live ones as a resync, the deleted ones as deleted. */
  redeliverAll(): void {
    this.redeliver(() => true);
    const now = this.bridge.clock.now();
    for (const key of this.observations.tombstoned()) this.observe(key, { reason: 'deleted', observedAt: now }, 'high');
  }

  /**
   * An event while the identity is not allowed, from watches kept from the spec this one
   * replaced while its identity is reviewed: what they hold is replayed once it is allowed; only
   * a deletion would be lost meanwhile.
   */
  whileNotAllowed(kind: KindRef, event: Exclude<WatchEvent, { type: 'synced' }>): void {
    if (sameKind(kind, this.config.for)) {
      const key = event.key ?? objectKey(event.object.metadata);
      if (event.type === 'delete' && this.inNamespaces(event.object) && this.owns(key)) this.observations.keepTombstone(key, event.object);
      else this.observations.dropTombstone(key);
    }
  }

  /** Whether the primaries' key names no namespace (a cluster-scoped kind). */
  private get primaryNamespaced(): boolean {
    return this.watches.primary[0]?.resource.namespaced ?? true;
  }

  /** Whether this Reconciler needs `obj` (of `kind`) kept when only the primaries `keeps` says are (bridge/routing.ts). */
  needs(kind: KindRef, obj: KubeObject, keeps: (primaryKey: string) => boolean): boolean {
    return needs(this.config, kind, obj, keeps, this.primaryNamespaced);
  }

  /** An event of one of its watches: a primary's own bookkeeping first, then the keys it routes to, observed. */
  onEvent(kind: KindRef, event: Exclude<WatchEvent, { type: 'synced' }>, initial: boolean): void {
    if (sameKind(kind, this.config.for)) this.primaryChanged(event);
    const now = this.bridge.clock.now();
    for (const e of route(this.config, kind, event, { initial, selectors: (field) => this.selectors.get(field), references: (field) => this.references.get(field), primaryNamespaced: this.primaryNamespaced })) {
      this.observe(e.key, { reason: e.reason, trigger: e.trigger, observedAt: now }, e.priority, true, { type: event.type, object: event.object, kind });
    }
  }

  /** A primary's event: its tombstone, its resync, its time to Ready and the indexes follow it. */
  private primaryChanged(event: Exclude<WatchEvent, { type: 'synced' }>): void {
    // The watch's own key string when it gives one: the resync schedule then shares it.
    const key = event.key ?? objectKey(event.object.metadata);
    if (event.type === 'delete' || event.kept === false) {
      // Kept until its `deleted` delivery succeeds; only for objects this Reconciler serves
      // (and this shard delivers). One the watch no longer keeps (another shard's) is let go.
      if (event.type === 'delete' && this.inNamespaces(event.object) && this.owns(key)) this.observations.keepTombstone(key, event.object);
      this.resync.untrack(key);
      this.readyTime?.gone(key);
      for (const index of this.primaryIndexes) index.delete(key);
    } else {
      this.observations.dropTombstone(key);
      if (this.inNamespaces(event.object)) this.resync.track(key);
      if (this.inNamespaces(event.object) && this.owns(key)) this.readyTime?.seen(key, event.object, this.bridge.clock.now(), event.type === 'apply' ? event.old : undefined);
      for (const index of this.primaryIndexes) index.set(key, event.object);
    }
  }

  /** Lets go of its watches and what it tracked of the primaries (the identity was refused): their resyncs and indexes. */
  forget(): void {
    for (const w of this.watches.primary) for (const key of w.store.keys()) this.resync.untrack(key);
    for (const index of this.primaryIndexes) index.clear();
    this.watches.clear();
  }

  private inNamespaces(obj: KubeObject): boolean {
    return servesNamespace(this.config, obj.metadata.namespace);
  }
}
