// P8 of bench:compare, at cluster scale: K MyWebs in one namespace, each with one ConfigMap made
// as the SDK makes a child (its labels, owned by the MyWeb), for each K of --scale-objects (made
// incrementally, 16 at a time). At each K every contender is started fresh, alone:
//
//   kfn                  the bundled bridge (the Deployment's V8 flags), a contract-1 Reconciler
//                        for MyWeb owning ConfigMap (metadata records), delivering to a sink that
//                        answers at once: spawn → first delivery at the sink, settled RSS, heap
//                        after a forced GC and that heap per watched object;
//   controller-runtime   the peer with --watch-only and its default cache: spawn → `synced` (its
//                        cache holds every watched kind), settled RSS;
//   c-r metadata-only    the same with --metadata-only (its cache holds PartialObjectMetadata);
//
// and for each, the kube-apiserver's peak RSS from the contender's spawn until its RSS settled
// (a look every 200 ms: /proc's VmHWM is the apiserver's lifetime peak, not this window's). At
// the largest K, two bridge replicas with --shards 2 beside the one: every replica still watches
// and records everything, so this shows what sharding does not save yet.
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { childLabels, reconcilerApiVersion, reconcilerKind } from '../../core/names.ts';
import { MyWeb } from '../../functions/myweb/index.ts';
import type { KubeApi, KubeObject } from '../../kube/api.ts';
import type { ClusterPaths } from '../../cluster/paths.ts';
import { isRunning } from '../../cluster/processes.ts';
import { readState } from '../../cluster/state.ts';
import { heapAfterGc, inParallel, rssMiB } from './common.ts';

type Child = ChildProcess & { logFile: string };

/** What P8 takes from bench:compare: the cluster, its way of running processes, P4's MyWebs. */
export interface ScaleBench {
  api: KubeApi;
  clusterPaths: ClusterPaths;
  kubeconfig: string;
  /** The bridge's bundle, and the V8 flags it runs with (one string, as --bridge-node-options). */
  bundle: string;
  bridgeNodeOptions: string;
  /** The controller-runtime peer's binary. */
  operator: string;
  dir: string;
  log(line: string): void;
  /** Wall-clock ms, comparable with the peer's unix ns. */
  now(): number;
  /** Spawns a process, its output in `logFile`; killed when the run ends, however it ends. */
  startProcess(name: string, command: string, args: string[]): Child;
  stop(child: ChildProcess): Promise<void>;
  settledRss(pid: number): Promise<number>;
  createNamespace(prefix: string): Promise<string>;
  deleteNamespace(ns: string): Promise<void>;
  /** The MyWebs' collection in `ns`, and a small MyWeb to create there. */
  webs(ns: string): string;
  web(name: string, port: number): object;
}

/** One contender started fresh: its settled RSS, spawn → ready (first delivery; cache synced), the apiserver's RSS meanwhile. */
export interface StartFigures {
  rssMiB: number;
  readyS: number;
  apiserverAtStartMiB: number;
  apiserverPeakMiB: number;
}

export interface ScaleSize {
  webs: number;
  /** The objects each contender watches: the MyWebs and their ConfigMaps. */
  objects: number;
  kfn: StartFigures & { heapMiB: number };
  crDefault: StartFigures;
  crMetadata: StartFigures;
}

export interface ScaleResult {
  sizes: ScaleSize[];
  /** At the largest size: two bridge replicas with --shards 2, started together. */
  shards?: { webs: number; objects: number; replicas: { rssMiB: number; heapMiB: number }[] };
  /** Why the part stopped before its end (the sizes before it stay). */
  error?: string;
}

/** --scale-objects: MyWeb counts in rising order (the namespace grows from one to the next). */
export function parseScaleSizes(text: string): number[] {
  const sizes = text.split(',').map((s) => Number(s.trim()));
  if (!sizes.length || sizes.some((k, i) => !Number.isInteger(k) || k < 1 || (i > 0 && k <= sizes[i - 1]!))) {
    throw new Error(`--scale-objects takes whole numbers of MyWebs in rising order, e.g. 10000,40000,100000; not "${text}"`);
  }
  return sizes;
}

/** KiB per watched object of `mib`. */
export const kibPerObject = (mib: number, objects: number) => (mib * 1024) / objects;

const reconcilerName = 'scale';
/** A first delivery or a synced cache at 250k MyWebs takes minutes on 2 cores; a stuck start, longer. */
const startTimeoutMs = 20 * 60_000;

/** Measures each size in turn into `into`; the namespace and every process go, however it ends. */
export async function atClusterScale(b: ScaleBench, sizes: number[], into: ScaleResult): Promise<void> {
  const ns = await b.createNamespace('kfn-compare-scale');
  const sink = await startSink(b.now);
  try {
    const config = (name: string, path: string) => {
      const file = join(b.dir, `${name}.yaml`);
      const spec = { for: { apiVersion: MyWeb.apiVersion, kind: MyWeb.kind }, owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }], contract: 1, sink: { uri: `${sink.url}${path}` }, namespaces: [ns], maxConcurrentReconciles: 8 };
      writeFileSync(file, stringify({ apiVersion: reconcilerApiVersion, kind: reconcilerKind, metadata: { name: reconcilerName }, spec }));
      return file;
    };
    const bridgeArgs = (file: string, ...more: string[]) => [...b.bridgeNodeOptions.split(' ').filter(Boolean), '--inspect=127.0.0.1:0', b.bundle, 'bridge', `--kubeconfig=${b.kubeconfig}`, `--config=${file}`, '--log-level=error', '--metrics-addr=0', ...more];
    const peerArgs = (...more: string[]) => ['--kubeconfig', b.kubeconfig, '--namespace', ns, '--watch-only', ...more, '--zap-log-level', 'error'];
    const synced = (child: Child) => until('the peer\'s cache to sync', child, () => {
      const nanos = readFileSync(child.logFile, 'utf8').match(/^synced (\d+)$/m)?.[1];
      return nanos ? Number(nanos) / 1e6 : undefined;
    });
    const single = config('scale-bridge', '/kfn');
    let made = 0;
    for (const k of sizes) {
      await grow(b, ns, made, k);
      made = k;
      const objects = 2 * k;
      sink.reset();
      const kfn = await runFresh(b, `scale-bridge-${k}`, process.execPath, bridgeArgs(single), (c) => until('the bridge\'s first delivery', c, () => sink.first.get('/kfn')), async (c) => ({ heapMiB: await heapAfterGc(c.logFile) }));
      b.log(`P8 ${k}: kfn bridge ${kfn.rssMiB.toFixed(0)} MiB (heap ${kibPerObject(kfn.heapMiB, objects).toFixed(2)} KiB per object), first delivery after ${kfn.readyS.toFixed(1)} s, apiserver peak ${kfn.apiserverPeakMiB.toFixed(0)} MiB`);
      const crDefault = await runFresh(b, `scale-cr-${k}`, b.operator, peerArgs(), synced, async () => ({}));
      b.log(`P8 ${k}: controller-runtime ${crDefault.rssMiB.toFixed(0)} MiB, synced after ${crDefault.readyS.toFixed(1)} s, apiserver peak ${crDefault.apiserverPeakMiB.toFixed(0)} MiB`);
      const crMetadata = await runFresh(b, `scale-cr-metadata-${k}`, b.operator, peerArgs('--metadata-only'), synced, async () => ({}));
      b.log(`P8 ${k}: controller-runtime metadata-only ${crMetadata.rssMiB.toFixed(0)} MiB, synced after ${crMetadata.readyS.toFixed(1)} s, apiserver peak ${crMetadata.apiserverPeakMiB.toFixed(0)} MiB`);
      into.sizes.push({ webs: k, objects, kfn, crDefault, crMetadata });
    }
    const replica = (i: number) => bridgeArgs(config(`scale-shard-${i}`, `/shard-${i}`), '--leader-elect', '--shards=2', `--shard=${i}`, `--lease-namespace=${ns}`, '--lease-name=scale-bridge');
    into.shards = await twoShards(b, made, sink, replica);
  } finally {
    sink.close();
    // 2K objects and more: the namespace controller may take longer than deleteNamespace waits.
    await b.deleteNamespace(ns).catch((err: Error) => b.log(`P8: ${err.message}; it goes on being deleted in the background`));
  }
}

/** Two bridge replicas with --shards 2, started together, at `k` MyWebs: each one's settled RSS and heap. Replica i delivers to /shard-i. */
async function twoShards(b: ScaleBench, k: number, sink: Sink, args: (i: number) => string[]): Promise<NonNullable<ScaleResult['shards']>> {
  sink.reset();
  const replicas = [0, 1].map((i) => b.startProcess(`scale-shard-${i}`, process.execPath, args(i)));
  try {
    // A replica's first delivery: it holds its shard and has listed.
    await Promise.all(replicas.map((c, i) => until(`replica ${i}'s first delivery`, c, () => sink.first.get(`/shard-${i}`))));
    const rss = await Promise.all(replicas.map((c) => b.settledRss(c.pid!)));
    const heap: number[] = [];
    for (const c of replicas) heap.push(await heapAfterGc(c.logFile));
    const shards = { webs: k, objects: 2 * k, replicas: rss.map((rssMiB, i) => ({ rssMiB, heapMiB: heap[i]! })) };
    b.log(`P8 ${k}, --shards 2: ${shards.replicas.map((r, i) => `replica ${i} ${r.rssMiB.toFixed(0)} MiB (heap ${kibPerObject(r.heapMiB, shards.objects).toFixed(2)} KiB per object)`).join(', ')}`);
    return shards;
  } finally {
    await Promise.all(replicas.map((c) => b.stop(c)));
  }
}

/** Grows `ns` from `from` to `to` MyWebs, each with its page ConfigMap made as the SDK makes a child. */
async function grow(b: ScaleBench, ns: string, from: number, to: number): Promise<void> {
  const n = to - from;
  const step = Math.ceil(n / 10);
  let done = 0;
  b.log(`P8: making ${n} MyWebs and their ConfigMaps (to ${to})`);
  await inParallel(n, 16, async (i) => {
    const name = `w${from + i}`;
    const owner = await b.api.request<KubeObject>('POST', b.webs(ns), { body: b.web(name, 30000 + ((from + i) % 2700)) });
    const uid = owner.metadata.uid!;
    await b.api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, {
      body: {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: `${name}-page`, labels: childLabels(uid, reconcilerName), ownerReferences: [{ apiVersion: MyWeb.apiVersion, kind: MyWeb.kind, name, uid, controller: true, blockOwnerDeletion: true }] },
        data: { 'index.html': `<h1>${name}</h1>` },
      },
    });
    if (++done % step === 0 || done === n) b.log(`P8: ${from + done} of ${to} MyWebs made (${Math.round((done / n) * 100)}%)`);
  });
}

/**
 * Starts a contender fresh and samples the apiserver's RSS from its spawn until the contender's
 * own has settled; `ready` answers when it is ready (wall-clock ms), `more` reads the rest
 * before it is stopped.
 */
async function runFresh<T extends object>(b: ScaleBench, name: string, command: string, args: string[], ready: (child: Child) => Promise<number>, more: (child: Child) => Promise<T>): Promise<StartFigures & T> {
  const apiserver = peakRss(apiserverPid(b.clusterPaths));
  const started = b.now();
  const child = b.startProcess(name, command, args);
  try {
    const readyS = ((await ready(child)) - started) / 1000;
    const rssMiB = await b.settledRss(child.pid!);
    const { atStartMiB, peakMiB } = apiserver.stop();
    return { rssMiB, readyS, apiserverAtStartMiB: atStartMiB, apiserverPeakMiB: peakMiB, ...(await more(child)) };
  } catch (err) {
    // A bridge whose heap outgrows the ceiling its V8 flags give it ends, as its pod would restart.
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${name} ended (${child.exitCode ?? child.signalCode}) before it was measured; see ${child.logFile}`, { cause: err });
    throw err;
  } finally {
    apiserver.stop();
    await b.stop(child);
  }
}

/** Polls `look` every 100 ms until it answers; throws if `child` ends first or the start timeout passes. */
async function until<T>(what: string, child: Child, look: () => T | undefined): Promise<T> {
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    const found = look();
    if (found !== undefined) return found;
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`waiting for ${what}: the process ended (${child.exitCode ?? child.signalCode}); see ${child.logFile}`);
    if (Date.now() > deadline) throw new Error(`waiting for ${what}: nothing in ${startTimeoutMs / 60_000} minutes; see ${child.logFile}`);
    await sleep(100);
  }
}

/** A sink that answers every delivery at once, noting when the first came to each path since reset(). */
interface Sink {
  url: string;
  /** Wall-clock ms of the first POST to each path since reset(). */
  first: Map<string, number>;
  reset(): void;
  close(): void;
}

async function startSink(now: () => number): Promise<Sink> {
  const first = new Map<string, number>();
  const server = createServer((req, res) => {
    if (req.method === 'POST' && !first.has(req.url!)) first.set(req.url!, now());
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, first, reset: () => first.clear(), close: () => server.close() };
}

/** The largest RSS of `pid` from now until stop() (MiB), a look every 200 ms; NaN if a look failed. */
function peakRss(pid: number): { stop(): { atStartMiB: number; peakMiB: number } } {
  const look = () => {
    try {
      return rssMiB(pid);
    } catch {
      return NaN;
    }
  };
  const atStartMiB = look();
  let peakMiB = atStartMiB;
  const timer = setInterval(() => {
    peakMiB = Math.max(peakMiB, look());
  }, 200);
  return {
    stop() {
      clearInterval(timer);
      return { atStartMiB, peakMiB };
    },
  };
}

/** The local cluster's kube-apiserver: the process its state records while it runs that binary, else one /proc shows. */
function apiserverPid(paths: ClusterPaths): number {
  const recorded = readState(paths)?.processes.find((p) => p.name === 'kube-apiserver');
  if (recorded && isRunning(recorded)) return recorded.pid;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (basename(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!) === 'kube-apiserver') return Number(pid);
    } catch {
      // Gone since the listing.
    }
  }
  throw new Error(`no kube-apiserver process: none running as ${paths.state} records it, none in /proc`);
}

/** P8's lines of the bench:compare table. */
export function scaleTable(r: ScaleResult): string[] {
  const lines: string[] = [];
  const f = (n: number, digits = 0) => n.toFixed(digits);
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  lines.push('', 'P8 at cluster scale: K MyWebs and a ConfigMap each (2K objects watched), each contender started fresh (MiB; seconds from spawn; apiserver: its peak RSS until the contender settled)');
  lines.push('  K          kfn RSS  heap KiB/obj  1st delivery s  apiserver    c-r RSS  synced s  apiserver    c-r metadata RSS  synced s  apiserver    kfn/c-r  kfn/c-r metadata');
  for (const s of r.sizes) {
    const start = (c: StartFigures, width: number) => `${f(c.rssMiB).padStart(width)}  ${f(c.readyS, 1).padStart(8)}  ${f(c.apiserverPeakMiB).padStart(9)}`;
    lines.push(`  ${String(s.webs).padEnd(9)} ${f(s.kfn.rssMiB).padStart(8)}  ${f(kibPerObject(s.kfn.heapMiB, s.objects), 2).padStart(12)}  ${f(s.kfn.readyS, 1).padStart(14)}  ${f(s.kfn.apiserverPeakMiB).padStart(9)}   ${start(s.crDefault, 8)}   ${start(s.crMetadata, 17)}   ${x(s.kfn.rssMiB, s.crDefault.rssMiB).padStart(7)}  ${x(s.kfn.rssMiB, s.crMetadata.rssMiB).padStart(16)}`);
  }
  if (r.sizes.length > 1) {
    const [a, b] = [r.sizes[0]!, r.sizes.at(-1)!];
    const slope = (of: (s: ScaleSize) => number) => f(kibPerObject(of(b) - of(a), b.objects - a.objects), 2);
    lines.push(`  per additional object watched (KiB), ${a.webs}→${b.webs}: kfn RSS ${slope((s) => s.kfn.rssMiB)} (heap ${slope((s) => s.kfn.heapMiB)}), c-r ${slope((s) => s.crDefault.rssMiB)}, c-r metadata-only ${slope((s) => s.crMetadata.rssMiB)}; apiserver peak with kfn ${slope((s) => s.kfn.apiserverPeakMiB)}, c-r ${slope((s) => s.crDefault.apiserverPeakMiB)}, c-r metadata-only ${slope((s) => s.crMetadata.apiserverPeakMiB)}`);
  }
  const one = r.sizes.find((s) => s.webs === r.shards?.webs)?.kfn;
  if (r.shards && one) {
    const replica = (rss: number, heap: number) => `${f(rss)} MiB (heap ${f(kibPerObject(heap, r.shards!.objects), 2)} KiB/object)`;
    lines.push(`  --shards 2 at ${r.shards.webs} (every replica watches everything today): one replica ${replica(one.rssMiB, one.heapMiB)}; ${r.shards.replicas.map((p, i) => `replica ${i} of 2 ${replica(p.rssMiB, p.heapMiB)}`).join(', ')}`);
  }
  if (r.error) lines.push(`  P8 stopped: ${r.error}`);
  return lines;
}
