// What a delivery's outcome means for its key, decided without side effects: the queue action,
// whether the key's observation is finished, whether the key is held back, the metric's result
// and the journal line. DeliveryLoop.deliver carries the decision out.
import type { JournalEntry } from '../core/journal.ts';
import { clockSkewMs, type Observation } from '../core/event.ts';
import type { DeliveryResult } from './delivery.ts';

/**
 * After a delivery that may still be running, how long past its deadline the bridge waits before delivering
 * that object again: the SDK aborts its reads and writes at the deadline, and a write already
 * on the wire lands within this.
 */
export const deadlineGraceMs = 2000;

export type QueueAction =
  /** Done with the key: its backoff is reset. */
  | { kind: 'forget' }
  /** Again after the key's backoff, and at least `atLeastMs` (a Retry-After, a held key). */
  | { kind: 'backoff'; atLeastMs: number }
  /** Again after `ms`, with the backoff reset (requeueAfterSeconds). */
  | { kind: 'after'; ms: number };

export interface Settlement {
  /** controller_runtime_reconcile_total's `result` label. */
  result: 'success' | 'requeue' | 'requeue_after' | 'error';
  queue: QueueAction;
  /**
   * The observation delivered is finished (a newer one stays pending). Not finished after a
   * failure: the retry carries the same observation, so the same event id.
   */
  finished: boolean;
  /** Record a `requeue` observation at this time (a newer one pending is delivered first). */
  requeue?: { observedAt: number };
  /** No delivery of the key before this time: the function may still be at work on it. */
  holdUntil?: number;
  /** Which error counter, besides the total, counts it. */
  error?: 'retry' | 'terminal';
}

/** The decision for one delivery's result, at `now`, for a delivery whose deadline was `deadline`. */
export function settle(result: DeliveryResult, now: number, deadline: number): Settlement {
  const { outcome } = result;
  switch (outcome.kind) {
    case 'done':
      return { result: 'success', queue: { kind: 'forget' }, finished: true };
    case 'requeue':
      return outcome.afterMs === undefined
        ? { result: 'requeue', queue: { kind: 'backoff', atLeastMs: 0 }, finished: true, requeue: { observedAt: now } }
        : { result: 'requeue_after', queue: { kind: 'after', ms: outcome.afterMs }, finished: true, requeue: { observedAt: now + outcome.afterMs } };
    case 'retry': {
      // When the function may still be at work (a timeout, a connection broken after sending, a
      // proxy's 502 or 504): no delivery of this key until its deadline has passed by a grace,
      // whatever arrives meanwhile.
      const holdUntil = result.mayBeRunning ? deadline + deadlineGraceMs : undefined;
      const atLeastMs = Math.max(outcome.afterMs ?? 0, holdUntil !== undefined ? holdUntil - now : 0);
      return { result: 'error', queue: { kind: 'backoff', atLeastMs }, finished: false, error: 'retry', ...(holdUntil !== undefined ? { holdUntil } : {}) };
    }
    case 'terminal':
      return { result: 'error', queue: { kind: 'forget' }, finished: true, error: 'terminal' };
  }
}

/**
 * What a Reconciler's Ready condition says of its function's clock, from its deliveries'
 * answers: a problem while the function refuses events for their time (400 with its clock,
 * core/response.ts), none once it takes one again. Says something only when that changes, or
 * when the skew moves by a second or more, so that a thousand refused deliveries write the
 * Reconciler's status once. A new report (a new controller) says something at its first
 * answer either way: a problem an earlier one reported is cleared.
 */
export class ClockSkewReport {
  /** The skew last reported (ms), 0 for none; undefined before the first. */
  private reportedMs: number | undefined;

  /** After one delivery: the problem to report (undefined: none) and the skew in seconds (0: none), or undefined when nothing changed. */
  after(result: DeliveryResult): { problem: string | undefined; skewSeconds: number } | undefined {
    const { outcome } = result;
    const skewMs = outcome.kind === 'retry' ? outcome.clockSkewMs : undefined;
    if (skewMs === undefined) {
      if (!timeTaken(result) || this.reportedMs === 0) return undefined;
      this.reportedMs = 0;
      return { problem: undefined, skewSeconds: 0 };
    }
    if (this.reportedMs !== undefined && this.reportedMs !== 0 && Math.abs(skewMs - this.reportedMs) < 1000) return undefined;
    this.reportedMs = skewMs;
    const how = `${Math.round(Math.abs(skewMs) / 1000)} s ${skewMs >= 0 ? 'ahead of' : 'behind'}`;
    return {
      problem: `the function's clock is ${how} the bridge's, more than the ${clockSkewMs / 1000} s the contract allows: it refuses every event for its time. Set the machines' time right (NTP); deliveries are retried and resume by themselves`,
      skewSeconds: skewMs / 1000,
    };
  }
}

/**
 * Answers a function gives only once it has taken the event's time: a reconcile's answer, a
 * reconcile that failed (500), a delivery it has already (409). Others — a proxy's, a refusal
 * before the time was read — say nothing of its clock.
 */
function timeTaken(result: DeliveryResult): boolean {
  const { outcome, status } = result;
  if (outcome.kind === 'done' || outcome.kind === 'requeue') return true;
  return outcome.kind === 'retry' && !outcome.invalidAnswer && (status === 500 || status === 409);
}

/** The journal line of one delivery attempt. */
export function journalEntryOf(d: { id: string; key: string; attempt: number; observation: Observation; sink: string; result: DeliveryResult; now: number }): JournalEntry {
  const { observation, result } = d;
  const { outcome } = result;
  return {
    time: new Date(d.now).toISOString(),
    id: d.id,
    reconciler: observation.reconciler,
    key: d.key,
    reason: observation.reason,
    attempt: d.attempt,
    primary: observation.primary,
    trigger: observation.trigger,
    observedAt: new Date(observation.observedAt).toISOString(),
    sink: d.sink,
    status: result.status,
    outcome: outcome.kind,
    why: 'why' in outcome ? outcome.why : undefined,
    durationMs: result.durationMs,
    response: 'response' in outcome ? outcome.response : undefined,
  };
}
