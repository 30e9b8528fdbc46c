// npm run bench:bridge — the bridge's two targets, measured on the real local cluster:
//   1. latency from an object write to its delivery at a local receiver, with 1,000 objects
//      changing (target p99 ≤ 50 ms);
//   2. resident memory of a bridge process watching 10,000 objects (target ≤ 100 MB).
// The bridge runs as its own process (as in production); the receiver answers at once.
// Options: --objects N (default 1000), --changes N (default 1000), --rate N writes/s (default
// 200), --memory-objects N (default 10000), --skip-memory, --node-options="…" (the V8 flags
// the bridge runs with; default: those of the shipped Deployment; "" for Node's defaults),
// --from-source (run cli/kfn.ts instead of the esbuild bundle that a deployment runs).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { parseReconcileRequest } from '../../core/event.ts';
import { bridgeNodeOptionsAt } from '../../bridge/main.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { applyYaml, testCluster, uniqueName, kubeApi } from '../support/cluster.ts';
import { bridgeMemoryLimitMiB, inParallel, kfnEntry, percentile, rssMiB, spawnBridge, untilServed } from './common.ts';

const { values } = parseArgs({
  options: {
    objects: { type: 'string', default: '1000' },
    changes: { type: 'string', default: '1000' },
    rate: { type: 'string', default: '200' },
    'memory-objects': { type: 'string', default: '10000' },
    'skip-memory': { type: 'boolean', default: false },
    // The V8 flags the bridge Deployment runs with (manifests/bridge/deployment.yaml).
    'node-options': { type: 'string', default: bridgeNodeOptionsAt(bridgeMemoryLimitMiB()) },
    // Run the bridge from the TypeScript sources instead of the bundle a deployment runs.
    'from-source': { type: 'boolean', default: false },
  },
});
const objects = Number(values.objects);
const changes = Number(values.changes);
const rate = Number(values.rate);
const memoryObjects = Number(values['memory-objects']);

const say = (line: string) => console.log(line);

const entry = kfnEntry(values['from-source']);

const cluster = await testCluster();
const api = kubeApi(cluster.kc);
const group = `${uniqueName('bench')}.kfn.test`;
const apiVersion = `${group}/v1`;
const ns = uniqueName('kfn-bench');
const dir = mkdtempSync(join(tmpdir(), 'kfn-bench-'));

await applyYaml(
  cluster.kc,
  stringify({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `widgets.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind: 'Widget', plural: 'widgets', singular: 'widget', listKind: 'WidgetList' },
      versions: [{ name: 'v1', served: true, storage: true, subresources: { status: {} }, schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }],
    },
  }),
);
await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: ns } } });
await untilServed(api, apiVersion, 'Widget');
const widgets = `/apis/${apiVersion}/namespaces/${ns}/widgets`;

// The receiver: records when each (name, generation) arrives.
const arrivals = new Map<string, number>();
let deliveries = 0;
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => (body += c));
  req.on('end', () => {
    const now = performance.now();
    const r = parseReconcileRequest(req.headers, body, { kind: 'none' });
    deliveries++;
    const key = `${r.data.primary.name}@${r.data.primary.generation}`;
    if (!arrivals.has(key)) arrivals.set(key, now);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const sink = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

/** The bridge's own view of its memory, from its /metrics (prom-client's process metrics). */
async function memoryBreakdown(port: number): Promise<string> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  const get = (name: string) => Number(text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'm'))?.[1] ?? NaN) / 1048576;
  return `heap used ${get('nodejs_heap_size_used_bytes').toFixed(0)} MiB of ${get('nodejs_heap_size_total_bytes').toFixed(0)} MiB, external ${get('nodejs_external_memory_bytes').toFixed(0)} MiB`;
}

function startBridgeProcess(name: string, extra: Record<string, unknown> = {}) {
  const config = join(dir, `${name}.yaml`);
  writeFileSync(config, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion, kind: 'Widget' }, sink: { uri: sink }, namespaces: [ns], maxConcurrentReconciles: 8, resyncPeriodSeconds: 0, ...extra } }));
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawnBridge(entry, values['node-options'], [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${config}`, `--metrics-addr=127.0.0.1:${port}`, '--log-level=error'], join(dir, `${name}.log`));
  return Object.assign(child, { metricsPort: port });
}

async function waitUntil(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

try {
  // --- 1. latency ------------------------------------------------------------------------
  say(`Bridge process: node ${values['node-options'] || '(default flags)'} ${entry.slice(repoRoot.length + 1)} bridge`);
  say(`Creating ${objects} Widgets…`);
  await inParallel(objects, 16, (i) => api.request('POST', widgets, { body: { apiVersion, kind: 'Widget', metadata: { name: `w${i}` }, spec: { n: 0 } } }));
  const bridge = startBridgeProcess('latency');
  await waitUntil('the initial deliveries', () => arrivals.size >= objects, 120_000);
  say(`Bridge delivered the initial list of ${objects} objects. Changing ${changes} of them at ${rate}/s…`);
  const written = new Map<string, { start: number; end: number }>();
  const interval = 1000 / rate;
  const t0 = performance.now();
  await inParallel(changes, 16, async (i) => {
    const due = t0 + i * interval;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const name = `w${i % objects}`;
    const generation = 2 + Math.floor(i / objects);
    const start = performance.now();
    await api.request('PATCH', `${widgets}/${name}`, { body: { spec: { n: i + 1 } }, contentType: 'application/merge-patch+json' });
    written.set(`${name}@${generation}`, { start, end: performance.now() });
  });
  await waitUntil('every change to be delivered', () => [...written.keys()].every((k) => arrivals.has(k)), 60_000);
  const fromWrite = [...written].map(([k, w]) => arrivals.get(k)! - w.end).sort((a, b) => a - b);
  const fromRequest = [...written].map(([k, w]) => arrivals.get(k)! - w.start).sort((a, b) => a - b);
  const rssLatency = rssMiB(bridge.pid!);
  const breakdown = await memoryBreakdown(bridge.metricsPort);
  bridge.kill('SIGTERM');
  say('');
  say(`write → delivery latency, ${changes} changes over ${objects} objects at ${rate}/s (ms):`);
  say(`  from the write's response:  p50 ${percentile(fromWrite, 50).toFixed(1)}  p90 ${percentile(fromWrite, 90).toFixed(1)}  p99 ${percentile(fromWrite, 99).toFixed(1)}  max ${fromWrite.at(-1)!.toFixed(1)}`);
  say(`  from the write's request:   p50 ${percentile(fromRequest, 50).toFixed(1)}  p90 ${percentile(fromRequest, 90).toFixed(1)}  p99 ${percentile(fromRequest, 99).toFixed(1)}  max ${fromRequest.at(-1)!.toFixed(1)}`);
  say(`  target p99 ≤ 50 ms: ${percentile(fromWrite, 99) <= 50 ? 'met' : 'NOT met'}; bridge RSS ${rssLatency.toFixed(0)} MiB (${breakdown})`);

  // --- 2. memory -------------------------------------------------------------------------
  if (!values['skip-memory']) {
    const extra = memoryObjects - objects;
    say('');
    say(`Creating ${extra} more Widgets (${memoryObjects} in all)…`);
    const started = Date.now();
    await inParallel(extra, 16, (i) => api.request('POST', widgets, { body: { apiVersion, kind: 'Widget', metadata: { name: `m${i}`, labels: { bench: 'memory' } }, spec: { n: 0 } } }));
    say(`  created in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    const before = deliveries;
    const watcher = startBridgeProcess('memory');
    await waitUntil(`the initial list of ${memoryObjects} objects to be delivered`, () => deliveries - before >= memoryObjects, 300_000);
    await sleep(2000);
    const rss = rssMiB(watcher.pid!);
    say(`  ${await memoryBreakdown(watcher.metricsPort)}`);
    watcher.kill('SIGTERM');
    say(`bridge RSS watching ${memoryObjects} objects (all delivered once): ${rss.toFixed(0)} MiB — target ≤ 100 MB: ${rss * 1.048576 <= 100 ? 'met' : 'NOT met'}`);
  }
} finally {
  server.close();
  await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  await api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.${group}`).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
