// The dev server's side a browser and the bridge talk to: each function at /fn/<name>, the UI
// at / (dev-ui.html) and its API under /api — the deliveries (the last keepRecords, streamed as
// they come), one delivery's whole record, and replay (live, or as a server-side dry run).
import { readFileSync } from 'node:fs';
import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { KubeApi } from '../kube/api.ts';
import { authenticate, type Credentials } from '../core/authentication.ts';
import { encodeReconcileEvent } from '../core/event.ts';
import type { Journal } from '../core/journal.ts';
import { objectKey } from '../core/objects.ts';
import type { InvocationRecord } from '../functions/sdk/record.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { replayDryRun } from '../functions/sdk/replay.ts';
import { userFirstStack } from '../functions/sdk/stack.ts';

/** What the UI lists for each delivery (the whole record is one request away). */
export interface DeliverySummary {
  id: string;
  time: string;
  function: string;
  object: string;
  kind: string;
  reason: string;
  attempt: number;
  durationMs: number;
  outcome: 'done' | 'requeue' | 'error';
  /** Writes the apiserver accepted, and those it refused (a 4xx/5xx answer). */
  writes: number;
  refused: number;
  /** Why a requeue or an error, in the function's or the runtime's words. */
  message?: string;
  error?: string;
  replay?: InvocationRecord['replay'];
  version: number;
}

export interface DevFunctionState {
  name: string;
  dir: string;
  kind: string;
  version: number;
  /** Why the code on disk does not load (the previous version keeps running). */
  loadError?: string;
  loadedAt?: string;
}

export interface DevFunction extends DevFunctionState {
  reconciler: Reconciler;
  secret: string;
  api: KubeApi;
  inputs: Set<string>;
  manifestsHash: string;
  app: Hono;
}

export const keepRecords = 500;

const accepted = (w: { status: number }) => w.status >= 200 && w.status < 300;

function summary(r: InvocationRecord, version: number): DeliverySummary {
  const p = r.event.data.primary;
  return {
    id: r.id,
    time: r.time,
    function: r.function,
    object: objectKey(p),
    kind: p.kind,
    reason: r.event.reason,
    attempt: r.event.attempt,
    durationMs: r.durationMs,
    outcome: r.error ? 'error' : (r.result?.result ?? 'done'),
    writes: r.writes.filter(accepted).length,
    refused: r.writes.filter((w) => !accepted(w)).length,
    ...(r.result?.message ? { message: r.result.message } : {}),
    ...(r.error ? { error: r.error.message } : {}),
    ...(r.replay ? { replay: r.replay } : {}),
    version,
  };
}

/** The deliveries this server has seen (the last keepRecords), told to the UI's streams and the terminal as they come. */
export class DeliveryLog {
  readonly records: InvocationRecord[] = [];
  readonly versions = new Map<string, number>();
  readonly subscribers = new Set<(event: string, data: unknown) => void>();
  private readonly file: Journal<InvocationRecord> | undefined;
  private readonly say: (line: string) => void;
  private readonly versionOf: (fn: string) => number;

  constructor(file: Journal<InvocationRecord> | undefined, say: (line: string) => void, versionOf: (fn: string) => number) {
    this.file = file;
    this.say = say;
    this.versionOf = versionOf;
  }

  broadcast(event: string, data: unknown): void {
    for (const s of this.subscribers) s(event, data);
  }

  summaries(): DeliverySummary[] {
    return this.records.map((r) => summary(r, this.versions.get(r.id) ?? 0));
  }

  add(r: InvocationRecord): void {
    this.records.push(r);
    if (this.records.length > keepRecords) this.records.splice(0, this.records.length - keepRecords);
    const version = this.versionOf(r.function);
    this.versions.set(r.id, version);
    this.file?.append(r);
    const s = summary(r, version);
    this.broadcast('delivery', s);
    const time = new Date(r.time).toLocaleTimeString('en-GB');
    const what = s.outcome === 'error' ? `failed: ${s.error}` : `${s.outcome}, ${s.writes} write${s.writes === 1 ? '' : 's'}${s.refused ? `, ${s.refused} refused` : ''}`;
    this.say(`${time} ${s.function} ${s.kind} ${s.object} ${s.reason}${s.replay ? ` (${s.replay.mode} replay)` : ''} #${s.attempt} → ${what} (${s.durationMs} ms)`);
    if (s.outcome === 'requeue' && s.message) this.say(`    ${s.message.length > 300 ? `${s.message.slice(0, 297)}…` : s.message}`);
    if (r.error) {
      // The summary line has the message: the frames follow, the function's own first.
      const frames = userFirstStack(r.error).split('\n').filter((l) => /^\s+(at |… )/.test(l)).slice(0, 8);
      for (const l of frames) this.say(`    ${l.trim()}`);
    }
  }
}

/** The server's routes: each function at /fn/<name>, the UI at /, and the UI's API under /api. */
export function devApp(fns: Map<string, DevFunction>, log: DeliveryLog, base: string): Hono {
  const app = new Hono();
  app.all('/fn/:name', async (c) => {
    const fn = fns.get(c.req.param('name'));
    if (!fn) return c.json({ error: `no function ${c.req.param('name')} here; kfn dev serves ${[...fns.keys()].join(', ')}` }, 404);
    const url = new URL(c.req.url);
    url.pathname = '/';
    return fn.app.fetch(new Request(url, c.req.raw));
  });
  const uiFile = new URL('./dev-ui.html', import.meta.url);
  app.get('/', (c) => {
    try {
      return c.html(readFileSync(uiFile, 'utf8'));
    } catch {
      return c.text('the dev UI (cli/dev-ui.html) is missing from this installation', 500);
    }
  });
  app.get('/api/functions', (c) => c.json([...fns.values()].map(stateOf)));
  app.get('/api/deliveries', (c) => c.json(log.summaries()));
  app.get('/api/deliveries/:id', (c) => {
    const r = log.records.find((x) => x.id === c.req.param('id'));
    if (!r) return c.json({ error: `no delivery ${c.req.param('id')} (the dev server keeps the last ${keepRecords})` }, 404);
    // The UI shows the stack as the terminal does: the function's own frames first.
    return c.json(r.error ? { ...r, error: { ...r.error, userFirstStack: userFirstStack(r.error) } } : r);
  });
  app.post('/api/deliveries/:id/replay', async (c) => {
    const r = log.records.find((x) => x.id === c.req.param('id'));
    if (!r) return c.json({ error: `no delivery ${c.req.param('id')}` }, 404);
    const fn = fns.get(r.function);
    if (!fn) return c.json({ error: `function ${r.function} is not served here` }, 404);
    return c.json(c.req.query('mode') === 'dry-run' ? await replayDryRunOf(fn, r, log) : await replayLiveOf(fn, r, log, base));
  });
  app.get('/api/stream', (c) =>
    streamSSE(c, async (stream) => {
      const send = (event: string, data: unknown) => void stream.writeSSE({ event, data: JSON.stringify(data) }).catch(() => undefined);
      log.subscribers.add(send);
      send('hello', { functions: [...fns.values()].map(stateOf) });
      const ping = setInterval(() => send('ping', {}), 15_000);
      await new Promise<void>((done) => stream.onAbort(() => done()));
      clearInterval(ping);
      log.subscribers.delete(send);
    }),
  );
  return app;
}

/** A recorded delivery run again in this process, every write a server-side dry run. */
async function replayDryRunOf(fn: DevFunction, r: InvocationRecord, log: DeliveryLog): Promise<Record<string, unknown>> {
  const out = await replayDryRun(fn.reconciler, r.event, fn.api, { then: r });
  log.add(out.record);
  return { id: out.record.id, same: out.same, comparisons: out.comparisons.map((x) => ({ key: x.key, status: x.status, changes: x.changes })), effects: out.effects };
}

/** The recorded event sent again, reason replay, through the contract and its authentication. */
async function replayLiveOf(fn: DevFunction, r: InvocationRecord, log: DeliveryLog, base: string): Promise<Record<string, unknown>> {
  const { message, event } = encodeReconcileEvent({ reconciler: r.event.data.reconciler, primary: r.event.data.primary, reason: 'replay', ...(r.event.data.trigger ? { trigger: r.event.data.trigger } : {}), observedAt: Date.now() }, 1, 'kfn://dev/replay', Date.now() + 30_000);
  const credentials: Credentials = { kind: 'hmac', secret: fn.secret };
  const signed = authenticate(message, credentials);
  const res = await fetch(`${base}/fn/${fn.name}`, { method: 'POST', headers: signed.headers, body: signed.body });
  const answer = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  const replayed = [...log.records].reverse().find((x) => x.event.id === event.id);
  return { id: replayed?.id, status: res.status, answer };
}

export function stateOf(fn: DevFunction): DevFunctionState {
  return { name: fn.name, dir: fn.dir, kind: fn.kind, version: fn.version, ...(fn.loadError ? { loadError: fn.loadError } : {}), ...(fn.loadedAt ? { loadedAt: fn.loadedAt } : {}) };
}