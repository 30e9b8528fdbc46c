// P8's throughput by shards: W MyWebs (--scale-changes), each reconciled by MyWeb's page alone
// (test/bench/page-function: the page ConfigMap and Ready; the controller-runtime peer's
// --page-only does the same, so that no NodePort caps W at the port range and no pod measures
// the kube-controller-manager instead), converged by each contender in turn:
//
//   controller-runtime   the peer with --max-concurrent-reconciles 8; it has one leader and cannot shard
//   kfn ×N               N bridge replicas, leader-elected, with --shards N (N > 1), each
//                        delivering to a function process of its own (as Knative gives a function
//                        more pods under load), maxConcurrentReconciles 8 each
//
// and for each, two rounds:
//
//   start     every MyWeb's page changed while nothing runs, then the contender started:
//             spawn → all converged;
//   changed   once the contender is quiet again, every MyWeb's page changed (16 writers) while it
//             runs: first write → all converged.
//
// Converged: the MyWeb's Ready condition is True for its generation, and that generation has the
// round's page. `writes s` is the changed round's writes alone (the fastest it can end). Each
// process's CPU over the changed round (the apiserver, etcd, the controller-manager, the
// contender's bridges or operator, its functions) says what bounds it on this machine. The
// scaling efficiency of N shards is time at 1 / (N × time at N).
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { applyFunction, loadFunction, startFunction } from '../../cli/functions.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { inParallel, processCpuMs } from './common.ts';
import { freePort } from '../support/bridge.ts';
import { serveReconcilerNamed } from '../support/functions.ts';
import { componentPid, grow, reconcilerName, type ScaleBench } from './scale.ts';

export interface ThroughputRound {
  contender: string;
  /** Bridge replicas (1 for controller-runtime). */
  shards: number;
  /** Spawn → all converged, every MyWeb changed before the start. */
  startS: number;
  /** First write → all converged, every MyWeb changed while it runs. */
  changedS: number;
  /** The changed round's writes alone. */
  writesS: number;
  /** CPU seconds over the changed round, by process (apiserver, etcd, controller-manager, contender, functions). */
  cpuS: Record<string, number>;
}

/** A contender's processes, and when the first of them that the start round times was spawned (wall-clock ms). */
interface Started {
  spawned: number;
  contender: ChildProcess[];
  functions: ChildProcess[];
}

export interface ThroughputResult {
  webs: number;
  rounds: ThroughputRound[];
  error?: string;
}

const pageFunction = join(import.meta.dirname, 'page-function');
/** In flight per bridge replica, and the peer's workers. */
const concurrency = 8;
/** A round that has not converged in this long is stuck. */
const roundTimeoutMs = 20 * 60_000;

/** Converges `webs` MyWebs with controller-runtime and kfn at 1, 2 and 4 shards into `into`; the namespace and every process go, however it ends. */
export async function throughputByShards(b: ScaleBench, webs: number, into: ThroughputResult, shardCounts = [1, 2, 4]): Promise<void> {
  const ns = await b.createNamespace('kfn-compare-throughput');
  try {
    await grow(b, ns, 0, webs);
    const kfn = await kfnSetup(b, ns);
    let round = 0;
    const contenders: { name: string; shards: number; start: () => Promise<Started> }[] = [
      ...shardCounts.map((n) => ({ name: `kfn ×${n}`, shards: n, start: () => kfn.start(n) })),
      { name: 'controller-runtime', shards: 1, start: async () => ({ spawned: b.now(), contender: [b.startProcess('throughput-cr', b.operator, ['--kubeconfig', b.kubeconfig, '--namespace', ns, '--page-only', '--max-concurrent-reconciles', String(concurrency), '--zap-log-level', 'error'])], functions: [] }) },
    ];
    for (const c of contenders) {
      const page = (phase: string) => `<h1>${c.name}, ${phase} ${++round}</h1>`;
      // Start: every page changed first, with nothing running.
      const before = page('start');
      await changeAll(b, ns, webs, before);
      const watches: { close(): void }[] = [];
      const started: Started = { spawned: 0, contender: [], functions: [] };
      try {
        const startWatch = converged(b, ns, webs, before, `${c.name} start`);
        watches.push(startWatch);
        Object.assign(started, await c.start());
        const startS = ((await startWatch.done) - started.spawned) / 1000;
        b.log(`P8 throughput, ${c.name}: ${webs} MyWebs changed before its start converged ${startS.toFixed(1)} s after it was spawned`);
        // What the start round left (deliveries of its own writes' events, requeues) is done before the next.
        await quiet(b, [...started.contender, ...started.functions]);
        // Changed: every page changed while it runs.
        const after = page('changed');
        const changeWatch = converged(b, ns, webs, after, `${c.name} changed`);
        watches.push(changeWatch);
        await changeWatch.listed;
        const pids: Record<string, number[]> = {
          apiserver: [componentPid(b.clusterPaths, 'kube-apiserver')],
          etcd: [componentPid(b.clusterPaths, 'etcd')],
          'controller-manager': [componentPid(b.clusterPaths, 'kube-controller-manager')],
          [c.name.startsWith('kfn') ? 'bridges' : 'operator']: started.contender.map((p) => p.pid!),
          ...(started.functions.length ? { functions: started.functions.map((p) => p.pid!) } : {}),
        };
        const cpu = () => Object.fromEntries(Object.entries(pids).map(([k, ps]) => [k, ps.reduce((sum, pid) => sum + processCpuMs(pid), 0)]));
        const cpuBefore = cpu();
        const first = b.now();
        await changeAll(b, ns, webs, after);
        const writesS = (b.now() - first) / 1000;
        const changedS = ((await changeWatch.done) - first) / 1000;
        const cpuAfter = cpu();
        const cpuS = Object.fromEntries(Object.keys(cpuAfter).map((k) => [k, (cpuAfter[k]! - cpuBefore[k]!) / 1000]));
        const r: ThroughputRound = { contender: c.name, shards: c.shards, startS, changedS, writesS, cpuS };
        into.rounds.push(r);
        b.log(`P8 throughput, ${c.name}: ${webs} MyWebs changed while it ran converged in ${changedS.toFixed(1)} s (the writes alone ${writesS.toFixed(1)} s); ${cpuLine(r)}`);
      } finally {
        for (const w of watches) w.close();
        for (const p of [...started.contender, ...started.functions]) await b.stop(p);
      }
    }
  } finally {
    await b.deleteNamespace(ns).catch((err: Error) => b.log(`P8 throughput: ${err.message}; it goes on being deleted in the background`));
  }
}

/** The page function's identity, RBAC and secret in `ns`; start(n) runs n function processes and n bridge replicas with --shards n. */
async function kfnSetup(b: ScaleBench, ns: string) {
  const reconciler = await loadFunction(pageFunction);
  const objects = functionManifests(reconciler, { namespace: ns, sinkUri: 'http://127.0.0.1:9/', namespaces: [ns] });
  await applyFunction(b.api, reconciler.name, objects.filter((o) => o.kind !== 'Reconciler'), ns);
  await serveReconcilerNamed(b.api, ns, reconciler.name, reconcilerName);
  const template = objects.find((o) => o.kind === 'Reconciler') as { spec: Record<string, unknown> };
  return {
    /** n function processes, then (the clock starts) n bridge replicas, replica i delivering to function i. */
    async start(n: number): Promise<Started> {
      const started: Started = { spawned: 0, contender: [], functions: [] };
      try {
        const configs: string[] = [];
        for (let i = 0; i < n; i++) {
          const workDir = join(b.dir, `throughput-${n}-${i}`);
          mkdirSync(workDir, { recursive: true });
          const fn = await startFunction({ dir: pageFunction, name: reconciler.name, port: await freePort(), adminKubeconfig: b.kubeconfig, namespace: ns, workDir });
          started.functions.push(fn.process);
          configs.push(join(workDir, 'bridge.yaml'));
          writeFileSync(configs[i]!, stringify({ ...template, metadata: { name: reconcilerName }, spec: { ...template.spec, sink: { uri: fn.url }, maxConcurrentReconciles: concurrency } }));
        }
        const ports = await Promise.all(configs.map(() => freePort()));
        started.spawned = b.now();
        for (const [i, config] of configs.entries()) {
          // Elected, as the chart runs one replica; N > 1: a shard each.
          const sharding = ['--leader-elect', `--lease-namespace=${ns}`, `--lease-name=throughput-${n}`, ...(n > 1 ? [`--shards=${n}`, `--shard=${i}`] : [])];
          const args = [...b.bridgeNodeOptions.split(' ').filter(Boolean), b.bundle, 'bridge', `--kubeconfig=${b.kubeconfig}`, `--config=${config}`, '--log-level=error', `--metrics-addr=127.0.0.1:${ports[i]}`, ...sharding];
          started.contender.push(b.startProcess(`throughput-bridge-${n}-${i}`, process.execPath, args));
        }
      } catch (err) {
        for (const p of [...started.contender, ...started.functions]) await b.stop(p);
        throw err;
      }
      return started;
    },
  };
}

/** Waits (at most a minute) until `processes` used under 1.5 % of a core each (at least 5 % together) over a second. */
async function quiet(b: ScaleBench, processes: ChildProcess[]): Promise<void> {
  const cpu = () => processes.reduce((sum, p) => sum + processCpuMs(p.pid!), 0);
  for (let i = 0, last = cpu(); i < 60; i++) {
    await sleep(1000);
    const now = cpu();
    if (now - last < Math.max(50, 15 * processes.length)) return;
    last = now;
  }
  b.log('P8 throughput: the contender was still busy a minute after converging; going on');
}

/** Sets every MyWeb's page to `page`, 16 writes at a time. */
async function changeAll(b: ScaleBench, ns: string, webs: number, page: string): Promise<void> {
  await inParallel(webs, 16, (i) => b.api.request('PATCH', `${b.webs(ns)}/w${i}`, { body: { spec: { pageContentHtml: page } }, contentType: 'application/merge-patch+json' }));
}

interface Web {
  metadata: { name: string; generation?: number };
  spec?: { pageContentHtml?: string };
  status?: { conditions?: { type: string; status: string; observedGeneration?: number }[] };
}

/**
 * Watches the MyWebs in `ns`: `done` resolves with the time (wall-clock ms) at which all `n`
 * were converged on `page`, `listed` once the watch has seen every MyWeb once. Progress every
 * 30 s; stuck after roundTimeoutMs.
 */
function converged(b: ScaleBench, ns: string, n: number, page: string, what: string) {
  const abort = new AbortController();
  const ok = new Set<string>();
  const seen = new Set<string>();
  let markListed: () => void = () => undefined;
  const listed = new Promise<void>((resolve) => (markListed = resolve));
  const progress = setInterval(() => b.log(`P8 throughput, ${what}: ${ok.size} of ${n} converged`), 30_000);
  const done = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`P8 throughput, ${what}: ${ok.size} of ${n} MyWebs converged after ${roundTimeoutMs / 60_000} minutes`)), roundTimeoutMs);
    abort.signal.addEventListener('abort', () => clearTimeout(timer));
    b.api
      .stream(`${b.webs(ns)}?watch=1&allowWatchBookmarks=false`, { signal: abort.signal }, (line) => {
        const web = (line as { object: Web }).object;
        const name = web.metadata?.name;
        if (!name) return; // an ERROR event's Status
        const ready = web.status?.conditions?.find((c) => c.type === 'Ready');
        if (web.spec?.pageContentHtml === page && ready?.status === 'True' && ready.observedGeneration === web.metadata.generation) ok.add(name);
        else ok.delete(name);
        if (seen.size < n && seen.add(name).size === n) markListed();
        if (ok.size === n) {
          clearTimeout(timer);
          resolve(b.now());
        }
      })
      .then(
        () => abort.signal.aborted || reject(new Error(`P8 throughput, ${what}: the MyWebs' watch ended with ${ok.size} of ${n} converged`)),
        (err: Error) => abort.signal.aborted || reject(err),
      );
  }).finally(() => clearInterval(progress));
  // A round that fails elsewhere ends the watch; its rejection is then nobody's.
  done.catch(() => undefined);
  return {
    done,
    listed,
    close: () => {
      abort.abort();
      clearInterval(progress);
    },
  };
}

function cpuLine(r: ThroughputRound): string {
  return `CPU over it: ${Object.entries(r.cpuS).map(([k, s]) => `${k} ${(s / r.changedS).toFixed(2)}`).join(', ')} cores`;
}

/** The table's lines: each contender's two rounds, the scaling efficiency of N shards beside 1, and the CPU by process. */
export function throughputTable(r: ThroughputResult): string[] {
  const lines = [`P8 throughput by shards: ${r.webs} MyWebs changed at once (page ConfigMap + status each), converged`];
  lines.push('  contender              start s   changed s   writes s   efficiency (start / changed)');
  const one = r.rounds.find((x) => x.contender === 'kfn ×1');
  const cr = r.rounds.find((x) => x.contender === 'controller-runtime');
  for (const x of r.rounds) {
    const eff = one && x.contender.startsWith('kfn') ? `${(one.startS / (x.shards * x.startS)).toFixed(2)} / ${(one.changedS / (x.shards * x.changedS)).toFixed(2)}` : '–';
    lines.push(`  ${x.contender.padEnd(20)} ${x.startS.toFixed(1).padStart(8)} ${x.changedS.toFixed(1).padStart(11)} ${x.writesS.toFixed(1).padStart(10)}   ${eff}`);
  }
  if (cr) for (const x of r.rounds.filter((y) => y.contender.startsWith('kfn'))) lines.push(`  ${x.contender} / controller-runtime: start ${(x.startS / cr.startS).toFixed(2)}×, changed ${(x.changedS / cr.changedS).toFixed(2)}×`);
  lines.push('  cores used over the changed round, by process (of the machine\'s):');
  for (const x of r.rounds) lines.push(`    ${x.contender.padEnd(20)} ${cpuLine(x).replace(/^CPU over it: /, '')}`);
  if (r.error) lines.push(`  stopped: ${r.error}`);
  return lines;
}
