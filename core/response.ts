// The function's answer to a reconcile request, and how the bridge reads it: 200 with a
// ReconcileResponse is success (done, or requeue); 429 and 503 are retried after Retry-After;
// other 5xx retried with backoff; a redirect, 404 or 405 is the sink not being ready (a route
// being programmed, a wrong path), retried with backoff; other 4xx terminal for that observation.
import type { ObjectRef } from './objects.ts';

export interface Change {
  /** What was done: applied (created or changed), pruned, status (patched), event, finalizer. */
  action: 'applied' | 'pruned' | 'status' | 'event' | 'finalizer';
  ref: ObjectRef;
  detail?: string;
}

/**
 * Contract 2: a child as the reconcile left it — applied now, or found as wanted — with the hash
 * of what the function wants of it. The bridge carries the hash back in the next event's
 * `observed.applied` while the child stays unchanged (same resourceVersion, or generation).
 */
export interface ChildState {
  ref: ObjectRef;
  hash: string;
}

export interface ReconcileResponse {
  result: 'done' | 'requeue';
  requeueAfterSeconds?: number;
  /**
   * What the function wrote. In contract 2 each write's ref carries the resourceVersion the
   * apiserver answered with: the bridge delivers the object again only once its watches have
   * reached those versions (and seen pruned children go), so no reconcile decides on a
   * snapshot older than its own writes.
   */
  changes: Change[];
  message?: string;
  /** Contract 2: the children the reconcile wants, as it left them. */
  children?: ChildState[];
  /**
   * Contract 2: objects of the event's snapshot found to be stale (a write preconditioned on
   * their resourceVersion failed with 409): the next delivery waits for a newer version.
   */
  stale?: ObjectRef[];
}

/** How the bridge treats a delivery's outcome. */
export type DeliveryOutcome =
  | { kind: 'done'; response?: ReconcileResponse }
  /** `afterMs` undefined: requeue with the key's backoff, as controller-runtime's Requeue. */
  | { kind: 'requeue'; afterMs?: number; response?: ReconcileResponse }
  /** `sinkProblem`: the answer came from in front of the function (the sink is not ready), not from it. */
  | { kind: 'retry'; afterMs?: number; why: string; sinkProblem?: string }
  | { kind: 'terminal'; why: string };

/** The longest wait a Retry-After header can ask for (an hour); a longer one is cut to it. */
export const maxRetryAfterMs = 3_600_000;

/** The longest requeueAfterSeconds honoured (a day, the longest resync period); a longer one is cut to it. */
export const maxRequeueAfterSeconds = 86_400;

/** Parses Retry-After (seconds, or an HTTP date) into milliseconds, at most maxRetryAfterMs; undefined if absent/bad. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const at = /^\d+$/.test(value.trim()) ? now + Number(value.trim()) * 1000 : Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.min(maxRetryAfterMs, Math.max(0, at - now));
}

/**
 * Answers that come from in front of the function, not from it: a redirect (the bridge follows
 * none), 404 (no route yet, or a wrong path) and 405. The function's own verdicts are 2xx, 4xx
 * for a refused event and 5xx; these mean the sink is not ready, and the object keeps its change.
 */
function notTheFunction(status: number): boolean {
  return (status >= 300 && status < 400) || status === 404 || status === 405;
}

/** Classifies a function's HTTP answer per the contract. */
export function classifyResponse(status: number, headers: { get(name: string): string | null }, body: string, now = Date.now()): DeliveryOutcome {
  if (status >= 200 && status < 300) {
    let response: ReconcileResponse | undefined;
    try {
      response = body ? (JSON.parse(body) as ReconcileResponse) : undefined;
    } catch {
      response = undefined;
    }
    const seconds = Number(response?.requeueAfterSeconds ?? 0);
    if (seconds > 0) return { kind: 'requeue', afterMs: Math.min(seconds, maxRequeueAfterSeconds) * 1000, response };
    if (response?.result === 'requeue') return { kind: 'requeue', response };
    return { kind: 'done', response };
  }
  const snippet = body.length > 300 ? `${body.slice(0, 300)}…` : body;
  if (status === 429 || status === 503) return { kind: 'retry', afterMs: retryAfterMs(headers.get('retry-after'), now), why: `HTTP ${status}: ${snippet}` };
  if (status >= 500) return { kind: 'retry', why: `HTTP ${status}: ${snippet}` };
  if (notTheFunction(status)) {
    const sinkProblem = `the sink answers HTTP ${status}${status < 400 ? ' (a redirect, which the bridge does not follow)' : ''}, not the function: is its route ready and the URL's path right? (${snippet})`;
    return { kind: 'retry', why: sinkProblem, sinkProblem };
  }
  return { kind: 'terminal', why: `HTTP ${status}: ${snippet}` };
}
