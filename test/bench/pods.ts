// `npm run bench:pods`: how fast the real node starts pods. Creates N pods (busybox, sleep) in
// a fresh namespace, all at once or one by one, and prints create → Running latency (p50, p90,
// p99, max) measured from each pod's create request to the moment its watch event says
// Running; beside it, the same for N pods on a kwok fake node in the same run (the floor: the
// control plane's own share, no container started), when the cluster has fake nodes.
//
//   npm run bench:pods -- [--pods 50] [--sequential]
import { parseArgs } from 'node:util';
import { kubeApi, testCluster, uniqueName } from '../support/cluster.ts';
import { percentile } from './common.ts';

const { values } = parseArgs({ options: { pods: { type: 'string', default: '50' }, sequential: { type: 'boolean', default: false } } });
const count = Number(values.pods);
const cluster = await testCluster();
const api = kubeApi(cluster.kc);

async function measure(label: string, fake: boolean): Promise<number[]> {
  const ns = uniqueName(`kfn-bench-pods-${fake ? 'fake' : 'real'}`);
  await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } });
  const created = new Map<string, number>();
  const running = new Map<string, number>();
  const abort = new AbortController();
  const watch = api
    .stream(`/api/v1/namespaces/${ns}/pods?watch=true`, { signal: abort.signal }, (event) => {
      const pod = (event as { object: { metadata: { name: string }; status?: { phase?: string } } }).object;
      if (pod.status?.phase === 'Running' && !running.has(pod.metadata.name)) running.set(pod.metadata.name, performance.now());
    })
    .catch(() => undefined);
  await new Promise((r) => setTimeout(r, 200));
  const create = async (i: number) => {
    const name = `p${i}`;
    created.set(name, performance.now());
    await api.request('POST', `/api/v1/namespaces/${ns}/pods`, {
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name },
        spec: {
          terminationGracePeriodSeconds: 0,
          containers: [{ name: 'c', image: 'kfn.local/busybox:1.35', command: ['sleep', '3600'], resources: { requests: { cpu: '1m', memory: '4Mi' } } }],
          ...(fake ? { nodeSelector: { type: 'kwok' }, tolerations: [{ key: 'kfn.dev/fake-node', operator: 'Exists', effect: 'NoSchedule' }] } : {}),
        },
      },
    });
  };
  if (values.sequential) for (let i = 0; i < count; i++) await create(i);
  else await Promise.all(Array.from({ length: count }, (_, i) => create(i)));
  const deadline = Date.now() + 300_000;
  while (running.size < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  abort.abort();
  await watch;
  await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  if (running.size < count) throw new Error(`${label}: only ${running.size}/${count} pods Running after 300 s`);
  return [...running].map(([name, at]) => at - created.get(name)!).sort((a, b) => a - b);
}

const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const rows: [string, number[]][] = [['real node (kubelet + containerd + runc + CNI)', await measure('real node', false)]];
if (cluster.state.fakeNodes > 0) rows.push(['fake node (kwok: control plane only)', await measure('fake node', true)]);
console.log(`\npod create → Running, ${count} pods ${values.sequential ? 'one after another' : 'created at once'}:`);
console.log(`${'node'.padEnd(48)} ${'p50'.padStart(8)} ${'p90'.padStart(8)} ${'p99'.padStart(8)} ${'max'.padStart(8)}`);
for (const [label, d] of rows) console.log(`${label.padEnd(48)} ${fmt(percentile(d, 50)).padStart(8)} ${fmt(percentile(d, 90)).padStart(8)} ${fmt(percentile(d, 99)).padStart(8)} ${fmt(d[d.length - 1]!).padStart(8)}`);
if (rows.length === 2) console.log(`ratio real/fake at p50: ${(percentile(rows[0]![1], 50) / percentile(rows[1]![1], 50)).toFixed(1)}×`);
