// The bridge → function event contract, version 1: the one place both sides take it from.
// docs/contract.md describes it for people (and for functions written in other languages).
//
// Request: HTTP POST, CloudEvents 1.0 binary mode (structured mode accepted), type
// `dev.kfn.reconcile.v1`, `kfn*` extension attributes naming the primary object, JSON data
// holding references (never the object itself), authenticated by an HMAC signature or a
// bearer token. Response: 200 with ReconcileResponse JSON; 429/503 with Retry-After; other 5xx
// retried with backoff; other 4xx terminal for that observation.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { CloudEvent, HTTP, ValidationError } from 'cloudevents';
import { objectKey } from '../kube/objects.ts';
import type { KubeObject } from '../kube/api.ts';

export const contractVersion = 1;
export const reconcileEventType = 'dev.kfn.reconcile.v1';

export const reconcileReasons = ['created', 'updated', 'deleted', 'child', 'mapped', 'resync', 'requeue', 'replay'] as const;
export type ReconcileReason = (typeof reconcileReasons)[number];

/** A reference to a Kubernetes object, enough to GET it (and to tell versions apart). */
export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
}

/** The `data` of a reconcile event. */
export interface ReconcileEventData {
  contract: typeof contractVersion;
  /** The Reconciler (its metadata.name) the event is for. */
  reconciler: string;
  primary: ObjectRef;
  /** The child or mapped object whose change caused this event, when not the primary itself. */
  trigger?: ObjectRef;
}

/** One observation of a primary: what the bridge saw, when and why. */
export interface Observation {
  reconciler: string;
  primary: ObjectRef;
  reason: ReconcileReason;
  trigger?: ObjectRef;
  /** When the bridge observed the change (ms since epoch). */
  observedAt: number;
}

export interface HttpMessage {
  headers: Record<string, string>;
  body: string;
}

export const signatureHeader = 'kfn-signature';

export { objectKey };

/**
 * The event id: the same for every delivery attempt of one observation (a retry after a
 * failure is a redelivery of the same event), different for every new observation — a change
 * of the object, reason or trigger, and also each resync and each requeue of an unchanged
 * object, which are observed anew at their own time. So (source, id) is unique per event, as
 * CloudEvents requires, and deduplicating by id drops only true redeliveries.
 */
export function eventId(obs: Observation): string {
  const parts = [
    obs.reconciler,
    obs.primary.uid ?? '',
    obs.primary.namespace ?? '',
    obs.primary.name,
    obs.primary.resourceVersion ?? '',
    obs.reason,
    obs.trigger ? `${obs.trigger.kind}/${obs.trigger.uid ?? objectKey(obs.trigger)}@${obs.trigger.resourceVersion ?? ''}` : '',
    String(obs.observedAt),
  ];
  return createHash('sha256').update(parts.join('\0')).digest('hex').slice(0, 32);
}

function refText(ref: ObjectRef): string {
  return `${ref.kind}/${objectKey(ref)}`;
}

/**
 * Builds the binary-mode HTTP message for one delivery attempt (attempts count from 1).
 * `deadline` (ms since epoch) is when the bridge stops waiting for the answer.
 */
export function reconcileEvent(obs: Observation, attempt: number, source: string, deadline?: number): { event: CloudEvent<ReconcileEventData>; message: HttpMessage } {
  const data: ReconcileEventData = { contract: contractVersion, reconciler: obs.reconciler, primary: obs.primary };
  if (obs.trigger) data.trigger = obs.trigger;
  // Extension values are strings: the SDK would put objects into headers verbatim.
  const extensions: Record<string, string> = {
    kfnreconciler: obs.reconciler,
    kfnapiversion: obs.primary.apiVersion,
    kfnkind: obs.primary.kind,
    kfnname: obs.primary.name,
    kfnreason: obs.reason,
    kfnattempt: String(attempt),
  };
  if (obs.primary.namespace) extensions.kfnnamespace = obs.primary.namespace;
  if (obs.primary.uid) extensions.kfnuid = obs.primary.uid;
  if (obs.primary.resourceVersion) extensions.kfnresourceversion = obs.primary.resourceVersion;
  if (obs.primary.generation !== undefined) extensions.kfngeneration = String(obs.primary.generation);
  if (obs.trigger) extensions.kfntrigger = refText(obs.trigger);
  if (deadline !== undefined) extensions.kfndeadline = new Date(deadline).toISOString();
  const event = new CloudEvent<ReconcileEventData>({
    specversion: '1.0',
    type: reconcileEventType,
    source,
    id: eventId(obs),
    subject: objectKey(obs.primary),
    time: new Date(obs.observedAt).toISOString(),
    datacontenttype: 'application/json',
    data,
    ...extensions,
  });
  const binary = HTTP.binary(event);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(binary.headers)) headers[k.toLowerCase()] = String(v);
  return { event, message: { headers, body: typeof binary.body === 'string' ? binary.body : JSON.stringify(binary.body) } };
}

// ---------------------------------------------------------------------------------------------
// Authentication

/** What the HMAC signs: the event id, its time and the exact body, newline-separated. */
function signedPayload(id: string, time: string, body: string): string {
  return `${id}\n${time}\n${body}`;
}

/** The `kfn-signature` header value: `v1=<hex HMAC-SHA256>`. */
export function sign(secret: string, id: string, time: string, body: string): string {
  return `v1=${createHmac('sha256', secret).update(signedPayload(id, time, body)).digest('hex')}`;
}

export type Credentials = { kind: 'hmac'; secret: string } | { kind: 'bearer'; token: string } | { kind: 'none' };

/** Adds authentication headers to a message for the given credentials. */
export function authenticate(message: HttpMessage, credentials: Credentials): HttpMessage {
  const headers = { ...message.headers };
  if (credentials.kind === 'hmac') headers[signatureHeader] = sign(credentials.secret, headers['ce-id'] ?? '', headers['ce-time'] ?? '', message.body);
  if (credentials.kind === 'bearer') headers.authorization = `Bearer ${credentials.token}`;
  return { headers, body: message.body };
}

// ---------------------------------------------------------------------------------------------
// Receiving side

/** A request the function must refuse: the HTTP status to answer and why. */
export class ContractError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export interface ReceivedReconcile {
  event: CloudEvent<ReconcileEventData>;
  data: ReconcileEventData;
  reason: ReconcileReason;
  attempt: number;
  /** When the bridge stops waiting for the answer (kfndeadline); work past it is wasted or worse. */
  deadline?: Date;
}

function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && timingSafeEqual(ab, bb);
}

/**
 * Checks a request's authentication. `credentials.kind === 'none'` accepts anything and is only
 * for explicit development mode. Throws ContractError(401) otherwise.
 */
export function verifyAuthentication(headers: Record<string, string>, body: string, credentials: Credentials): void {
  if (credentials.kind === 'none') return;
  if (credentials.kind === 'bearer') {
    const given = headers.authorization ?? '';
    if (!given.startsWith('Bearer ') || !constantTimeEqual(given.slice(7), credentials.token)) {
      throw new ContractError(401, 'missing or wrong bearer token: the bridge and the function must share the Reconciler auth secret');
    }
    return;
  }
  const given = headers[signatureHeader];
  if (!given) throw new ContractError(401, `unsigned request: no ${signatureHeader} header (is the Reconciler's spec.auth set?)`);
  // Structured mode carries id and time in the body; binary mode in headers.
  let id = headers['ce-id'];
  let time = headers['ce-time'];
  if (id === undefined && (headers['content-type'] ?? '').startsWith('application/cloudevents+json')) {
    try {
      const parsed = JSON.parse(body) as { id?: string; time?: string };
      id = parsed.id;
      time = parsed.time;
    } catch {
      /* reported as a bad signature below, then as malformed */
    }
  }
  const expected = sign(credentials.secret, id ?? '', time ?? '', body);
  if (!constantTimeEqual(given, expected)) throw new ContractError(401, 'bad signature: the request was not signed with this function\'s secret, or was altered');
}

function lowerCaseHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

function requireString(value: unknown, what: string): string {
  if (typeof value !== 'string' || value === '') throw new ContractError(400, `${what} is missing`);
  return value;
}

/**
 * Parses and validates a reconcile request (binary or structured mode). Never throws anything
 * but ContractError: 401 for authentication, 400 for a malformed event, 415 for content.
 */
export function parseReconcileRequest(rawHeaders: Record<string, string | string[] | undefined>, body: string, credentials: Credentials): ReceivedReconcile {
  const headers = lowerCaseHeaders(rawHeaders);
  verifyAuthentication(headers, body, credentials);
  let event: CloudEvent<ReconcileEventData>;
  try {
    const parsed = HTTP.toEvent<ReconcileEventData>({ headers, body });
    if (Array.isArray(parsed)) throw new ContractError(400, 'batched CloudEvents are not accepted; send one event per request');
    event = parsed as CloudEvent<ReconcileEventData>;
    // toEvent does not validate: do it here (spec version, required attributes, names).
    event.validate();
  } catch (err) {
    if (err instanceof ContractError) throw err;
    const detail = err instanceof ValidationError ? `${err.message}${err.errors ? `: ${JSON.stringify(err.errors)}` : ''}` : (err as Error).message;
    throw new ContractError(400, `not a valid CloudEvent: ${detail}`);
  }
  if (event.specversion !== '1.0') throw new ContractError(400, `not a valid CloudEvent: specversion ${String(event.specversion)}; CloudEvents 1.0 is required`);
  if (event.type !== reconcileEventType) throw new ContractError(400, `unexpected event type "${event.type}"; this endpoint takes ${reconcileEventType}`);
  const data = event.data as ReconcileEventData | undefined;
  if (!data || typeof data !== 'object') throw new ContractError(400, 'the event has no JSON data');
  if (data.contract !== contractVersion) throw new ContractError(400, `unsupported contract version ${String(data.contract)}; this function speaks version ${contractVersion}`);
  requireString(data.reconciler, 'data.reconciler');
  const primary = data.primary;
  if (!primary || typeof primary !== 'object') throw new ContractError(400, 'data.primary is missing');
  requireString(primary.apiVersion, 'data.primary.apiVersion');
  requireString(primary.kind, 'data.primary.kind');
  requireString(primary.name, 'data.primary.name');
  const reason = (event as unknown as Record<string, unknown>).kfnreason;
  if (typeof reason !== 'string' || !(reconcileReasons as readonly string[]).includes(reason)) {
    throw new ContractError(400, `kfnreason must be one of ${reconcileReasons.join(', ')}`);
  }
  const attempt = Number((event as unknown as Record<string, unknown>).kfnattempt ?? 1);
  const deadlineText = (event as unknown as Record<string, unknown>).kfndeadline;
  let deadline: Date | undefined;
  if (deadlineText !== undefined) {
    deadline = new Date(String(deadlineText));
    if (Number.isNaN(deadline.getTime())) throw new ContractError(400, `kfndeadline must be an RFC 3339 time, not ${JSON.stringify(deadlineText)}`);
  }
  return { event, data, reason: reason as ReconcileReason, attempt: Number.isInteger(attempt) && attempt > 0 ? attempt : 1, ...(deadline ? { deadline } : {}) };
}

// ---------------------------------------------------------------------------------------------
// The function's answer

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

/** The reference to `obj` that the contract carries (primary, trigger): kind, name, uid, version. */
export function refOf(obj: KubeObject): ObjectRef {
  const ref: ObjectRef = { apiVersion: obj.apiVersion ?? '', kind: obj.kind ?? '', name: obj.metadata.name };
  if (obj.metadata.namespace) ref.namespace = obj.metadata.namespace;
  if (obj.metadata.uid) ref.uid = obj.metadata.uid;
  if (obj.metadata.resourceVersion) ref.resourceVersion = obj.metadata.resourceVersion;
  if (obj.metadata.generation !== undefined) ref.generation = obj.metadata.generation;
  return ref;
}
