// What a delivery's outcome means for its key, decided without side effects: the queue action,
// whether the key's observation is finished, whether the key is held back, the metric's result
// and the journal line. Controller.deliver carries the decision out.
import type { JournalEntry } from '../core/journal.ts';
import type { Observation } from '../core/event.ts';
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
