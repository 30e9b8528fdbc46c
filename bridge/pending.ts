// Why each of a Reconciler's keys wants a delivery: the observation its next delivery says (the
// reason, what triggered it, when it was observed), a requeue owed behind a newer observation,
// and the last known state of a deleted primary until its `deleted` delivery succeeds. The
// queue holds when a key is delivered; this holds what the delivery says.
import type { DeliveryTraces, ObservationTrace, TraceCause } from './traces.ts';
import type { WorkQueue } from './workqueue.ts';
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

export class Observations {
  private readonly pending = new Map<string, PendingObservation>();
  // Requeues answered while a newer observation was pending: that one is delivered first (with
  // its own reason); the requeue is what the key's delayed add then delivers.
  readonly requeues = new Map<string, PendingObservation>();
  // Last known version of deleted primaries, until their `deleted` delivery succeeds.
  readonly tombstones = new Map<string, KubeObject>();
  private readonly traces: DeliveryTraces;
  private readonly queue: WorkQueue;

  constructor(traces: DeliveryTraces, queue: WorkQueue) {
    this.traces = traces;
    this.queue = queue;
  }

  /**
   * Records why `key` needs a delivery; with tracing on, the observation starts a trace
   * (core/tracing.ts), linked to the write that caused it when `cause` is one of this bridge's.
   * A resync never overrides a real reason.
   */
  record(key: string, observed: Omit<PendingObservation, 'trace'>, override: boolean, cause?: TraceCause): void {
    const obs: PendingObservation = tracing.on ? { ...observed, trace: this.traces.received(key, cause, observed.reason) } : observed;
    if (override || !this.pending.has(key)) this.setPending(key, obs);
    else this.joinPending(key, obs);
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

  /** The key's pending observation, or the requeue it is owed; undefined for neither. */
  next(key: string): PendingObservation | undefined {
    return this.pending.get(key) ?? this.owedRequeue(key);
  }

  /** A requeue kept while a newer observation went first, now the key's pending observation. */
  private owedRequeue(key: string): PendingObservation | undefined {
    const requeue = this.requeues.get(key);
    if (!requeue) return undefined;
    this.requeues.delete(key);
    this.pending.set(key, requeue);
    return requeue;
  }

  /** A requeue answered: the key's pending observation, or kept behind a newer one. */
  requeue(key: string, observedAt: number): void {
    const requeue: PendingObservation = { reason: 'requeue', observedAt };
    if (this.pending.has(key)) this.requeues.set(key, requeue);
    else {
      this.setPending(key, requeue);
      this.requeues.delete(key);
    }
  }

  /** Drops the pending observation if no newer one arrived meanwhile. */
  finish(key: string, pending: PendingObservation, deleted = false): void {
    if (this.pending.get(key) === pending) {
      this.pending.delete(key);
      // A requeue kept for the key's delayed add is owed no more once that add has come (and
      // been folded into this delivery) or the object is gone.
      if (deleted || !this.queue.isDelayed(key)) this.requeues.delete(key);
    }
    if (deleted) this.tombstones.delete(key);
  }

  /** Forgets every observation (the identity was refused). */
  clear(): void {
    this.pending.clear();
    this.requeues.clear();
    this.tombstones.clear();
  }

  /** Traces of observations never delivered end here (the next controller observes them afresh). */
  stop(): void {
    for (const p of this.pending.values()) if (p.trace) this.traces.dequeued(p.trace);
  }
}
