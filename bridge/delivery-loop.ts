// One Reconciler's deliveries — controller-runtime's reconcile loop: its workers take keys from
// the queue, at most as many at once as the adaptive limit allows, and deliver each. What a
// delivery says is decided when it is sent, from the newest state (the primary as the watch
// holds it now, or its tombstone if it was deleted) and the reason recorded for the key's latest
// observation; a retry of an unchanged observation has the same event id. What an answer means
// for the key is bridge/outcome.ts's; this carries it out.
//
//   WorkQueue ─▶ Workers ─▶ deliver(key): decide ─▶ admitted ─▶ request ─▶ send ─▶ answered
//       ▲                                                                            │
//       └──────────────────────── carryOut(settle(answer)) ◀─────────────────────────┘
import type { AccessReview } from './access.ts';
import type { Activator } from './activator.ts';
import { AdaptiveLimit } from './concurrency.ts';
import type { ReconcilerConfig } from './config.ts';
import { sinkFailureOf, type DeliveryResult } from './delivery.ts';
import type { Holds } from './holds.ts';
import type { WatchSet } from './intake.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics } from './metrics.ts';
import { ClockSkewReport, deadlineGraceMs, journalEntryOf, settle, type Settlement } from './outcome.ts';
import type { Observations, PendingObservation } from './pending.ts';
import type { Sink } from './sink.ts';
import type { SnapshotWaits } from './snapshot-waits.ts';
import type { DeliveryTraces } from './traces.ts';
import { Workers, type WorkQueue } from './workqueue.ts';
import type { HttpMessage } from '../core/authentication.ts';
import type { Clock } from '../core/clock.ts';
import { encodeReconcileEvent, eventBudgetBytes, fitObserved, type Observation, type ObservedState, type ReconcileCloudEvent, type ReconcileReason } from '../core/event.ts';
import type { Journal } from '../core/journal.ts';
import { refOf } from '../core/objects.ts';
import type { Change, DeliveryOutcome } from '../core/response.ts';
import { tracing } from '../core/tracing.ts';
import type { KubeObject } from '../kube/api.ts';

/** What deliveries use of the bridge they run in. */
export interface DeliveryContext {
  log: Logger;
  clock: Clock;
  /** CloudEvent `source`. */
  source: string;
  journal?: Journal;
  metrics?: BridgeMetrics;
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** Told when a Reconciler's deliveries in flight at once (its adaptive limit) change. */
  onConcurrency?: (reconciler: string, concurrency: number) => void;
  /** The bridge's holds: keys whose deliveries may still be running, here or in a replica before. */
  holds: Holds;
  /** A Warning Event on the object, for failures a person should see there. */
  recordWarning(obj: KubeObject, reason: string, message: string): Promise<void>;
}

/** The parts of its Controller a Reconciler's deliveries read and write. */
export interface DeliveryParts {
  queue: WorkQueue;
  observations: Observations;
  watches: WatchSet;
  snapshots: SnapshotWaits | undefined;
  access: AccessReview;
  sink: Sink;
  /** The activator of the sink's Deployment, when the bridge scales it to zero. */
  activator: Activator | undefined;
  traces: DeliveryTraces;
  /** Who holds a key while its delivery runs (the Controller): its successor is woken when it answers. */
  holder: object;
}

/** What a delivery of a key says, decided from the newest state. */
interface Decision {
  pending: PendingObservation;
  /** The primary as its watch holds it now; undefined once it is deleted. */
  live: KubeObject | undefined;
  /** The primary delivered: `live`, or its tombstone. */
  primary: KubeObject;
  reason: ReconcileReason;
  /** Contract 2: what the event carries of the watches. */
  observed: ObservedState | undefined;
}

/** One attempt's event, and the deadline the bridge holds the key by. */
interface Request {
  observation: Observation;
  attempt: number;
  /** On the bridge's monotonic clock. */
  deadline: number;
  event: ReconcileCloudEvent;
  message: HttpMessage;
}

/** The sink's answer, and the sink it came from. */
type Sent = { result: DeliveryResult; sink: string };

export class DeliveryLoop {
  private readonly workers: Workers;
  private readonly limit: AdaptiveLimit;
  /** What the Reconciler's Ready condition says of its function's clock (bridge/outcome.ts). */
  private readonly clockSkew = new ClockSkewReport();
  private readonly bridge: DeliveryContext;
  private readonly config: ReconcilerConfig;
  private readonly queue: WorkQueue;
  private readonly observations: Observations;
  private readonly watches: WatchSet;
  private readonly snapshots: SnapshotWaits | undefined;
  private readonly access: AccessReview;
  private readonly sink: Sink;
  private readonly activator: Activator | undefined;
  private readonly traces: DeliveryTraces;
  private readonly holder: object;

  constructor(bridge: DeliveryContext, config: ReconcilerConfig, parts: DeliveryParts) {
    this.bridge = bridge;
    this.config = config;
    this.queue = parts.queue;
    this.observations = parts.observations;
    this.watches = parts.watches;
    this.snapshots = parts.snapshots;
    this.access = parts.access;
    this.sink = parts.sink;
    this.activator = parts.activator;
    this.traces = parts.traces;
    this.holder = parts.holder;
    // Deliveries in flight: learnt from the function's answers, up to maxConcurrentReconciles.
    this.limit = new AdaptiveLimit(config.maxConcurrentReconciles, bridge.clock);
    bridge.metrics?.concurrency.set({ controller: config.name }, this.limit.current);
    this.workers = new Workers(this.queue, () => this.limit.current, (key) => this.deliver(key), bridge.clock);
  }

  /** Stops starting deliveries and waits (up to `timeoutMs`) for those in flight. */
  stop(timeoutMs: number): Promise<boolean> {
    return this.workers.stop(timeoutMs);
  }

  /**
   * One delivery of `key`: what it says is decided now, from the newest state (the primary as
   * the watch holds it, or its tombstone), then sent, journaled and settled (bridge/outcome.ts).
   */
  private async deliver(key: string): Promise<void> {
    const decision = this.decide(key);
    if (!decision || !this.admitted(key, decision)) return;
    const request = await this.request(key, decision);
    const sent = await this.send(key, decision, request);
    this.answered(key, decision, request, sent);
  }

  /**
   * What a delivery of `key` says now; undefined when there is nothing to send now: the
   * identity may not see it, an earlier delivery may still run, its primary does not exist, or
   * contract 2 waits for the watches to see its last writes.
   */
  private decide(key: string): Decision | undefined {
    if (!this.mayDeliver(key)) return undefined;
    const pending = this.observations.next(key) ?? { reason: 'resync' as const, observedAt: this.bridge.clock.now() };
    const live = this.watches.primaryOf(key);
    const primary = live ?? this.observations.tombstone(key);
    if (!primary) {
      // Mapped or child events for a primary that does not exist (or no longer): nothing to do.
      this.observations.dropped(key, pending);
      this.queue.forget(key);
      this.snapshots?.forget(key);
      this.snapshots?.undefer(key);
      return undefined;
    }
    const observed = live && this.snapshots ? this.snapshots.observedFor(key, live) : undefined;
    if (observed === 'wait') return undefined;
    let reason: ReconcileReason = live ? pending.reason : 'deleted';
    if (live && reason === 'deleted') reason = 'created';
    // Gone: nothing more to wait for before delivering it (a new object of the name starts afresh).
    if (reason === 'deleted') this.snapshots?.forget(key);
    return { pending, live, primary, reason, observed };
  }

  /** Whether `key` may be delivered now, its identity allowed and no earlier delivery of it still running. */
  private mayDeliver(key: string): boolean {
    if (this.access.verdict !== 'allowed') {
      // Not reviewed yet, or not for an identity that may not see it: held with its reason
      // (created, updated…), and delivered with it once the identity may (redeliverAll). A
      // Reconciler is often reviewed a moment before the apiserver's authorizer has seen the
      // binding applied with it: its first objects keep their reasons across that refusal.
      this.queue.forget(key);
      return false;
    }
    return !this.heldBack(key);
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

  /**
   * A sink scaled to zero: held while a pod starts, and queued again once one is ready (the key
   * keeps its reason and its place). Not a failure, so no backoff.
   */
  private admitted(key: string, d: Decision): boolean {
    if (!this.activator || this.activator.admit(key, () => this.queue.add(key), this.queue.length + this.workers.busy)) return true;
    this.observations.dequeued(d.pending);
    return false;
  }

  /** The event of this attempt, with the time it may take. */
  private async request(key: string, d: Decision): Promise<Request> {
    const observation: Observation = {
      reconciler: this.config.name,
      primary: refOf(d.primary),
      reason: d.reason,
      trigger: d.reason === 'child' || d.reason === 'mapped' ? d.pending.trigger : undefined,
      observedAt: d.pending.observedAt,
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
    return { observation, attempt, deadline, ...this.fitted(key, encode, d.observed) };
  }

  /** The event with all of `observed` it can carry: a snapshot too large for a function to take goes without the children (or whole). */
  private fitted(key: string, encode: (o: ObservedState | undefined) => { event: ReconcileCloudEvent; message: HttpMessage }, observed: ObservedState | undefined): { event: ReconcileCloudEvent; message: HttpMessage } {
    const encoded = encode(observed);
    if (!observed || Buffer.byteLength(encoded.message.body) <= eventBudgetBytes) return encoded;
    const fitted = fitObserved(observed, (o) => Buffer.byteLength(encode(o).message.body));
    this.bridge.log.warn({ reconciler: this.config.name, key, bytes: Buffer.byteLength(encoded.message.body), carried: fitted ? 'the primary only' : 'nothing' }, 'the observed state is too large for one event; the function reads the rest itself');
    return encode(fitted);
  }

  /** Sends the event, the key held while it is in flight: a controller that replaces this one (a Reconciler edit) waits for it. */
  private async send(key: string, d: Decision, r: Request): Promise<Sent> {
    this.bridge.holds.hold(this.config.name, key, r.deadline + deadlineGraceMs, this.holder);
    this.activator?.started();
    const sent = tracing.on ? await this.traces.sending(r.message, r.event, d.reason, r.attempt, d.pending.trace, (message) => this.post(message, d.reason)) : await this.post(r.message, d.reason);
    // Not reached at all (its pod gone, evicted, scaled down by someone else): looked at again first.
    this.activator?.finished(sent.result.status === undefined && sent.result.outcome.kind === 'retry');
    return sent;
  }

  /** Sends one event to the sink with the Reconciler's credentials; never throws. */
  private async post(message: HttpMessage, reason: ReconcileReason): Promise<Sent> {
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

  /** The answer: learnt from (the limit, contract 2's waits, the traces), journaled, and settled for the key (bridge/outcome.ts). */
  private answered(key: string, d: Decision, r: Request, sent: Sent): void {
    this.adapt(sent.result);
    const now = this.bridge.clock.now();
    const result = this.snapshots ? this.snapshots.noteAnswer(key, sent.result, now) : sent.result;
    if (tracing.on) this.traces.answered(writtenBy(result.outcome));
    this.bridge.journal?.append(journalEntryOf({ id: r.event.id, key, attempt: r.attempt, observation: r.observation, sink: sent.sink, result, now }));
    this.checkClock(result);
    const delay = this.carryOut(key, d.pending, d.reason === 'deleted', settle(result, now, r.deadline));
    this.report(key, d, r.attempt, sent.sink, result.outcome, delay);
  }

  /** The adaptive limit learns from the answer's pace and pushback. */
  private adapt(result: DeliveryResult): void {
    if (!this.limit.answered({ status: result.status, durationMs: result.durationMs, inFlight: this.workers.busy })) return;
    this.bridge.metrics?.concurrency.set({ controller: this.config.name }, this.limit.current);
    this.bridge.onConcurrency?.(this.config.name, this.limit.current);
  }

  /** What the function's clock says, on the Reconciler's Ready condition and in kfn_bridge_clock_skew_seconds. */
  private checkClock(result: DeliveryResult): void {
    const clock = this.clockSkew.after(result);
    if (!clock) return;
    this.bridge.onProblem?.(this.config.name, 'clock', clock.problem);
    this.bridge.metrics?.clockSkew.set({ controller: this.config.name }, clock.skewSeconds);
  }

  /** Carries out what settle() decided for the key; answers the backoff's delay when it chose one. */
  private carryOut(key: string, pending: PendingObservation, deleted: boolean, s: Settlement): number | undefined {
    const metrics = this.bridge.metrics;
    const controller = this.config.name;
    metrics?.reconcileTotal.inc({ controller, result: s.result });
    if (s.error === 'retry') metrics?.reconcileErrors.inc({ controller });
    if (s.error === 'terminal') metrics?.terminalErrors.inc({ controller });
    if (s.finished) this.observations.finish(key, pending, deleted);
    if (s.requeue) this.observations.requeue(key, s.requeue.observedAt);
    this.bridge.holds.release(this.config.name, key, s.holdUntil, this.holder);
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

  /** A failed delivery said where a person looks: the log, and for a refusal the object's Events. */
  private report(key: string, d: Decision, attempt: number, sink: string, outcome: DeliveryOutcome, retryInMs: number | undefined): void {
    const { reason } = d;
    if (outcome.kind === 'retry' && outcome.invalidAnswer) {
      this.bridge.metrics?.invalidAnswers.inc({ controller: this.config.name });
      this.bridge.log.warn({ reconciler: this.config.name, key, reason, attempt, sink, problem: outcome.invalidAnswer, retryInMs }, "the function's answer is not the contract's response; will retry");
    } else if (outcome.kind === 'retry') {
      this.bridge.log.warn({ reconciler: this.config.name, key, reason, attempt, why: outcome.why, retryInMs }, 'delivery failed; will retry');
    } else if (outcome.kind === 'terminal') {
      this.bridge.log.error({ reconciler: this.config.name, key, reason, why: outcome.why }, 'function refused the event; waiting for the next change or resync');
      if (d.live) void this.bridge.recordWarning(d.primary, 'ReconcileRejected', `kfn: the ${this.config.name} function refused the ${reason} event: ${outcome.why}`);
    }
  }
}

/** The writes an answer names: a done or requeue answer's changes, or those a failure reports. */
function writtenBy(outcome: DeliveryOutcome): readonly Change[] {
  if (outcome.kind === 'done' || outcome.kind === 'requeue') return outcome.response?.changes ?? [];
  if (outcome.kind === 'retry') return outcome.written ?? [];
  return [];
}
