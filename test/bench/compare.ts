// npm run bench:compare — kfn beside its peers and the API's own floors, in one run on the real
// local cluster (with its fake nodes: the MyWebs' pods go there, no container starts):
//
//   P1 convergence  N MyWebs bulk-created → all Ready: kfn (bridge + function process) vs the
//                   controller-runtime MyWeb operator vs the floor (a bare client doing only the
//                   writes); apiserver writes and reads per MyWeb, from the apiserver's metrics.
//   P2 latency      write → arrival at 1,000 objects changing at several rates: kfn's bridge vs
//                   Knative's ApiServerSource adapter vs a bare watch, all three on the same writes.
//   P3 idle         apiserver requests by each contender over one resync period of N idle MyWebs.
//   P5 cold start   process start → first reconcile answered: kfn's function (its deployment
//                   bundle) vs a bare Hono server (bundled the same way) vs the Go operator's
//                   start → first reconcile; and on Lambda (aws-lambda-ric, a new environment →
//                   first invocation answered), kfn's package vs a bare handler and bare Hono;
//                   and on Knative (p5k, after P7: scale from zero → first answer through the
//                   ingress), kfn's function vs a bare Hono app in the same Knative Service.
//   P6 relists      K watched objects: deliveries after an apiserver restart, and after changes
//                   made while kfn's bridge and the adapter were frozen, then 410 Gone.
//   P4 memory       resident memory of kfn's bridge, the controller-runtime operator and the
//                   adapter, each started fresh on a namespace of K MyWebs, for each K.
//   reconcile cost  during P1: kfn's delivery → answer against controller-runtime's Reconcile.
//   cpu             ×1 convergences measured by process CPU: controller-runtime's operator, kfn's
//                   bridge and function (the function without and with V8 flags), each side's
//                   CPU per reconcile and resident set after; then one more kfn ×1 convergence
//                   with the bridge and the function profiled: where the CPU goes; and the hop
//                   between them over HTTP/1.1 against h2c (test/bench/transport.ts).
//   P7 fleet        twelve operators at rest, from the kubelet's figures: twelve controller-runtime
//                   operators, one manager of twelve controllers, kfn's twelve examples as
//                   Deployments, as a shared host and on Knative (test/bench/fleet.ts).
//   P8 scale        (long: only with --only p8) K MyWebs with a ConfigMap each, at several K: kfn's
//                   contract-1 bridge vs the controller-runtime operator's default and
//                   metadata-only caches, memory, start and the apiserver's peak; at the largest
//                   K, --shards 2 and 4 (memory per replica), a shard's and a leader's take-over
//                   (test/bench/scale.ts); first, a thousand namespaces beside ApiServerSource
//                   (scale-namespaces.ts) and W MyWebs changed at once, converged by
//                   controller-runtime and by kfn with 1, 2 and 4 shards (scale-throughput.ts).
//
// Each contender runs alone in P1/P3 (in its own namespace, stopped and cleaned up before the
// next); P2 runs the three watchers together on one stream of writes, so each pays for the
// others' CPU alike. Figures move between runs on a shared machine: read the ratios.
//
//   npm run bench:compare -- [--objects 1000] [--concurrency 1,4] [--rates 50,200,max] [--changes 1000]
//                            [--memory 1000,10000] [--only p1,p2,p3,p4,p5,p6,cpu,p7,p5k,p8] [--out DIR]
//                            [--relist-objects 10000] [--bridge-node-options="…"]
//                            [--fleet-settle 120] [--fleet-idle 180] [--fleet-sides operators,manager,deployment,host,knative]
//                            [--cold-starts 11] [--knative-cold-starts 5] [--scale-objects 10000,40000,100000]
//                            [--scale-namespaces 1000] [--scale-changes 10000] [--scale-steps sizes,shards,cold,warm]
//                            (--scale-objects none: P8 without its sizes; 0 skips the others;
//                            --scale-steps: what P8 measures at its sizes, the MyWebs made whatever it says)
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, cpSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { bridgeNodeOptionsAt } from '../../bridge/main.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { applyYaml, kubeApi, restartApiserver, testCluster, uniqueName } from '../support/cluster.ts';
import { compactEtcd } from '../../cluster/etcd.ts';
import { functionStack, journalLines, type FunctionStack } from '../support/functions.ts';
import myWebFunction, { MyWeb } from '../../functions/myweb/index.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { childLabels, ownerUidLabel } from '../../core/names.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import { applyObject, collectionPath, type KubeObject } from '../../kube/api.ts';
import { ensurePeers } from './peers/peers.ts';
import { compareChart } from './chart.ts';
import { transportCost, transportLines, type TransportRound } from './transport.ts';
import { functionNodeFlags } from '../../cli/artifacts/oci-image.ts';
import { bridgeMemoryLimitMiB, heapAfterGc, processCpuMs, histogramOf, inspector, histogramQuantile, inParallel, parseHistogram, percentile, profilePlaces, rssMiB, untilServed, type CpuProfile, type Histogram } from './common.ts';
import { bundleFunction } from '../../cli/artifacts/bundle.ts';
import { encodeReconcileEvent, projectObject, type ObservedKind, type ObservedObject, type ObservedState } from '../../core/event.ts';
import type { ReconcileResponse } from '../../core/response.ts';
import { objectId, type ObjectRef } from '../../core/objects.ts';
import { sendReconcileEvent } from '../../bridge/delivery.ts';
import { reconcilerLimits } from '../../core/reconciler-spec.ts';
import { resolveKubeconfig } from '../../kube/kubeconfig.ts';
import { atClusterScale, parseScaleSizes, scaleSteps, scaleTable, startSink, type ScaleResult, type ScaleStep } from './scale.ts';
import { atManyNamespaces, namespacesTable, type NamespacesResult } from './scale-namespaces.ts';
import { throughputByShards, throughputTable, type ThroughputResult } from './scale-throughput.ts';
import { beyond, describeCounts, fleetAtRest, fleetCleanup, fleetSideNames, quietSeconds, type FleetSide, type FleetSideName } from './fleet.ts';
import { buildLambdaPackage } from '../../cli/build.ts';
import { installOnLocalCluster } from '../../cli/knative.ts';
import { installBridge, bridgeNamespace } from '../../cli/incluster.ts';
import { deployFunctions } from '../../cli/deploy.ts';
import { undeployFunction } from '../../cli/undeploy.ts';
import { ensureBinaries } from '../../cluster/build.ts';
import { buildImage, importImages, nodeRecipe } from '../../cluster/images.ts';
import { nodePaths } from '../../cluster/node.ts';
import { ingressNamespace } from '../../cluster/traefik.ts';
import { clusterPaths } from '../../cluster/paths.ts';
import { waitFor } from '../../core/clock.ts';
import { request as undiciRequest } from 'undici';
import { startLambda, unzipPackage, type LocalLambda } from '../support/lambda.ts';

const { values } = parseArgs({
  options: {
    objects: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '1,4' },
    rates: { type: 'string', default: '50,200,max' },
    changes: { type: 'string', default: '1000' },
    memory: { type: 'string', default: '1000,10000,20000,40000' },
    'snapshot-objects': { type: 'string', default: '10000' },
    only: { type: 'string', default: 'p1,p2,p3,p4,p5,p6,cpu,p7,p5k' },
    'fleet-settle': { type: 'string', default: '120' },
    'fleet-idle': { type: 'string', default: '180' },
    'fleet-sides': { type: 'string', default: fleetSideNames.join(',') },
    'relist-objects': { type: 'string', default: '10000' },
    'cold-starts': { type: 'string', default: '11' },
    // Each waits for both Knative Services to be back at zero (about 40 s).
    'knative-cold-starts': { type: 'string', default: '5' },
    // P8's MyWeb counts (each with a ConfigMap), in rising order.
    'scale-objects': { type: 'string', default: '10000,40000,100000' },
    // P8's namespaces case: this many namespaces with a MyWeb each (0: none).
    'scale-namespaces': { type: 'string', default: '1000' },
    // P8's throughput by shards: this many MyWebs changed at once (0: none).
    'scale-changes': { type: 'string', default: '10000' },
    // What P8 measures at its sizes: each size's contenders, the shards, the cold and the warm standby.
    'scale-steps': { type: 'string', default: scaleSteps.join(',') },
    out: { type: 'string', default: join(repoRoot, '.kfn', 'bench') },
    // The V8 flags the bridge runs with (default: those of the shipped Deployment).
    'bridge-node-options': { type: 'string', default: bridgeNodeOptionsAt(bridgeMemoryLimitMiB()) },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  // The comment at the top of this file: the parts and the options.
  const source = readFileSync(import.meta.filename, 'utf8').split('\n');
  console.log(source.slice(0, source.findIndex((l) => !l.startsWith('//'))).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}
const objects = Number(values.objects);
const changes = Number(values.changes);
const only = new Set(values.only.split(','));
const fleetSides = values['fleet-sides'].split(',').filter(Boolean) as FleetSideName[];
for (const side of fleetSides) if (!(fleetSideNames as readonly string[]).includes(side)) throw new Error(`--fleet-sides: no side "${side}" (the sides: ${fleetSideNames.join(', ')})`);
if (only.has('p3')) only.add('p1'); // P3 is measured on P1's converged MyWebs
const scaleSizes = parseScaleSizes(values['scale-objects']);
const scaleStepsWanted = new Set(values['scale-steps'].split(',').filter(Boolean) as ScaleStep[]);
for (const step of scaleStepsWanted) if (!(scaleSteps as readonly string[]).includes(step)) throw new Error(`--scale-steps: no step "${step}" (the steps: ${scaleSteps.join(', ')})`);
const scaleChanges = Number(values['scale-changes']);
if (!Number.isInteger(scaleChanges) || scaleChanges < 0) throw new Error(`--scale-changes takes a whole number of MyWebs (0: none), not "${values['scale-changes']}"`);
const log = (line: string) => console.error(`  ${line}`);
const now = () => performance.timeOrigin + performance.now(); // wall-clock ms, comparable with the peers' unix ns

const build = spawnSync('npm', ['run', '--silent', 'build'], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
if (build.status !== 0) throw new Error('npm run build failed (the bridge bundle a deployment runs)');
const bundle = join(repoRoot, 'dist', 'kfn.mjs');
const peers = await ensurePeers({ log });
const cluster = await testCluster();
if (cluster.state.fakeNodes < 1) throw new Error('bench:compare needs the local cluster with fake nodes (the MyWebs\' pods go there): stop the running one (npm run kfn -- cluster down) and run again');
const api = kubeApi(cluster.kc);
const dir = mkdtempSync(join(tmpdir(), 'kfn-compare-'));
const kubeconfig = cluster.paths.kubeconfig;
// The MyWeb CRD, as kfn's manifests write it (every contender uses it).
await applyObject(api, crdOf(MyWeb) as never, 'kfn-bench');
await untilServed(api, 'operator.k8s-summit.org/v1', 'MyWeb');
const results: Record<string, unknown> = { date: new Date().toISOString(), objects, peers: peers.versions, machine: machine() };
const stamp = (results.date as string).replace(/[:.]/g, '-');
const cleanups: (() => unknown)[] = [];

function machine() {
  const cpu = readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m)?.[1] ?? 'unknown CPU';
  const cores = readFileSync('/proc/cpuinfo', 'utf8').match(/^processor\s*:/gm)?.length ?? 0;
  const mem = Number(readFileSync('/proc/meminfo', 'utf8').match(/^MemTotal:\s+(\d+)/m)?.[1] ?? 0) / 1048576;
  return `${cores} × ${cpu}, ${mem.toFixed(0)} GiB, Node ${process.version}`;
}

function startProcess(name: string, command: string, args: string[], env: Record<string, string> = {}): ChildProcess & { logFile: string } {
  const logFile = join(dir, `${name}.log`);
  const fd = openSync(logFile, 'a');
  const child = spawn(command, args, { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  cleanups.push(() => child.kill('SIGKILL'));
  return Object.assign(child, { logFile });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await Promise.race([exited, sleep(5000).then(() => child.kill('SIGKILL'))]);
}

/** The apiserver's request counters for the resources a MyWeb controller touches. */
async function apiserverCounts(): Promise<{ writes: number; reads: number }> {
  const text = await api.text('GET', '/metrics');
  let writes = 0;
  let reads = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    const resource = labels.resource ?? '';
    if (!['configmaps', 'deployments', 'services', 'mywebs'].includes(resource)) continue;
    // The Deployment's status is the deployment controller's, not the contender's.
    if (resource === 'deployments' && labels.subresource === 'status') continue;
    const n = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (['POST', 'PUT', 'PATCH', 'APPLY', 'DELETE'].includes(labels.verb ?? '')) writes += n;
    else reads += n;
  }
  return { writes, reads };
}

async function createNamespace(prefix: string): Promise<string> {
  const ns = uniqueName(prefix);
  await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } });
  return ns;
}

async function deleteNamespace(ns: string): Promise<void> {
  await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  const deadline = Date.now() + 300_000;
  while (Date.now() < deadline) {
    try {
      await api.request('GET', `/api/v1/namespaces/${ns}`);
    } catch {
      return;
    }
    await sleep(1000);
  }
  throw new Error(`namespace ${ns} was not deleted within 5 minutes`);
}

const webs = (ns: string) => `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`;
const web = (name: string, port: number) => ({ apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: port, pageContentHtml: `<h1>${name}</h1>` } });

/** Watches the namespace's MyWebs and resolves with the time the last of `n` became Ready. */
function allReady(ns: string, n: number, signal: AbortSignal): Promise<number> {
  const ready = new Set<string>();
  return new Promise((resolve, reject) => {
    api.stream(`${webs(ns)}?watch=1&allowWatchBookmarks=false`, { signal }, (line) => {
      const obj = (line as { object: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } } }).object;
      if (obj.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) ready.add(obj.metadata.name);
      if (ready.size === n) resolve(now());
    }).catch((err: Error) => (signal.aborted ? undefined : reject(err)));
  });
}

// ------------------------------------------------------------------------------------------
// The MyWebs' pods go to the fake nodes: the real node is cordoned and the fake ones lose their
// taint for the run (both restored at the end).
async function podsToFakeNodes(): Promise<() => Promise<void>> {
  const nodes = await api.request<{ items: { metadata: { name: string; labels?: Record<string, string> }; spec?: { taints?: unknown[]; unschedulable?: boolean } }[] }>('GET', '/api/v1/nodes');
  const restore: (() => Promise<unknown>)[] = [];
  for (const node of nodes.items) {
    const path = `/api/v1/nodes/${node.metadata.name}`;
    const patch = (body: unknown) => api.request('PATCH', path, { body, contentType: 'application/merge-patch+json' });
    if (node.metadata.labels?.type === 'kwok') {
      await patch({ spec: { taints: null } });
      restore.push(() => patch({ spec: { taints: node.spec?.taints ?? null } }));
    } else {
      await patch({ spec: { unschedulable: true } });
      restore.push(() => patch({ spec: { unschedulable: node.spec?.unschedulable ?? null } }));
    }
  }
  return async () => {
    for (const r of restore) await r();
  };
}

interface Convergence {
  contender: string;
  concurrency: number;
  seconds: number;
  writesPerObject: number;
  readsPerObject: number;
  /**
   * Reconcile time over convergence (ms): kfn's delivery → answer from its journal,
   * controller-runtime's Reconcile from its own histogram; the p50 of each is taken through the
   * same buckets and interpolation, the mean is exact.
   */
  reconcile?: { count: number; p50Ms: number; meanMs: number };
  idle?: { seconds: number; writes: number; reads: number };
}

const reconcileFigures = (h: Histogram) => ({ count: h.count, p50Ms: histogramQuantile(h, 0.5) * 1000, meanMs: (h.sum / h.count) * 1000 });

const idleSeconds = 30;

async function convergence(contender: 'floor' | 'controller-runtime' | 'kfn', concurrency: number): Promise<Convergence> {
  const ns = await createNamespace(`kfn-compare-${contender === 'controller-runtime' ? 'cr' : contender}`);
  let child: ChildProcess | undefined;
  const after: (() => unknown)[] = [];
  const label = contender === 'floor' ? contender : concurrency ? `${contender} ×${concurrency}` : `${contender}, its defaults`;
  log(`P1 ${label}: ${objects} MyWebs in ${ns}`);
  // Ends the readiness watch and the time limit, however the round ends.
  const abort = new AbortController();
  let stack: FunctionStack | undefined;
  let metricsPort: number | undefined;
  try {
    if (contender === 'controller-runtime') {
      metricsPort = await freePort();
      child = startProcess(`cr-${ns}`, peers.operator, ['--kubeconfig', kubeconfig, '--namespace', ns, '--max-concurrent-reconciles', String(concurrency), '--metrics-bind-address', `127.0.0.1:${metricsPort}`, '--zap-log-level', 'error']);
    } else if (contender === 'kfn') {
      // kfn's function process and bridge as the tests run them, resync once per idle window.
      const t = { name: 'bench', after: (fn: () => unknown) => after.push(fn), diagnostic: () => undefined } as unknown as TestContext;
      // Concurrency 0: the Reconciler's default (deliveries in flight adapt, up to its ceiling).
      stack = await functionStack(t, cluster, 'myweb', { namespace: ns, resyncPeriodSeconds: idleSeconds, maxConcurrentReconciles: concurrency || undefined });
    } else {
      child = startProcess(`floor-${ns}`, peers.floor, ['converge', '--kubeconfig', kubeconfig, '--namespace', ns, '--count', String(objects)]);
    }
    await sleep(2000); // watches established
    const before = await apiserverCounts();
    const started = now();
    const done = allReady(ns, objects, abort.signal);
    await inParallel(objects, 16, (i) => api.request('POST', webs(ns), { body: web(`w${i}`, 30000 + i) }));
    const limit = sleep(900_000, undefined, { signal: abort.signal }).then(() => Promise.reject(new Error(`${contender}: not all ${objects} MyWebs Ready within 15 minutes`)));
    const finished = await Promise.race([done, limit]);
    const after1 = await apiserverCounts();
    const reconcileTimes = stack
      ? histogramOf(journalLines(stack.journal).map((l) => l.durationMs / 1000))
      : metricsPort
        ? parseHistogram(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text(), 'controller_runtime_reconcile_time_seconds')
        : undefined;
    abort.abort();
    // The bench's own requests are not the contender's: N creates, one watch (which the
    // apiserver counts when it ends, so it may not be in the count yet: never below 0).
    const result: Convergence = {
      contender,
      concurrency,
      seconds: (finished - started) / 1000,
      writesPerObject: (after1.writes - before.writes - objects) / objects,
      readsPerObject: Math.max(0, after1.reads - before.reads - 1) / objects,
      ...(reconcileTimes?.count ? { reconcile: reconcileFigures(reconcileTimes) } : {}),
    };
    log(`P1 ${label}: all Ready in ${result.seconds.toFixed(1)} s; ${result.writesPerObject.toFixed(2)} writes, ${result.readsPerObject.toFixed(2)} reads per MyWeb`);
    if (only.has('p3') && contender !== 'floor') {
      await sleep(5000);
      const a = await apiserverCounts();
      await sleep(idleSeconds * 1000);
      const b = await apiserverCounts();
      result.idle = { seconds: idleSeconds, writes: b.writes - a.writes, reads: b.reads - a.reads };
      log(`P3 ${label}: ${result.idle.writes} writes, ${result.idle.reads} reads in ${idleSeconds} s idle`);
    }
    return result;
  } finally {
    abort.abort();
    if (child) await stop(child);
    for (const fn of after) await fn();
    log(`P1 ${label}: cleaning up ${ns}`);
    await deleteNamespace(ns);
  }
}

// ------------------------------------------------------------------------------------------
// P5: cold start. Each contender is started fresh `coldRuns` times; the clock runs from spawn to
// the first answered reconcile (for kfn, the answer includes the reconcile's own API requests).

// Eleven each: a median of five moved by 10–20 % between runs on a shared machine.
const coldRuns = Number(values['cold-starts']);
if (!Number.isInteger(coldRuns) || coldRuns < 1) throw new Error(`--cold-starts must be a whole number of at least 1, not "${values['cold-starts']}"`);
const knativeColdRuns = Number(values['knative-cold-starts']);
if (!Number.isInteger(knativeColdRuns) || knativeColdRuns < 1) throw new Error(`--knative-cold-starts must be a whole number of at least 1, not "${values['knative-cold-starts']}"`);

/** Bundles `source` as a function image's bundle is made (cli/artifacts/bundle.ts) and returns its entry. */
async function bundleEntry(name: string, source: string, target?: string): Promise<string> {
  const work = join(dir, `bundle-${name}`);
  mkdirSync(work, { recursive: true });
  // Beside the repository's node_modules, so that packages resolve as they do for a function.
  const entry = join(repoRoot, '.kfn', 'build', `bench-${name}.ts`);
  mkdirSync(join(repoRoot, '.kfn', 'build'), { recursive: true });
  writeFileSync(entry, source);
  try {
    await bundleFunction(entry, work, target);
  } finally {
    rmSync(entry, { force: true });
  }
  return join(work, `bench-${name}.mjs`);
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Spawns `node file` and answers the ms from spawn until `attempt` first succeeds. */
async function timeToAnswer(file: string, env: Record<string, string>, attempt: (port: number) => Promise<boolean>): Promise<number> {
  const port = await freePort();
  const started = now();
  const child = startProcess(`cold-${port}`, process.execPath, [file], { ...env, PORT: String(port) });
  try {
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (await attempt(port).catch(() => false)) return now() - started;
      await sleep(2);
    }
    throw new Error(`${file} did not answer within 30 s; see ${child.logFile}`);
  } finally {
    await stop(child);
  }
}

/**
 * What the bridge would send for MyWeb `ns/name` now (contract 2, the default): the MyWeb and
 * the children it controls as the bridge's watches hold them, projected as MyWeb declares, and
 * which children are as the function last applied them (`children` of its last answer, matched
 * as the bridge matches them: same resourceVersion, or same generation).
 */
async function contract2Event(ns: string, name: string, last: ReconcileResponse | undefined): Promise<{ primary: ObjectRef; observed: ObservedState }> {
  const primary = await api.request<KubeObject>('GET', `${webs(ns)}/${name}`);
  const kinds: ObservedKind[] = [];
  const children: ObservedObject[] = [];
  const applied: Record<string, string> = {};
  for (const { kind, fields } of myWebFunction.observe ?? []) {
    const resource = await api.resource(kind.apiVersion, kind.kind);
    const list = await api.request<{ metadata: { resourceVersion: string }; items: KubeObject[] }>('GET', collectionPath(resource, ns), { query: { labelSelector: `${ownerUidLabel}=${primary.metadata.uid}` } });
    kinds.push({ apiVersion: kind.apiVersion, kind: kind.kind, resourceVersion: list.metadata.resourceVersion, fields, plural: resource.plural, namespaced: resource.namespaced });
    for (const child of list.items) {
      children.push(projectObject({ ...child, apiVersion: kind.apiVersion, kind: kind.kind } as ObservedObject, fields));
      const was = last?.children?.find((c) => c.ref.kind === kind.kind && c.ref.name === child.metadata.name);
      const written = last?.changes.find((c) => c.action === 'applied' && c.ref.kind === kind.kind && c.ref.name === child.metadata.name);
      const unchanged = was && (child.metadata.resourceVersion === was.ref.resourceVersion || (written === undefined && child.metadata.generation !== undefined && child.metadata.generation === coldGenerations.get(`${kind.kind}/${child.metadata.name}`)));
      if (unchanged) applied[objectId({ apiVersion: kind.apiVersion, kind: kind.kind, namespace: ns, name: child.metadata.name })] = was.hash;
      if (child.metadata.generation !== undefined) coldGenerations.set(`${kind.kind}/${child.metadata.name}`, child.metadata.generation);
    }
  }
  return {
    primary: { apiVersion: primary.apiVersion!, kind: primary.kind!, namespace: ns, name, uid: primary.metadata.uid, resourceVersion: primary.metadata.resourceVersion },
    observed: { primary: primary as ObservedObject, kinds, children, ...(Object.keys(applied).length ? { applied } : {}) },
  };
}
/** The generation each child had when the bench last looked (the bridge's baseline, as far as the bench can tell). */
const coldGenerations = new Map<string, number>();

/**
 * P5's delivery to kfn's function: the contract-2 event built by contract2Event, encoded and
 * signed as the bridge sends it (`host` for an ingress that routes by it). Throws unless the
 * function reconciled; returns its answer, the next event's `last`.
 */
async function deliverCold(url: string, event: Awaited<ReturnType<typeof contract2Event>>, secret: string, timeoutMs: number, host?: string): Promise<ReconcileResponse | undefined> {
  const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: event.primary, reason: 'resync', observedAt: Date.now() }, 1, 'kfn://bench', undefined, event.observed);
  if (host) message.headers.host = host;
  const r = await sendReconcileEvent({ url, message, credentials: { kind: 'hmac', secret }, timeoutMs });
  if (r.outcome.kind !== 'done' && r.outcome.kind !== 'requeue') throw new Error(`kfn's function at ${host ?? url} answered ${r.status}: ${'why' in r.outcome ? r.outcome.why : ''}`);
  return r.outcome.response;
}

async function coldStart(): Promise<{ kfn: number[]; kfnContract1: number[]; kfnListening: number[]; hono: number[]; operator: number[]; lambda?: { kfn: number[]; bare: number[]; hono: number[] }; lambdaError?: string }> {
  const ns = await createNamespace('kfn-compare-cold');
  await api.request('POST', webs(ns), { body: web('cold', 30999) });
  const secret = 'bench-cold-start';
  // The function's kubeconfig as kfn hands one over (JSON, kubeconfigText: `kfn dev`, a Lambda's
  // $KFN_KUBECONFIG; in a pod it resolves its ServiceAccount's, also without YAML), not the local
  // cluster's admin file, whose YAML no deployed function reads.
  const fnKubeconfig = join(dir, 'function.kubeconfig');
  writeFileSync(fnKubeconfig, resolveKubeconfig({ kubeconfig }).kubeconfig, { mode: 0o600 });
  const fnFile = await bundleEntry('fn', `import reconciler from ${JSON.stringify(join(repoRoot, 'functions', 'myweb', 'index.ts'))};\nimport { serve } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'node', 'index.ts'))};\nawait serve(reconciler, { hostname: '127.0.0.1' });\n`);
  const honoFile = await bundleEntry('hono', "import { Hono } from 'hono';\nimport { serve } from '@hono/node-server';\nconst app = new Hono();\napp.post('/', (c) => c.json({ result: 'done', changes: [] }));\nserve({ fetch: app.fetch, port: Number(process.env.PORT), hostname: '127.0.0.1' });\n");
  const result = { kfn: [] as number[], kfnContract1: [] as number[], kfnListening: [] as number[], hono: [] as number[], operator: [] as number[] };
  let last: ReconcileResponse | undefined;
  for (let i = 0; i < coldRuns; i++) {
    // The event the bridge sends (contract 2): built before the process starts, as the bridge
    // has it in its watches' stores.
    const event = await contract2Event(ns, 'cold', last);
    result.kfn.push(await timeToAnswer(fnFile, { KFN_AUTH_SECRET: secret, KUBECONFIG: fnKubeconfig }, async (port) => {
      last = await deliverCold(`http://127.0.0.1:${port}/`, event, secret, 10_000);
      return true;
    }));
    // A contract-1 event (a bridge of an earlier kfn): the function reads the MyWeb and lists its children.
    result.kfnContract1.push(await timeToAnswer(fnFile, { KFN_AUTH_SECRET: secret, KUBECONFIG: fnKubeconfig }, async (port) => {
      const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: ns, name: 'cold' }, reason: 'resync', observedAt: Date.now() }, 1, 'kfn://bench');
      const r = await sendReconcileEvent({ url: `http://127.0.0.1:${port}/`, message, credentials: { kind: 'hmac', secret }, timeoutMs: 10_000 });
      return r.outcome.kind === 'done' || r.outcome.kind === 'requeue';
    }));
    result.kfnListening.push(await timeToAnswer(fnFile, { KFN_AUTH_SECRET: secret, KUBECONFIG: fnKubeconfig }, async (port) => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok));
    result.hono.push(await timeToAnswer(honoFile, {}, async (port) => (await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{}' })).ok));
    const started = now();
    const op = spawn(peers.operator, ['--kubeconfig', kubeconfig, '--namespace', ns, '--zap-log-level', 'error'], { stdio: ['ignore', 'pipe', 'ignore'] });
    cleanups.push(() => op.kill('SIGKILL'));
    const first = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the operator did not reconcile within 30 s')), 30_000);
      createInterface({ input: op.stdout! }).on('line', (line) => {
        if (line.startsWith('first-reconcile ')) {
          clearTimeout(timer);
          resolve(Number(line.split(' ')[1]) / 1e6);
        }
      });
    });
    result.operator.push(first - started);
    await stop(op);
  }
  log(`P5 median: kfn function ${percentile(result.kfn, 50).toFixed(0)} ms, bare Hono ${percentile(result.hono, 50).toFixed(0)} ms, Go operator ${percentile(result.operator, 50).toFixed(0)} ms`);
  // The Lambda half may fail on its own (the runtime client is compiled on first use): the figures above stay.
  let lambda: { kfn: number[]; bare: number[]; hono: number[] } | undefined;
  let lambdaError: string | undefined;
  try {
    lambda = await lambdaColdStart(ns, fnKubeconfig, secret);
  } catch (err) {
    lambdaError = (err as Error).message;
    log(`P5 on Lambda stopped: ${lambdaError}`);
  } finally {
    await deleteNamespace(ns);
  }
  return { ...result, lambda, lambdaError };
}

/**
 * P5 on Lambda: a new execution environment each time (aws-lambda-ric under the local Lambda of
 * test/support/lambda.ts), the clock running from the request sent to its Function URL until the
 * answer: the runtime client's start, the handler module's import, the first invocation. kfn's
 * package as `kfn build` makes it, answering the contract-2 event P5 sends above, against a bare
 * handler and a bare Hono app under Hono's Lambda adapter, both bundled as kfn's is (esbuild,
 * node22, one module and its chunks).
 */
async function lambdaColdStart(ns: string, fnKubeconfig: string, secret: string): Promise<{ kfn: number[]; bare: number[]; hono: number[] }> {
  const pkg = await buildLambdaPackage(join(repoRoot, 'functions', 'myweb'), join(dir, 'lambda'));
  const kfnTask = join(dir, 'lambda', 'task');
  unzipPackage(pkg.zip, kfnTask);
  const bare = await bundleEntry('lambda-bare', "export const handler = async () => ({ statusCode: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ result: 'done', changes: [] }) });\n", 'node22');
  const hono = await bundleEntry('lambda-hono', "import { Hono } from 'hono';\nimport { handle } from 'hono/aws-lambda';\nconst app = new Hono();\napp.post('/', (c) => c.json({ result: 'done', changes: [] }));\nexport const handler = handle(app);\n", 'node22');
  const handlerOf = (file: string) => `${basename(file, '.mjs')}.handler`;
  const started = async (options: Parameters<typeof startLambda>[0]) => {
    const lambda = await startLambda(options);
    cleanups.push(() => lambda.stop());
    return lambda;
  };
  const lambdas = {
    kfn: await started({ codeDir: kfnTask, env: { KFN_AUTH_SECRET: secret, KFN_KUBECONFIG: readFileSync(fnKubeconfig, 'utf8') }, functionName: 'kfn-fn-myweb', concurrency: 1 }),
    bare: await started({ codeDir: dirname(bare), handler: handlerOf(bare), functionName: 'bare', concurrency: 1 }),
    hono: await started({ codeDir: dirname(hono), handler: handlerOf(hono), functionName: 'bare-hono', concurrency: 1 }),
  };
  const result = { kfn: [] as number[], bare: [] as number[], hono: [] as number[] };
  let last: ReconcileResponse | undefined;
  const cold = async (lambda: LocalLambda, send: () => Promise<boolean>): Promise<number> => {
    await lambda.freeze();
    const started = now();
    const answered = await send().catch((err: Error) => {
      throw new Error(`${err.message}\n${lambda.logs().slice(-2000)}`);
    });
    if (!answered) throw new Error(`the Lambda did not answer its first invocation as expected:\n${lambda.logs().slice(-2000)}`);
    return now() - started;
  };
  // The whole answer read, as sendReconcileEvent reads kfn's.
  const post = async (lambda: LocalLambda) => {
    const res = await fetch(lambda.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}', signal: AbortSignal.timeout(30_000) });
    await res.text();
    return res.ok;
  };
  for (let i = 0; i < coldRuns; i++) {
    const event = await contract2Event(ns, 'cold', last);
    result.kfn.push(await cold(lambdas.kfn, async () => {
      last = await deliverCold(lambdas.kfn.url, event, secret, 30_000);
      return true;
    }));
    result.bare.push(await cold(lambdas.bare, () => post(lambdas.bare)));
    result.hono.push(await cold(lambdas.hono, () => post(lambdas.hono)));
  }
  for (const l of Object.values(lambdas)) await l.stop();
  log(`P5 on Lambda, median: kfn ${percentile(result.kfn, 50).toFixed(0)} ms, bare handler ${percentile(result.bare, 50).toFixed(0)} ms, bare Hono ${percentile(result.hono, 50).toFixed(0)} ms`);
  return result;
}

/**
 * P5 on Knative: scale from zero → first answer, kfn's MyWeb function as `kfn deploy --target
 * knative` runs it beside a bare Hono app in a Knative Service that is kfn's with the container
 * swapped (same scaling, probes, resources, security context). Each request goes from this
 * machine to the ingress (Traefik's pod, with the Service's host name), as the bridge's does
 * from its pod; the clock runs from the request to the answer, both Services at zero before each.
 * The bridge's Reconciler is removed once deployed: only the bench's events wake the function.
 */
async function knativeColdStart(runs: number): Promise<{ kfn: number[]; hono: number[] }> {
  let ns: string | undefined;
  // Whatever happens: the function, the namespace and the in-cluster bridge go (Knative stays, as after P7).
  const teardown = async () => {
    await undeployFunction(api, 'myweb', { namespace: bridgeNamespace, log: () => undefined }).catch(() => undefined);
    if (ns) await deleteNamespace(ns).catch(() => undefined);
    await deleteNamespace(bridgeNamespace).catch(() => undefined);
  };
  cleanups.push(teardown);
  await installOnLocalCluster({ log });
  await installBridge(api, cluster.state.binDir, 'kfn-bench', log);
  ns = await createNamespace('kfn-compare-knative');
  await api.request('POST', webs(ns), { body: web('cold', 30997) });
  await deployFunctions([join(repoRoot, 'functions', 'myweb')], { api, namespace: bridgeNamespace, namespaces: [ns], target: 'knative', windowSeconds: 6, log });
  await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/myweb');
  const services = '/apis/serving.knative.dev/v1/namespaces';
  type KnativeService = { spec: { template: { metadata?: { annotations?: Record<string, string>; labels?: Record<string, string> }; spec: { containers: Record<string, unknown>[]; volumes?: unknown; serviceAccountName?: string } } }; status?: { conditions?: { type: string; status: string }[] } };
  const kfnService = await api.request<KnativeService>('GET', `${services}/${bridgeNamespace}/services/kfn-fn-myweb`);
  // Bare Hono: its bundle on kfn's Node image, in kfn's Knative Service with the container swapped.
  const hono = await bundleEntry('knative-hono', "import { Hono } from 'hono';\nimport { serve } from '@hono/node-server';\nconst app = new Hono();\napp.get('/healthz', (c) => c.text('ok'));\napp.post('/', (c) => c.json({ result: 'done', changes: [] }));\nserve({ fetch: app.fetch, port: Number(process.env.PORT ?? 8080) });\n");
  const node = nodeRecipe();
  const image = buildImage({ name: 'bench-hono', tag: 'bench', base: node, files: [[dirname(hono), '/app']], config: { ...node.config, Entrypoint: ['/usr/local/bin/node', `/app/${basename(hono)}`] } }, await ensureBinaries({ log }), log);
  importImages(nodePaths(clusterPaths().dir).containerdSocket, [image.tarball]);
  const template = structuredClone(kfnService.spec.template);
  const container: Record<string, unknown> = { ...template.spec.containers[0]!, image: image.ref };
  delete container.env;
  delete container.volumeMounts;
  delete template.spec.volumes;
  delete template.spec.serviceAccountName;
  template.spec.containers = [container];
  template.metadata = { annotations: Object.fromEntries(Object.entries(template.metadata?.annotations ?? {}).filter(([k]) => k.startsWith('autoscaling.knative.dev/'))) };
  await api.request('POST', `${services}/${ns}/services`, { body: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', metadata: { name: 'bench-hono' }, spec: { template } } });
  await waitFor('the bare Hono Knative Service to be Ready', async () => (await api.request<KnativeService>('GET', `${services}/${ns}/services/bench-hono`)).status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') || undefined, { timeoutMs: 120_000 });
  const ingress = await api.request<{ items: { status: { podIP?: string; conditions?: { type: string; status: string }[] } }[] }>('GET', `/api/v1/namespaces/${ingressNamespace}/pods`);
  const ingressIp = ingress.items.find((p) => p.status.podIP && p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))?.status.podIP;
  if (!ingressIp) throw new Error(`no ingress pod with an address in ${ingressNamespace}`);
  const url = `http://${ingressIp}:8080/`;
  const sides = [
    { host: `kfn-fn-myweb.${bridgeNamespace}.svc.cluster.local`, ns: bridgeNamespace, service: 'kfn-fn-myweb' },
    { host: `bench-hono.${ns}.svc.cluster.local`, ns, service: 'bench-hono' },
  ];
  const podsUp = async (side: (typeof sides)[number]) => (await api.request<{ items: unknown[] }>('GET', `/api/v1/namespaces/${side.ns}/pods`, { query: { labelSelector: `serving.knative.dev/service=${side.service}` } })).items.length;
  const secret = Buffer.from((await api.request<{ data: { secret: string } }>('GET', `/api/v1/namespaces/${bridgeNamespace}/secrets/kfn-fn-myweb`)).data.secret, 'base64').toString('utf8');
  const result = { kfn: [] as number[], hono: [] as number[] };
  let last: ReconcileResponse | undefined;
  for (let i = 0; i < runs; i++) {
    // Both at zero (the pods gone, not only terminating): the next request starts a pod.
    await waitFor('both Knative Services to be at zero', async () => ((await podsUp(sides[0]!)) + (await podsUp(sides[1]!)) === 0) || undefined, { timeoutMs: 240_000, intervalMs: 250 });
    const kfn = async () => {
      const event = await contract2Event(ns, 'cold', last);
      const started = now();
      last = await deliverCold(url, event, secret, 60_000, sides[0]!.host);
      result.kfn.push(now() - started);
    };
    const bare = async () => {
      const started = now();
      // Bounded as kfn's delivery above is (60 s).
      const res = await undiciRequest(url, { method: 'POST', headers: { host: sides[1]!.host, 'content-type': 'application/json' }, body: '{}', headersTimeout: 60_000, bodyTimeout: 60_000 });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`the bare Hono Knative Service answered ${res.statusCode}`);
      result.hono.push(now() - started);
    };
    // Taking turns at going first: the second starts while the first's new pod is still up.
    for (const start of i % 2 ? [bare, kfn] : [kfn, bare]) await start();
    log(`P5 on Knative, cold start ${i + 1}/${runs}: kfn ${result.kfn.at(-1)!.toFixed(0)} ms, bare Hono ${result.hono.at(-1)!.toFixed(0)} ms`);
  }
  await teardown();
  return result;
}

// ------------------------------------------------------------------------------------------
// P2: one stream of writes to 1,000 Widgets; three watchers timestamp each change's arrival.

interface LatencyRow {
  rate: string;
  achieved: number;
  watchers: Record<string, { p50: number; p99: number; max: number; missed: number }>;
}

/** A Widget CRD of its own and `n` Widgets in a new namespace. */
async function widgets(prefix: string, n: number) {
  const group = `${uniqueName('compare')}.kfn.test`;
  const apiVersion = `${group}/v1`;
  const ns = await createNamespace(prefix);
  await applyYaml(cluster.kc, stringify({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `widgets.${group}` },
    spec: { group, scope: 'Namespaced', names: { kind: 'Widget', plural: 'widgets', singular: 'widget', listKind: 'WidgetList' }, versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }] },
  }));
  cleanups.push(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.${group}`).catch(() => undefined));
  await untilServed(api, apiVersion, 'Widget');
  const path = `/apis/${apiVersion}/namespaces/${ns}/widgets`;
  log(`${prefix}: creating ${n} Widgets`);
  await inParallel(n, 16, (i) => api.request('POST', path, { body: { apiVersion, kind: 'Widget', metadata: { name: `w${i}` }, spec: { n: 0 } } }));
  return { group, apiVersion, ns, path, n };
}

/**
 * kfn's bridge and the ApiServerSource adapter watching the Widgets, delivering to a Go receiver
 * that timestamps each arrival (`name@generation` → first arrival, and a count per watcher);
 * with `bareWatch`, the bare watch too.
 */
async function watchers(w: Awaited<ReturnType<typeof widgets>>, name: string, bareWatch: boolean) {
  const arrivals: Record<string, Map<string, number>> = { kfn: new Map(), adapter: new Map(), watch: new Map() };
  const counts: Record<string, number> = { kfn: 0, adapter: 0, watch: 0 };
  const record = (who: string, objName: string, generation: string, unixNs: string) => {
    counts[who]!++;
    const key = `${objName}@${generation}`;
    if (!arrivals[who]!.has(key)) arrivals[who]!.set(key, Number(unixNs) / 1e6);
  };
  const receiver = spawn(peers.floor, ['receive'], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => receiver.kill('SIGKILL'));
  const port = await new Promise<number>((resolve, reject) => {
    receiver.once('exit', (code) => reject(new Error(`the receiver (floor receive) exited with ${code} before listening`)));
    createInterface({ input: receiver.stdout! }).on('line', (line) => {
      const [first, objName, generation, at] = line.split(' ');
      if (first === 'listening') resolve(Number(objName));
      else record(first === '/adapter' ? 'adapter' : 'kfn', objName!, generation!, at!);
    });
  });
  const config = join(dir, `${name}-bridge.yaml`);
  writeFileSync(config, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion: w.apiVersion, kind: 'Widget' }, sink: { uri: `http://127.0.0.1:${port}/kfn` }, namespaces: [w.ns], maxConcurrentReconciles: 8, resyncPeriodSeconds: 0 } }));
  const bridge = startProcess(`${name}-bridge`, process.execPath, [...values['bridge-node-options'].split(' ').filter(Boolean), bundle, 'bridge', `--kubeconfig=${kubeconfig}`, `--config=${config}`, '--log-level=error', '--metrics-addr=0']);
  const adapter = startProcess(`${name}-adapter`, peers.adapter, ['--kubeconfig', kubeconfig], {
    NAME: 'compare', NAMESPACE: w.ns, K_SINK: `http://127.0.0.1:${port}/adapter`,
    K_SOURCE_CONFIG: JSON.stringify({ namespaces: [w.ns], resources: [{ gvr: { Group: w.group, Version: 'v1', Resource: 'widgets' } }], mode: 'Resource' }),
  });
  let watch: ChildProcess | undefined;
  if (bareWatch) {
    watch = spawn(peers.floor, ['watch', '--kubeconfig', kubeconfig, '--namespace', w.ns, '--group', w.group, '--version', 'v1', '--resource', 'widgets'], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(() => watch!.kill('SIGKILL'));
    createInterface({ input: watch.stdout! }).on('line', (line) => {
      const [type, objName, generation, at] = line.split(' ');
      if (type !== 'synced') record('watch', objName!, generation!, at!);
    });
  }
  // kfn delivers every existing object once at start; the others start quietly.
  const deadline = Date.now() + 300_000;
  while (arrivals.kfn!.size < w.n && Date.now() < deadline) await sleep(100);
  await sleep(3000);
  const stopAll = async () => {
    await stop(bridge);
    await stop(adapter);
    watch?.kill('SIGTERM');
    receiver.kill('SIGTERM');
  };
  return { arrivals, counts, bridge, adapter, stopAll };
}

async function latency(): Promise<{ rows: LatencyRow[]; initialDeliveries: Record<string, number> }> {
  const w = await widgets('kfn-compare-latency', 1000);
  const { ns, n } = w;
  const { arrivals, counts, stopAll } = await watchers(w, 'latency', true);
  const widgetsPath = w.path;
  const initialDeliveries = { ...counts };
  log(`P2: at start, kfn delivered ${counts.kfn}, the adapter ${counts.adapter}, the watch ${counts.watch} events for ${n} existing Widgets`);

  const rows: LatencyRow[] = [];
  let generation = 1;
  for (const rate of values.rates.split(',')) {
    generation++;
    const written = new Map<string, number>();
    const interval = rate === 'max' ? 0 : 1000 / Number(rate);
    const t0 = performance.now();
    await inParallel(changes, 16, async (i) => {
      if (interval) {
        const wait = t0 + i * interval - performance.now();
        if (wait > 0) await sleep(wait);
      }
      const name = `w${i % n}`;
      const g = generation + Math.floor(i / n);
      // From the write's request: the apiserver may send the watch event before its response
      // reaches this process.
      const sent = now();
      await api.request('PATCH', `${widgetsPath}/${name}`, { body: { spec: { n: Math.random() } }, contentType: 'application/merge-patch+json' });
      written.set(`${name}@${g}`, sent);
    });
    const achieved = changes / ((performance.now() - t0) / 1000);
    generation += Math.floor((changes - 1) / n);
    const until = Date.now() + 30_000;
    while (Date.now() < until && ![...written.keys()].every((k) => arrivals.kfn!.has(k) && arrivals.adapter!.has(k) && arrivals.watch!.has(k))) await sleep(100);
    const row: LatencyRow = { rate, achieved, watchers: {} };
    for (const who of ['watch', 'kfn', 'adapter']) {
      const lat = [...written].flatMap(([k, w]) => (arrivals[who]!.has(k) ? [arrivals[who]!.get(k)! - w] : []));
      row.watchers[who] = { p50: percentile(lat, 50), p99: percentile(lat, 99), max: Math.max(...lat), missed: written.size - lat.length };
    }
    rows.push(row);
    log(`P2 ${rate}/s (achieved ${achieved.toFixed(0)}/s): p99 watch ${row.watchers.watch!.p99.toFixed(1)} ms, kfn ${row.watchers.kfn!.p99.toFixed(1)} ms, adapter ${row.watchers.adapter!.p99.toFixed(1)} ms`);
    await sleep(2000);
  }
  await stopAll();
  await deleteNamespace(ns);
  return { rows, initialDeliveries };
}

// ------------------------------------------------------------------------------------------
// P6: relists. K Widgets watched by kfn's bridge and the ApiServerSource adapter. (1) The
// apiserver restarts, nothing changes: what does each deliver? (2) Both are frozen (SIGSTOP),
// `changed` Widgets change, etcd is compacted and the apiserver restarted, both resume: each
// must relist (410 Gone). What does each deliver, and which changes does each miss?
// (Freezing alone is not a gap: events sent on an open watch wait in the frozen process's socket.)

interface RelistResult {
  objects: number;
  changed: number;
  afterRestart: Record<string, number>;
  after410: Record<string, number>;
  missed: Record<string, number>;
}

async function relists(k: number, changed = 100): Promise<RelistResult> {
  const w = await widgets('kfn-compare-relist', k);
  const { arrivals, counts, bridge, adapter, stopAll } = await watchers(w, 'relist', false);
  const delta = (before: Record<string, number>) => ({ kfn: counts.kfn! - before.kfn!, adapter: counts.adapter! - before.adapter! });

  log(`P6: restarting the apiserver with ${k} Widgets watched`);
  let before = { ...counts };
  await restartApiserver({ downtimeMs: 2000 });
  await sleep(15_000);
  const afterRestart = delta(before);
  log(`P6: after the restart, kfn delivered ${afterRestart.kfn}, ApiServerSource ${afterRestart.adapter}`);

  log(`P6: both frozen; ${changed} Widgets change, etcd is compacted, the apiserver restarts`);
  before = { ...counts };
  bridge.kill('SIGSTOP');
  adapter.kill('SIGSTOP');
  const keys: string[] = [];
  try {
    // A first restart closes their watch connections while they cannot reconnect: the changes
    // then reach no open watch (events already sent would wait in the frozen process's socket).
    await restartApiserver({ downtimeMs: 1000 });
    await inParallel(changed, 16, async (i) => {
      const obj = await api.request<{ metadata: { generation: number } }>('PATCH', `${w.path}/w${i}`, { body: { spec: { n: -1 } }, contentType: 'application/merge-patch+json' });
      keys.push(`w${i}@${obj.metadata.generation}`);
    });
    await compactEtcd();
    await restartApiserver({ downtimeMs: 2000 });
  } finally {
    bridge.kill('SIGCONT');
    adapter.kill('SIGCONT');
  }
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !keys.every((key) => arrivals.kfn!.has(key) && arrivals.adapter!.has(key))) await sleep(200);
  await sleep(5000);
  const after410 = delta(before);
  const missed = { kfn: keys.filter((key) => !arrivals.kfn!.has(key)).length, adapter: keys.filter((key) => !arrivals.adapter!.has(key)).length };
  log(`P6: after the 410, kfn delivered ${after410.kfn} (missed ${missed.kfn} of ${changed} changes), ApiServerSource ${after410.adapter} (missed ${missed.adapter})`);
  await stopAll();
  await deleteNamespace(w.ns);
  return { objects: k, changed, afterRestart, after410, missed };
}

// ------------------------------------------------------------------------------------------
// P4: memory with K MyWebs in a namespace, each watcher started fresh and measured once its
// resident set has settled.

async function settledRss(pid: number): Promise<number> {
  let last = 0;
  let steady = 0;
  const deadline = Date.now() + 300_000;
  while (Date.now() < deadline) {
    await sleep(1000);
    const rss = rssMiB(pid);
    steady = last && Math.abs(rss - last) / last < 0.01 ? steady + 1 : 0;
    last = rss;
    if (steady >= 5) break;
  }
  return last;
}

async function memory(): Promise<{ objects: number; kfn: number; kfnHeapAfterGc: number; cr: number; adapter: number }[]> {
  const ns = await createNamespace('kfn-compare-memory');
  const sink = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(req.url === '/kfn' ? '{"result":"done","changes":[]}' : ''));
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => sink.close());
  const port = (sink.address() as AddressInfo).port;
  const rows: { objects: number; kfn: number; kfnHeapAfterGc: number; cr: number; adapter: number }[] = [];
  let created = 0;
  for (const k of values.memory.split(',').map(Number)) {
    log(`P4: ${k} MyWebs (creating ${k - created})`);
    const from = created;
    await inParallel(k - created, 16, (i) => api.request('POST', webs(ns), { body: web(`m${from + i}`, 30000 + ((from + i) % 2700)) }));
    created = k;
    const config = join(dir, 'memory-bridge.yaml');
    writeFileSync(config, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: 'memory' }, spec: { for: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' }, owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }, { apiVersion: 'apps/v1', kind: 'Deployment' }, { apiVersion: 'v1', kind: 'Service' }], sink: { uri: `http://127.0.0.1:${port}/kfn` }, namespaces: [ns], maxConcurrentReconciles: 8 } }));
    const row = { objects: k, kfn: 0, kfnHeapAfterGc: 0, cr: 0, adapter: 0 };
    const bridge = startProcess(`memory-bridge-${k}`, process.execPath, [...values['bridge-node-options'].split(' ').filter(Boolean), '--inspect=127.0.0.1:0', bundle, 'bridge', `--kubeconfig=${kubeconfig}`, `--config=${config}`, '--log-level=error', '--metrics-addr=0']);
    row.kfn = await settledRss(bridge.pid!);
    row.kfnHeapAfterGc = await heapAfterGc(bridge.logFile);
    await stop(bridge);
    const cr = startProcess(`memory-cr-${k}`, peers.operator, ['--kubeconfig', kubeconfig, '--namespace', ns, '--watch-only', '--zap-log-level', 'error']);
    row.cr = await settledRss(cr.pid!);
    await stop(cr);
    const adapter = startProcess(`memory-adapter-${k}`, peers.adapter, ['--kubeconfig', kubeconfig], {
      NAME: 'compare', NAMESPACE: ns, K_SINK: `http://127.0.0.1:${port}/adapter`,
      K_SOURCE_CONFIG: JSON.stringify({ namespaces: [ns], resources: [{ gvr: { Group: 'operator.k8s-summit.org', Version: 'v1', Resource: 'mywebs' } }], mode: 'Resource' }),
    });
    row.adapter = await settledRss(adapter.pid!);
    await stop(adapter);
    rows.push(row);
    log(`P4 ${k}: kfn bridge ${row.kfn.toFixed(0)} MiB (heap after a forced GC ${row.kfnHeapAfterGc.toFixed(1)} MiB), controller-runtime ${row.cr.toFixed(0)} MiB, ApiServerSource adapter ${row.adapter.toFixed(0)} MiB`);
  }
  sink.close();
  await deleteNamespace(ns);
  return rows;
}

/** What P4 measures with snapshots: N MyWebs with their 3N children, watched by each contender. */
interface SnapshotMemory {
  webs: number;
  children: number;
  /** The bridge watching an empty namespace: what no object costs. */
  emptyRss: number;
  emptyHeap: number;
  /** Contract 1: metadata records of the MyWebs and their children. */
  v1Rss: number;
  v1Heap: number;
  /** Contract 2 with what MyWeb declares it reads: whole MyWebs, the Deployments' status and selector, the others' metadata. */
  v2Rss: number;
  v2Heap: number;
  cr: number;
}

/**
 * P4 with snapshots: N MyWebs and, made here as the function would make them, their ConfigMap,
 * Deployment (0 replicas: no pods) and headless Service, each owned by its MyWeb; the bridge
 * started on them fresh for each projection (delivering to a sink that answers at once), then
 * the controller-runtime operator (`--watch-only`: its cache of MyWebs and the three owned kinds).
 */
async function snapshotMemory(n: number): Promise<SnapshotMemory> {
  const ns = await createNamespace('kfn-compare-snapshots');
  const sink = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => sink.close());
  const port = (sink.address() as AddressInfo).port;
  log(`P4 with snapshots: creating ${n} MyWebs and ${3 * n} children`);
  await inParallel(n, 16, async (i) => {
    const name = `s${i}`;
    const created = await api.request<{ metadata: { uid: string } }>('POST', webs(ns), { body: web(name, 30000 + (i % 2700)) });
    const metadata = (child: string) => ({ name: child, labels: { ...childLabels(created.metadata.uid, 'myweb'), app: name }, ownerReferences: [{ apiVersion: MyWeb.apiVersion, kind: 'MyWeb', name, uid: created.metadata.uid, controller: true, blockOwnerDeletion: true }] });
    await Promise.all([
      api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: metadata(`${name}-page`), data: { 'index.html': `<h1>${name}</h1>` } } }),
      api.request('POST', `/apis/apps/v1/namespaces/${ns}/deployments`, {
        body: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: metadata(name), spec: { replicas: 0, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'nginx', image: 'kfn.local/nginx:1.22', ports: [{ containerPort: 80 }] }] } } } },
      }),
      api.request('POST', `/api/v1/namespaces/${ns}/services`, { body: { apiVersion: 'v1', kind: 'Service', metadata: metadata(name), spec: { clusterIP: 'None', selector: { app: name }, ports: [{ port: 80 }] } } }),
    ]);
  });
  const reconciler = functionManifests(myWebFunction, { namespace: ns, sinkUri: `http://127.0.0.1:${port}/kfn`, namespaces: [ns] }).find((o) => o.kind === 'Reconciler') as { spec: Record<string, unknown> };
  delete reconciler.spec.auth;
  // No identity: the function's ServiceAccount is not made here, and the bridge's file is the test's own.
  delete reconciler.spec.serviceAccount;
  const bridgeOn = async (label: string, spec: Record<string, unknown>, namespace: string) => {
    const config = join(dir, `snapshot-bridge-${label}.yaml`);
    writeFileSync(config, stringify({ ...reconciler, metadata: { name: 'snapshots' }, spec: { ...spec, namespaces: [namespace] } }));
    const bridge = startProcess(`snapshot-bridge-${label}`, process.execPath, [...values['bridge-node-options'].split(' ').filter(Boolean), '--inspect=127.0.0.1:0', bundle, 'bridge', `--kubeconfig=${kubeconfig}`, `--config=${config}`, '--log-level=error', '--metrics-addr=0']);
    const rss = await settledRss(bridge.pid!);
    const heap = await heapAfterGc(bridge.logFile);
    await stop(bridge);
    log(`P4 with snapshots, kfn bridge (${label}): ${rss.toFixed(0)} MiB, heap after a forced GC ${heap.toFixed(1)} MiB`);
    return { rss, heap };
  };
  const empty = await createNamespace('kfn-compare-empty');
  const none = await bridgeOn('empty', reconciler.spec, empty);
  await deleteNamespace(empty);
  const v1 = await bridgeOn('contract 1', { ...reconciler.spec, contract: 1 }, ns);
  const v2 = await bridgeOn('contract 2', reconciler.spec, ns);
  const cr = startProcess('snapshot-cr', peers.operator, ['--kubeconfig', kubeconfig, '--namespace', ns, '--watch-only', '--zap-log-level', 'error']);
  const crRss = await settledRss(cr.pid!);
  await stop(cr);
  log(`P4 with snapshots, controller-runtime: ${crRss.toFixed(0)} MiB`);
  sink.close();
  await deleteNamespace(ns);
  return { webs: n, children: 3 * n, emptyRss: none.rss, emptyHeap: none.heap, v1Rss: v1.rss, v1Heap: v1.heap, v2Rss: v2.rss, v2Heap: v2.heap, cr: crRss };
}

// ------------------------------------------------------------------------------------------
// CPU: where a reconcile's time goes on each side. One more kfn ×1 convergence of N MyWebs
// (not one of P1's measured rounds: profiling slows them) with the bridge and the function
// started under --inspect; each is profiled through its inspector from the first create to the
// last Ready, so start-up is not in the figures. The profiles are kept beside the results (open
// them in Chrome's DevTools).

interface CpuSide {
  busyMs: number;
  perDeliveryMs: number;
  places: { where: string; ms: number }[];
  file: string;
}

/** A process's CPU time so far (user + system), ms, from /proc: what the kernel charged it, not sampled. */

/** One ×1 convergence of `objects` MyWebs, measured by process CPU: controller-runtime's operator, or kfn's bridge and function with the Node flags given. */
interface CpuRound {
  contender: string;
  /** Reconciles (controller-runtime's histogram count) or deliveries (kfn's journal). */
  reconciles: number;
  seconds: number;
  /** ms of CPU per reconcile or delivery, each process. */
  perReconcileMs: Record<string, number>;
  /** Each process's resident set once settled after the convergence (MiB). */
  rssMiB: Record<string, number>;
  nodeOptions?: { bridge: string; function: string };
}

async function cpuRound(contender: 'controller-runtime' | 'kfn', nodeOptions?: { bridge: string[]; function: string[]; label: string }): Promise<CpuRound> {
  const ns = await createNamespace(`kfn-compare-cpu-${contender === 'kfn' ? 'kfn' : 'cr'}`);
  const label = contender === 'kfn' ? `kfn ×1, ${nodeOptions?.label}` : 'controller-runtime ×1';
  const after: (() => unknown)[] = [];
  const abort = new AbortController();
  let child: ChildProcess | undefined;
  try {
    log(`CPU ${label}: ${objects} MyWebs in ${ns}`);
    const pids: Record<string, number> = {};
    let reconciles: () => Promise<number>;
    if (contender === 'controller-runtime') {
      const metricsPort = await freePort();
      child = startProcess(`cpu-cr-${ns}`, peers.operator, ['--kubeconfig', kubeconfig, '--namespace', ns, '--max-concurrent-reconciles', '1', '--metrics-bind-address', `127.0.0.1:${metricsPort}`, '--zap-log-level', 'error']);
      pids.operator = child.pid!;
      reconciles = async () => parseHistogram(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text(), 'controller_runtime_reconcile_time_seconds').count;
    } else {
      const t = { name: 'bench', after: (fn: () => unknown) => after.push(fn), diagnostic: () => undefined } as unknown as TestContext;
      const stack = await functionStack(t, cluster, 'myweb', { namespace: ns, resyncPeriodSeconds: 3600, maxConcurrentReconciles: 1, bridgeNodeOptions: nodeOptions!.bridge, functionNodeOptions: nodeOptions!.function });
      pids.bridge = stack.bridge.pid;
      pids.function = stack.process!.pid!;
      reconciles = async () => journalLines(stack.journal).length;
    }
    await sleep(2000); // watches established
    const cpuBefore = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, processCpuMs(pid)]));
    const countBefore = await reconciles();
    const started = now();
    const done = allReady(ns, objects, abort.signal);
    await inParallel(objects, 16, (i) => api.request('POST', webs(ns), { body: web(`w${i}`, 30000 + i) }));
    await Promise.race([done, sleep(900_000, undefined, { signal: abort.signal }).then(() => Promise.reject(new Error(`CPU ${label}: not all ${objects} MyWebs Ready within 15 minutes`)))]);
    const seconds = (now() - started) / 1000;
    // The last Ready's own events still arrive: a moment for them before the count.
    await sleep(3000);
    const count = (await reconciles()) - countBefore;
    const perReconcileMs = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, (processCpuMs(pid) - cpuBefore[k]!) / count]));
    const rss: Record<string, number> = {};
    for (const [k, pid] of Object.entries(pids)) rss[k] = await settledRss(pid);
    const total = Object.values(perReconcileMs).reduce((a, b) => a + b, 0);
    log(`CPU ${label}: ${count} reconciles in ${seconds.toFixed(1)} s, ${total.toFixed(2)} ms of CPU each (${Object.entries(perReconcileMs).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}); resident ${Object.entries(rss).map(([k, v]) => `${k} ${v.toFixed(0)} MiB`).join(', ')}`);
    return { contender: label, reconciles: count, seconds, perReconcileMs, rssMiB: rss, ...(nodeOptions ? { nodeOptions: { bridge: nodeOptions.bridge.join(' '), function: nodeOptions.function.join(' ') } } : {}) };
  } finally {
    abort.abort();
    if (child) await stop(child);
    for (const fn of after) await fn();
    await deleteNamespace(ns);
  }
}

/**
 * Node's flags for kfn's two processes, each set measured beside the others: the function without
 * flags (as images ran it), with the young generation kept small and V8 tuned for size, then
 * without its optimising compilers too (the bridge's set); last, the bridge with Maglev (the
 * mid-tier compiler) and then with both compilers.
 */
function cpuFlagSets(bridge: string[]): { label: string; bridge: string[]; function: string[] }[] {
  const small = ['--max-semi-space-size=1', '--optimize-for-size'];
  const optimising = (flags: string[]) => flags.filter((f) => f !== '--no-opt' && f !== '--no-maglev');
  return [
    { label: 'fn: no flags', bridge, function: [] },
    { label: 'fn: semi-space 1, optimize-for-size', bridge, function: small },
    { label: 'fn: + --no-opt --no-maglev', bridge, function: [...small, '--no-opt', '--no-maglev'] },
    { label: 'bridge with Maglev (--no-opt only); fn: semi-space 1, optimize-for-size', bridge: bridge.filter((f) => f !== '--no-maglev'), function: small },
    { label: 'bridge without --no-opt --no-maglev; fn: semi-space 1, optimize-for-size', bridge: optimising(bridge), function: small },
  ];
}

async function reconcileCpu(): Promise<{ deliveries: number; bridge: CpuSide; function: CpuSide; rounds: CpuRound[] }> {
  // Process CPU, unprofiled, each side as it runs in production (the bridge with its Deployment's flags, unless a round says otherwise).
  const rounds: CpuRound[] = [await cpuRound('controller-runtime')];
  for (const set of cpuFlagSets(values['bridge-node-options'].split(' ').filter(Boolean))) rounds.push(await cpuRound('kfn', set));
  return { ...(await reconcileProfiles()), rounds };
}

async function reconcileProfiles(): Promise<{ deliveries: number; bridge: CpuSide; function: CpuSide }> {
  const ns = await createNamespace('kfn-compare-cpu');
  const profiles = join(values.out, `cpu-${stamp}`);
  mkdirSync(profiles, { recursive: true });
  const after: (() => unknown)[] = [];
  const abort = new AbortController();
  const saved = process.env.NODE_OPTIONS;
  try {
    log(`CPU: ${objects} MyWebs in ${ns}, the bridge and the function profiled`);
    process.env.NODE_OPTIONS = `${saved ?? ''} --inspect=127.0.0.1:0`.trim();
    const t = { name: 'bench', after: (fn: () => unknown) => after.push(fn), diagnostic: () => undefined } as unknown as TestContext;
    let stack: FunctionStack;
    try {
      stack = await functionStack(t, cluster, 'myweb', { namespace: ns, resyncPeriodSeconds: 3600, maxConcurrentReconciles: 1 });
    } finally {
      if (saved === undefined) delete process.env.NODE_OPTIONS;
      else process.env.NODE_OPTIONS = saved;
    }
    await sleep(2000);
    const fnLog = join(profiles, 'function.log');
    writeFileSync(fnLog, stack.output());
    const sides = { bridge: await inspector(stack.bridge.log), function: await inspector(fnLog) };
    for (const side of Object.values(sides)) {
      await side.call('Profiler.enable');
      await side.call('Profiler.setSamplingInterval', { interval: 500 });
      await side.call('Profiler.start');
    }
    const before = journalLines(stack.journal).length;
    const done = allReady(ns, objects, abort.signal);
    await inParallel(objects, 16, (i) => api.request('POST', webs(ns), { body: web(`w${i}`, 30000 + i) }));
    await Promise.race([done, sleep(900_000, undefined, { signal: abort.signal }).then(() => Promise.reject(new Error(`CPU: not all ${objects} MyWebs Ready within 15 minutes`)))]);
    const result: Record<string, CpuSide> = {};
    const deliveries = journalLines(stack.journal).length - before;
    for (const [name, side] of Object.entries(sides)) {
      const { profile } = await side.call<{ profile: CpuProfile }>('Profiler.stop');
      side.close();
      const file = join(profiles, `${name}.cpuprofile`);
      writeFileSync(file, JSON.stringify(profile));
      const { busyMs, places } = profilePlaces(profile, repoRoot);
      result[name] = { busyMs, perDeliveryMs: busyMs / deliveries, places: places.slice(0, 12), file };
    }
    log(`CPU: ${deliveries} deliveries; bridge ${result.bridge!.perDeliveryMs.toFixed(2)} ms, function ${result.function!.perDeliveryMs.toFixed(2)} ms of CPU per delivery`);
    return { deliveries, bridge: result.bridge!, function: result.function! };
  } finally {
    abort.abort();
    for (const fn of after) await fn();
    await deleteNamespace(ns);
  }
}

// ------------------------------------------------------------------------------------------

const lines: string[] = [];
const say = (line = '') => lines.push(line);
try {
  if (only.has('p1')) {
    const restore = await podsToFakeNodes();
    try {
      const rows: Convergence[] = [];
      rows.push(await convergence('floor', 16));
      for (const c of values.concurrency.split(',').map(Number)) {
        rows.push(await convergence('controller-runtime', c));
        rows.push(await convergence('kfn', c));
      }
      // Both sides untuned: controller-runtime's default is one reconcile at a time (×1 above).
      rows.push(await convergence('kfn', 0));
      results.convergence = rows;
    } finally {
      await restore();
    }
  }
  if (only.has('cpu')) {
    const restore = await podsToFakeNodes();
    try {
      results.cpu = await reconcileCpu();
    } finally {
      await restore();
    }
    // The hop alone, without the cluster: each side with its production flags.
    const words = (s: string) => s.split(' ').filter(Boolean);
    results.transport = await transportCost({ deliveries: 5000, concurrency: [1, 8], rounds: 2, flags: { bridge: words(values['bridge-node-options']), function: [...functionNodeFlags] }, log });
  }
  if (only.has('p5')) {
    // The cold-start MyWeb's pod goes to a fake node too.
    const restore = await podsToFakeNodes();
    try {
      results.coldStart = await coldStart();
    } finally {
      await restore();
    }
  }
  if (only.has('p2')) results.latency = await latency();
  if (only.has('p6')) results.relists = await relists(Number(values['relist-objects']));
  if (only.has('p4')) results.memory = await memory();
  if (only.has('p4') && Number(values['snapshot-objects']) > 0) results.snapshotMemory = await snapshotMemory(Number(values['snapshot-objects']));
  if (only.has('p8')) {
    // Long: a failure says so and keeps the sizes measured before it.
    const scale: ScaleResult = { sizes: [] };
    results.scale = scale;
    const bench = { api, clusterPaths: cluster.paths, kubeconfig, bundle, bridgeNodeOptions: values['bridge-node-options'], operator: peers.operator, dir, log, now, startProcess, stop, settledRss, createNamespace, deleteNamespace, webs, web };
    const namespaceCount = Number(values['scale-namespaces']);
    if (namespaceCount > 0) {
      // First, while no other MyWeb exists: the contenders that watch every namespace see these alone.
      const sink = await startSink(now);
      try {
        results.scaleNamespaces = await atManyNamespaces({ ...bench, adapter: peers.adapter }, namespaceCount, sink, log);
      } catch (err) {
        log(`P8 namespaces stopped: ${(err as Error).message}`);
      } finally {
        sink.close();
      }
    }
    if (scaleChanges > 0) {
      const throughput: ThroughputResult = { webs: scaleChanges, rounds: [] };
      results.scaleThroughput = throughput;
      await throughputByShards(bench, scaleChanges, throughput).catch((err: Error) => {
        throughput.error = err.message;
        log(`P8 throughput stopped: ${err.message}`);
      });
    }
    await atClusterScale(bench, scaleSizes, scale, scaleStepsWanted).catch((err: Error) => {
      scale.error = err.message;
      log(`P8 stopped: ${err.message}`);
    });
  }
  if (only.has('p7')) {
    cleanups.push(() => fleetCleanup(api));
    // P7 is last and long: a failure there says so and keeps the figures of the parts before it.
    const fleet: FleetSide[] = [];
    results.fleet = fleet;
    try {
      await fleetAtRest({ api, cluster, operator: peers.operator, settleSeconds: Number(values['fleet-settle']), idleSeconds: Number(values['fleet-idle']), log, into: fleet, sides: fleetSides });
    } catch (err) {
      results.fleetError = (err as Error).message;
      log(`P7 stopped: ${(err as Error).message}`);
    }
  }
  // After P7, which installs Knative too: the parts before it run without Knative's controllers.
  if (only.has('p5k')) {
    try {
      results.knativeColdStart = await knativeColdStart(knativeColdRuns);
    } catch (err) {
      results.knativeColdStartError = (err as Error).message;
      log(`P5 on Knative stopped: ${(err as Error).message}`);
    }
  }
} finally {
  for (const fn of cleanups.reverse()) await fn();
  // A part that stopped names a process's log in this run's folder: the logs outlive the folder.
  const stopped = [results.scale, results.scaleThroughput].some((r) => (r as { error?: string } | undefined)?.error) || results.fleetError || results.knativeColdStartError;
  if (stopped) {
    const kept = join(values.out, `logs-${stamp}`);
    cpSync(dir, kept, { recursive: true, filter: (src) => statSync(src).isDirectory() || src.endsWith('.log') });
    log(`a part stopped: the logs of this run (${dir}) are kept in ${kept}`);
  }
  rmSync(dir, { recursive: true, force: true });
}

// The table.
const x = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
say(`kfn vs peers — ${results.date}, ${results.machine}; controller-runtime ${peers.versions.controllerRuntime}, Knative Eventing ${peers.versions.eventing}`);
const conv = results.convergence as Convergence[] | undefined;
if (conv) {
  const floor = conv[0]!;
  say();
  say(`P1 convergence: ${objects} MyWebs bulk-created → all Ready (pods on fake nodes); ×N = reconciles at once`);
  say('  contender                 seconds   ×floor   writes/MyWeb   reads/MyWeb');
  const name = (r: Convergence) => (r.contender === 'floor' ? 'floor (16 writers)' : r.concurrency ? `${r.contender} ×${r.concurrency}` : `${r.contender} defaults`);
  for (const r of conv) say(`  ${name(r).padEnd(24)} ${r.seconds.toFixed(1).padStart(8)}   ${x(r.seconds, floor.seconds).padStart(6)}   ${r.writesPerObject.toFixed(2).padStart(12)}   ${r.readsPerObject.toFixed(2).padStart(11)}`);
  for (const c of new Set(conv.filter((r) => r.contender === 'kfn' && r.concurrency).map((r) => r.concurrency))) {
    const kfn = conv.find((r) => r.contender === 'kfn' && r.concurrency === c)!;
    const cr = conv.find((r) => r.contender === 'controller-runtime' && r.concurrency === c)!;
    say(`  ×${c}: kfn / controller-runtime ${x(kfn.seconds, cr.seconds)} (goal ≤ 1.0×); kfn / floor ${x(kfn.seconds, floor.seconds)} (goal ≤ 1.3×)`);
  }
  const untuned = conv.find((r) => r.contender === 'kfn' && !r.concurrency);
  const crDefault = conv.find((r) => r.contender === 'controller-runtime' && r.concurrency === 1);
  if (untuned && crDefault) say(`  both untuned: kfn (adaptive, up to ${reconcilerLimits.maxConcurrentReconciles.default}) / controller-runtime (one at a time) ${x(untuned.seconds, crDefault.seconds)} (goal ≤ 0.6×)`);
  const timed = conv.filter((r) => r.reconcile);
  if (timed.length) {
    say();
    say('Reconcile cost over P1 (ms): kfn delivery → answer (its journal), controller-runtime Reconcile (its histogram); p50 through the same buckets');
    say('  contender                 reconciles      p50     mean   total (s)');
    for (const r of timed) say(`  ${name(r).padEnd(24)} ${String(r.reconcile!.count).padStart(10)}   ${r.reconcile!.p50Ms.toFixed(1).padStart(6)}   ${r.reconcile!.meanMs.toFixed(1).padStart(6)}   ${((r.reconcile!.count * r.reconcile!.meanMs) / 1000).toFixed(1).padStart(9)}`);
    for (const c of new Set(timed.filter((r) => r.contender === 'kfn' && r.concurrency).map((r) => r.concurrency))) {
      const kfn = timed.find((r) => r.contender === 'kfn' && r.concurrency === c)?.reconcile;
      const cr = timed.find((r) => r.contender === 'controller-runtime' && r.concurrency === c)?.reconcile;
      if (kfn && cr) say(`  ×${c}: kfn / controller-runtime p50 ${x(kfn.p50Ms, cr.p50Ms)} (goal ≤ 1.5×), mean ${x(kfn.meanMs, cr.meanMs)}, total ${x(kfn.count * kfn.meanMs, cr.count * cr.meanMs)}`);
    }
  }
  const idle = conv.filter((r) => r.idle);
  if (idle.length) {
    say();
    say(`P3 idle: ${objects} Ready MyWebs, ${idleSeconds} s (kfn resyncs every ${idleSeconds} s; controller-runtime's default resync is 10 h)`);
    for (const r of idle) say(`  ${name(r).padEnd(24)} ${String(r.idle!.writes).padStart(5)} writes ${String(r.idle!.reads).padStart(7)} reads`);
  }
}
const lat = results.latency as { rows: LatencyRow[]; initialDeliveries: Record<string, number> } | undefined;
if (lat) {
  say();
  say(`P2 write → arrival, ${changes} changes over 1,000 objects, all three watching the same writes, from each write's request (ms)`);
  say('  rate (achieved)      bare watch p50/p99    kfn bridge p50/p99 (×watch p99)   ApiServerSource p50/p99 (×watch p99)');
  for (const r of lat.rows) {
    const w = r.watchers;
    const cell = (s: { p50: number; p99: number; missed: number }, ref?: number) => `${s.p50.toFixed(1)} / ${s.p99.toFixed(1)}${ref ? ` (${x(s.p99, ref)})` : ''}${s.missed ? ` [${s.missed} missed]` : ''}`;
    say(`  ${`${r.rate}/s (${r.achieved.toFixed(0)})`.padEnd(20)} ${cell(w.watch!).padEnd(21)} ${cell(w.kfn!, w.watch!.p99).padEnd(33)} ${cell(w.adapter!, w.watch!.p99)}`);
  }
  say(`  at start (1,000 existing objects): kfn delivered ${lat.initialDeliveries.kfn}, ApiServerSource ${lat.initialDeliveries.adapter}`);
}
const cold = results.coldStart as { kfn: number[]; kfnContract1?: number[]; kfnListening: number[]; hono: number[]; operator: number[]; lambda?: { kfn: number[]; bare: number[]; hono: number[] }; lambdaError?: string } | undefined;
if (cold) {
  say();
  say(`P5 cold start, process start → first reconcile answered (median of ${coldRuns}, ms)`);
  const [k, h, o] = [percentile(cold.kfn, 50), percentile(cold.hono, 50), percentile(cold.operator, 50)];
  const v1 = cold.kfnContract1?.length ? `   (a contract-1 event, which it reads for: ${percentile(cold.kfnContract1, 50).toFixed(0)}, ${x(percentile(cold.kfnContract1, 50), h)})` : '';
  say(`  kfn function ${k.toFixed(0)} (answering /healthz: ${percentile(cold.kfnListening, 50).toFixed(0)})   bare Hono ${h.toFixed(0)}   Go operator (to its first reconcile) ${o.toFixed(0)}   kfn / Hono ${x(k, h)} (goal ≤ 1.5×)${v1}`);
  if (cold.lambdaError) say(`  on Lambda: stopped (${cold.lambdaError})`);
  if (cold.lambda) {
    const [lk, lb, lh] = [percentile(cold.lambda.kfn, 50), percentile(cold.lambda.bare, 50), percentile(cold.lambda.hono, 50)];
    say(`  on Lambda (new environment → first invocation answered): kfn ${lk.toFixed(0)}   bare handler ${lb.toFixed(0)}   bare Hono ${lh.toFixed(0)}   kfn / bare handler ${x(lk, lb)}, / bare Hono ${x(lk, lh)}`);
  }
}
const knativeCold = results.knativeColdStart as { kfn: number[]; hono: number[] } | undefined;
if (knativeCold || results.knativeColdStartError) {
  if (!cold) say();
  if (knativeCold) {
    const [kk, kh] = [percentile(knativeCold.kfn, 50), percentile(knativeCold.hono, 50)];
    say(`  on Knative (scale from zero → first answer, median of ${knativeCold.kfn.length}): kfn ${kk.toFixed(0)}   bare Hono ${kh.toFixed(0)}   kfn / bare Hono ${x(kk, kh)}`);
  } else {
    say(`  on Knative: stopped (${results.knativeColdStartError})`);
  }
}
const mem = results.memory as { objects: number; kfn: number; kfnHeapAfterGc: number; cr: number; adapter: number }[] | undefined;
if (mem) {
  say();
  say('P4 resident memory, watching K MyWebs (MiB)');
  say('  K          kfn bridge (heap after GC)   controller-runtime   ApiServerSource   kfn/controller-runtime');
  for (const r of mem) say(`  ${String(r.objects).padEnd(10)} ${r.kfn.toFixed(0).padStart(10)} (${r.kfnHeapAfterGc.toFixed(1).padStart(6)})        ${r.cr.toFixed(0).padStart(18)}   ${r.adapter.toFixed(0).padStart(15)}   ${x(r.kfn, r.cr).padStart(10)}`);
  if (mem.length > 1) {
    const [a, b] = [mem[0]!, mem.at(-1)!];
    const slope = (f: (r: typeof a) => number) => ((f(b) - f(a)) * 1048576 / (b.objects - a.objects) / 1024).toFixed(2);
    say(`  per additional object (KiB of RSS): kfn ${slope((r) => r.kfn)} (of heap after a forced GC: ${slope((r) => r.kfnHeapAfterGc)}), controller-runtime ${slope((r) => r.cr)}, ApiServerSource ${slope((r) => r.adapter)}`);
    const steps = mem.slice(1).map((r, i) => `${mem[i]!.objects / 1000}k→${r.objects / 1000}k ${(((r.kfnHeapAfterGc - mem[i]!.kfnHeapAfterGc) * 1024) / (r.objects - mem[i]!.objects)).toFixed(2)}`);
    say(`  kfn's heap after a forced GC, KiB per additional object, step by step: ${steps.join(', ')}`);
  }
}
const snap = results.snapshotMemory as SnapshotMemory | undefined;
if (snap) {
  const objects = snap.webs + snap.children;
  const perObject = (heap: number) => (((heap - snap.emptyHeap) * 1024) / objects).toFixed(2);
  say();
  say(`P4 with snapshots: ${snap.webs} MyWebs and their ${snap.children} children (MiB; heap after a forced GC in brackets)`);
  say(`  kfn bridge, no objects (its floor)               ${snap.emptyRss.toFixed(0).padStart(5)} (${snap.emptyHeap.toFixed(1)})`);
  say(`  kfn bridge, contract 1 (metadata records)        ${snap.v1Rss.toFixed(0).padStart(5)} (${snap.v1Heap.toFixed(1)})   ${perObject(snap.v1Heap)} KiB of heap per object`);
  say(`  kfn bridge, contract 2 (what MyWeb reads)        ${snap.v2Rss.toFixed(0).padStart(5)} (${snap.v2Heap.toFixed(1)})   ${perObject(snap.v2Heap)} KiB of heap per object`);
  say(`  controller-runtime (its cache of all four kinds) ${snap.cr.toFixed(0).padStart(5)}`);
  say(`  kfn contract 2 / controller-runtime ${x(snap.v2Rss, snap.cr)} (goal ≤ 1.0×)`);
}
if (results.scaleNamespaces) for (const line of namespacesTable(results.scaleNamespaces as NamespacesResult)) say(line);
if (results.scaleThroughput) for (const line of throughputTable(results.scaleThroughput as ThroughputResult)) say(line);
if (results.scale) for (const line of scaleTable(results.scale as ScaleResult)) say(line);
const rel = results.relists as RelistResult | undefined;
if (rel) {
  say();
  say(`P6 relists, ${rel.objects} Widgets watched (deliveries)`);
  say('                                                       kfn bridge   ApiServerSource');
  say(`  apiserver restart, nothing changed                 ${String(rel.afterRestart.kfn).padStart(10)}   ${String(rel.afterRestart.adapter).padStart(15)}`);
  say(`  ${rel.changed} changes while cut off, then 410 Gone         ${String(rel.after410.kfn).padStart(10)}   ${String(rel.after410.adapter).padStart(15)}`);
  say(`  of those ${rel.changed} changes, never delivered              ${String(rel.missed.kfn).padStart(10)}   ${String(rel.missed.adapter).padStart(15)}`);
}
const cpu = results.cpu as Awaited<ReturnType<typeof reconcileCpu>> | undefined;
if (cpu?.rounds) {
  const cr = cpu.rounds.find((r) => r.contender.startsWith('controller-runtime'));
  const sum = (r: CpuRound) => Object.values(r.perReconcileMs).reduce((a, b) => a + b, 0);
  say();
  say(`CPU per reconcile, ×1 converging ${objects} MyWebs: each process's CPU (/proc, user + system) from the first create to the last Ready, over its reconciles (kfn: deliveries) and over the MyWebs; the bridge with its Deployment's flags unless said`);
  say('  contender                                   reconciles   seconds   ms CPU each   × c-r   ms per MyWeb   × c-r   resident MiB after');
  for (const r of cpu.rounds) {
    const perWeb = (c: CpuRound) => (sum(c) * c.reconciles) / objects;
    say(`  ${r.contender.slice(0, 42).padEnd(42)} ${String(r.reconciles).padStart(11)}   ${r.seconds.toFixed(1).padStart(7)}   ${sum(r).toFixed(2).padStart(11)}   ${cr ? x(sum(r), sum(cr)).padStart(5) : '    –'}   ${perWeb(r).toFixed(2).padStart(12)}   ${cr ? x(perWeb(r), perWeb(cr)).padStart(5) : '    –'}   ${Object.entries(r.rssMiB).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ')}`);
    if (Object.keys(r.perReconcileMs).length > 1) say(`    ${r.contender}: ${Object.entries(r.perReconcileMs).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(' + ')} ms`);
  }
  if (cr) say(`  goal: kfn ≤ 2× controller-runtime's CPU per reconcile (and ≤ 3 ms together)`);
}
if (cpu) {
  say();
  say(`CPU per delivery, kfn ×1 converging ${objects} MyWebs (${cpu.deliveries} deliveries; busy CPU profiled from the first create to the last Ready)`);
  say(`  bridge ${cpu.bridge.perDeliveryMs.toFixed(2)} ms   function ${cpu.function.perDeliveryMs.toFixed(2)} ms   (profiles: ${cpu.bridge.file}, ${cpu.function.file})`);
  for (const [name, side] of [['bridge', cpu.bridge], ['function', cpu.function]] as const) {
    say(`  ${name}, self time by place (share of its busy CPU):`);
    for (const p of side.places.slice(0, 8)) say(`    ${((p.ms / side.busyMs) * 100).toFixed(1).padStart(5)}%  ${p.where}`);
  }
}
const transport = results.transport as TransportRound[] | undefined;
if (transport?.length) {
  say();
  say(`The hop from bridge to function, HTTP/1.1 against h2c: ${transport[0]!.deliveries} contract-2 MyWeb events a round, the bridge's delivery code and the SDK's decoding, each side's CPU (/proc) per delivery, the median of its rounds`);
  for (const line of transportLines(transport)) say(line);
}
const fleet = results.fleet as FleetSide[] | undefined;
if (fleet?.length) {
  // Without the twelve operators measured (--fleet-sides), no ratios: a dash.
  const operators = fleet.find((f) => f.side === 'controller-runtime ×12 operators');
  const manager = fleet.find((f) => f.side === 'controller-runtime, one manager ×12 controllers');
  const ratio = (a: number, peer: FleetSide | undefined, of: (f: FleetSide) => number) => (peer ? x(a, of(peer)) : '–');
  // NaN: the side it leans on (operators, deployment) was not measured.
  const marginal = (f: FleetSide) => (Number.isFinite(f.marginalMiB) ? f.marginalMiB.toFixed(1) : '–');
  say();
  say(`P7 the fleet at rest: twelve operators, ${values['fleet-settle']} s settled (a kfn side also until its bridge has delivered nothing but resyncs for ${quietSeconds} s), then ${values['fleet-idle']} s idle (the kubelet's working sets, mean of looks every 5 s; CPU over the idle period)`);
  say('  side                                              MiB   ×12 c-r   CPU s/idle min   ×12 c-r    pods   one more operator (MiB)');
  for (const f of fleet) say(`  ${f.side.padEnd(46)} ${f.memoryMiB.toFixed(0).padStart(6)}   ${ratio(f.memoryMiB, operators, (o) => o.memoryMiB).padStart(7)}   ${f.cpuPerMinute.toFixed(2).padStart(14)}   ${ratio(f.cpuPerMinute, operators, (o) => o.cpuPerMinute).padStart(7)}   ${f.pods.toFixed(1).padStart(5)}   ${marginal(f).padStart(8)}`);
  for (const f of fleet.filter((f) => f.side.startsWith('kfn'))) {
    const parts = Object.entries(f.parts).map(([name, p]) => `${name} ${p.memoryMiB.toFixed(0)} MiB / ${p.cpuPerMinute.toFixed(2)} s / ${p.pods.toFixed(1)} pods${name === 'functions' ? ` (none up in ${(p.atZero * 100).toFixed(0)}% of looks)` : ''}`);
    say(`  ${f.side}: ${parts.join('; ')}`);
    if (f.settledSeconds !== undefined) say(`    settled ${f.settledSeconds} s`);
    if (f.idleDeliveries) say(`    deliveries during the idle period: ${describeCounts(f.idleDeliveries)} (of ${f.journalled} in the leading bridge's journal)`);
    if (f.functionsUp) say(`    each function's pod up, share of looks: ${Object.entries(f.functionsUp).sort((a, b) => b[1] - a[1]).map(([fn, up]) => `${fn.replace(/^kfn-fn-/, '')} ${(up * 100).toFixed(0)}%`).join(', ') || 'none up'}`);
  }
  const knative = fleet.find((f) => f.side === 'kfn on Knative');
  const host = fleet.find((f) => f.side.startsWith('kfn, shared host'));
  if (knative) {
    say(`  Knative: functions at zero ${((knative.parts.functions?.atZero ?? 1) * 100).toFixed(0)}% of the idle period (goal ≥ 90%), memory ${ratio(knative.memoryMiB, operators, (o) => o.memoryMiB)} (goal ≤ 0.5×), idle CPU ${ratio(knative.cpuPerMinute, operators, (o) => o.cpuPerMinute)} (goal ≤ 1.0×), one more operator ${marginal(knative)} MiB (goal ≤ 5)`);
    const added = beyond(knative, ['knative', 'ingress']);
    say(`  Knative: what kfn adds beyond Knative Serving and its ingress ${added.memoryMiB.toFixed(0)} MiB, ${ratio(added.memoryMiB, operators, (o) => o.memoryMiB)} twelve operators' memory (goal ≤ 0.5×), ${added.cpuPerMinute.toFixed(2)} CPU s/idle min, ${ratio(added.cpuPerMinute, operators, (o) => o.cpuPerMinute)} their idle CPU`);
  }
  if (results.fleetError) say(`  P7 stopped before its last sides: ${results.fleetError}`);
  if (host) say(`  shared host: ${ratio(host.memoryMiB, manager, (m) => m.memoryMiB)} one controller-runtime manager of twelve (goal ≤ 3×), one more operator ${marginal(host)} MiB (goal ≤ 5)`);
}
const table = lines.join('\n');
console.log(table);
mkdirSync(values.out, { recursive: true });
writeFileSync(join(values.out, `compare-${stamp}.json`), `${JSON.stringify({ ...results, table }, null, 2)}\n`);
writeFileSync(join(values.out, `compare-${stamp}.svg`), compareChart(results));
console.error(`\nwrote ${join(values.out, `compare-${stamp}.json`)} and the chart beside it (.svg); redraw one with: node test/bench/chart.ts <json>`);
process.exit(0);

