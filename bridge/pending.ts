// Why each of a Reconciler's keys wants a delivery: the observation its next delivery says (the
// reason, what triggered it, when it was observed), a requeue owed behind a newer observation,
// and the last known state of a deleted primary until its `deleted` delivery succeeds. The
// queue holds when a key is delivered; this holds what the delivery says. The traces watch the
// observations come and go through ObservationObserver; nothing here depends on them.
import type { ObservationTrace, TraceCause } from './traces.ts';
import type { ReconcileReason } from '../core/event.ts';
import type { ObjectRef } from '../core/objects.ts';
import { tracing } from '../core/tracing.ts';
import type { KubeObject } from '../kube/api.ts';

/** Why the bridge wants a key delivered, and what caused it. */
export interface PendingObservation {
  reason: ReconcileReason;
  trigger?: ObjectRef;
  observedAt: number;
  /** With tracing on: the span of the event that made the object pending, and its time queued. */
  trace?: ObservationTrace;
}

/** What sees observations come, join one another and leave the queue: the traces (bridge/traces.ts). */
export interface ObservationObserver {
  /** With tracing on: `key` is observed (from a watch event, or a resync without one); answers its trace. */
  received(key: string, cause: TraceCause | undefined, reason: string): ObservationTrace;
  /** A later observation of a key whose earlier one still waits in the queue joins its trace. */
  alsoReceived(waiting: ObservationTrace, later: ObservationTrace): void;
  /** The observation leaves the queue: its delivery starts, it is held for a sink that starts, or dropped. */
  dequeued(trace: ObservationTrace): void;
}

export class Observations {
  /**
   * At most one per key: what its next delivery says. A newer observation replaces it (a resync
   * never replaces a real reason); a delivery's answer removes it only if it is still the one
   * that delivery said.
   */
  private readonly pending = new Map<string, PendingObservation>();
  /**
   * Requeues answered while a newer observation was pending: that one is delivered first (with
   * its own reason); the requeue is what the key's delayed add then delivers. Kept only while
   * that add is owed.
   */
  private readonly owed = new Map<string, PendingObservation>();
  /** Last known version of deleted primaries, until their `deleted` delivery succeeds; none for a live one. */
  private readonly tombstones = new Map<string, KubeObject>();
  private readonly observer: ObservationObserver;
  /** Whether the queue holds a delayed add of the key (a requeue's, or a backoff's). */
  private readonly delayed: (key: string) => boolean;

  constructor(observer: ObservationObserver, delayed: (key: string) => boolean) {
    this.observer = observer;
    this.delayed = delayed;
  }

  /**
   * Records why `key` needs a delivery; with tracing on, the observation starts a trace
   * (core/tracing.ts), linked to the write that caused it when `cause` is one of this bridge's.
   * A resync (`override` false) never overrides a real reason.
   */
  record(key: string, observed: Omit<PendingObservation, 'trace'>, override: boolean, cause?: TraceCause): void {
    const obs: PendingObservation = tracing.on ? { ...observed, trace: this.observer.received(key, cause, observed.reason) } : observed;
    if (override || !this.pending.has(key)) this.setPending(key, obs);
    else this.joinWaiting(key, obs);
  }

  /** `obs` becomes what `key` waits for, carrying on the trace of one still waiting in the queue. */
  private setPending(key: string, obs: PendingObservation): void {
    this.pending.set(key, this.joinWaiting(key, obs));
  }

  /**
   * An observation of `key` while an earlier one still waits in the queue joins its trace (the
   * first event's, the one that made the object wait; the later one is linked), and answers
   * the observation carrying that trace. One in flight has left the queue already: an event now
   * starts a trace of its own.
   */
  private joinWaiting(key: string, obs: PendingObservation): PendingObservation {
    const waiting = this.pending.get(key)?.trace;
    if (!waiting?.queued) return obs;
    if (obs.trace) this.observer.alsoReceived(waiting, obs.trace);
    return { ...obs, trace: waiting };
  }

  /** The key's pending observation, or the requeue it is owed (which becomes its pending one); undefined for neither. */
  next(key: string): PendingObservation | undefined {
    const pending = this.pending.get(key);
    if (pending) return pending;
    const requeue = this.owed.get(key);
    if (!requeue) return undefined;
    this.owed.delete(key);
    this.pending.set(key, requeue);
    return requeue;
  }

  /** The observation leaves the queue without a delivery now (held for a sink that starts, or dropped). */
  dequeued(obs: PendingObservation): void {
    if (obs.trace) this.observer.dequeued(obs.trace);
  }

  /** A requeue answered: the key's pending observation, or kept behind a newer one. */
  requeue(key: string, observedAt: number): void {
    const requeue: PendingObservation = { reason: 'requeue', observedAt };
    if (this.pending.has(key)) this.owed.set(key, requeue);
    else {
      this.setPending(key, requeue);
      this.owed.delete(key);
    }
  }

  /** A delivery of `pending` finished: it is dropped, if no newer observation arrived meanwhile. */
  finish(key: string, pending: PendingObservation, deleted = false): void {
    if (this.pending.get(key) === pending) {
      this.pending.delete(key);
      // A requeue kept for the key's delayed add is owed no more once that add has come (and
      // been folded into this delivery) or the object is gone.
      if (deleted || !this.delayed(key)) this.owed.delete(key);
    }
    if (deleted) this.tombstones.delete(key);
  }

  /** Nothing to deliver for `key` (its primary does not exist): the observation and any requeue owed go. */
  dropped(key: string, pending: PendingObservation): void {
    this.dequeued(pending);
    this.finish(key, pending);
    this.owed.delete(key);
  }

  /** The requeues kept behind newer observations. */
  get requeues(): ReadonlyMap<string, PendingObservation> {
    return this.owed;
  }

  /** A deleted primary's last known version, kept until its `deleted` delivery succeeds. */
  tombstone(key: string): KubeObject | undefined {
    return this.tombstones.get(key);
  }

  keepTombstone(key: string, obj: KubeObject): void {
    this.tombstones.set(key, obj);
  }

  /** The primary is there (again): no tombstone. */
  dropTombstone(key: string): void {
    this.tombstones.delete(key);
  }

  /** The keys of the deleted primaries not yet delivered as deleted. */
  tombstoned(): Iterable<string> {
    return this.tombstones.keys();
  }

  /** Forgets every observation (the identity was refused). */
  clear(): void {
    this.pending.clear();
    this.owed.clear();
    this.tombstones.clear();
  }

  /** Traces of observations never delivered end here (the next controller observes them afresh). */
  stop(): void {
    for (const p of this.pending.values()) this.dequeued(p);
  }
}
