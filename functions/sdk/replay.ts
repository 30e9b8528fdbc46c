// Replaying a recorded invocation with the function's code as it is now:
//
//   offline   the reads are answered from the record (no cluster), the writes are captured;
//   dry-run   against the live cluster, every write sent with dryRun=All (nothing changes);
//
// and the writes made now set beside the writes recorded then. (Live replay — the event sent
// to a running function again, reason `replay` — is in cli/replay-live.ts: it needs no SDK.)
import pino, { type Logger } from 'pino';
import { reconcileEventType, type ReceivedReconcile, type ReconcileCloudEvent, type ReconcileEventData } from '../../core/event.ts';
import type { Connection } from '../../kube/connection.ts';
import { apiError, KubeApi, type Exchange, type Method, type RequestOptions, type ResourceInfo, type Tap } from '../../kube/api.ts';
import { compareWrites, diffValues, writesEqual, type FieldChange, type WriteComparison } from './diff.ts';
import { capturingLogger, Recorder, type InvocationRecord, type RecordedEvent } from './record.ts';
import type { Reconciler } from './reconciler.ts';
import { reconcileEvent } from './runtime.ts';
import { groupOf } from '../../core/objects.ts';

export interface ReplayOutcome {
  mode: 'offline' | 'dry-run';
  /** The replay's own record: what the function read and wrote now. */
  record: InvocationRecord;
  /** Each write then beside the one now. */
  comparisons: WriteComparison[];
  /** Whether the writes now equal the writes then (method, path and body of each). */
  same: boolean;
  /** Offline: reads the function made now that the record cannot answer. */
  unrecordedReads: string[];
  /** Reads of the record whose Secret data the function saw as hashes. */
  redactedReads: string[];
  /** Dry-run: what each write would change on the live object. */
  /** Dry run: what each write would do to the live object (`created`: it does not exist now). */
  effects: { key: string; created?: boolean; deleted?: boolean; changes: FieldChange[] }[];
}

/** The reconcile the record received, as the runtime takes it (without the deadline: a replay runs to the end). */
export function receivedFrom(event: RecordedEvent, overrides: { reason?: ReceivedReconcile['reason']; attempt?: number; deadline?: boolean; now?: boolean } = {}): ReceivedReconcile {
  // `now`: the object as it is now, not as the event saw it then: without the observed state (contract 2), the runtime reads the cluster.
  const { observed: _then, ...references } = event.data;
  const data: ReconcileEventData = overrides.now ? { ...references, contract: 1 } : event.data;
  const ce: ReconcileCloudEvent = { specversion: '1.0', type: reconcileEventType, source: event.source, id: event.id, ...(event.time ? { time: event.time } : {}), datacontenttype: 'application/json', data };
  // The recorded deadline only means something on the recorded clock (an offline replay); now it has passed.
  // With the time it gave, as the invocation had it: the runtime then reads no clock to time it.
  const deadline = overrides.deadline && event.deadline ? { deadline: new Date(event.deadline), ...(event.timeLeftMs !== undefined ? { timeLeftMs: event.timeLeftMs } : {}) } : {};
  return { event: ce, data, reason: overrides.reason ?? event.reason, attempt: overrides.attempt ?? event.attempt, ...deadline };
}

/** Not in the record: the function reads something now that it did not read then. */
export class UnrecordedRead extends Error {
  constructor(what: string) {
    super(`${what} was not read by the recorded invocation, so an offline replay cannot answer it (replay with --dry-run to read the live cluster)`);
    this.name = 'UnrecordedRead';
  }
}

const offlineConnection: Connection = {
  server: 'http://recorded.invalid',
  send: () => Promise.reject(new Error('no apiserver here')),
  reset() {},
  headers: () => ({}),
  source: 'a recorded invocation',
};

function queryKey(query: RequestOptions['query'] | Exchange['query']): string {
  const entries = Object.entries(query ?? {})
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => [k, String(v)])
    .sort(([a], [b]) => a!.localeCompare(b!));
  return JSON.stringify(entries);
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

interface OfflineState {
  record: InvocationRecord;
  used: Set<Exchange>;
  unrecorded: string[];
}

/** A client that answers from a record: reads as recorded, writes captured and answered. */
class RecordedApi extends KubeApi {
  private readonly state: OfflineState;

  constructor(state: OfflineState, options: { signal?: AbortSignal; tap?: Tap } = {}) {
    super(offlineConnection, options);
    this.state = state;
  }

  protected override derive(options: { signal?: AbortSignal; tap?: Tap }): KubeApi {
    return new RecordedApi(this.state, options);
  }

  override async resource(apiVersion: string, kind: string): Promise<ResourceInfo> {
    const found = this.state.record.resources.find((r) => r.apiVersion === apiVersion && r.kind === kind);
    if (!found) {
      this.state.unrecorded.push(`the kind ${kind} (${apiVersion})`);
      throw new UnrecordedRead(`the kind ${kind} (${apiVersion})`);
    }
    this.tap?.resource?.(found);
    return found;
  }

  override async text(method: Method, path: string, options: RequestOptions = {}): Promise<string> {
    const { record, used } = this.state;
    const query = queryKey(options.query);
    const body = typeof options.body === 'string' ? safeParse(options.body) : options.body;
    let answer: Exchange | undefined;
    if (method === 'GET') {
      let candidates = record.reads.filter((r) => r.path === path && queryKey(r.query) === query);
      if (!candidates.length && options.query?.limit !== undefined && options.query.continue === undefined) {
        // A first page asked of a record made before lists were paged: its one unpaged answer
        // holds every item and no continue token, so it is the whole list.
        const unpaged = (q: RequestOptions['query'] | Exchange['query']) => queryKey({ ...q, limit: undefined });
        candidates = record.reads.filter((r) => r.path === path && r.query?.limit === undefined && unpaged(r.query) === unpaged(options.query));
      }
      answer = candidates.find((r) => !used.has(r)) ?? candidates.at(-1);
      if (!answer) {
        const what = `GET ${path}${query !== '[]' ? ` ${query}` : ''}`;
        this.state.unrecorded.push(what);
        throw new UnrecordedRead(what);
      }
    } else {
      // The same write as then gets the answer it got then (an error included); any other
      // write is taken as accepted, its body as the object.
      const candidates = record.writes.filter((w) => w.method === method && w.path === path && !used.has(w));
      answer = candidates.find((w) => sameJson(w.body, body));
      if (!answer) answer = { method, path, status: method === 'POST' ? 201 : 200, response: body ?? {} };
    }
    used.add(answer);
    const exchange: Exchange = {
      method,
      path,
      ...(options.query ? { query: Object.fromEntries(Object.entries(options.query).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)])) } : {}),
      ...(body !== undefined ? { body, contentType: options.contentType ?? 'application/json' } : {}),
      status: answer.status,
      ...(answer.response !== undefined ? { response: answer.response } : {}),
      ...(answer.error ? { error: answer.error } : {}),
    };
    this.tap?.request(exchange);
    if (answer.status === 0) throw new Error(answer.error ?? `${method} ${path} got no answer`);
    const text = typeof answer.response === 'string' ? answer.response : JSON.stringify(answer.response ?? '');
    if (answer.status < 200 || answer.status > 299) throw apiError(answer.status, text, `${method} ${path}`);
    return text;
  }
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A client whose every write is a server-side dry run (dryRun=All): validated, admitted, not stored. */
export class DryRunApi extends KubeApi {
  constructor(api: KubeApi, options: { signal?: AbortSignal; tap?: Tap } = {}) {
    super(api.connection, { signal: options.signal ?? api.signal, tap: options.tap ?? api.tap, discovery: (api as DryRunApi).discovery });
  }

  protected override derive(options: { signal?: AbortSignal; tap?: Tap }): KubeApi {
    return new DryRunApi(this, options);
  }

  override text(method: Method, path: string, options: RequestOptions = {}): Promise<string> {
    if (method === 'GET') return super.text(method, path, options);
    // A DELETE with DeleteOptions in its body takes its options from the body alone: the query's
    // dryRun would be ignored and the object really deleted. So it goes in both.
    const body = method === 'DELETE' && isDeleteOptions(options.body) ? { ...options.body, dryRun: ['All'] } : options.body;
    // The whole object back, whatever the write asked for: what it would become is the point.
    return super.text(method, path, { ...options, body, accept: undefined, query: { ...options.query, dryRun: 'All' } });
  }
}

function isDeleteOptions(body: unknown): body is Record<string, unknown> {
  return typeof body === 'object' && body !== null && (body as { kind?: string }).kind === 'DeleteOptions';
}

const quietLog = () => pino({ level: 'info' }, { write: () => {} });

async function run(reconciler: Reconciler, received: ReceivedReconcile, api: KubeApi, options: { now?: () => Date; log?: Logger; replay: InvocationRecord['replay'] }): Promise<InvocationRecord> {
  const now = options.now ?? (() => new Date());
  const recorder = new Recorder(reconciler, received, now());
  const log = capturingLogger(options.log ?? quietLog(), (entry) => recorder.log(entry));
  try {
    const result = await reconcileEvent(reconciler, received, { api: api.withTap(recorder.tap), log, now: recorder.clock(now), observer: recorder.observer });
    return recorder.finish({ result }, options.replay);
  } catch (err) {
    return recorder.finish({ error: err }, options.replay);
  }
}

/** The function does not reconcile the record's kind (renamed, or its kind changed since). */
export function checkKind(reconciler: Reconciler, record: { function: string; for?: { apiVersion: string; kind: string }; event: { data: ReconcileEventData } }): void {
  const primary = record.event.data.primary;
  if (primary.kind !== reconciler.for.kind || groupOf(primary.apiVersion) !== reconciler.for.group) {
    throw new Error(`the record is of a ${primary.apiVersion} ${primary.kind} (function ${record.function}), but this function reconciles ${reconciler.for.apiVersion} ${reconciler.for.kind}: its kind changed, or this is another function`);
  }
}

/**
 * The clock as the invocation read it: the recorded readings in turn (the first is the
 * record's start), then the last one advancing with real time.
 */
export function recordedClock(recorded: InvocationRecord): () => Date {
  const readings = [recorded.time, ...(recorded.clock ?? [])];
  let i = 0;
  let after: number | undefined;
  return () => {
    if (i < readings.length) return new Date(readings[i++]!);
    after ??= Date.now();
    return new Date(Date.parse(readings.at(-1)!) + (Date.now() - after));
  };
}

/**
 * Runs the function now against the reads recorded then: no cluster. The clock reads as it did
 * then and the delivery had the same deadline, so conditions and Events come out as they would
 * have then (and a reconcile that ran out of time then does so again).
 */
export async function replayOffline(reconciler: Reconciler, recorded: InvocationRecord, options: { log?: Logger } = {}): Promise<ReplayOutcome> {
  checkKind(reconciler, recorded);
  if (recorded.cut) throw new Error(`record ${recorded.id} was cut before it was logged (${recorded.cut.bytes} bytes): it holds no reads to answer, so it replays with --dry-run (against the cluster now) or --live, not offline`);
  const state: OfflineState = { record: recorded, used: new Set(), unrecorded: [] };
  const record = await run(reconciler, receivedFrom(recorded.event, { deadline: true }), new RecordedApi(state), { now: recordedClock(recorded), log: options.log, replay: { of: recorded.id, mode: 'offline' } });
  const comparisons = compareWrites(recorded.writes, record.writes);
  return {
    mode: 'offline',
    record,
    comparisons,
    same: writesEqual(comparisons) && !record.error === !recorded.error,
    unrecordedReads: [...new Set(state.unrecorded)],
    redactedReads: recorded.redacted.filter((r) => r.startsWith('GET ')),
    effects: [],
  };
}

const noisyMetadata = ['managedFields', 'resourceVersion', 'generation', 'creationTimestamp', 'uid'];

function comparable(obj: unknown): unknown {
  if (typeof obj !== 'object' || obj === null) return obj;
  const o = obj as { metadata?: Record<string, unknown> };
  if (!o.metadata) return obj;
  const metadata = Object.fromEntries(Object.entries(o.metadata).filter(([k]) => !noisyMetadata.includes(k)));
  return { ...o, metadata };
}

/**
 * Runs the function now against the live cluster with every write a server-side dry run:
 * what it would change now, and how that compares with what it wrote then (when a record is given).
 */
export async function replayDryRun(reconciler: Reconciler, event: RecordedEvent, api: KubeApi, options: { then?: InvocationRecord; log?: Logger } = {}): Promise<ReplayOutcome> {
  if (options.then) checkKind(reconciler, options.then);
  const record = await run(reconciler, receivedFrom(event, { now: true }), new DryRunApi(api), { log: options.log, replay: { of: options.then?.id ?? event.id, mode: 'dry-run' } });
  const primaryRead = record.reads.find((r) => r.status === 200 && typeof r.response === 'object' && (r.response as { kind?: string }).kind === reconciler.for.kind);
  const effects: ReplayOutcome['effects'] = [];
  for (const w of record.writes) {
    if (!(w.status >= 200 && w.status < 300)) continue;
    const key = `${w.method} ${w.path}`;
    if (w.method === 'DELETE') {
      effects.push({ key, deleted: true, changes: [] });
      continue;
    }
    if (w.method !== 'PATCH') continue;
    // The primary itself (its finalizer, its status) or one of its children.
    const onPrimary = primaryRead && (w.path === primaryRead.path || w.path === `${primaryRead.path}/status`);
    const before = onPrimary
      ? primaryRead.response
      : record.children.find((c) => w.path.endsWith(`/${encodeURIComponent(c.ref.name)}`) && (c.desired as { kind?: string }).kind === (w.body as { kind?: string })?.kind)?.live;
    if (before === undefined) effects.push({ key, created: true, changes: diffValues(undefined, comparable(w.response)) });
    else effects.push({ key, changes: diffValues(comparable(before), comparable(w.response)) });
  }
  const comparisons = options.then ? compareWrites(options.then.writes, record.writes) : [];
  return {
    mode: 'dry-run',
    record,
    comparisons,
    same: options.then ? writesEqual(comparisons) : record.writes.length === 0,
    unrecordedReads: [],
    redactedReads: [],
    effects,
  };
}

