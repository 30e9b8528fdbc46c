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
// (a look every 200 ms: /proc's VmHWM is the apiserver's lifetime peak, not this window's); then
// a bare client's paginated and streaming lists of the same objects, timed, with the apiserver's
// heap meanwhile (scale-lists.ts). At the largest K, then:
//
//   shards               N bridge replicas with --shards N (2, then 4), started together: each
//                        one's RSS and heap (each keeps the records of its own shard);
//   take-over by shard   with 2: replica 1 killed (SIGKILL); replica 0 takes its shard once the
//                        Lease expires, lists its records in and delivers its keys: kill → first
//                        and → last of them delivered, and replica 0's RSS after;
//   take-over by leader  a leader and a standby (--leader-elect; a standby starts its watches
//                        when it takes the Lease): the leader killed; kill → the standby's
//                        first delivery and → every key delivered again (at low priority);
//                        then the same with --warm-standby (the standby lists at its start,
//                        and is killed for once it has): its memory while it waits, its take-over.
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
import { heapAfterGc, inParallel, rssMiB, sumMetric } from './common.ts';
import { freePort } from '../support/bridge.ts';
import { shardOf } from '../../bridge/shards.ts';
import { apiserverHeap, listModes, listModesLine, type ListProbe } from './scale-lists.ts';

export type Child = ChildProcess & { logFile: string };

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
  startProcess(name: string, command: string, args: string[], env?: Record<string, string>): Child;
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
  /** kfn: spawn → every watch listed (its /readyz). */
  listedS?: number;
  apiserverAtStartMiB: number;
  apiserverPeakMiB: number;
  /** The apiserver's Go heap in use: its highest until the contender settled, less what it was at the spawn (MiB). */
  apiserverHeapRiseMiB?: number;
  /** LIST requests of MyWebs and ConfigMaps the apiserver answered meanwhile. */
  listRequests?: number;
}

export interface ScaleSize {
  webs: number;
  /** The objects each contender watches: the MyWebs and their ConfigMaps. */
  objects: number;
  kfn: StartFigures & { heapMiB: number };
  /** The same bridge with --lists pages: its lists by pages of 500, beside kfn's streaming lists. */
  kfnPages?: StartFigures & { heapMiB: number };
  crDefault: StartFigures;
  crMetadata: StartFigures;
  /** A bare client's paginated and streaming lists of the same objects (scale-lists.ts). */
  lists?: ListProbe[];
}

/** A take-over: from the kill to the first and the last key of the dead replica's delivered by the survivor. */
export interface TakeoverFigures {
  keys: number;
  /** MyWebs of the dead replica's changed right after the kill, and how many of those changes the survivor did not deliver (a delivery after the change). */
  changed?: number;
  lost?: number;
  /** LIST requests of MyWebs and ConfigMaps the apiserver answered from the kill to the last key delivered. */
  lists?: number;
  /** A leader's standby: its settled RSS before the kill. */
  standbyRssMiB?: number;
  firstS: number;
  allS: number;
  rssAfterMiB: number;
}

/** N replicas with --shards N at `webs` MyWebs: each one's settled RSS and heap. */
export interface ShardedRun {
  shards: number;
  webs: number;
  objects: number;
  replicas: { rssMiB: number; heapMiB: number }[];
  /** With 2 shards: replica 1 killed, replica 0 taking its shard over. */
  takeover?: TakeoverFigures;
}

export interface ScaleResult {
  sizes: ScaleSize[];
  /** At the largest size: --shards 2 and 4. */
  sharded?: ShardedRun[];
  /** At the largest size: a leader killed, its standby taking over (it lists on taking the Lease). */
  leaderTakeover?: TakeoverFigures & { webs: number };
  /** The same with --warm-standby (it listed at its start). */
  warmTakeover?: TakeoverFigures & { webs: number };
  /** Why the part stopped before its end (the sizes before it stay). */
  error?: string;
}

/** --scale-objects: MyWeb counts in rising order (the namespace grows from one to the next). */
export function parseScaleSizes(text: string): number[] {
  if (text === 'none') return [];
  const sizes = text.split(',').map((s) => Number(s.trim()));
  if (!sizes.length || sizes.some((k, i) => !Number.isInteger(k) || k < 1 || (i > 0 && k <= sizes[i - 1]!))) {
    throw new Error(`--scale-objects takes whole numbers of MyWebs in rising order, e.g. 10000,40000,100000 (or none); not "${text}"`);
  }
  return sizes;
}

/** KiB per watched object of `mib`. */
export const kibPerObject = (mib: number, objects: number) => (mib * 1024) / objects;

/** The Reconciler's name in every P8 case (the children's labels name it). */
export const reconcilerName = 'scale';
/** A first delivery or a synced cache at 250k MyWebs takes minutes on 2 cores; a stuck start, longer. */
const startTimeoutMs = 20 * 60_000;

/** Measures each size in turn into `into`; the namespace and every process go, however it ends. */
/** What P8 measures at its sizes (`--scale-steps`): each size's contenders, the shards, the leader's cold and warm standbys. */
export const scaleSteps = ['sizes', 'shards', 'cold', 'warm'] as const;
export type ScaleStep = (typeof scaleSteps)[number];

export async function atClusterScale(b: ScaleBench, sizes: number[], into: ScaleResult, steps: ReadonlySet<ScaleStep> = new Set(scaleSteps)): Promise<void> {
  if (!sizes.length) return;
  const ns = await b.createNamespace('kfn-compare-scale');
  const sink = await startSink(b.now);
  try {
    const config = (name: string, path: string) => {
      const file = join(b.dir, `${name}.yaml`);
      const spec = { for: { apiVersion: MyWeb.apiVersion, kind: MyWeb.kind }, owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }], contract: 1, sink: { uri: `${sink.url}${path}` }, namespaces: [ns], maxConcurrentReconciles: 8 };
      writeFileSync(file, stringify({ apiVersion: reconcilerApiVersion, kind: reconcilerKind, metadata: { name: reconcilerName }, spec }));
      return file;
    };
    // Each bridge serves /readyz on a port of its own: ready once every watch has listed.
    const bridgeArgs = (file: string, port: number, ...more: string[]) => [...b.bridgeNodeOptions.split(' ').filter(Boolean), '--inspect=127.0.0.1:0', b.bundle, 'bridge', `--kubeconfig=${b.kubeconfig}`, `--config=${file}`, '--log-level=error', `--metrics-addr=127.0.0.1:${port}`, ...more];
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
      if (!steps.has('sizes')) continue;
      const objects = 2 * k;
      sink.reset();
      const port = await freePort();
      const kfn = await runFresh(b, `scale-bridge-${k}`, process.execPath, bridgeArgs(single, port), (c) => until('the bridge\'s first delivery', c, () => sink.first.get('/kfn')), async (c) => ({ heapMiB: await drainedHeap(c, port) }), (c) => listed(c, port));
      b.log(`P8 ${k}: kfn bridge ${kfn.rssMiB.toFixed(0)} MiB (heap ${kibPerObject(kfn.heapMiB, objects).toFixed(2)} KiB per object), first delivery after ${kfn.readyS.toFixed(1)} s, listed after ${kfn.listedS!.toFixed(1)} s, apiserver peak ${kfn.apiserverPeakMiB.toFixed(0)} MiB`);
      sink.reset();
      const pagesPort = await freePort();
      const kfnPages = await runFresh(b, `scale-bridge-pages-${k}`, process.execPath, bridgeArgs(single, pagesPort, '--lists=pages'), (c) => until('the bridge\'s first delivery', c, () => sink.first.get('/kfn')), async (c) => ({ heapMiB: await drainedHeap(c, pagesPort) }), (c) => listed(c, pagesPort));
      b.log(kfnListsLine(k, kfn, kfnPages).trim());
      const crDefault = await runFresh(b, `scale-cr-${k}`, b.operator, peerArgs(), synced, async () => ({}));
      b.log(`P8 ${k}: controller-runtime ${crDefault.rssMiB.toFixed(0)} MiB, synced after ${crDefault.readyS.toFixed(1)} s, apiserver peak ${crDefault.apiserverPeakMiB.toFixed(0)} MiB (its heap +${crDefault.apiserverHeapRiseMiB?.toFixed(0)} MiB), ${crDefault.listRequests} LIST requests`);
      const crMetadata = await runFresh(b, `scale-cr-metadata-${k}`, b.operator, peerArgs('--metadata-only'), synced, async () => ({}));
      b.log(`P8 ${k}: controller-runtime metadata-only ${crMetadata.rssMiB.toFixed(0)} MiB, synced after ${crMetadata.readyS.toFixed(1)} s, apiserver peak ${crMetadata.apiserverPeakMiB.toFixed(0)} MiB (its heap +${crMetadata.apiserverHeapRiseMiB?.toFixed(0)} MiB), ${crMetadata.listRequests} LIST requests`);
      const lists = await listModes(b, ns);
      b.log(listModesLine(k, lists).trim());
      into.sizes.push({ webs: k, objects, kfn, kfnPages, crDefault, crMetadata, lists });
    }
    into.sharded = [];
    for (const n of steps.has('shards') ? [2, 4] : []) {
      const replica = (i: number, port: number) => bridgeArgs(config(`scale-shard-${n}-${i}`, `/shard-${n}-${i}`), port, '--leader-elect', `--shards=${n}`, `--shard=${i}`, `--lease-namespace=${ns}`, `--lease-name=scale-shards-${n}`);
      into.sharded.push(await sharded(b, ns, made, n, sink, replica));
    }
    const standby = (lease: string, ...more: string[]) => (i: number, port: number) => bridgeArgs(config(`scale-leader-${i}`, `/leader-${i}`), port, '--leader-elect', `--lease-namespace=${ns}`, `--lease-name=${lease}`, ...more);
    if (steps.has('cold')) into.leaderTakeover = { webs: made, ...(await leaderTakeover(b, ns, made, sink, standby('scale-leader'), false)) };
    if (steps.has('warm')) into.warmTakeover = { webs: made, ...(await leaderTakeover(b, ns, made, sink, standby('scale-warm', '--warm-standby'), true)) };
  } finally {
    sink.close();
    // 2K objects and more: the namespace controller may take longer than deleteNamespace waits.
    await b.deleteNamespace(ns).catch((err: Error) => b.log(`P8: ${err.message}; it goes on being deleted in the background`));
  }
}

/** N replicas with --shards N, started together, at `k` MyWebs: each one's settled RSS and heap; with 2, then the take-over of replica 1's shard by replica 0. Replica i delivers to /shard-N-i. */
async function sharded(b: ScaleBench, ns: string, k: number, n: number, sink: Sink, args: (i: number, port: number) => string[]): Promise<ShardedRun> {
  sink.reset();
  const ports = await Promise.all(Array.from({ length: n }, () => freePort()));
  const replicas = ports.map((port, i) => b.startProcess(`scale-shard-${n}-${i}`, process.execPath, args(i, port)));
  try {
    // A replica's first delivery (it holds its shard), then every watch of it listed.
    await Promise.all(replicas.map((c, i) => until(`replica ${i} of ${n}'s first delivery`, c, () => sink.first.get(`/shard-${n}-${i}`))));
    await Promise.all(replicas.map((c, i) => listed(c, ports[i]!)));
    const rss = await Promise.all(replicas.map((c) => b.settledRss(c.pid!)));
    const heap: number[] = [];
    for (const c of replicas) heap.push(await heapAfterGc(c.logFile));
    const run: ShardedRun = { shards: n, webs: k, objects: 2 * k, replicas: rss.map((rssMiB, i) => ({ rssMiB, heapMiB: heap[i]! })) };
    b.log(`P8 ${k}, --shards ${n}: ${run.replicas.map((r, i) => `replica ${i} ${r.rssMiB.toFixed(0)} MiB (heap ${kibPerObject(r.heapMiB, run.objects).toFixed(2)} KiB per object)`).join(', ')}`);
    if (n === 2) {
      // Replica 0 takes over shard 1: every MyWeb key in it, delivered to replica 0's path.
      const keys = Array.from({ length: k }, (_, i) => `w${i}`).filter((name) => shardOf(`${ns}/${name}`, 2) === 1).length;
      run.takeover = await takeover(b, sink, replicas[1]!, replicas[0]!, `/shard-2-0`, (subject) => shardOf(subject, 2) === 1, keys, ns);
      b.log(`P8 ${k}, --shards 2, replica 1 killed: replica 0's first delivery of shard 1 after ${run.takeover.firstS.toFixed(1)} s, all ${keys} of its keys after ${run.takeover.allS.toFixed(1)} s; replica 0 then ${run.takeover.rssAfterMiB.toFixed(0)} MiB`);
    }
    return run;
  } finally {
    await Promise.all(replicas.map((c) => b.stop(c)));
  }
}

/**
 * A leader and a standby: the leader killed once it has listed and both have settled; the
 * standby's take-over of every key. A standby starts its watches when it takes the Lease, so its
 * list is in the figure; a `warm` one listed at its start (it is ready once it has).
 */
async function leaderTakeover(b: ScaleBench, ns: string, k: number, sink: Sink, args: (i: number, port: number) => string[], warm: boolean): Promise<TakeoverFigures> {
  sink.reset();
  const ports = [await freePort(), await freePort()];
  const replicas = [0, 1].map((i) => b.startProcess(`scale-leader-${i}`, process.execPath, args(i, ports[i]!)));
  try {
    const leader = await until('a leader\'s first delivery', replicas[0]!, () => [0, 1].find((i) => sink.first.has(`/leader-${i}`)));
    const standby = 1 - leader;
    await listed(replicas[leader]!, ports[leader]!);
    if (warm) await listed(replicas[standby]!, ports[standby]!);
    const rss = await Promise.all(replicas.map((c) => b.settledRss(c.pid!)));
    const figures = { ...(await takeover(b, sink, replicas[leader]!, replicas[standby]!, `/leader-${standby}`, () => true, k, ns)), standbyRssMiB: rss[standby]! };
    b.log(`P8 ${k}, leader killed: the ${warm ? 'warm ' : ''}standby (${figures.standbyRssMiB.toFixed(0)} MiB before) first delivered after ${figures.firstS.toFixed(1)} s, all ${k} keys after ${figures.allS.toFixed(1)} s; then ${figures.rssAfterMiB.toFixed(0)} MiB`);
    return figures;
  } finally {
    await Promise.all(replicas.map((c) => b.stop(c)));
  }
}

/** MyWebs changed during each take-over's gap: a change made then must be delivered after it. */
const changedInGap = 100;

/**
 * Kills `dead` (SIGKILL: nothing handed over) and times `survivor`'s deliveries to `path` of the
 * keys `theirs` selects, until `keys` distinct ones. Right after the kill, changedInGap of those
 * MyWebs are changed: each must then be delivered after its change (its latest state read
 * after it), or it counts as lost.
 */
async function takeover(b: ScaleBench, sink: Sink, dead: Child, survivor: Child, path: string, theirs: (subject: string) => boolean, keys: number, ns: string): Promise<TakeoverFigures> {
  const listsBefore = await listRequests(b);
  const killed = b.now();
  sink.watchFor(path, theirs);
  dead.kill('SIGKILL');
  const names: string[] = [];
  for (let i = 0; names.length < Math.min(changedInGap, keys); i++) if (theirs(`${ns}/w${i}`)) names.push(`w${i}`);
  const changedAt = new Map<string, number>();
  await inParallel(names.length, 16, async (i) => {
    await b.api.request('PATCH', `${b.webs(ns)}/${names[i]}`, { body: { spec: { pageContentHtml: `<h1>changed during the take-over</h1>` } }, contentType: 'application/merge-patch+json' });
    changedAt.set(`${ns}/${names[i]}`, b.now());
  });
  const first = await until(`the take-over's first delivery to ${path}`, survivor, () => sink.taken.first);
  const all = await until(`the take-over's ${keys} keys at ${path}`, survivor, () => (sink.taken.subjects.size >= keys ? b.now() : undefined));
  const lists = (await listRequests(b)) - listsBefore;
  // The changes go ahead of the low-priority redeliveries; a minute more for any left.
  const pending = () => [...changedAt].filter(([key, at]) => !((sink.taken.subjects.get(key) ?? 0) > at));
  for (const deadline = b.now() + 60_000; pending().length && b.now() < deadline; ) await sleep(200);
  const rssAfterMiB = await b.settledRss(survivor.pid!);
  return { keys, firstS: (first - killed) / 1000, allS: (all - killed) / 1000, rssAfterMiB, changed: changedAt.size, lost: pending().length, lists };
}

/** LIST requests of MyWebs and ConfigMaps the apiserver has answered (apiserver_request_total). */
async function listRequests(b: ScaleBench): Promise<number> {
  return sumMetric(await b.api.text('GET', '/metrics'), (l) => l.startsWith('apiserver_request_total{') && l.includes('verb="LIST"') && /resource="(mywebs|configmaps)"/.test(l));
}

/** Makes MyWebs w`from`…w`to - 1` in `ns`, each with its page ConfigMap as the SDK makes a child (owned, labelled). */
export async function grow(b: Pick<ScaleBench, 'api' | 'log' | 'webs' | 'web'>, ns: string, from: number, to: number): Promise<void> {
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
async function runFresh<T extends object>(b: ScaleBench, name: string, command: string, args: string[], ready: (child: Child) => Promise<number>, more: (child: Child) => Promise<T>, settle?: (child: Child) => Promise<number>): Promise<StartFigures & T> {
  const apiserver = peakRss(apiserverPid(b.clusterPaths));
  const heap = await apiserverHeap(b);
  const listsBefore = await listRequests(b);
  const started = b.now();
  const child = b.startProcess(name, command, args);
  try {
    const readyS = ((await ready(child)) - started) / 1000;
    // Memory is read once everything is listed: a bridge delivers while its lists go on.
    const listedS = settle ? ((await settle(child)) - started) / 1000 : undefined;
    const rssMiB = await b.settledRss(child.pid!);
    const { atStartMiB, peakMiB } = apiserver.stop();
    const { beforeMiB, peakMiB: heapPeakMiB } = await heap.stop();
    const listRequestsMade = (await listRequests(b)) - listsBefore;
    return { rssMiB, readyS, ...(listedS !== undefined ? { listedS } : {}), apiserverAtStartMiB: atStartMiB, apiserverPeakMiB: peakMiB, apiserverHeapRiseMiB: heapPeakMiB - beforeMiB, listRequests: listRequestsMade, ...(await more(child)) };
  } catch (err) {
    // A bridge whose heap outgrows the ceiling its V8 flags give it ends, as its pod would restart.
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${name} ended (${child.exitCode ?? child.signalCode}) before it was measured; see ${child.logFile}`, { cause: err });
    throw err;
  } finally {
    apiserver.stop();
    await heap.stop();
    await b.stop(child);
  }
}

/**
 * The heap after a full GC of a bridge serving /metrics on `port`, once its work queues are empty:
 * the first list queues a delivery of every primary (at low priority), and a heap read while they
 * wait counts them as kept.
 */
async function drainedHeap(child: Child, port: number): Promise<number> {
  const url = `http://127.0.0.1:${port}/metrics`;
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`waiting for the bridge's work queues to drain: not empty in ${startTimeoutMs / 60_000} minutes; see ${child.logFile}`);
    const text = await fetch(url, { signal: AbortSignal.timeout(2000) }).then((r) => r.text(), () => undefined);
    if (text !== undefined && sumMetric(text, (l) => l.startsWith('workqueue_depth{')) === 0) break;
    await until('the bridge to answer /metrics', child, () => true);
    await sleep(500);
  }
  return heapAfterGc(child.logFile);
}

/** When a bridge serving /readyz on `port` is ready (every watch listed): wall-clock ms. */
async function listed(child: Child, port: number): Promise<number> {
  const url = `http://127.0.0.1:${port}/readyz`;
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`waiting for the bridge's lists (/readyz): not ready in ${startTimeoutMs / 60_000} minutes; see ${child.logFile}`);
    const ok = await fetch(url, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false);
    if (ok) return Date.now();
    await until('the bridge to answer /readyz', child, () => true);
    await sleep(200);
  }
}

/** Polls `look` every 100 ms until it answers; throws if `child` ends first or the start timeout passes. */
export async function until<T>(what: string, child: Child, look: () => T | undefined): Promise<T> {
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
export interface Sink {
  url: string;
  /** Wall-clock ms of the first POST to each path since reset(). */
  first: Map<string, number>;
  /** Since watchFor(): the first delivery it selects (wall-clock ms), and the keys (ce-subject) of those delivered, each with its last delivery's time. */
  taken: { first?: number; subjects: Map<string, number> };
  /** Notes, from now, the deliveries to `path` of the keys `select` takes. */
  watchFor(path: string, select: (subject: string) => boolean): void;
  reset(): void;
  close(): void;
}

export async function startSink(now: () => number): Promise<Sink> {
  const first = new Map<string, number>();
  let watched: { path: string; select: (subject: string) => boolean } | undefined;
  let taken: Sink['taken'] = { subjects: new Map() };
  const server = createServer((req, res) => {
    if (req.method === 'POST' && !first.has(req.url!)) first.set(req.url!, now());
    const subject = req.headers['ce-subject'];
    if (watched && req.url === watched.path && typeof subject === 'string' && watched.select(subject)) {
      taken.first ??= now();
      taken.subjects.set(subject, now());
    }
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    first,
    get taken() {
      return taken;
    },
    watchFor: (path, select) => {
      watched = { path, select };
      taken = { subjects: new Map() };
    },
    reset: () => {
      first.clear();
      watched = undefined;
      taken = { subjects: new Map() };
    },
    close: () => server.close(),
  };
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
const apiserverPid = (paths: ClusterPaths) => componentPid(paths, 'kube-apiserver');

/** The pid of one of the local cluster's components (kube-apiserver, etcd, …): as its state records it, else found in /proc. */
export function componentPid(paths: ClusterPaths, name: string): number {
  const recorded = readState(paths)?.processes.find((p) => p.name === name);
  if (recorded && isRunning(recorded)) return recorded.pid;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (basename(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!) === name) return Number(pid);
    } catch {
      // Gone since the listing.
    }
  }
  throw new Error(`no ${name} process: none running as ${paths.state} records it, none in /proc`);
}

/** The line comparing kfn's bridge listing by streaming lists (its default) and by pages at one size. */
function kfnListsLine(webs: number, stream: StartFigures, pages: StartFigures): string {
  const one = (c: StartFigures) => `first delivery ${c.readyS.toFixed(1)} s, listed ${c.listedS?.toFixed(1) ?? '?'} s, apiserver heap +${c.apiserverHeapRiseMiB?.toFixed(0) ?? '?'} MiB, ${c.listRequests ?? '?'} LIST requests, bridge ${c.rssMiB.toFixed(0)} MiB`;
  return `  kfn's lists at ${webs}: streaming (default) ${one(stream)}; by pages (--lists pages) ${one(pages)}`;
}

/** P8's lines of the bench:compare table. */
export function scaleTable(r: ScaleResult): string[] {
  if (!r.sizes.length && !r.sharded?.length && !r.leaderTakeover && !r.warmTakeover && !r.error) return [];
  const lines: string[] = [];
  const f = (n: number, digits = 0) => n.toFixed(digits);
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  lines.push('', 'P8 at cluster scale: K MyWebs and a ConfigMap each (2K objects watched), each contender started fresh (MiB; seconds from spawn; kfn listed: every watch listed, its memory read after; apiserver: its peak RSS until the contender settled)');
  if (r.sizes.length) lines.push('  K          kfn RSS  heap KiB/obj  1st delivery s  listed s  apiserver    c-r RSS  synced s  apiserver    c-r metadata RSS  synced s  apiserver    kfn/c-r  kfn/c-r metadata');
  for (const s of r.sizes) {
    const start = (c: StartFigures, width: number) => `${f(c.rssMiB).padStart(width)}  ${f(c.readyS, 1).padStart(8)}  ${f(c.apiserverPeakMiB).padStart(9)}`;
    lines.push(`  ${String(s.webs).padEnd(9)} ${f(s.kfn.rssMiB).padStart(8)}  ${f(kibPerObject(s.kfn.heapMiB, s.objects), 2).padStart(12)}  ${f(s.kfn.readyS, 1).padStart(14)}  ${(s.kfn.listedS === undefined ? '–' : f(s.kfn.listedS, 1)).padStart(8)}  ${f(s.kfn.apiserverPeakMiB).padStart(9)}   ${start(s.crDefault, 8)}   ${start(s.crMetadata, 17)}   ${x(s.kfn.rssMiB, s.crDefault.rssMiB).padStart(7)}  ${x(s.kfn.rssMiB, s.crMetadata.rssMiB).padStart(16)}`);
  }
  if (r.sizes.length > 1) {
    const [a, b] = [r.sizes[0]!, r.sizes.at(-1)!];
    const slope = (of: (s: ScaleSize) => number) => f(kibPerObject(of(b) - of(a), b.objects - a.objects), 2);
    lines.push(`  per additional object watched (KiB), ${a.webs}→${b.webs}: kfn RSS ${slope((s) => s.kfn.rssMiB)} (heap ${slope((s) => s.kfn.heapMiB)}), c-r ${slope((s) => s.crDefault.rssMiB)}, c-r metadata-only ${slope((s) => s.crMetadata.rssMiB)}; apiserver peak with kfn ${slope((s) => s.kfn.apiserverPeakMiB)}, c-r ${slope((s) => s.crDefault.apiserverPeakMiB)}, c-r metadata-only ${slope((s) => s.crMetadata.apiserverPeakMiB)}`);
  }
  for (const s of r.sizes) if (s.kfnPages) lines.push(kfnListsLine(s.webs, s.kfn, s.kfnPages));
  for (const s of r.sizes) if (s.lists?.length) lines.push(listModesLine(s.webs, s.lists));
  const replica = (rss: number, heap: number, objects: number) => `${f(rss)} MiB (heap ${f(kibPerObject(heap, objects), 2)} KiB/object)`;
  const takeover = (t: TakeoverFigures) => `first of its keys delivered after ${f(t.firstS, 1)} s, all ${t.keys} after ${f(t.allS, 1)} s${t.lists !== undefined ? `, ${t.lists} list requests` : ''}${t.changed ? ` (${t.changed} changed in the gap, ${t.lost} of them not delivered after)` : ''}`;
  for (const run of r.sharded ?? []) {
    const one = r.sizes.find((s) => s.webs === run.webs)?.kfn;
    const mean = run.replicas.reduce((a, p) => a + p.rssMiB, 0) / run.replicas.length;
    lines.push(`  --shards ${run.shards} at ${run.webs} (each replica keeps its shard's records): ${one ? `one replica alone ${replica(one.rssMiB, one.heapMiB, run.objects)}; ` : ''}${run.replicas.map((p, i) => `replica ${i} ${replica(p.rssMiB, p.heapMiB, run.objects)}`).join(', ')}${one ? `; mean ${x(mean, one.rssMiB)} one replica's` : ''}`);
    if (run.takeover) lines.push(`    replica 1 killed: replica 0 takes its shard over, ${takeover(run.takeover)}; replica 0 then ${f(run.takeover.rssAfterMiB)} MiB`);
  }
  const standby = (t: TakeoverFigures) => (t.standbyRssMiB !== undefined ? `${f(t.standbyRssMiB)} MiB while standing by, ` : '');
  if (r.leaderTakeover) lines.push(`  leader killed at ${r.leaderTakeover.webs} (its standby lists on taking the Lease): the standby's ${takeover(r.leaderTakeover)}; the standby ${standby(r.leaderTakeover)}${f(r.leaderTakeover.rssAfterMiB)} MiB after`);
  if (r.warmTakeover) lines.push(`  leader killed at ${r.warmTakeover.webs}, a warm standby (--warm-standby: it listed at its start): its ${takeover(r.warmTakeover)}; ${standby(r.warmTakeover)}${f(r.warmTakeover.rssAfterMiB)} MiB after`);
  if (r.error) lines.push(`  P8 stopped: ${r.error}`);
  return lines;
}
