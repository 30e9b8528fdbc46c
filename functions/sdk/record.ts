// Invocation records: what one reconcile saw and did, so that it can be replayed — the event,
// every read (GET and LIST answers), every write (applies, status, deletes, Events), the
// children it wanted next to the live ones, its logs and its result or error.
//
// One JSON object per invocation, `{"kfnRecord":1,…}`, written where KFN_RECORD says: a file
// (local runs), `stdout` (in a cluster: the pod's log, rotated by the kubelet), or nowhere.
// Secret data never leaves the function: `data`/`stringData` values of Secrets are replaced by
// a keyed digest (`redacted:hmac:…`) and the record lists what it redacted. The key is the
// process's own and random: equal values are equal within its records, and a dictionary of
// short passwords cannot reverse a digest (a plain hash of a short password it can).
import { createHmac, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { ReceivedReconcile, ReconcileEventData } from '../../core/event.ts';
import type { ReconcileResponse } from '../../core/response.ts';
import type { JournalEntry } from '../../core/journal.ts';
import { Journal } from '../../core/journal.ts';
import type { Exchange, ResourceInfo, Tap } from '../../kube/api.ts';
import { groupKind, type KindRef } from '../../core/objects.ts';
import { isObject } from '../../core/json.ts';
import { mapValuesAt, valuesAt } from '../../core/paths.ts';
import { desiredChanges, type FieldChange } from './diff.ts';

export const recordFormat = 1;

export interface RecordedEvent {
  id: string;
  source: string;
  time?: string;
  reason: ReceivedReconcile['reason'];
  attempt: number;
  deadline?: string;
  /** The time the event gave the function (kfntimeleft, ms from receipt): an offline replay is timed the same way. */
  timeLeftMs?: number;
  data: ReconcileEventData;
}

export interface ChildRecord {
  ref: { apiVersion: string; kind: string; namespace?: string; name: string };
  desired: unknown;
  live?: unknown;
  /** Whether the runtime applied it (something it wants is missing, or it dropped a field). */
  written: boolean;
  /** What the apply changes: the desired fields the live child lacks or holds differently. */
  changes: FieldChange[];
  /** The apiserver refused the apply (or it did not complete): its status and message. */
  refused?: { status: number; message: string };
}

export interface RecordedError {
  message: string;
  stack?: string;
  /** The error the function's own code threw (its stack points into the function). */
  cause?: { message: string; stack?: string };
}

export interface InvocationRecord {
  kfnRecord: typeof recordFormat;
  /** Unique per invocation. */
  id: string;
  /** When the invocation started: the clock an offline replay runs at. */
  time: string;
  /** The reconciler's name (its function). */
  function: string;
  for: { apiVersion: string; kind: string };
  event: RecordedEvent;
  /** The kinds the invocation looked up (discovery), so that a replay needs no apiserver. */
  resources: ResourceInfo[];
  reads: Exchange[];
  writes: Exchange[];
  children: ChildRecord[];
  status?: { desired: unknown; written: boolean };
  result?: ReconcileResponse;
  error?: RecordedError;
  logs: Record<string, unknown>[];
  durationMs: number;
  /** Each time the invocation read the clock (condition times, finalizer timeouts): a replay reads the same. */
  clock: string[];
  /** Reads and writes whose Secret data was replaced by hashes: `GET /api/v1/…/secrets/x: data.password`. */
  redacted: string[];
  /** Set on the record of a replay: how it ran and which record it replayed. */
  replay?: { of: string; mode: 'live' | 'dry-run' | 'offline' };
  /**
   * Set on a record too big to be logged whole (`bytes`, more than maxLoggedRecordBytes): its
   * reads, children, logs, the bodies of its writes and the event's observed state are left
   * out, so it replays with --dry-run or --live, not offline.
   */
  cut?: { bytes: number };
}

/** Sees how the runtime decided about each child (children.ts calls it) and the status (runtime.ts). */
export interface InvocationObserver {
  child(desired: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } }, live: unknown, written: boolean): void;
  status(desired: unknown, written: boolean): void;
}

const secretPath = /^\/api\/v1\/(namespaces\/[^/]+\/)?secrets(\/|$)/;
const discoveryPath = /^\/(api\/[^/]+|apis\/[^/]+\/[^/]+)$/;

/** The key of this process's redaction digests: never written anywhere. */
const redactionKey = randomBytes(32);

function hashed(value: unknown): string {
  return `redacted:hmac:${createHmac('sha256', redactionKey).update(String(value)).digest('hex').slice(0, 16)}`;
}

/** A copy of a Secret with its data values hashed; `found` gets the names of the fields hashed. */
function redactSecret(obj: unknown, found: string[]): unknown {
  if (!isObject(obj)) return obj;
  const out: Record<string, unknown> = { ...obj };
  for (const field of ['data', 'stringData']) {
    const data = obj[field];
    if (!isObject(data)) continue;
    out[field] = Object.fromEntries(Object.entries(data).map(([k, v]) => [k, hashed(v)]));
    for (const k of Object.keys(data)) found.push(`${field}.${k}`);
  }
  return out;
}

/** The fields a kind's schema marks sensitive (Kind.sensitive), by `group/Kind`. */
export type SensitiveFields = Map<string, string[][]>;

/** The sensitive fields of the kinds a function reads and writes: its own and the ones it owns. */
export function sensitiveFieldsOf(reconciler: { for: KindRef; owns?: readonly KindRef[] }): SensitiveFields {
  const out: SensitiveFields = new Map();
  for (const k of [reconciler.for, ...(reconciler.owns ?? [])] as (KindRef & { sensitive?: string[][] })[]) {
    if (k.sensitive?.length) out.set(groupKind(k), k.sensitive);
  }
  return out;
}

/** The strings found at an object's sensitive fields: what no message may show. */
export function sensitiveValues(obj: unknown, fields: SensitiveFields): string[] {
  const o = obj as { apiVersion?: string; kind?: string } | undefined;
  const paths = o?.apiVersion && o.kind ? fields.get(groupKind({ apiVersion: o.apiVersion, kind: o.kind })) : undefined;
  return (paths ?? []).flatMap((p) => valuesAt(obj, p)).map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).filter((v) => v.length >= 4);
}

/** `text` with every one of `values` replaced by its digest. */
export function scrub(text: string, values: readonly string[]): string {
  let out = text;
  for (const v of values) if (out.includes(v)) out = out.split(v).join(hashed(v));
  return out;
}

/** A copy of an object with its kind's sensitive fields hashed, each named in `found` (`kind`: when the object does not say, as list items). */
function redactFields(obj: unknown, fields: SensitiveFields, found: string[], kind?: { apiVersion?: string; kind?: string }): unknown {
  if (!isObject(obj) || !fields.size) return obj;
  const apiVersion = (obj.apiVersion as string | undefined) ?? kind?.apiVersion;
  const k = (obj.kind as string | undefined) ?? kind?.kind;
  const paths = apiVersion && k ? fields.get(groupKind({ apiVersion, kind: k })) : undefined;
  let out: unknown = obj;
  const hash = (value: unknown, at: string[]) => (found.push(at.join('.')), hashed(typeof value === 'string' ? value : JSON.stringify(value)));
  for (const p of paths ?? []) out = mapValuesAt(out, p, hash);
  return out;
}

function redactValue(value: unknown, secretScope: boolean, found: string[], fields: SensitiveFields): unknown {
  if (!isObject(value)) return value;
  if (Array.isArray(value.items)) {
    const itemKind = { apiVersion: value.apiVersion as string | undefined, kind: (value.kind as string | undefined)?.replace(/List$/, '') };
    return { ...value, items: value.items.map((i) => redactValue(redactFields(i, fields, found, itemKind), secretScope, found, fields)) };
  }
  const v = redactFields(value, fields, found);
  return secretScope || value.kind === 'Secret' ? redactSecret(v, found) : v;
}

/** The exchange with any Secret data and sensitive field hashed, and a line saying what was, if anything. */
export function redactExchange(exchange: Exchange, fields: SensitiveFields = new Map()): { exchange: Exchange; redacted?: string } {
  const scope = secretPath.test(exchange.path);
  const found: string[] = [];
  const out: Exchange = { ...exchange };
  if (exchange.body !== undefined) out.body = redactValue(exchange.body, scope, found, fields);
  if (exchange.response !== undefined) out.response = redactValue(exchange.response, scope, found, fields);
  if (!found.length) return { exchange };
  return { exchange: out, redacted: `${exchange.method} ${exchange.path}: ${[...new Set(found)].join(', ')}` };
}

/** Collects one invocation's record. */
export class Recorder {
  private readonly record: InvocationRecord;
  private readonly started: number;

  /** The sensitive fields of the function's kinds; and the values seen in them, scrubbed from errors and logs. */
  private readonly fields: SensitiveFields;
  private readonly secrets = new Set<string>();

  constructor(reconciler: { name: string; for: KindRef; owns?: readonly KindRef[] }, received: ReceivedReconcile, start: Date) {
    this.fields = sensitiveFieldsOf(reconciler);
    this.started = Date.now();
    const event = received.event;
    this.record = {
      kfnRecord: recordFormat,
      id: randomBytes(8).toString('hex'),
      time: start.toISOString(),
      function: reconciler.name,
      for: { apiVersion: reconciler.for.apiVersion, kind: reconciler.for.kind },
      event: {
        id: event.id,
        source: event.source,
        ...(event.time ? { time: event.time } : {}),
        reason: received.reason,
        attempt: received.attempt,
        ...(received.deadline ? { deadline: received.deadline.toISOString() } : {}),
        ...(received.timeLeftMs !== undefined ? { timeLeftMs: received.timeLeftMs } : {}),
        data: received.data,
      },
      resources: [],
      reads: [],
      writes: [],
      children: [],
      logs: [],
      durationMs: 0,
      clock: [],
      redacted: [],
    };
    this.record.event.data = this.safeData(received.data);
  }

  /**
   * The event's data with what the observed state (contract 2) holds of Secret data and
   * sensitive fields hashed, as reads are; the values seen are scrubbed from messages too.
   */
  private safeData(data: ReconcileEventData): ReconcileEventData {
    const observed = data.observed;
    if (!observed) return data;
    const found: string[] = [];
    for (const item of [observed.primary, ...observed.children]) for (const s of sensitiveValues(item, this.fields)) this.secrets.add(s);
    const safe = {
      ...data,
      observed: {
        ...observed,
        primary: redactValue(observed.primary, false, found, this.fields) as typeof observed.primary,
        children: observed.children.map((c) => redactValue(c, false, found, this.fields) as typeof c),
      },
    };
    if (found.length) this.record.redacted.push(`the event's observed state: ${[...new Set(found)].join(', ')}`);
    return safe;
  }

  /** The clock `now`, each reading of it recorded. */
  clock(now: () => Date): () => Date {
    return () => {
      const at = now();
      if (this.record.clock.length < 1000) this.record.clock.push(at.toISOString());
      return at;
    };
  }

  get id(): string {
    return this.record.id;
  }

  /** Passed to KubeApi.withTap: every request of the invocation lands here. */
  readonly tap: Tap = {
    request: (exchange) => {
      // Discovery is kept as the kinds it found (resources), not as reads.
      if (exchange.method === 'GET' && discoveryPath.test(exchange.path)) return;
      // The values of sensitive fields seen, to scrub from messages (only kinds that mark some).
      for (const v of this.fields.size ? [exchange.response, exchange.body] : []) {
        const items = isObject(v) && Array.isArray(v.items) ? v.items : [v];
        for (const item of items) for (const s of sensitiveValues(item, this.fields)) this.secrets.add(s);
      }
      const { exchange: safe, redacted } = redactExchange(exchange, this.fields);
      if (redacted) this.record.redacted.push(redacted);
      (exchange.method === 'GET' ? this.record.reads : this.record.writes).push(safe);
    },
    resource: (info) => {
      if (!this.record.resources.some((r) => r.apiVersion === info.apiVersion && r.kind === info.kind)) this.record.resources.push(info);
    },
  };

  readonly observer: InvocationObserver = {
    child: (desired, live, written) => {
      const found: string[] = [];
      const secret = desired.kind === 'Secret';
      const d = redactFields(secret ? redactSecret(desired, found) : desired, this.fields, found) as typeof desired;
      const l = redactFields(secret ? redactSecret(live, found) : live, this.fields, found) as typeof live;
      this.record.children.push({
        ref: { apiVersion: desired.apiVersion, kind: desired.kind, ...(desired.metadata.namespace ? { namespace: desired.metadata.namespace } : {}), name: desired.metadata.name },
        desired: d,
        ...(live !== undefined ? { live: l } : {}),
        written,
        // Not written: the runtime found nothing to change (a child the event only carries in
        // part would otherwise show its other fields as missing).
        changes: written ? desiredChanges(l, d) : [],
      });
    },
    status: (desired, written) => {
      this.record.status = { desired: redactFields(desired, this.fields, []) as typeof desired, written };
    },
  };

  /** A log entry of the invocation (sensitive values seen so far scrubbed from it). */
  log(entry: Record<string, unknown>): void {
    if (this.record.logs.length >= 200) return;
    this.record.logs.push(this.secrets.size ? (JSON.parse(scrub(JSON.stringify(entry), [...this.secrets])) as Record<string, unknown>) : entry);
  }

  finish(outcome: { result: ReconcileResponse } | { error: unknown }, replay?: InvocationRecord['replay']): InvocationRecord {
    this.record.durationMs = Date.now() - this.started;
    if ('result' in outcome) this.record.result = outcome.result;
    else this.record.error = errorRecord(outcome.error);
    // What the apiserver or the function echoed of a sensitive value (a 422's "Invalid value").
    if (this.secrets.size) {
      const values = [...this.secrets];
      if (this.record.error) this.record.error = JSON.parse(scrub(JSON.stringify(this.record.error), values)) as typeof this.record.error;
      if (this.record.result) this.record.result = JSON.parse(scrub(JSON.stringify(this.record.result), values)) as ReconcileResponse;
      for (const w of [...this.record.reads, ...this.record.writes]) if (w.response !== undefined) w.response = JSON.parse(scrub(JSON.stringify(w.response), values)) as unknown;
    }
    if (replay) this.record.replay = replay;
    for (const child of this.record.children) {
      if (!child.written) continue;
      const write = this.record.writes.find((w) => {
        const body = w.body as { kind?: string; metadata?: { name?: string; namespace?: string } } | undefined;
        return w.method === 'PATCH' && body?.kind === child.ref.kind && body.metadata?.name === child.ref.name && body.metadata?.namespace === child.ref.namespace;
      });
      if (write && !(write.status >= 200 && write.status < 300)) {
        const message = (write.response as { message?: string } | undefined)?.message ?? write.error ?? `status ${write.status}`;
        child.refused = { status: write.status, message };
      }
    }
    return this.record;
  }
}

const logLevels = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;

/**
 * The logger `log` that also hands each entry it writes to `capture` — whatever `log` writes
 * to, and through its children too (the runtime logs through a child per invocation).
 */
export function capturingLogger(log: Logger, capture: (entry: Record<string, unknown>) => void, bindings: Record<string, unknown> = {}): Logger {
  return new Proxy(log, {
    get(target, prop, receiver) {
      if (prop === 'child') {
        return (more: Record<string, unknown>, options?: object) => capturingLogger(target.child(more, options as never), capture, { ...bindings, ...more });
      }
      if (typeof prop === 'string' && (logLevels as readonly string[]).includes(prop)) {
        const method = (target as unknown as Record<string, (...args: unknown[]) => void>)[prop]!.bind(target);
        return (first: unknown, ...rest: unknown[]) => {
          if (target.isLevelEnabled(prop)) {
            const fields = isObject(first) && !(first instanceof Error) ? first : first instanceof Error ? { err: first.message } : {};
            const msg = typeof first === 'string' ? first : typeof rest[0] === 'string' ? rest[0] : undefined;
            capture({ time: new Date().toISOString(), level: prop, ...bindings, ...fields, ...(msg !== undefined ? { msg } : {}) });
          }
          return method(first, ...rest);
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
}

export function errorRecord(err: unknown): RecordedError {
  const e = err instanceof Error ? err : new Error(String(err));
  const cause = e.cause instanceof Error ? e.cause : undefined;
  return { message: e.message, ...(e.stack ? { stack: e.stack } : {}), ...(cause ? { cause: { message: cause.message, ...(cause.stack ? { stack: cause.stack } : {}) } } : {}) };
}

/** Where records go. */
export type RecordSink = (record: InvocationRecord) => void;

/**
 * The most bytes of one record in a function's log: a tenth of what the kubelet keeps of a
 * container's log by default (10 MiB), so that one reconcile of many objects cannot push out
 * the records before it; the same bound as the bridge puts on a function's answer. A MyWeb
 * reconcile's record is about 25 KB.
 */
export const maxLoggedRecordBytes = 1 << 20;

/**
 * Whether a record goes to the function's log. A resync that wrote nothing and did not fail
 * says only that the object was as the function wants it: the bridge's journal has that
 * delivery, and at the default resync (every 5 minutes per object) such records would be most
 * of the log and rotate away the records of the reconciles that changed something.
 */
export function logsRecord(record: InvocationRecord): boolean {
  return record.event.reason !== 'resync' || record.writes.length > 0 || record.error !== undefined;
}

/** A record without what makes it big (InvocationRecord.cut): what it did, not what it read. */
export function cutRecord(record: InvocationRecord, bytes: number): InvocationRecord {
  const { observed: _observed, ...data } = record.event.data;
  return {
    ...record,
    event: { ...record.event, data },
    resources: [],
    reads: [],
    writes: record.writes.map((w) => ({ method: w.method, path: w.path, status: w.status, ...(w.error ? { error: w.error } : {}) })),
    children: [],
    ...(record.status ? { status: { desired: undefined, written: record.status.written } } : {}),
    logs: [],
    clock: [],
    cut: { bytes },
  };
}

/** One record as a line of the function's log: whole, or cut when it is bigger than maxLoggedRecordBytes. */
export function logLine(record: InvocationRecord, maxBytes = maxLoggedRecordBytes): string {
  const whole = JSON.stringify(record);
  const bytes = Buffer.byteLength(whole);
  return `${bytes > maxBytes ? JSON.stringify(cutRecord(record, bytes)) : whole}\n`;
}

/**
 * The sink KFN_RECORD names: `stdout` (JSON lines among the function's logs, what `kfn deploy`
 * sets: each record at most maxLoggedRecordBytes, resyncs that changed nothing left out), a file
 * path (every record whole, appended, rotated at 10 MiB keeping 5), or unset/`off` for none.
 */
export function recordSinkFromEnv(env: NodeJS.ProcessEnv = process.env): RecordSink | undefined {
  const where = env.KFN_RECORD?.trim();
  if (!where || where === 'off' || where === '0') return undefined;
  if (where === 'stdout') return (record) => void (logsRecord(record) && process.stdout.write(logLine(record)));
  const file = new Journal<InvocationRecord>(where, { redactSecretFields: false });
  return (record) => file.append(record);
}

// ---------------------------------------------------------------------------------------------
// Reading records back

export interface ReadRecords {
  records: InvocationRecord[];
  /** Bridge journal lines: deliveries, without reads (replayable live or in dry-run only). */
  deliveries: JournalEntry[];
  /** Lines that could not be used, each naming its line: the rest is still usable. */
  problems: string[];
}

/**
 * Reads records and bridge journal lines from text (a record file, a journal, a function's
 * log: other log lines are passed over). A truncated line or one of another format is named
 * in `problems`; every other line is still read.
 */
export function readRecords(text: string, source: string): ReadRecords {
  const out: ReadRecords = { records: [], deliveries: [], problems: [] };
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    const where = `${source}:${i + 1}`;
    if (!line.trim()) return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      // A log line that is not JSON is not ours to judge; a JSON line cut short is.
      if (line.trimStart().startsWith('{')) out.problems.push(`${where}: not a complete JSON line (truncated?): ${line.slice(0, 80)}${line.length > 80 ? '…' : ''}`);
      return;
    }
    if (!isObject(value)) return;
    if ('kfnRecord' in value) {
      if (value.kfnRecord !== recordFormat) {
        out.problems.push(`${where}: a record of format ${JSON.stringify(value.kfnRecord)}; this kfn reads format ${recordFormat} (it was written by another version of kfn)`);
        return;
      }
      const r = value as unknown as InvocationRecord;
      const missing = ['id', 'function', 'time'].filter((k) => typeof (r as unknown as Record<string, unknown>)[k] !== 'string');
      if (!isObject(r.event) || !isObject(r.event.data) || !isObject(r.event.data.primary)) missing.push('event.data.primary');
      if (!Array.isArray(r.reads) || !Array.isArray(r.writes)) missing.push('reads/writes');
      if (missing.length) {
        out.problems.push(`${where}: a record without ${missing.join(', ')}; skipped`);
        return;
      }
      out.records.push(r);
      return;
    }
    if (typeof value.outcome === 'string' && typeof value.reconciler === 'string' && isObject(value.primary) && typeof value.id === 'string') {
      out.deliveries.push(value as unknown as JournalEntry);
    }
  });
  return out;
}
