// One Reconciler's controller: its primaries' events routed to keys, the per-key work queue and
// its workers, the spread resync, and each delivery — what it says is decided when it is sent,
// from the newest state (the primary as the watch holds it now, or its tombstone if it was
// deleted) and the reason recorded for the key's latest observation; a retry of an unchanged
// observation has the same event id. What an answer means for the key is bridge/outcome.ts's.
//
//   watch event ─▶ onEvent ─▶ route() ─▶ observe(key) ─▶ WorkQueue ─▶ Workers ─▶ deliver(key)
//   ResyncSchedule ─────────── low-priority keys ──┘        ▲                      │
//                                                          └── carryOut(settle()) ◀┘
import type { Activator } from './activator.ts';
import { AdaptiveLimit } from './concurrency.ts';
import { watchedKinds, type ReconcilerConfig } from './config.ts';
import { sinkFailureOf, type DeliveryResult } from './delivery.ts';
import type { Holds } from './holds.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics } from './metrics.ts';
import { identityProblem, identityRecheckMs, identityRecheckWatchedMs, undecidedGraceMs } from './identity.ts';
import { ClockSkewReport, deadlineGraceMs, journalEntryOf, settle, type Settlement } from './outcome.ts';
import { ResyncSchedule } from './resync.ts';
import { TimeToReady } from './ready-time.ts';
import { DeliveryTraces, type ObservationTrace, type TraceCause } from './traces.ts';
import { inSpan, tracing, withTraceHeaders } from '../core/tracing.ts';
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { ReferenceIndex, route, SelectorIndex } from './routing.ts';
import { Sink } from './sink.ts';
import { maxSnapshotWaitMs, Snapshots } from './snapshot.ts';
import type { Watcher, WatchEvent } from './watcher.ts';
import { WorkQueue, Workers, type Priority } from './workqueue.ts';
import type { HttpMessage } from '../core/authentication.ts';
import type { Clock } from '../core/clock.ts';
import { encodeReconcileEvent, eventBudgetBytes, fitObserved, type Observation, type ObservedState, type ReconcileCloudEvent, type ReconcileReason } from '../core/event.ts';
import type { Change, DeliveryOutcome } from '../core/response.ts';
import type { Journal } from '../core/journal.ts';
import { groupKind, objectKey, refOf, sameKind, type KindRef, type ObjectRef } from '../core/objects.ts';
import { collectionPath, type KubeApi, type KubeObject } from '../kube/api.ts';

/** What a controller uses of the bridge it runs in. */
export interface ControllerContext {
  api: KubeApi;
  log: Logger;
  clock: Clock;
  /** CloudEvent `source`. */
  source: string;
  journal?: Journal;
  metrics?: BridgeMetrics;
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** Told when a Reconciler's deliveries in flight at once (its adaptive limit) change. */
  onConcurrency?: (reconciler: string, concurrency: number) => void;
  owns?: (key: string) => boolean;
  /** The bridge's holds: keys whose deliveries may still be running, here or in a replica before. */
  holds: Holds;
  /** A Warning Event on the object, for failures a person should see there. */
  recordWarning(obj: KubeObject, reason: string, message: string): Promise<void>;
  /** A Reconciler without an identity is not delivered for (bridge/identity.ts). */
  requireIdentity?: boolean;
  /** How often rights are reviewed again: fixed (tests); else long while RBAC changes are watched, identityRecheckMs while not. */
  identityRecheckMs?: number;
  /** True while the bridge sees every RBAC change (bridge/rbac-changes.ts): rights are reviewed on a change, not polled. */
  rbacWatched?: () => boolean;
  /**
   * The identity's verdict changed: allowed, the Reconciler's watches are started (none runs
   * before: a Reconciler that may not be delivered for costs no more than its record); refused,
   * they are let go.
   */
  accessChanged?: (controller: Controller, allowed: boolean) => Promise<void>;
  /** The activator of the Deployment the sink runs as, when the bridge scales it to zero (bridge/activator.ts). */
  activator?: (config: ReconcilerConfig) => { activator: Activator; release: () => void } | undefined;
}



/** How often contract 2's bookkeeping is swept of children no watch holds (Snapshots.sweep). */
const sweepEveryMs = 60_000;

/** Why the bridge wants a key delivered, and what caused it. */
interface PendingObservation {
  reason: ReconcileReason;
  trigger?: ObjectRef;
  observedAt: number;
  /** With tracing on: the span of the event that made the object pending, and its time queued. */
  trace?: ObservationTrace;
}

export class Controller {
  readonly config: ReconcilerConfig;
  readonly queue: WorkQueue;
  private readonly workers: Workers;
  private readonly limit: AdaptiveLimit;
  private readonly resync: ResyncSchedule;
  /** How long its primaries take from a change to Ready (kfn_bridge_change_to_ready_seconds). */
  private readonly traces: DeliveryTraces;
  private readonly readyTime: TimeToReady | undefined;
  private readonly pending = new Map<string, PendingObservation>();
  // Requeues answered while a newer observation was pending: that one is delivered first (with
  // its own reason); the requeue is what the key's delayed add then delivers.
  private readonly requeues = new Map<string, PendingObservation>();
  // Last known version of deleted primaries, until their `deleted` delivery succeeds.
  private readonly tombstones = new Map<string, KubeObject>();
  // The primaries' selectors, by the field a selector-mapped watch names.
  private readonly selectors = new Map<string, SelectorIndex>();
  // The primaries' references, by the field a reference-mapped watch names.
  private readonly references = new Map<string, ReferenceIndex>();
  // Both kinds of index, kept up to date from the primary's events.
  private readonly primaryIndexes: (SelectorIndex | ReferenceIndex)[] = [];
  private readonly bridge: ControllerContext;
  private readonly sink: Sink;
  /** The activator of the sink's Deployment, when the bridge scales it to zero; released at stop. */
  private readonly activation: { activator: Activator; release: () => void } | undefined;
  private readonly unreport: (() => void) | undefined;
  /** What the Reconciler's Ready condition says of its function's clock (bridge/outcome.ts). */
  private readonly clockSkew = new ClockSkewReport();

  constructor(bridge: ControllerContext, config: ReconcilerConfig) {
    this.bridge = bridge;
    this.config = config;
    this.traces = new DeliveryTraces(config.name);
    // Only where the primary's watch keeps its status (contract 2, or a field-mapped watch).
    this.readyTime = watchedKinds(config)[0]?.full ? new TimeToReady((seconds) => bridge.metrics?.changeToReady.observe({ controller: config.name }, seconds)) : undefined;
    this.sink = new Sink(config, bridge.api, bridge.log, (problem) => bridge.onProblem?.(config.name, 'sink', problem), { allowPlainHttp: config.sink.allowPlainHttp === true });
    this.activation = bridge.activator?.(config);
    // A start that does not come is the sink's problem, as one that does not answer is.
    this.unreport = this.activation?.activator.report((problem) => bridge.onProblem?.(config.name, 'activator', problem));
    const metrics = bridge.metrics;
    this.queue = new WorkQueue({ clock: bridge.clock, backoff: config.backoff, rateLimit: config.rateLimit, observer: metrics?.queueObserver(config.name) });
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
    metrics?.controllerStarted(config.name, bridge.clock.wall() / 1000);
    metrics?.maxConcurrent.set({ controller: config.name }, config.maxConcurrentReconciles);
    this.snapshots = config.contract === 2 ? new Snapshots(config) : undefined;
    // Deliveries in flight: learnt from the function's answers, up to maxConcurrentReconciles.
    this.limit = new AdaptiveLimit(config.maxConcurrentReconciles, bridge.clock);
    metrics?.concurrency.set({ controller: config.name }, this.limit.current);
    this.workers = new Workers(this.queue, () => this.limit.current, (key) => this.deliver(key), bridge.clock);
    this.resync.start();
    if (config.serviceAccount || bridge.requireIdentity) void this.reviewAccess();
    else this.access = 'allowed';
  }

  /**
   * Whether the Reconciler's identity may see everything its deliveries carry (bridge/identity.ts):
   * unknown until first reviewed; `undecided` once reviews have failed for undecidedGraceMs
   * (the apiserver cannot answer, so a revocation could not be seen). Nothing is delivered unless allowed.
   */
  private access: 'unknown' | 'allowed' | 'refused' | 'undecided' = 'unknown';
  /** When the reviews started failing to reach a verdict (undefined while they reach one). */
  private undecidedSince: number | undefined;

  /** True once the identity may see what it is sent (or none is needed): the watches may run. */
  get allowed(): boolean {
    return this.access === 'allowed' || this.access === 'undecided';
  }
  private cancelReview: (() => void) | undefined;
  private stopped = false;

  /** A review in flight, and whether another was asked for meanwhile (RBAC changed again). */
  private reviewing = false;
  private reviewAgain = false;

  /** RBAC changed: the identity's rights are reviewed now, not at the next period. */
  reviewSoon(): void {
    if (this.stopped || !(this.config.serviceAccount || this.bridge.requireIdentity)) return;
    if (this.reviewing) {
      this.reviewAgain = true;
      return;
    }
    this.cancelReview?.();
    void this.reviewAccess();
  }

  /** Reviews the identity's rights now and again every recheck period; delivers everything again once allowed. */
  private async reviewAccess(): Promise<void> {
    this.reviewing = true;
    try {
      await this.reviewOnce();
    } finally {
      this.reviewing = false;
    }
    if (this.reviewAgain && !this.stopped) {
      this.reviewAgain = false;
      this.cancelReview?.();
      void this.reviewAccess();
    }
  }

  private async reviewOnce(): Promise<void> {
    let problem: string | undefined;
    try {
      problem = await identityProblem(this.bridge.api, this.config, this.bridge.requireIdentity ?? false);
    } catch (err) {
      // No verdict (a kind not served yet, the apiserver away or failing): the last one stands
      // for a grace period — a blip must not stop a fleet — and after it deliveries are held, so
      // that a revocation the bridge cannot see does not go on being ignored. Until there is a
      // first verdict, nothing is delivered.
      if (this.stopped) return;
      const now = this.bridge.clock.now();
      this.undecidedSince ??= now;
      if (this.access === 'allowed' && now - this.undecidedSince >= undecidedGraceMs) {
        this.access = 'undecided';
        const problem = `its identity's rights could not be reviewed for ${Math.round((now - this.undecidedSince) / 1000)} s (${(err as Error).message}): deliveries are held until they can be`;
        this.bridge.onProblem?.(this.config.name, 'identity', problem);
        this.bridge.log.warn({ reconciler: this.config.name, problem }, 'not delivering: its identity cannot be reviewed');
      }
      this.scheduleReview();
      return;
    }
    if (this.stopped) return;
    this.undecidedSince = undefined;
    const before = this.access;
    this.access = problem ? 'refused' : 'allowed';
    this.bridge.onProblem?.(this.config.name, 'identity', problem);
    if (problem && before !== 'refused') this.bridge.log.warn({ reconciler: this.config.name, problem }, 'not delivering: its identity may not see what it would be sent');
    if (!problem && before === 'refused') this.bridge.log.info({ reconciler: this.config.name }, 'its identity may see what it is sent now; delivering');
    if (problem && before !== 'refused') {
      // Nothing is kept of what it may not see: its watches go, and with them what it tracked.
      this.forgetObjects();
      await this.bridge.accessChanged?.(this, false);
    }
    if (!problem && before !== 'allowed') {
      if (before !== 'undecided') await this.bridge.accessChanged?.(this, true);
      if (this.stopped) return;
      this.redeliverAll();
    }
    this.scheduleReview();
  }

  /** Failed reviews in a row: while not allowed, the next review comes sooner (1 s, 2 s, 4 s … up to the period). */
  private reviewsFailed = 0;

  /**
   * The next review: after the recheck period once allowed; sooner while not — the identity's
   * ServiceAccount and Role are often applied just after the Reconciler (kfn deploy), and the
   * first delivery should not wait a whole period for them — and sooner while reviews fail.
   */
  private scheduleReview(): void {
    // Allowed: again after the period, long while RBAC changes are watched (each one has the rights
    // reviewed at once). Not allowed, or not decided: sooner, up to identityRecheckMs — what is
    // missing may be the ServiceAccount or its consent, or the apiserver's answer.
    const fixed = this.bridge.identityRecheckMs;
    const period = fixed ?? (this.bridge.rbacWatched?.() ? identityRecheckWatchedMs : identityRecheckMs);
    const settled = this.access === 'allowed' && this.undecidedSince === undefined;
    this.reviewsFailed = settled ? 0 : this.reviewsFailed + 1;
    const delay = settled ? period : Math.min(fixed ?? identityRecheckMs, 1000 * 2 ** (this.reviewsFailed - 1));
    this.cancelReview = this.bridge.clock.setTimer(() => void this.reviewAccess(), delay);
  }

  /** Lets go of every object it tracked (its identity was refused): its watches are let go next. */
  private forgetObjects(): void {
    for (const w of this.primaryWatches) for (const key of w.store.keys()) this.resync.untrack(key);
    for (const key of [...this.deferred.keys()]) this.undefer(key);
    for (const index of this.primaryIndexes) index.clear();
    this.pending.clear();
    this.requeues.clear();
    this.tombstones.clear();
    this.primaryWatches = [];
    this.otherWatches.clear();
  }

  /** Every object again once its identity may see it: the live ones as a resync, the deleted ones as deleted. */
  private redeliverAll(): void {
    this.redeliver(() => true);
    const now = this.bridge.clock.now();
    for (const key of this.tombstones.keys()) this.observe(key, { reason: 'deleted', observedAt: now }, 'high');
  }

  /** The Reconciler's primary watches (one per namespace it names, or one for all). */
  primaryWatches: Watcher[] = [];
  /** Its other watches (owned and watched kinds), by group/Kind. */
  private readonly otherWatches = new Map<string, Watcher[]>();
  /** Contract 2: what deliveries carry of the watches, and the writes they wait for. */
  private readonly snapshots: Snapshots | undefined;
  /** When the snapshots' bookkeeping was last swept (at most once every sweepEveryMs, after a delivery). */
  private sweptAt = 0;

  /**
   * Contract 2, after taking objects over from another holder (a leader, a shard): nothing is
   * vouched for until this bridge's watches have reached what the cluster holds now, which is
   * at least what the previous holder's deliveries wrote. One consistent list of the primary
   * kind (one object) tells the cluster's current resourceVersion.
   */
  async fenceSnapshots(): Promise<void> {
    const watch = this.primaryWatches[0];
    const snapshots = this.snapshots;
    if (!snapshots || !watch) return;
    // At once, before any delivery of what was taken over: nothing vouched for until it is known.
    snapshots.fencePending();
    try {
      const list = await this.bridge.api.request<{ metadata?: { resourceVersion?: string } }>('GET', collectionPath(watch.resource, watch.namespace), { query: { limit: 1 } });
      snapshots.fenceAt(list.metadata?.resourceVersion);
    } catch (err) {
      snapshots.fenceAt(undefined);
      throw err;
    }
  }

  /**
   * Keys held back until the watches have seen their last writes, each with the timer of its
   * longest wait. Woken by the watch event that shows a write (onEvent); should none come (a
   * version reached only through a bookmark, a watch that lags), the timer delivers it at the
   * end of the wait, without the lagging kinds. Only these keys are woken by events.
   */
  private readonly deferred = new Map<string, () => void>();

  private defer(key: string, since: number): void {
    if (this.deferred.has(key)) return;
    const cancel = this.bridge.clock.setTimer(() => {
      this.deferred.delete(key);
      this.queue.add(key);
    }, Math.max(0, since + maxSnapshotWaitMs - this.bridge.clock.now()));
    this.deferred.set(key, cancel);
  }

  private undefer(key: string): void {
    this.deferred.get(key)?.();
    this.deferred.delete(key);
  }

  /** Takes over what the controller of the Reconciler's previous spec knew that still holds: the waits for its writes. */
  inherit(previous: Controller): void {
    if (this.snapshots && previous.snapshots) this.snapshots.adopt(previous.snapshots);
  }

  /** A watch of an owned or watched kind this Reconciler uses. */
  addWatch(kind: KindRef, watcher: Watcher): void {
    const list = this.otherWatches.get(groupKind(kind)) ?? [];
    if (!list.includes(watcher)) list.push(watcher);
    this.otherWatches.set(groupKind(kind), list);
  }

  /** A shared watch replaced by one that keeps more of each object. */
  replaceWatch(old: Watcher, replaced: Watcher): void {
    this.primaryWatches = this.primaryWatches.map((w) => (w === old ? replaced : w));
    for (const [gk, list] of this.otherWatches) this.otherWatches.set(gk, list.map((w) => (w === old ? replaced : w)));
  }

  /** The watches of a kind, for the snapshots. */
  private readonly watchesOf = (kind: KindRef): Watcher[] => (sameKind(kind, this.config.for) ? this.primaryWatches : (this.otherWatches.get(groupKind(kind)) ?? []));

  /** The primary's last known state, from whichever of its watches holds it. */
  private primaryOf(key: string): KubeObject | undefined {
    for (const w of this.primaryWatches) {
      const obj = w.store.get(key);
      if (obj) return obj;
    }
    return undefined;
  }

  /**
   * Records why `key` needs a delivery and queues it; with tracing on, the observation starts a
   * trace (core/tracing.ts), linked to the write that caused it when `cause` is one of this
   * bridge's. A resync never overrides a real reason. Another shard's key is left alone.
   */
  private observe(key: string, observed: Omit<PendingObservation, 'trace'>, priority: Priority, override = true, cause?: TraceCause): void {
    if (!this.owns(key)) return;
    const obs: PendingObservation = tracing.on ? { ...observed, trace: this.traces.received(key, cause, observed.reason) } : observed;
    if (override || !this.pending.has(key)) this.setPending(key, obs);
    else this.joinPending(key, obs);
    this.queue.add(key, priority);
  }

  /** `obs` becomes what `key` waits for; a trace still waiting in the queue carries on (with tracing on). */
  private setPending(key: string, obs: PendingObservation): void {
    this.pending.set(key, this.joinPending(key, obs));
  }

  /**
   * With tracing on: an observation of `key` while an earlier one still waits in the queue joins
   * its trace (the first event's, the one that made the object wait; the later one is linked),
   * and answers the observation carrying that trace. One in flight has left the queue already:
   * an event now starts a trace of its own.
   */
  private joinPending(key: string, obs: PendingObservation): PendingObservation {
    const waiting = this.pending.get(key)?.trace;
    if (!waiting?.queued) return obs;
    if (obs.trace) this.traces.alsoReceived(waiting, obs.trace);
    return { ...obs, trace: waiting };
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
    if (!this.allowed) {
      // Watches kept from the spec this one replaced, while its identity is reviewed: what they
      // hold is replayed once it is allowed; only a deletion would be lost meanwhile.
      if (sameKind(kind, this.config.for)) {
        const key = event.key ?? objectKey(event.object.metadata);
        if (event.type === 'delete' && this.inNamespaces(event.object) && this.owns(key)) this.tombstones.set(key, event.object);
        else this.tombstones.delete(key);
      }
      return;
    }
    this.snapshots?.onEvent(kind, event);
    // A delivery held back until its last writes are seen: this may be one of them.
    if (this.snapshots && this.deferred.size) {
      for (const key of this.snapshots.waitingFor(kind, event.object)) if (this.deferred.has(key)) this.queue.add(key);
    }
    if (sameKind(kind, this.config.for)) {
      // The watch's own key string when it gives one: the resync schedule then shares it.
      const key = event.key ?? objectKey(event.object.metadata);
      if (event.type === 'delete') {
        // Kept until its `deleted` delivery succeeds; only for objects this Reconciler serves
        // (and this shard delivers).
        if (this.inNamespaces(event.object) && this.owns(key)) this.tombstones.set(key, event.object);
        this.resync.untrack(key);
        this.readyTime?.gone(key);
        for (const index of this.primaryIndexes) index.delete(key);
      } else {
        this.tombstones.delete(key);
        if (this.inNamespaces(event.object)) this.resync.track(key);
        if (this.inNamespaces(event.object) && this.owns(key)) this.readyTime?.seen(key, event.object, this.bridge.clock.now(), event.type === 'apply' ? event.old : undefined);
        for (const index of this.primaryIndexes) index.set(key, event.object);
      }
    }
    const now = this.bridge.clock.now();
    const primaryWatch = this.primaryWatches[0];
    for (const e of route(this.config, kind, event, { initial, selectors: (field) => this.selectors.get(field), references: (field) => this.references.get(field), primaryNamespaced: primaryWatch?.resource.namespaced ?? true })) {
      this.observe(e.key, { reason: e.reason, trigger: e.trigger, observedAt: now }, e.priority, true, { type: event.type, object: event.object, kind });
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
    if (this.access !== 'allowed') {
      // Not reviewed yet, or not for an identity that may not see it: held with its reason
      // (created, updated…), and delivered with it once the identity may (redeliverAll). A
      // Reconciler is often reviewed a moment before the apiserver's authorizer has seen the
      // binding applied with it: its first objects keep their reasons across that refusal.
      this.queue.forget(key);
      return;
    }
    if (this.heldBack(key)) return;
    const pending = this.pending.get(key) ?? this.owedRequeue(key) ?? { reason: 'resync' as const, observedAt: this.bridge.clock.now() };
    const live = this.primaryOf(key);
    const primary = live ?? this.tombstones.get(key);
    if (!primary) {
      // Mapped or child events for a primary that does not exist (or no longer): nothing to do.
      if (pending.trace) this.traces.dequeued(pending.trace);
      this.finish(key, pending);
      this.requeues.delete(key);
      this.queue.forget(key);
      this.snapshots?.forget(key);
      this.undefer(key);
      return;
    }
    const observed = live && this.snapshots ? this.snapshotFor(key, live) : undefined;
    if (observed === 'wait') return;
    let reason: ReconcileReason = live ? pending.reason : 'deleted';
    if (live && reason === 'deleted') reason = 'created';
    // Gone: nothing more to wait for before delivering it (a new object of the name starts afresh).
    if (reason === 'deleted') this.snapshots?.forget(key);
    // A sink scaled to zero: held while a pod starts, and queued again once one is ready (the
    // key keeps its reason and its place). Not a failure, so no backoff.
    const activator = this.activation?.activator;
    if (activator && !activator.admit(key, () => this.queue.add(key), this.queue.length + this.workers.busy)) {
      if (pending.trace) this.traces.dequeued(pending.trace);
      return;
    }
    const observation: Observation = {
      reconciler: this.config.name,
      primary: refOf(primary),
      reason,
      trigger: reason === 'child' || reason === 'mapped' ? pending.trigger : undefined,
      observedAt: pending.observedAt,
    };
    // Timed from here: what the sink's lookup and signing take is not the function's time.
    await this.sink.prepare();
    const attempt = this.queue.retries(key) + 1;
    // The deadline the function reads is wall time (its clock is another machine's); the one
    // the bridge holds the key by is on its monotonic clock.
    const timeoutMs = this.config.timeoutSeconds * 1000;
    const deadline = this.bridge.clock.now() + timeoutMs;
    const wallDeadline = this.bridge.clock.wall() + timeoutMs;
    // The time left travels too (signed): the function counts it down on its own monotonic
    // clock from receipt, so the two machines' clocks need not agree.
    const encode = (o: ObservedState | undefined) => encodeReconcileEvent(observation, attempt, this.bridge.source, wallDeadline, o, timeoutMs);
    // A snapshot too large for a function to take goes without the children (or whole).
    let encoded = encode(observed);
    if (observed && Buffer.byteLength(encoded.message.body) > eventBudgetBytes) {
      const fitted = fitObserved(observed, (o) => Buffer.byteLength(encode(o).message.body));
      this.bridge.log.warn({ reconciler: this.config.name, key, bytes: Buffer.byteLength(encoded.message.body), carried: fitted ? 'the primary only' : 'nothing' }, 'the observed state is too large for one event; the function reads the rest itself');
      encoded = encode(fitted);
    }
    const { event, message } = encoded;
    // Held while in flight: a controller that replaces this one (a Reconciler edit) waits for it.
    this.bridge.holds.hold(this.config.name, key, deadline + deadlineGraceMs, this);
    activator?.started();
    const sent = tracing.on ? await this.sendTraced(message, reason, event, attempt, pending.trace) : await this.send(message, reason);
    // Not reached at all (its pod gone, evicted, scaled down by someone else): looked at again first.
    activator?.finished(sent.result.status === undefined && sent.result.outcome.kind === 'retry');
    const { sink } = sent;
    if (this.limit.answered({ status: sent.result.status, durationMs: sent.result.durationMs, inFlight: this.workers.busy })) {
      this.bridge.metrics?.concurrency.set({ controller: this.config.name }, this.limit.current);
      this.bridge.onConcurrency?.(this.config.name, this.limit.current);
    }
    const now = this.bridge.clock.now();
    const result = this.noteAnswer(key, sent.result, now);
    if (tracing.on) this.traces.answered(writtenBy(result.outcome));
    this.bridge.journal?.append(journalEntryOf({ id: event.id, key, attempt, observation, sink, result, now }));
    const { outcome } = result;
    const clock = this.clockSkew.after(result);
    if (clock) {
      this.bridge.onProblem?.(this.config.name, 'clock', clock.problem);
      this.bridge.metrics?.clockSkew.set({ controller: this.config.name }, clock.skewSeconds);
    }
    const delay = this.carryOut(key, pending, reason === 'deleted', settle(result, now, deadline));
    if (outcome.kind === 'retry' && outcome.invalidAnswer) {
      this.bridge.metrics?.invalidAnswers.inc({ controller: this.config.name });
      this.bridge.log.warn({ reconciler: this.config.name, key, reason, attempt, sink, problem: outcome.invalidAnswer, retryInMs: delay }, "the function's answer is not the contract's response; will retry");
    } else if (outcome.kind === 'retry') {
      this.bridge.log.warn({ reconciler: this.config.name, key, reason, attempt, why: outcome.why, retryInMs: delay }, 'delivery failed; will retry');
    } else if (outcome.kind === 'terminal') {
      this.bridge.log.error({ reconciler: this.config.name, key, reason, why: outcome.why }, 'function refused the event; waiting for the next change or resync');
      if (live) void this.bridge.recordWarning(primary, 'ReconcileRejected', `kfn: the ${this.config.name} function refused the ${reason} event: ${outcome.why}`);
    }
  }

  /**
   * Contract 2: takes what a done or requeue answer says the next delivery must wait for. The
   * answer was checked against the contract (core/response.ts); should the bookkeeping still
   * refuse it, the delivery counts as failed rather than throwing past the key's hold.
   */
  private noteAnswer(key: string, result: DeliveryResult, now: number): DeliveryResult {
    const { outcome } = result;
    // A failure that reports writes: its retry waits for them (the answer was checked already).
    if (this.snapshots && outcome.kind === 'retry' && outcome.written) this.snapshots.noteWrites(key, outcome.written, now);
    if (!this.snapshots || (outcome.kind !== 'done' && outcome.kind !== 'requeue')) return result;
    try {
      this.snapshots.noteAnswer(key, outcome.response, now);
      return result;
    } catch (err) {
      const problem = (err as Error).message;
      return { ...result, outcome: { kind: 'retry', why: `invalid answer: ${problem}`, invalidAnswer: problem } };
    }
  }

  /**
   * Contract 2: the observed state for a delivery of `key`, or 'wait' when its watches have not
   * yet seen the writes of its last reconcile (the key is queued again shortly). After
   * maxSnapshotWaitMs the delivery goes without the lagging kinds, which the function reads.
   */
  private snapshotFor(key: string, live: KubeObject): ObservedState | undefined | 'wait' {
    const snapshots = this.snapshots!;
    const now = this.bridge.clock.now();
    if (now - this.sweptAt >= sweepEveryMs) {
      // Due with a delivery (an idle bridge is not woken for it), run after it: the sweep walks
      // every child the Reconciler holds, which this delivery need not wait for.
      this.sweptAt = now;
      this.bridge.clock.setTimer(() => {
        const released = snapshots.sweep(this.watchesOf, this.bridge.clock.now());
        if (released.baselines || released.children) this.bridge.log.info({ reconciler: this.config.name, ...released }, 'released the bookkeeping of children no watch holds');
      }, 0);
    }
    const readiness = snapshots.readiness(key, this.watchesOf, now);
    if (readiness.kind === 'wait') {
      if (readiness.first) this.bridge.metrics?.staleSnapshotSkips.inc({ controller: this.config.name });
      this.defer(key, readiness.since);
      return 'wait';
    }
    this.undefer(key);
    if (readiness.kind === 'lagging') {
      this.bridge.metrics?.snapshotLagFallbacks.inc({ controller: this.config.name });
      this.bridge.log.warn({ reconciler: this.config.name, key, kinds: [...readiness.kinds], waitedMs: maxSnapshotWaitMs }, "the bridge's watches have not seen the last reconcile's writes; delivering without their snapshot (the function reads those kinds itself)");
    }
    return snapshots.observed(live, this.watchesOf, readiness.kind === 'lagging' ? readiness.kinds : undefined);
  }

  /**
   * True when a delivery of the key may still be running (one that timed out, one in flight in
   * the controller this one replaced, one a previous Lease holder left): it is queued for later.
   */
  private heldBack(key: string): boolean {
    const until = this.bridge.holds.until(this.config.name, key, this.config.timeoutSeconds * 1000);
    if (until === undefined) return false;
    this.bridge.metrics?.heldBack.inc({ controller: this.config.name });
    this.queue.addAfter(key, until - this.bridge.clock.now());
    return true;
  }

  /** Sends one event to the sink with the Reconciler's credentials; never throws. */
  private async send(message: HttpMessage, reason: ReconcileReason): Promise<{ result: DeliveryResult; sink: string }> {
    const metrics = this.bridge.metrics;
    const controller = this.config.name;
    metrics?.activeWorkers.inc({ controller });
    const sent = await this.sink.send(message, this.config.timeoutSeconds * 1000).finally(() => metrics?.activeWorkers.dec({ controller }));
    metrics?.reconcileTime.observe({ controller }, sent.result.durationMs / 1000);
    metrics?.deliveries.inc({ controller, reason, code: sent.result.status === undefined ? 'none' : String(sent.result.status) });
    const failure = sinkFailureOf(sent.result);
    if (failure) {
      metrics?.sinkFailures.inc({ controller, reason: failure });
      metrics?.lastSinkFailure.set({ controller }, this.bridge.clock.wall() / 1000);
    } else metrics?.lastAnswer.set({ controller }, this.bridge.clock.wall() / 1000);
    return sent;
  }

  /** send(), in a span of the delivery attempt whose traceparent travels with the event: the function's spans continue its trace. */
  private sendTraced(message: HttpMessage, reason: ReconcileReason, event: ReconcileCloudEvent, attempt: number, t: ObservationTrace | undefined): Promise<{ result: DeliveryResult; sink: string }> {
    if (t) this.traces.dequeued(t);
    const attributes = {
      'messaging.system': 'cloudevents',
      'messaging.operation.type': 'send',
      'messaging.destination.name': this.config.name,
      'cloudevents.event_id': event.id,
      'cloudevents.event_type': event.type,
      'cloudevents.event_source': event.source,
      ...(event.subject ? { 'cloudevents.event_subject': event.subject } : {}),
      'kfn.reason': reason,
      'kfn.attempt': attempt,
    };
    return inSpan(`send ${this.config.name}`, attributes, async (span) => {
      const sent = await this.send({ ...message, headers: withTraceHeaders(message.headers, context.active()) }, reason);
      const { result } = sent;
      span?.setAttributes({ 'kfn.outcome': result.outcome.kind, ...(result.status !== undefined ? { 'http.response.status_code': result.status } : {}), 'server.address': sent.sink });
      if (result.outcome.kind === 'retry' || result.outcome.kind === 'terminal') span?.setStatus({ code: SpanStatusCode.ERROR, message: result.outcome.why });
      return sent;
    }, { parent: t?.context ?? ROOT_CONTEXT, kind: SpanKind.PRODUCER });
  }

  /** Carries out what settle() decided for the key; answers the backoff's delay when it chose one. */
  private carryOut(key: string, pending: PendingObservation, deleted: boolean, s: Settlement): number | undefined {
    const metrics = this.bridge.metrics;
    const controller = this.config.name;
    metrics?.reconcileTotal.inc({ controller, result: s.result });
    if (s.error === 'retry') metrics?.reconcileErrors.inc({ controller });
    if (s.error === 'terminal') metrics?.terminalErrors.inc({ controller });
    if (s.finished) this.finish(key, pending, deleted);
    if (s.requeue) {
      const requeue: PendingObservation = { reason: 'requeue', observedAt: s.requeue.observedAt };
      if (this.pending.has(key)) this.requeues.set(key, requeue);
      else {
        this.setPending(key, requeue);
        this.requeues.delete(key);
      }
    }
    this.bridge.holds.release(this.config.name, key, s.holdUntil, this);
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

  /** A requeue kept while a newer observation went first, now the key's pending observation. */
  private owedRequeue(key: string): PendingObservation | undefined {
    const requeue = this.requeues.get(key);
    if (!requeue) return undefined;
    this.requeues.delete(key);
    this.pending.set(key, requeue);
    return requeue;
  }

  /** Drops the pending observation if no newer one arrived meanwhile. */
  private finish(key: string, pending: PendingObservation, deleted = false): void {
    if (this.pending.get(key) === pending) {
      this.pending.delete(key);
      // A requeue kept for the key's delayed add is owed no more once that add has come (and
      // been folded into this delivery) or the object is gone.
      if (deleted || !this.queue.isDelayed(key)) this.requeues.delete(key);
    }
    if (deleted) this.tombstones.delete(key);
  }

  async stop(timeoutMs: number): Promise<boolean> {
    this.stopped = true;
    this.cancelReview?.();
    this.unreport?.();
    this.activation?.release();
    for (const key of [...this.deferred.keys()]) this.undefer(key);
    this.resync.stop();
    const finished = await this.workers.stop(timeoutMs);
    this.queue.shutDown();
    // Traces of observations never delivered end here (the next controller observes them afresh).
    for (const p of this.pending.values()) if (p.trace) this.traces.dequeued(p.trace);
    return finished;
  }
}


/** The writes an answer names: a done or requeue answer's changes, or those a failure reports. */
function writtenBy(outcome: DeliveryOutcome): readonly Change[] {
  if (outcome.kind === 'done' || outcome.kind === 'requeue') return outcome.response?.changes ?? [];
  if (outcome.kind === 'retry') return outcome.written ?? [];
  return [];
}
