// `npm run bench:serverless`: what each way of running a function costs, side by side in one
// run, with the MyWeb function and the bridge in the cluster:
//
//   Deployment   kfn deploy: always one pod (the floor: nothing starts on the delivery path)
//   Knative      kfn deploy --target knative: warm (a pod up), and cold (scaled to zero, the
//                delivery wakes it: activator → new pod → queue-proxy → function)
//   Lambda       kfn build --target lambda: the zip under AWS's runtime client, warm, and cold
//                (a new execution environment), the event sent straight to its Function URL
//
// For the cluster targets, "write → answered" runs from the client's create request to the
// bridge's journal entry saying the function answered (watch + queue + delivery), and
// "delivery" is the bridge's own measure of the HTTP exchange. Memory: the pods' cgroups
// (function + queue-proxy on Knative) and the Lambda environment's resident set.
//
//   npm run bench:serverless -- [--cold 20] [--warm 20] [--targets deployment,knative,lambda]
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { encodeReconcileEvent } from '../../core/event.ts';
import { sendReconcileEvent } from '../../bridge/delivery.ts';
import type { JournalEntry } from '../../core/journal.ts';
import { buildLambdaPackage } from '../../cli/build.ts';
import { deployFunctions } from '../../cli/deploy.ts';
import { followBridgeJournal, installBridge } from '../../cli/incluster.ts';
import { installOnLocalCluster } from '../../cli/knative.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { kubeApi, testCluster, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { lambdaEnvironment, startLambda, unzipPackage } from '../support/lambda.ts';
import { percentile } from './common.ts';

const { values } = parseArgs({ options: { cold: { type: 'string', default: '20' }, warm: { type: 'string', default: '20' }, targets: { type: 'string', default: 'deployment,knative,lambda' } } });
const targets = new Set(values.targets.split(','));
const colds = Number(values.cold);
const warms = Number(values.warm);
const system = 'kfn-system';
const log = (line: string) => console.error(`  ${line}`);

const cluster = await testCluster();
const api = kubeApi(cluster.kc);
await installOnLocalCluster({ log });
await installBridge(api, cluster.state.binDir, 'kfn-bench', log);
await waitFor('the bridge to hold its Lease', async () => (await api.request<{ spec?: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/${system}/leases/kfn-bridge`).catch(() => undefined))?.spec?.holderIdentity, { timeoutMs: 120_000 });
const journal: JournalEntry[] = [];
const follow = followBridgeJournal(api, system, (e) => journal.push(e));
const ns = uniqueName('kfn-bench-serverless');
await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } });
let port = 30400;

const ms = (x: number) => `${Math.round(x)} ms`;
interface Sample {
  total: number;
  delivery: number;
}
const rows: { label: string; samples: Sample[] }[] = [];
const memory: [string, number][] = [];

/** Creates a MyWeb and returns write → answered and the delivery's own duration, from the journal. */
async function writeToAnswer(): Promise<Sample> {
  const name = `w${port}`;
  const written = Date.now();
  await api.request('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
    body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { nodePortNumber: port++, pageContentHtml: name } },
  });
  const entry = await waitFor(`the creation of ${name} delivered`, async () => journal.find((e) => e.key === `${ns}/${name}` && e.reason === 'created' && (e.outcome === 'done' || e.outcome === 'requeue')), { timeoutMs: 120_000, intervalMs: 20 });
  // Out of the way: its pods would load the node (the deletion is delivered too; it is not measured).
  await api.request('DELETE', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs/${name}`);
  return { total: Date.parse(entry.time) - written, delivery: entry.durationMs };
}

/** A pod's working set (usage less inactive file cache, as the kubelet reports it), from its cgroup (v1 or v2, cgroupfs driver). */
function podMemory(uid: string): number {
  for (const [root, usage, inactive] of [
    ['/sys/fs/cgroup/memory/kubepods', 'memory.usage_in_bytes', 'total_inactive_file'],
    ['/sys/fs/cgroup/kubepods', 'memory.current', 'inactive_file'],
  ] as const) {
    for (const qos of ['', 'burstable', 'besteffort']) {
      const dir = join(root, qos, `pod${uid}`);
      try {
        const used = Number(readFileSync(join(dir, usage), 'utf8'));
        const stat = readFileSync(join(dir, 'memory.stat'), 'utf8').match(new RegExp(`^${inactive} (\\d+)$`, 'm'));
        return used - Number(stat?.[1] ?? 0);
      } catch {
        /* not this cgroup layout or QoS class */
      }
    }
  }
  return NaN;
}
async function functionPodMemory(selector: string): Promise<number> {
  const pods = await api.request<{ items: { metadata: { uid: string } }[] }>('GET', `/api/v1/namespaces/${system}/pods?labelSelector=${encodeURIComponent(selector)}`);
  return pods.items.length ? podMemory(pods.items[0]!.metadata.uid) : NaN;
}
const fnPods = async () => (await api.request<{ items: unknown[] }>('GET', `/api/v1/namespaces/${system}/pods?labelSelector=serving.knative.dev/service=kfn-fn-myweb`)).items.length;

// 1. Deployment: the floor (always measured: the other rows are given as ratios to it).
console.error('Deployment (kfn deploy)');
await deployFunctions([join(repoRoot, 'functions', 'myweb')], { namespace: system, namespaces: [ns], log });
await writeToAnswer(); // the first delivery opens the bridge's connection
rows.push({ label: 'Deployment, warm', samples: await sequence(warms, writeToAnswer) });
memory.push(['Deployment: function pod', await functionPodMemory('kfn.dev/function=myweb,!serving.knative.dev/service')]);
await api.request('DELETE', `/apis/apps/v1/namespaces/${system}/deployments/kfn-fn-myweb`);
await api.request('DELETE', `/api/v1/namespaces/${system}/services/kfn-fn-myweb`);

// 2. Knative: warm, then cold starts one after another.
if (targets.has('knative')) {
console.error('Knative Service (kfn deploy --target knative)');
await deployFunctions([join(repoRoot, 'functions', 'myweb')], { namespace: system, namespaces: [ns], target: 'knative', windowSeconds: 6, log });
await writeToAnswer();
rows.push({ label: 'Knative, warm', samples: await sequence(warms, writeToAnswer) });
memory.push(['Knative: function + queue-proxy pod', await functionPodMemory('serving.knative.dev/service=kfn-fn-myweb')]);
const cold: Sample[] = [];
for (let i = 0; i < colds; i++) {
  await waitFor('the function to scale to zero', async () => (await fnPods()) === 0 || undefined, { timeoutMs: 180_000, intervalMs: 250 });
  cold.push(await writeToAnswer());
  console.error(`  cold start ${i + 1}/${colds}: ${ms(cold.at(-1)!.total)} write → answered (delivery ${ms(cold.at(-1)!.delivery)})`);
}
rows.push({ label: 'Knative, cold (from zero)', samples: cold });
}
follow.abort();
// The bridge's Reconciler goes: from here on the events are sent by the benchmark alone.
await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/myweb').catch(() => undefined);

// 3. Lambda: the zip under aws-lambda-ric; each event is the creation of a new MyWeb, signed as
// the bridge signs it, sent to the Function URL — the same reconcile (three children applied,
// status written) as the rows above, without the watch in front.
if (targets.has('lambda')) {
  console.error('Lambda (kfn build --target lambda, AWS runtime interface client)');
  const pkg = await buildLambdaPackage(join(repoRoot, 'functions', 'myweb'), join(repoRoot, '.kfn', 'bench', 'lambda'));
  const code = join(repoRoot, '.kfn', 'bench', 'lambda', 'task');
  unzipPackage(pkg.zip, code);
  const env = await lambdaEnvironment(cluster, 'myweb', system);
  const lambda = await startLambda({ codeDir: code, env, functionName: 'kfn-fn-myweb', concurrency: 1 });
  const invoke = async (): Promise<Sample> => {
    const name = `l${port}`;
    const obj = await api.request<{ apiVersion: string; kind: string; metadata: { name: string; namespace: string; uid: string; resourceVersion: string; generation: number } }>('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
      body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { nodePortNumber: port++, pageContentHtml: name } },
    });
    const m = obj.metadata;
    const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: obj.apiVersion, kind: obj.kind, namespace: m.namespace, name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, generation: m.generation }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://bench/bridge');
    const result = await sendReconcileEvent({ url: lambda.url, message, credentials: { kind: 'hmac', secret: env.KFN_AUTH_SECRET! }, timeoutMs: 30_000 });
    if (result.outcome.kind !== 'done' && result.outcome.kind !== 'requeue') throw new Error(`the Lambda answered ${result.status}: ${'why' in result.outcome ? result.outcome.why : ''}\n${lambda.logs().slice(-2000)}`);
    await api.request('DELETE', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs/${name}`);
    return { total: NaN, delivery: result.durationMs };
  };
  await invoke();
  rows.push({ label: 'Lambda, warm', samples: await sequence(warms, invoke) });
  const lambdaPids = readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('aws-lambda-ric');
    } catch {
      return false;
    }
  });
  const rss = lambdaPids.map((p) => Number(readFileSync(`/proc/${p}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/)?.[1] ?? NaN) * 1024);
  memory.push(['Lambda: one execution environment (RSS)', rss[0] ?? NaN]);
  const lambdaCold: Sample[] = [];
  for (let i = 0; i < colds; i++) {
    await lambda.freeze();
    lambdaCold.push(await invoke());
  }
  rows.push({ label: 'Lambda, cold (new environment)', samples: lambdaCold });
  await lambda.stop();
}
await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);

async function sequence(n: number, fn: () => Promise<Sample>): Promise<Sample[]> {
  const out: Sample[] = [];
  for (let i = 0; i < n; i++) out.push(await fn());
  return out;
}

const floor = percentile(rows[0]!.samples.map((s) => s.delivery), 50);
console.log('\nOne MyWeb reconcile, by how the function runs (same machine, same run):');
console.log(`  ${'target'.padEnd(32)} ${'n'.padStart(3)}  ${'write→answered p50'.padStart(18)} ${'p99'.padStart(8)}   ${'delivery p50'.padStart(12)} ${'p99'.padStart(8)}  ${'× floor'.padStart(7)}`);
for (const r of rows) {
  const t = r.samples.map((s) => s.total).filter((x) => Number.isFinite(x));
  const d = r.samples.map((s) => s.delivery);
  const tp = t.length ? [ms(percentile(t, 50)), ms(percentile(t, 99))] : ['—', '—'];
  console.log(`  ${r.label.padEnd(32)} ${String(r.samples.length).padStart(3)}  ${tp[0]!.padStart(18)} ${tp[1]!.padStart(8)}   ${ms(percentile(d, 50)).padStart(12)} ${ms(percentile(d, 99)).padStart(8)}  ${(percentile(d, 50) / floor).toFixed(1).padStart(6)}×`);
}
console.log('  (× floor: delivery p50 over the Deployment\'s; Lambda rows have no watch on the path: the event goes straight to its Function URL)');
console.log('\nMemory:');
for (const [label, bytes] of memory) console.log(`  ${label.padEnd(42)} ${Number.isFinite(bytes) ? `${(bytes / 1024 ** 2).toFixed(0)} MiB` : 'n/a'}`);
console.log('  Knative itself (controller, webhook, activator, autoscaler) and Traefik: see `kfn knative status` and the cluster bench.');
process.exit(0);
