// The function's answer to a reconcile request, and how the bridge reads it: 200 with a
// ReconcileResponse is success (done, or requeue); 429 and 503 are retried after Retry-After;
// other 5xx retried with backoff; other 4xx terminal for that observation.
import type { ObjectRef } from './objects.ts';

export interface Change {
  /** What was done: applied (created or changed), pruned, status (patched), event, finalizer. */
  action: 'applied' | 'pruned' | 'status' | 'event' | 'finalizer';
  ref: ObjectRef;
  detail?: string;
}

export interface ReconcileResponse {
  result: 'done' | 'requeue';
  requeueAfterSeconds?: number;
  changes: Change[];
  message?: string;
}

/** How the bridge treats a delivery's outcome. */
export type DeliveryOutcome =
  | { kind: 'done'; response?: ReconcileResponse }
  /** `afterMs` undefined: requeue with the key's backoff, as controller-runtime's Requeue. */
  | { kind: 'requeue'; afterMs?: number; response?: ReconcileResponse }
  | { kind: 'retry'; afterMs?: number; why: string }
  | { kind: 'terminal'; why: string };

/** Parses Retry-After (seconds, or an HTTP date) into milliseconds; undefined if absent/bad. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
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
    if (Number.isFinite(seconds) && seconds > 0) return { kind: 'requeue', afterMs: seconds * 1000, response };
    if (response?.result === 'requeue') return { kind: 'requeue', response };
    return { kind: 'done', response };
  }
  const snippet = body.length > 300 ? `${body.slice(0, 300)}…` : body;
  if (status === 429 || status === 503) return { kind: 'retry', afterMs: retryAfterMs(headers.get('retry-after'), now), why: `HTTP ${status}: ${snippet}` };
  if (status >= 500) return { kind: 'retry', why: `HTTP ${status}: ${snippet}` };
  return { kind: 'terminal', why: `HTTP ${status}: ${snippet}` };
}
