// The function's answer to a reconcile request, and how the bridge reads it: 200 with a
// ReconcileResponse is success (done, or requeue); 429 and 503 are retried after Retry-After;
// other 5xx retried with backoff; a redirect, 404 or 405 is the sink not being ready (a route
// being programmed, a wrong path), retried with backoff; 409 (the function already has this
// delivery) retried once its first copy can have ended; 400 with the function's clock (`kfn-time`:
// it refused the event for its time alone) retried, with the skew measured; other 4xx terminal
// for that observation.
import type { ObjectRef } from './objects.ts';

export interface Change {
  /** What was done: applied (created or changed), pruned, status (patched), event, finalizer. */
  action: 'applied' | 'pruned' | 'status' | 'event' | 'finalizer';
  ref: ObjectRef;
  detail?: string;
  /** The W3C traceparent of the span that made the write, when the function traces: the bridge links the deliveries it causes to it. */
  traceparent?: string;
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
  /**
   * `sinkProblem`: the answer came from in front of the function (the sink is not ready), not from it.
   * `invalidAnswer`: the function answered 2xx with a body that is not the contract's response.
   * `written`: what a function that failed (5xx) says it wrote before failing: the retry waits for it.
   * `clockSkewMs`: the function refused the event for its time alone; how far its clock is from the
   * bridge's (positive: ahead), measured when the answer came.
   */
  | { kind: 'retry'; afterMs?: number; why: string; sinkProblem?: string; invalidAnswer?: string; written?: Change[]; clockSkewMs?: number }
  | { kind: 'terminal'; why: string };

/**
 * The header of a function's refusal of an event for its time alone (400): its own wall clock,
 * RFC 3339. Only that refusal carries it.
 */
export const functionTimeHeader = 'kfn-time';

/** The reason a refusal for time gives in its body (`{"error", "reason", "skewMs"}`), as the Reconciler's Ready condition names it. */
export const clockSkewReason = 'ClockSkew';

/** The most of a function's answer the bridge reads (its `changes` are a few KB); the rest is dropped unread. */
export const maxAnswerBytes = 1 << 20;

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

const actions: ReadonlySet<string> = new Set<Change['action']>(['applied', 'pruned', 'status', 'event', 'finalizer']);

/** The first thing wrong with a ref in an answer, at `path`; undefined when it is one. */
function refProblem(value: unknown, path: string): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return `${path} is not an object reference`;
  const ref = value as Record<string, unknown>;
  for (const field of ['apiVersion', 'kind', 'name'] as const) if (typeof ref[field] !== 'string' || ref[field] === '') return `${path}.${field} is not a non-empty string`;
  for (const field of ['namespace', 'uid', 'resourceVersion'] as const) if (ref[field] !== undefined && typeof ref[field] !== 'string') return `${path}.${field} is not a string`;
  if (ref.generation !== undefined && !Number.isSafeInteger(ref.generation)) return `${path}.generation is not an integer`;
  return undefined;
}

/** The first thing wrong with each element of an optional array field, or with the field itself. */
function listProblem(value: unknown, path: string, element: (item: unknown, at: string) => string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) return `${path} is not an array`;
  for (let i = 0; i < value.length; i++) {
    const problem = element(value[i], `${path}[${i}]`);
    if (problem) return problem;
  }
  return undefined;
}

/**
 * Reads a 2xx answer's body as the contract's ReconcileResponse, or says the first thing wrong
 * with it. Every field the bridge acts on is checked here, so that nothing an answer holds can
 * throw later, past the key's hold. An empty body is a valid answer only with 204 (No Content):
 * done, nothing reported.
 */
export function parseReconcileResponse(status: number, body: string, truncated = false): { response?: ReconcileResponse } | { problem: string } {
  if (truncated) return { problem: `the answer is larger than the ${maxAnswerBytes / (1 << 20)} MiB the bridge reads` };
  if (body === '' && status === 204) return {};
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return { problem: `the body is not JSON: ${JSON.stringify(body.length > 80 ? `${body.slice(0, 80)}…` : body)}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { problem: 'the body is not a JSON object' };
  const r = value as Record<string, unknown>;
  if (r.result !== 'done' && r.result !== 'requeue') return { problem: `result is ${JSON.stringify(r.result)}, not "done" or "requeue"` };
  if (r.requeueAfterSeconds !== undefined && (typeof r.requeueAfterSeconds !== 'number' || Number.isNaN(r.requeueAfterSeconds) || r.requeueAfterSeconds < 0)) {
    return { problem: 'requeueAfterSeconds is not a number of seconds (0 or more)' };
  }
  if (r.message !== undefined && typeof r.message !== 'string') return { problem: 'message is not a string' };
  const problem =
    listProblem(r.changes, 'changes', (c, at) => {
      if (typeof c !== 'object' || c === null) return `${at} is not an object`;
      const change = c as Record<string, unknown>;
      if (typeof change.action !== 'string' || !actions.has(change.action)) return `${at}.action is ${JSON.stringify(change.action)}, not one of ${[...actions].join(', ')}`;
      if (change.detail !== undefined && typeof change.detail !== 'string') return `${at}.detail is not a string`;
      if (change.traceparent !== undefined && typeof change.traceparent !== 'string') return `${at}.traceparent is not a string`;
      return refProblem(change.ref, `${at}.ref`);
    }) ??
    listProblem(r.children, 'children', (c, at) => {
      if (typeof c !== 'object' || c === null) return `${at} is not an object`;
      const child = c as Record<string, unknown>;
      return refProblem(child.ref, `${at}.ref`) ?? (typeof child.hash === 'string' && child.hash !== '' ? undefined : `${at}.hash is not a non-empty string`);
    }) ??
    listProblem(r.stale, 'stale', refProblem);
  if (problem) return { problem };
  return { response: { ...(r as unknown as ReconcileResponse), changes: (r.changes as Change[] | undefined) ?? [] } };
}

/**
 * The writes a failed answer (`{"error": …, "changes": […]}`) reports, when it reports any in
 * the contract's words; anything else says nothing.
 */
function writesOfFailure(body: string): Change[] | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || !Array.isArray((value as { changes?: unknown }).changes)) return undefined;
  const parsed = parseReconcileResponse(200, JSON.stringify({ result: 'done', changes: (value as { changes: unknown[] }).changes }));
  return 'response' in parsed && parsed.response?.changes.length ? parsed.response.changes : undefined;
}

/**
 * How far the function's clock (its `kfn-time`) is from the bridge's when its answer came, in ms;
 * undefined without a time. The answer's transit (milliseconds) counts against the function.
 */
function clockSkewOf(functionTime: string | null, now: number): number | undefined {
  const at = functionTime ? Date.parse(functionTime) : Number.NaN;
  return Number.isNaN(at) ? undefined : at - now;
}

/** Classifies a function's HTTP answer per the contract; `truncated` when the body was cut at maxAnswerBytes. */
export function classifyResponse(status: number, headers: { get(name: string): string | null }, body: string, now = Date.now(), truncated = false): DeliveryOutcome {
  if (status >= 200 && status < 300) {
    const parsed = parseReconcileResponse(status, body, truncated);
    // The function answered, but not in the contract's words: nothing it says can be trusted
    // (its writes, its children), so the delivery failed and is retried with the same event.
    if ('problem' in parsed) return { kind: 'retry', why: `invalid answer (HTTP ${status}): ${parsed.problem}`, invalidAnswer: parsed.problem };
    const { response } = parsed;
    const seconds = response?.requeueAfterSeconds ?? 0;
    if (seconds > 0) return { kind: 'requeue', afterMs: Math.min(seconds, maxRequeueAfterSeconds) * 1000, response };
    if (response?.result === 'requeue') return { kind: 'requeue', response };
    return { kind: 'done', response };
  }
  const snippet = body.length > 300 ? `${body.slice(0, 300)}…` : body;
  if (status === 429 || status === 503) return { kind: 'retry', afterMs: retryAfterMs(headers.get('retry-after'), now), why: `HTTP ${status}: ${snippet}` };
  if (status >= 500) {
    const written = writesOfFailure(body);
    return { kind: 'retry', why: `HTTP ${status}: ${snippet}`, ...(written ? { written } : {}) };
  }
  const skewMs = status === 400 ? clockSkewOf(headers.get(functionTimeHeader), now) : undefined;
  if (skewMs !== undefined) {
    // Refused for its time alone: the clocks disagree, the event is fine. Not terminal — every
    // object would be dropped until its next change — but retried with backoff until the clock
    // is set right, and reported.
    const how = `${(Math.abs(skewMs) / 1000).toFixed(1)} s ${skewMs >= 0 ? 'ahead of' : 'behind'}`;
    return { kind: 'retry', why: `the function refused the event for its time: its clock is ${how} the bridge's, more than the contract allows; set the machines' time right (NTP). Retrying (HTTP 400: ${snippet})`, clockSkewMs: skewMs };
  }
  // The function has this delivery already (the same event id and attempt arrived twice: a
  // proxy's retry, or a replay): not a refusal; the first copy's reconcile may still be running.
  if (status === 409) return { kind: 'retry', why: `HTTP 409, the function already has this delivery: ${snippet}` };
  if (notTheFunction(status)) {
    const sinkProblem = `the sink answers HTTP ${status}${status < 400 ? ' (a redirect, which the bridge does not follow)' : ''}, not the function: is its route ready and the URL's path right? (${snippet})`;
    return { kind: 'retry', why: sinkProblem, sinkProblem };
  }
  return { kind: 'terminal', why: `HTTP ${status}: ${snippet}` };
}
