// What the benchmarks share: percentiles, bounded parallel requests, a process's resident set,
// and waiting for a new kind to be served.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubeApi } from '../../kube/api.ts';
import { parseQuantity } from '../../kube/quantity.ts';
import { repoRoot } from '../../cluster/paths.ts';

/** The p-th percentile (nearest rank) of `xs`, which need not be sorted; NaN when empty. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN;
}

/** Runs `fn` for 0..n-1 with `parallel` calls in flight. */
export async function inParallel(n: number, parallel: number, fn: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < n) await fn(next++);
  }));
}

/** A process's resident set (VmRSS) in MiB. */
/** The sum of the Prometheus text's samples whose line `match` takes (their labels in the line). */
export function sumMetric(text: string, match: (line: string) => boolean): number {
  let sum = 0;
  for (const line of text.split('\n')) if (!line.startsWith('#') && match(line)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

/** A process's CPU so far (user + system), ms. */
export function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}
const clockTicks = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

export function rssMiB(pid: number): number {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Waits (up to 10 s) until the apiserver serves `kind` of `apiVersion`, e.g. after its CRD was created. */
export async function untilServed(api: KubeApi, apiVersion: string, kind: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await api.resource(apiVersion, kind);
      return;
    } catch (err) {
      if (i >= 100) throw err;
      await sleep(100);
    }
  }
}

/** controller-runtime's buckets for `controller_runtime_reconcile_time_seconds` (kfn's bridge uses the same). */
export const reconcileBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60];

/** A histogram as Prometheus keeps it: cumulative counts per upper bound, with the sum and count of what was observed. */
export interface Histogram {
  buckets: { le: number; count: number }[];
  sum: number;
  count: number;
}

/** The histogram of `values` (seconds) over `bounds`, as a Prometheus client would have recorded them. */
export function histogramOf(values: number[], bounds = reconcileBuckets): Histogram {
  return { buckets: [...bounds, Infinity].map((le) => ({ le, count: values.filter((v) => v <= le).length })), sum: values.reduce((a, b) => a + b, 0), count: values.length };
}

/** The `name` histogram (summed over its label sets) in a Prometheus text exposition. */
export function parseHistogram(text: string, name: string): Histogram {
  const h: Histogram = { buckets: [], sum: 0, count: 0 };
  const byLe = new Map<number, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    const rest = line.slice(name.length);
    if (rest.startsWith('_bucket')) {
      const le = /le="([^"]+)"/.exec(rest)?.[1];
      if (le !== undefined) byLe.set(le === '+Inf' ? Infinity : Number(le), (byLe.get(le === '+Inf' ? Infinity : Number(le)) ?? 0) + value);
    } else if (rest.startsWith('_sum')) h.sum += value;
    else if (rest.startsWith('_count')) h.count += value;
  }
  h.buckets = [...byLe].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
  return h;
}

/** The q-quantile (0–1) of a histogram, interpolated linearly inside its bucket as Prometheus's histogram_quantile does. */
export function histogramQuantile(h: Histogram, q: number): number {
  if (!h.count) return NaN;
  const rank = q * h.count;
  let lower = 0;
  let below = 0;
  for (const { le, count } of h.buckets) {
    if (count >= rank) {
      if (le === Infinity) return lower;
      return lower + ((le - lower) * (rank - below)) / Math.max(count - below, 1);
    }
    lower = le;
    below = count;
  }
  return lower;
}

/** A V8 CPU profile (`node --cpu-prof`), the parts read here. */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Where a process spent its CPU: busy milliseconds (samples not idle) and the self time of each
 * place, largest first. A place is an npm package, a file of this repository (relative to
 * `root`), one of Node's own modules, or V8's work (`(garbage collector)`, `(program)`).
 */
export function profilePlaces(profile: CpuProfile, root: string): { busyMs: number; places: { where: string; ms: number }[] } {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const byPlace = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const frame = nodes.get(profile.samples[i]!)?.callFrame;
    if (!frame || frame.functionName === '(idle)') continue;
    const ms = (profile.timeDeltas[i] ?? 0) / 1000;
    busy += ms;
    const url = frame.url.replace(/^file:\/\//, '');
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
    const where = pkg ?? (url.startsWith(`${root}/`) ? url.slice(root.length + 1) : url ? url.replace(/^node:internal\/(deps\/)?/, 'node:') : frame.functionName || '(native)');
    byPlace.set(where, (byPlace.get(where) ?? 0) + ms);
  }
  return { busyMs: busy, places: [...byPlace].map(([where, ms]) => ({ where, ms })).sort((a, b) => b.ms - a.ms) };
}

/** The memory limit of the bridge's Deployment (manifests/bridge/deployment.yaml), in MiB: a benchmark's bridge process gets the heap ceiling it gives. */
export function bridgeMemoryLimitMiB(): number {
  const docs = parseAllDocuments(readFileSync(join(repoRoot, 'manifests', 'bridge', 'deployment.yaml'), 'utf8')).map((d) => d.toJS());
  const limit = docs.find((d) => d?.kind === 'Deployment')?.spec.template.spec.containers[0].resources?.limits?.memory;
  const bytes = parseQuantity(limit);
  if (!bytes) throw new Error(`manifests/bridge/deployment.yaml gives the bridge no memory limit (${JSON.stringify(limit)})`);
  return bytes / 2 ** 20;
}

/** The inspector of a Node process started with --inspect=127.0.0.1:0, from the address it logged: calls by method. */
export async function inspector(logFile: string): Promise<{ call<T = unknown>(method: string, params?: Record<string, unknown>): Promise<T>; close(): void }> {
  const url = readFileSync(logFile, 'utf8').match(/Debugger listening on (ws:\/\/\S+)/)?.[1];
  if (!url) throw new Error(`no inspector address in ${logFile}`);
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve, { once: true });
    ws.addEventListener('error', reject, { once: true });
  });
  let id = 0;
  const call = <T,>(method: string, params: Record<string, unknown> = {}) =>
    new Promise<T>((resolve, reject) => {
      const mine = ++id;
      const onMessage = (e: MessageEvent) => {
        const msg = JSON.parse(String(e.data)) as { id?: number; result?: T; error?: { message: string } };
        if (msg.id !== mine) return;
        ws.removeEventListener('message', onMessage);
        if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
        else resolve(msg.result as T);
      };
      ws.addEventListener('message', onMessage);
      ws.send(JSON.stringify({ id: mine, method, params }));
    });
  return { call, close: () => ws.close() };
}

/** Forces a full garbage collection in a Node process started with --inspect=127.0.0.1:0 and returns its heap in use afterwards, in MiB. */
export async function heapAfterGc(logFile: string): Promise<number> {
  const node = await inspector(logFile);
  try {
    await node.call('HeapProfiler.collectGarbage');
    const used = (await node.call<{ result?: { value?: number } }>('Runtime.evaluate', { expression: 'process.memoryUsage().heapUsed', returnByValue: true })).result?.value ?? NaN;
    return used / 1048576;
  } finally {
    node.close();
  }
}

/**
 * The kfn entry a bench runs its bridges from: the esbuild bundle a deployment runs (built now),
 * or with `fromSource` cli/kfn.ts itself.
 */
export function kfnEntry(fromSource: boolean): string {
  if (fromSource) return join(repoRoot, 'cli', 'kfn.ts');
  const build = spawnSync('npm', ['run', '--silent', 'build'], { cwd: repoRoot, stdio: 'inherit' });
  if (build.status !== 0) throw new Error('npm run build failed (the bridge bundle a deployment runs)');
  return join(repoRoot, 'dist', 'kfn.mjs');
}

/** `kfn bridge` with `args`, under the V8 flags `nodeOptions`, its output in `logFile`. */
export function spawnBridge(entry: string, nodeOptions: string, args: string[], logFile: string): ChildProcess {
  const log = openSync(logFile, 'a');
  const child = spawn(process.execPath, [...nodeOptions.split(' ').filter(Boolean), entry, 'bridge', ...args], { stdio: ['ignore', log, log] });
  closeSync(log);
  return child;
}
