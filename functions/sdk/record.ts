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
import { desiredChanges, type FieldChange } from './diff.ts';

export const recordFormat = 1;

export interface RecordedEvent {
  id: string;
  source: string;
  time?: string;
  reason: ReceivedReconcile['reason'];
  attempt: number;
  deadline?: string;
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
}

/** Sees how the runtime decided about each child and the status (runtime.ts calls it). */
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

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

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

function redactValue(value: unknown, secretScope: boolean, found: string[]): unknown {
  if (!isObject(value)) return value;
  if (Array.isArray(value.items)) return { ...value, items: value.items.map((i) => redactValue(i, secretScope, found)) };
  return secretScope || value.kind === 'Secret' ? redactSecret(value, found) : value;
}

/** The exchange with any Secret data hashed, and a line saying what was, if anything. */
export function redactExchange(exchange: Exchange): { exchange: Exchange; redacted?: string } {
  const scope = secretPath.test(exchange.path);
  const found: string[] = [];
  const out: Exchange = { ...exchange };
  if (exchange.body !== undefined) out.body = redactValue(exchange.body, scope, found);
  if (exchange.response !== undefined) out.response = redactValue(exchange.response, scope, found);
  if (!found.length) return { exchange };
  return { exchange: out, redacted: `${exchange.method} ${exchange.path}: ${[...new Set(found)].join(', ')}` };
}

/** Collects one invocation's record. */
export class Recorder {
  private readonly record: InvocationRecord;
  private readonly started: number;

  constructor(reconciler: { name: string; for: { apiVersion: string; kind: string } }, received: ReceivedReconcile, start: Date) {
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
      const { exchange: safe, redacted } = redactExchange(exchange);
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
      const d = secret ? redactSecret(desired, found) : desired;
      const l = secret ? redactSecret(live, found) : live;
      this.record.children.push({
        ref: { apiVersion: desired.apiVersion, kind: desired.kind, ...(desired.metadata.namespace ? { namespace: desired.metadata.namespace } : {}), name: desired.metadata.name },
        desired: d,
        ...(live !== undefined ? { live: l } : {}),
        written,
        changes: desiredChanges(l, d),
      });
    },
    status: (desired, written) => {
      this.record.status = { desired, written };
    },
  };

  /** A log entry of the invocation. */
  log(entry: Record<string, unknown>): void {
    if (this.record.logs.length < 200) this.record.logs.push(entry);
  }

  finish(outcome: { result: ReconcileResponse } | { error: unknown }, replay?: InvocationRecord['replay']): InvocationRecord {
    this.record.durationMs = Date.now() - this.started;
    if ('result' in outcome) this.record.result = outcome.result;
    else this.record.error = errorRecord(outcome.error);
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
 * The sink KFN_RECORD names: `stdout` (JSON lines among the function's logs), a file path
 * (appended, rotated at 10 MiB keeping 5), or unset/`off` for none.
 */
export function recordSinkFromEnv(env: NodeJS.ProcessEnv = process.env): RecordSink | undefined {
  const where = env.KFN_RECORD?.trim();
  if (!where || where === 'off' || where === '0') return undefined;
  if (where === 'stdout') return (record) => void process.stdout.write(`${JSON.stringify(record)}\n`);
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
