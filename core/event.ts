// The bridge → function event contract, versions 1 and 2: the request. What the bridge sends (built by
// encodeReconcileEvent) and what a function accepts (parseReconcileRequest), in one file both
// sides take it from; authentication.ts signs and checks it, response.ts is the answer.
// docs/contract.md describes it for people (and for functions written in other languages).
//
// HTTP POST, CloudEvents 1.0 binary mode (structured mode accepted), type
// `dev.kfn.reconcile.v1`, `kfn*` extension attributes naming the primary object, JSON data
// holding references (version 1), and in version 2 also what the bridge's watches hold of the
// primary and its children (`observed`), so that a function need not read them again.
//
// Both sides build and read the CloudEvents 1.0 HTTP binding themselves (the attributes kfn
// uses, checked as the specification asks): the CloudEvents SDK's object building and schema
// validation were the largest cost of a delivery after the HTTP exchange itself, on the bridge
// for every event and on the function at every cold start. core/contract.test.ts checks the
// result against that SDK.
import { createHash } from 'node:crypto';
import { objectKey, type ObjectRef } from './objects.ts';
import { pickFields } from './paths.ts';
import { authenticationProblem, type Credentials, type HttpMessage } from './authentication.ts';

/** The newest contract this kfn speaks: the bridge sends it to Reconcilers that ask for it (spec.contract), and 1 to the others. */
export const contractVersion = 2;
/** Every contract version a function of this kfn accepts, and the bridge can send. */
export const contractVersions = [1, 2] as const;
export type ContractVersion = (typeof contractVersions)[number];
export const reconcileEventType = 'dev.kfn.reconcile.v1';

/**
 * An object as the bridge's watch holds it (contract 2): whole, or projected to the fields its
 * kind declares (`ObservedKind.fields`). Never with managedFields, except the primary's entries
 * of kfn's own field managers.
 */
export interface ObservedObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; generation?: number; labels?: Record<string, string>; [field: string]: unknown };
  [field: string]: unknown;
}

/**
 * An object as contract 2 carries it with `fields` declared: its identity and the metadata
 * routing reads (name, namespace, uid, resourceVersion, generation, deletionTimestamp, labels,
 * the controller ownerReference), and the declared paths; `fields` undefined: whole.
 */
export function projectObject(obj: ObservedObject, fields: readonly string[] | undefined): ObservedObject {
  if (!fields) return obj;
  const m = obj.metadata as ObservedObject['metadata'] & { deletionTimestamp?: string; ownerReferences?: { controller?: boolean }[] };
  const owner = m.ownerReferences?.filter((r) => r.controller);
  const metadata = { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion, generation: m.generation, deletionTimestamp: m.deletionTimestamp, labels: m.labels, ownerReferences: owner?.length ? owner : undefined };
  return pickFields({ apiVersion: obj.apiVersion, kind: obj.kind, metadata } as Record<string, unknown>, obj as unknown as Record<string, unknown>, fields) as unknown as ObservedObject;
}

/** One kind whose objects the event carries, and how far its watch had come. */
export interface ObservedKind {
  apiVersion: string;
  kind: string;
  /**
   * The resourceVersion the bridge's watch of this kind had reached when the event was built:
   * every change up to it is in `children` (for an owned kind, every object the primary controls).
   */
  resourceVersion: string;
  /** The fields carried besides metadata (dotted paths, e.g. `status`, `spec.selector`); absent: the whole object. */
  fields?: string[];
  /**
   * The kind's resource as the bridge's discovery lists it (both or neither): a function that
   * applies or reads this kind needs no discovery request of its own for it, which on a cold
   * start is a TLS handshake and two requests before the first answer.
   */
  plural?: string;
  namespaced?: boolean;
}

/**
 * What the bridge holds (contract 2): the primary as its watch last saw it, the children it
 * controls of each kind in `kinds`, and which children are provably as kfn last applied them.
 */
export interface ObservedState {
  primary: ObservedObject;
  /** The owned kinds whose children are all in `children`. An owned kind missing here is read from the apiserver. */
  kinds: ObservedKind[];
  children: ObservedObject[];
  /**
   * Children unchanged since kfn's last apply of them (same resourceVersion, or same generation),
   * by objectId, with the hash the function reported for what it applied. A desired child of
   * the same hash needs no write.
   */
  applied?: Record<string, string>;
}

export const reconcileReasons = ['created', 'updated', 'deleted', 'child', 'mapped', 'resync', 'requeue', 'replay'] as const;
export type ReconcileReason = (typeof reconcileReasons)[number];

/** The `data` of a reconcile event. */
export interface ReconcileEventData {
  contract: ContractVersion;
  /** The Reconciler (its metadata.name) the event is for. */
  reconciler: string;
  primary: ObjectRef;
  /** The child or mapped object whose change caused this event, when not the primary itself. */
  trigger?: ObjectRef;
  /** Contract 2: what the bridge's watches hold of the primary and its children. */
  observed?: ObservedState;
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

/** A reconcile event: its CloudEvents attributes (`kfn*` extensions included) and its data. */
export interface ReconcileCloudEvent {
  specversion: '1.0';
  type: string;
  source: string;
  id: string;
  subject?: string;
  time?: string;
  datacontenttype?: string;
  data: ReconcileEventData;
  [extension: string]: unknown;
}

/**
 * Builds the binary-mode HTTP message for one delivery attempt (attempts count from 1).
 * `deadline` (ms since epoch, wall time) is when the bridge stops waiting for the answer: the
 * request's time window against replays. `timeLeftMs` is what the function counts down on its
 * own monotonic clock from receipt, so that no two clocks need agree (default: the deadline less
 * this machine's time now).
 */
export function encodeReconcileEvent(obs: Observation, attempt: number, source: string, deadline?: number, observed?: ObservedState, timeLeftMs?: number): { event: ReconcileCloudEvent; message: HttpMessage } {
  const data: ReconcileEventData = { contract: observed ? 2 : 1, reconciler: obs.reconciler, primary: obs.primary };
  if (obs.trigger) data.trigger = obs.trigger;
  if (observed) data.observed = observed;
  // Extension values are strings, as headers carry them.
  const attributes: Record<string, string> = {
    specversion: '1.0',
    type: reconcileEventType,
    source,
    id: eventId(obs),
    subject: objectKey(obs.primary),
    time: new Date(obs.observedAt).toISOString(),
    kfnreconciler: obs.reconciler,
    kfnapiversion: obs.primary.apiVersion,
    kfnkind: obs.primary.kind,
    kfnname: obs.primary.name,
    kfnreason: obs.reason,
    kfnattempt: String(attempt),
  };
  if (obs.primary.namespace) attributes.kfnnamespace = obs.primary.namespace;
  if (obs.primary.uid) attributes.kfnuid = obs.primary.uid;
  if (obs.primary.resourceVersion) attributes.kfnresourceversion = obs.primary.resourceVersion;
  if (obs.primary.generation !== undefined) attributes.kfngeneration = String(obs.primary.generation);
  if (obs.trigger) attributes.kfntrigger = refText(obs.trigger);
  if (deadline !== undefined) {
    attributes.kfndeadline = new Date(deadline).toISOString();
    attributes.kfntimeleft = String(Math.max(0, Math.round(timeLeftMs ?? deadline - Date.now())));
  }
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const [name, value] of Object.entries(attributes)) headers[`ce-${name}`] = headerValue(value);
  const event = { ...attributes, datacontenttype: 'application/json', data } as ReconcileCloudEvent;
  return { event, message: { headers, body: JSON.stringify(data) } };
}

/**
 * A header value as the CloudEvents HTTP binding writes it: printable ASCII other than `"`
 * and `%` as is, everything else percent-encoded as UTF-8.
 */
function headerValue(value: string): string {
  return value.replace(/[^\x20-\x7e]|["%]/gu, (c) => encodeURIComponent(c));
}

/** A header value read back: percent-encoded sequences decoded (a malformed one is kept as is). */
function fromHeader(value: string): string {
  if (!value.includes('%')) return value;
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** A request the function must refuse: the HTTP status to answer and why. */
export class ContractError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/**
 * A signed event refused for its time alone: the function's clock puts it outside the window
 * its deadline and time left set. Not a verdict on the event: the function answers 400 with its
 * own wall clock (`kfn-time`, core/response.ts), and the bridge retries and reports the skew.
 */
export class ClockSkewError extends ContractError {
  /** The function's wall clock less the bridge's when it sent the event, in ms (positive: the function is ahead; the request's transit included). */
  readonly skewMs: number;
  /** The function's wall clock when it refused (ms since epoch). */
  readonly at: number;
  constructor(message: string, skewMs: number, at: number) {
    super(400, message);
    this.skewMs = skewMs;
    this.at = at;
  }
}

export interface ReceivedReconcile {
  event: ReconcileCloudEvent;
  data: ReconcileEventData;
  reason: ReconcileReason;
  attempt: number;
  /** When the bridge stops waiting for the answer (kfndeadline, the bridge's wall time): the request's time window. */
  deadline?: Date;
  /**
   * The milliseconds the function has from receipt (kfntimeleft), counted on its own monotonic
   * clock: work past them is wasted or worse (the bridge may deliver the object again).
   */
  timeLeftMs?: number;
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
 * The largest reconcile event a function takes (its body; the SDK refuses a larger one with
 * 413 before reading it whole). The bridge keeps contract-2 events under it (`fitObserved`).
 */
export const maxEventBytes = 1 << 20;

/** The most a contract-2 event's body may weigh: maxEventBytes less room for what is not the data (headers, a proxy's additions). */
export const eventBudgetBytes = maxEventBytes - (64 << 10);

/**
 * The observed state an event can carry within maxEventBytes: whole; without the children
 * (the function lists the owned kinds itself); or none (it reads the primary too). `bytes`
 * measures the encoded body with a given observed state.
 */
export function fitObserved(observed: ObservedState | undefined, bytes: (o: ObservedState | undefined) => number): ObservedState | undefined {
  if (!observed || bytes(observed) <= eventBudgetBytes) return observed;
  const primaryOnly: ObservedState = { primary: observed.primary, kinds: [], children: [] };
  return bytes(primaryOnly) <= eventBudgetBytes ? primaryOnly : undefined;
}

/** How far the bridge's and the function's clocks may disagree. */
export const clockSkewMs = 60_000;

/** The longest a delivery can last: a Reconciler's largest timeoutSeconds. */
export const maxDeliveryMs = 900_000;

/**
 * Parses and validates a reconcile request (binary or structured mode). Never throws anything
 * but ContractError: 401 for authentication, 400 for a malformed event, 415 for content.
 */
export function parseReconcileRequest(rawHeaders: Record<string, string | string[] | undefined>, body: string, credentials: Credentials, now = Date.now()): ReceivedReconcile {
  const headers = lowerCaseHeaders(rawHeaders);
  const refused = authenticationProblem(headers, body, credentials);
  if (refused) throw new ContractError(401, refused);
  const event = cloudEventOf(headers, body);
  if (event.type !== reconcileEventType) throw new ContractError(400, `unexpected event type "${event.type}"; this endpoint takes ${reconcileEventType}`);
  const data = event.data as ReconcileEventData | undefined;
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw new ContractError(400, 'the event has no JSON data');
  if (!(contractVersions as readonly unknown[]).includes(data.contract)) throw new ContractError(400, `unsupported contract version ${String(data.contract)}; this function speaks versions ${contractVersions.join(' and ')}`);
  requireString(data.reconciler, 'data.reconciler');
  const primary = data.primary;
  if (!primary || typeof primary !== 'object') throw new ContractError(400, 'data.primary is missing');
  requireString(primary.apiVersion, 'data.primary.apiVersion');
  requireString(primary.kind, 'data.primary.kind');
  requireString(primary.name, 'data.primary.name');
  if (data.contract === 2 && data.observed !== undefined) checkObserved(data.observed);
  if (data.contract === 1 && data.observed !== undefined) throw new ContractError(400, 'data.observed is part of contract 2, and this event says contract 1');
  const reason = event.kfnreason;
  if (typeof reason !== 'string' || !(reconcileReasons as readonly string[]).includes(reason)) {
    throw new ContractError(400, `kfnreason must be one of ${reconcileReasons.join(', ')}`);
  }
  if (credentials.kind === 'bearer' && data.contract === 2) {
    // A bearer token signs nothing: whoever saw one request could send any body, and a contract-2
    // body is what the function applies (the primary and its children, whole).
    throw new ContractError(401, 'a bearer token signs neither the body nor the time, and a contract 2 event carries whole objects: this function takes contract 2 with HMAC only (the Reconciler\'s spec.auth.type hmac, the function\'s KFN_AUTH_SECRET)');
  }
  const attempt = Number(event.kfnattempt ?? 1);
  let timeLeftMs: number | undefined;
  if (event.kfntimeleft !== undefined) {
    timeLeftMs = Number(event.kfntimeleft);
    if (!/^\d+$/.test(String(event.kfntimeleft)) || timeLeftMs > maxDeliveryMs) throw new ContractError(400, `kfntimeleft must be a whole number of milliseconds up to ${maxDeliveryMs}, not ${JSON.stringify(event.kfntimeleft)}`);
  }
  const deadlineText = event.kfndeadline;
  let deadline: Date | undefined;
  if (deadlineText !== undefined) {
    deadline = new Date(String(deadlineText));
    if (Number.isNaN(deadline.getTime())) throw new ContractError(400, `kfndeadline must be an RFC 3339 time, not ${JSON.stringify(deadlineText)}`);
    if (credentials.kind !== 'none') checkTimeWindow(deadline.getTime(), timeLeftMs, now);
  }
  return { event, data, reason: reason as ReconcileReason, attempt: Number.isInteger(attempt) && attempt > 0 ? attempt : 1, ...(deadline ? { deadline } : {}), ...(timeLeftMs !== undefined ? { timeLeftMs } : {}) };
}

/**
 * The signed deadline and time left are the request's time window, on the bridge's clock: from
 * when it was sent (the deadline less the time left) to the deadline, each widened by the clock
 * skew allowed. Outside it, on the function's clock, the request is refused: a captured request
 * sent again later, or a clock that disagrees with the bridge's by more than the skew. The window
 * is as long as the time the event was given plus twice the skew, and the SDK remembers every
 * delivery it took for that long (functions/sdk/replays.ts): a copy is refused either way.
 */
function checkTimeWindow(deadline: number, timeLeftMs: number | undefined, now: number): void {
  const sentAt = deadline - (timeLeftMs ?? maxDeliveryMs);
  const skew = now - sentAt;
  const fix = `the function's clock disagrees with the bridge's by more than the ${clockSkewMs / 1000} s allowed (set both machines' time by NTP)`;
  if (now > deadline + clockSkewMs) {
    throw new ClockSkewError(`the event's deadline (kfndeadline ${new Date(deadline).toISOString()}) passed ${seconds(now - deadline)} ago by this function's clock: a late or replayed request, or ${fix}`, skew, now);
  }
  if (now < sentAt - clockSkewMs) {
    throw new ClockSkewError(`the event was sent (kfndeadline less kfntimeleft, ${new Date(sentAt).toISOString()}) ${seconds(-skew)} ahead of this function's clock: ${fix}`, skew, now);
  }
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** A resource's plural as the apiserver names it: a DNS label. */
const resourceName = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** The shape of `observed`, checked before a function trusts it (a 400 names what is wrong). */
function checkObserved(observed: unknown): void {
  const bad = (what: string) => new ContractError(400, `data.observed: ${what}`);
  if (!observed || typeof observed !== 'object') throw bad('must be an object');
  const o = observed as Partial<ObservedState>;
  const isObservedObject = (v: unknown): v is ObservedObject => !!v && typeof v === 'object' && typeof (v as ObservedObject).metadata === 'object' && typeof (v as ObservedObject).metadata?.name === 'string';
  if (!isObservedObject(o.primary)) throw bad('primary must be an object with metadata.name');
  if (!Array.isArray(o.kinds) || !o.kinds.every((k) => k && typeof k.apiVersion === 'string' && typeof k.kind === 'string' && typeof k.resourceVersion === 'string')) throw bad('kinds must list {apiVersion, kind, resourceVersion}');
  // A plural becomes part of the paths the function writes to: a resource name, never a path.
  for (const k of o.kinds) {
    if (k.plural === undefined && k.namespaced === undefined) continue;
    if (typeof k.plural !== 'string' || !resourceName.test(k.plural) || typeof k.namespaced !== 'boolean') throw bad(`kinds: ${k.kind}'s resource must be a plural (a lower-case DNS label) with namespaced true or false, not ${JSON.stringify({ plural: k.plural, namespaced: k.namespaced })}`);
  }
  if (!Array.isArray(o.children) || !o.children.every((c) => isObservedObject(c) && typeof c.apiVersion === 'string' && typeof c.kind === 'string')) throw bad('children must be objects with apiVersion, kind and metadata.name');
  if (o.applied !== undefined && (typeof o.applied !== 'object' || o.applied === null || !Object.values(o.applied).every((h) => typeof h === 'string'))) throw bad('applied must map object ids to hashes');
}

/** Attributes every CloudEvent has (CloudEvents 1.0): a non-empty string each. */
const requiredAttributes = ['id', 'source', 'specversion', 'type'] as const;

/** RFC 3339, as CloudEvents' `time` is. */
const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * The CloudEvent of an HTTP request, binary mode (attributes in `ce-` headers, data the JSON
 * body) or structured mode (`application/cloudevents+json`: the whole event in the body),
 * checked as CloudEvents 1.0 asks: required attributes present, lower-case alphanumeric names,
 * an RFC 3339 time. A 400 says what is wrong.
 */
function cloudEventOf(headers: Record<string, string>, body: string): ReconcileCloudEvent {
  const invalid = (why: string) => new ContractError(400, `not a valid CloudEvent: ${why}`);
  const contentType = (headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (contentType === 'application/cloudevents-batch+json') throw new ContractError(400, 'batched CloudEvents are not accepted; send one event per request');
  let event: Record<string, unknown>;
  if (contentType === 'application/cloudevents+json') {
    try {
      event = JSON.parse(body) as Record<string, unknown>;
    } catch (err) {
      throw invalid(`the body is not JSON: ${(err as Error).message}`);
    }
    if (!event || typeof event !== 'object' || Array.isArray(event)) throw invalid('a structured-mode body must be a JSON object');
    if (event.data === undefined && typeof event.data_base64 === 'string') throw invalid('data_base64 is not accepted: the data is JSON');
  } else {
    event = {};
    for (const [name, value] of Object.entries(headers)) if (name.startsWith('ce-')) event[name.slice(3)] = fromHeader(value);
    if (event.specversion === undefined) throw invalid('no ce-specversion header (binary mode) and not application/cloudevents+json (structured mode)');
    if (contentType !== 'application/json' && !contentType.endsWith('+json')) throw invalid(`the data must be JSON (content-type ${contentType || 'absent'})`);
    try {
      event.data = body === '' ? undefined : JSON.parse(body);
    } catch (err) {
      throw invalid(`the body is not JSON: ${(err as Error).message}`);
    }
    event.datacontenttype = contentType;
  }
  if (event.specversion !== '1.0') throw invalid(`specversion ${JSON.stringify(event.specversion)}; CloudEvents 1.0 is required`);
  for (const a of requiredAttributes) if (typeof event[a] !== 'string' || event[a] === '') throw invalid(`${a} is required`);
  for (const name of Object.keys(event)) if (name !== 'data_base64' && !/^[a-z0-9]{1,20}$/.test(name)) throw invalid(`attribute name ${JSON.stringify(name)} must be lower-case letters and digits (at most 20)`);
  if (event.time !== undefined && (typeof event.time !== 'string' || !rfc3339.test(event.time) || Number.isNaN(Date.parse(event.time)))) throw invalid(`time must be an RFC 3339 timestamp, not ${JSON.stringify(event.time)}`);
  return event as ReconcileCloudEvent;
}
