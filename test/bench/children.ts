// npm run bench:children — what a contract-2 bridge keeps of many children, on the real local
// cluster: N children (default 50,000) under M primaries (default 1,000), each child shaped like
// a small Deployment as its controller leaves it (spec with a pod template, status with two
// conditions, a few annotations). The children are custom resources of that shape, not
// Deployments: 50,000 Deployments would make the controller-manager write 50,000 ReplicaSets too,
// which measures the cluster, not the bridge.
//
// Three bridge processes in turn, each with the V8 flags of the shipped Deployment and the heap
// ceiling its memory limit gives (bridgeNodeOptionsAt): one over an empty namespace (the floor),
// one with the owned kind's default projection (annotations and status), one with whole children
// (fields [*]). Each is measured once every primary has been delivered, then changed and delivered
// again (with its children in the event): RSS, heap after a forced GC, and whether it stayed up (a heap past its ceiling ends the process; in a pod, a restart).
// Options: --children N, --primaries M, --node-options="…", --from-source. Its objects go with
// their CRDs at the end; the controller-manager's garbage collector is busy with their deletion
// for a few minutes after (tests run right after may wait longer for it).
import type { ChildProcess } from 'node:child_process';
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
import { applyYaml, testCluster, uniqueName, kubeApi } from '../support/cluster.ts';
import { bridgeMemoryLimitMiB, heapAfterGc, inParallel, kfnEntry, rssMiB, spawnBridge, untilServed } from './common.ts';

const limitMiB = bridgeMemoryLimitMiB();
const { values } = parseArgs({
  options: {
    children: { type: 'string', default: '50000' },
    primaries: { type: 'string', default: '1000' },
    'node-options': { type: 'string', default: bridgeNodeOptionsAt(limitMiB) },
    'from-source': { type: 'boolean', default: false },
  },
});
const childCount = Number(values.children);
const primaryCount = Number(values.primaries);
const say = (line: string) => console.log(line);

const entry = kfnEntry(values['from-source']);

const cluster = await testCluster();
const api = kubeApi(cluster.kc);
const group = `${uniqueName('children')}.kfn.test`;
const apiVersion = `${group}/v1`;
const ns = uniqueName('kfn-bench-children');
const empty = uniqueName('kfn-bench-empty');
const dir = mkdtempSync(join(tmpdir(), 'kfn-bench-'));
const crd = (kind: string, plural: string) =>
  stringify({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      // No status subresource: a child is created with the status its controller would have written.
      versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }],
    },
  });

/** A child as a small Deployment is once its controller has written its status (about 2 KiB of JSON). */
function part(name: string, owner: { name: string; uid: string }, i: number) {
  const app = { app: name, tier: 'web' };
  const at = '2026-11-25T10:00:00Z';
  return {
    apiVersion,
    kind: 'Part',
    metadata: {
      name,
      labels: { ...app, 'app.kubernetes.io/managed-by': 'kfn', 'app.kubernetes.io/name': owner.name },
      annotations: { 'deployment.kubernetes.io/revision': '1', 'example.kfn.dev/page-sha256': (i * 2654435761).toString(16).padStart(16, '0') },
      ownerReferences: [{ apiVersion, kind: 'Widget', name: owner.name, uid: owner.uid, controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      replicas: 1,
      revisionHistoryLimit: 10,
      progressDeadlineSeconds: 600,
      selector: { matchLabels: app },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' } },
      template: {
        metadata: { labels: app, annotations: { 'example.kfn.dev/config-sha256': (i * 40503).toString(16).padStart(16, '0') } },
        spec: {
          containers: [
            {
              name: 'web',
              image: 'registry.example.com/team/web:1.22.1',
              imagePullPolicy: 'IfNotPresent',
              ports: [{ containerPort: 8080, name: 'http', protocol: 'TCP' }],
              env: [{ name: 'MODE', value: 'production' }, { name: 'PORT', value: '8080' }, { name: 'OWNER', value: owner.name }],
              resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '128Mi' } },
              readinessProbe: { httpGet: { path: '/healthz', port: 'http', scheme: 'HTTP' }, periodSeconds: 10, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 3 },
              volumeMounts: [{ name: 'page', mountPath: '/usr/share/web/html', readOnly: true }],
              terminationMessagePath: '/dev/termination-log',
              terminationMessagePolicy: 'File',
            },
          ],
          volumes: [{ name: 'page', configMap: { name: `${name}-page`, defaultMode: 420 } }],
          restartPolicy: 'Always',
          terminationGracePeriodSeconds: 30,
          dnsPolicy: 'ClusterFirst',
          schedulerName: 'default-scheduler',
          securityContext: {},
        },
      },
    },
    status: {
      observedGeneration: 1,
      replicas: 1,
      updatedReplicas: 1,
      readyReplicas: 1,
      availableReplicas: 1,
      conditions: [
        { type: 'Available', status: 'True', lastUpdateTime: at, lastTransitionTime: at, reason: 'MinimumReplicasAvailable', message: 'Deployment has minimum availability.' },
        { type: 'Progressing', status: 'True', lastUpdateTime: at, lastTransitionTime: at, reason: 'NewReplicaSetAvailable', message: `ReplicaSet "${name}-5d8f7c9b6d" has successfully progressed.` },
      ],
    },
  };
}

// The receiver: each primary's last delivered generation, and how many children the events after
// `countFrom` carried (the first ones may come before the children's watch has listed).
const delivered = new Map<string, number>();
let countFrom = new Map<string, number>();
let carriedChildren = 0;
let carriedBytes = 0;
let counted = 0;
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => (body += c));
  req.on('end', () => {
    const r = parseReconcileRequest(req.headers, body, { kind: 'none' });
    const { name, generation = 0 } = r.data.primary;
    const from = countFrom.get(name);
    if (from !== undefined && generation > from && (delivered.get(name) ?? 0) <= from) {
      counted++;
      carriedChildren += r.data.observed?.children.length ?? 0;
      carriedBytes += Buffer.byteLength(body);
      if (process.env.KFN_BENCH_SHOW_EVENT && counted === 1) console.log(body.slice(0, 3000));
    }
    delivered.set(name, Math.max(generation, delivered.get(name) ?? 0));
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const sink = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

function startBridge(label: string, namespace: string, fields: string[] | undefined): ChildProcess & { logFile: string } {
  const config = join(dir, `${label}.yaml`);
  const owns = [{ apiVersion, kind: 'Part', ...(fields ? { fields } : {}) }];
  writeFileSync(config, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: label }, spec: { for: { apiVersion, kind: 'Widget' }, contract: 2, owns, sink: { uri: sink }, namespaces: [namespace], maxConcurrentReconciles: 8, resyncPeriodSeconds: 0 } }));
  const logFile = join(dir, `${label}.log`);
  const child = spawnBridge(entry, `${values['node-options']} --inspect=127.0.0.1:0`, [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${config}`, '--metrics-addr=0', '--log-level=error'], logFile);
  return Object.assign(child, { logFile });
}

async function waitUntil(what: string, check: () => boolean, timeoutMs: number, alive: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (alive.exitCode !== null || alive.signalCode !== null) throw new Error(`the bridge ended (${alive.exitCode ?? alive.signalCode}) while waiting for ${what}`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** RSS once it has stopped growing for 3 s (the lists and first deliveries done). */
async function settledRss(pid: number): Promise<number> {
  let last = rssMiB(pid);
  for (let still = 0; still < 3; ) {
    await sleep(1000);
    const now = rssMiB(pid);
    still = Math.abs(now - last) < 1 ? still + 1 : 0;
    last = now;
  }
  return last;
}

interface Measured { rss: number; heap: number; carried: number; eventKiB: number; up: boolean }

async function measure(label: string, namespace: string, fields: string[] | undefined, primaries: string[], children: number): Promise<Measured> {
  delivered.clear();
  countFrom = new Map();
  carriedChildren = 0;
  carriedBytes = 0;
  counted = 0;
  const bridge = startBridge(label, namespace, fields);
  try {
    await waitUntil(`${label}: the first delivery of ${primaries.length} primaries`, () => primaries.every((p) => delivered.has(p)), 600_000, bridge);
    // Each primary changed, and delivered again, until the events carry every child: the first
    // deliveries come as soon as the primaries are listed, before the children's watch has.
    for (let round = 1; ; round++) {
      countFrom = new Map(delivered);
      carriedChildren = 0;
      carriedBytes = 0;
      await inParallel(primaries.length, 16, (i) => api.request('PATCH', `/apis/${apiVersion}/namespaces/${namespace}/widgets/${primaries[i]}`, { body: { spec: { n: -round, at: label } }, contentType: 'application/merge-patch+json' }));
      await waitUntil(`${label}: delivery ${round + 1} of ${primaries.length} primaries`, () => primaries.every((p) => (delivered.get(p) ?? 0) > countFrom.get(p)!), 600_000, bridge);
      if (carriedChildren >= children) break;
      if (round === 20) throw new Error(`${label}: after ${round} changes the events still carry ${carriedChildren} of ${children} children`);
      await sleep(2000);
    }
    const rss = await settledRss(bridge.pid!);
    const heap = await heapAfterGc(bridge.logFile);
    const up = bridge.exitCode === null && bridge.signalCode === null;
    return { rss, heap, carried: carriedChildren, eventKiB: carriedBytes / primaries.length / 1024, up };
  } finally {
    bridge.kill('SIGTERM');
    await new Promise((resolve) => (bridge.exitCode !== null ? resolve(undefined) : bridge.once('exit', resolve)));
  }
}

try {
  await applyYaml(cluster.kc, `${crd('Widget', 'widgets')}---\n${crd('Part', 'parts')}`);
  for (const n of [ns, empty]) await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: n } } });
  await untilServed(api, apiVersion, 'Widget');
  await untilServed(api, apiVersion, 'Part');
  const base = (kind: string, n: string) => `/apis/${apiVersion}/namespaces/${n}/${kind}`;
  say(`Creating ${primaryCount} primaries and ${childCount} children (${Buffer.byteLength(JSON.stringify(part('example-0', { name: 'w0', uid: '00000000-0000-0000-0000-000000000000' }, 0)))} bytes of JSON each)…`);
  const owners: { name: string; uid: string }[] = new Array(primaryCount);
  await inParallel(primaryCount, 16, async (i) => {
    const made = await api.request<{ metadata: { uid: string } }>('POST', base('widgets', ns), { body: { apiVersion, kind: 'Widget', metadata: { name: `w${i}` }, spec: { n: i } } });
    owners[i] = { name: `w${i}`, uid: made.metadata.uid };
  });
  const started = performance.now();
  let made = 0;
  await inParallel(childCount, 16, async (i) => {
    await api.request('POST', base('parts', ns), { body: part(`p${i}`, owners[i % primaryCount]!, i) });
    if (++made % 5000 === 0) say(`  ${made} children (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  });
  await api.request('POST', base('widgets', empty), { body: { apiVersion, kind: 'Widget', metadata: { name: 'alone' }, spec: {} } });

  say(`Bridge processes: node ${values['node-options']} (the ceiling of a ${limitMiB} MiB limit)`);
  const floor = await measure('floor', empty, undefined, ['alone'], 0);
  say(`  floor (one primary, no children): RSS ${floor.rss.toFixed(0)} MiB, heap after a forced GC ${floor.heap.toFixed(1)} MiB`);
  const rows: [string, Measured][] = [];
  for (const [label, fields] of [['default projection (annotations, status)', undefined], ['whole children ([*])', ['*']]] as const) {
    const m = await measure(label.split(' ')[0]!, ns, fields as string[] | undefined, owners.map((o) => o.name), childCount);
    rows.push([label, m]);
    say(`  ${label}: RSS ${m.rss.toFixed(0)} MiB, heap after a forced GC ${m.heap.toFixed(1)} MiB, ${m.carried} children carried, ${m.eventKiB.toFixed(1)} KiB per event, ${m.up ? 'stayed up' : 'ENDED'}`);
  }
  say('');
  say(`Children kept by a contract-2 bridge: ${childCount} under ${primaryCount} primaries (limit ${limitMiB} MiB, heap ceiling ${Math.floor((limitMiB * 70) / 100)} MiB)`);
  say('  projection                                 RSS MiB   heap MiB   heap KiB/child   RSS/limit');
  for (const [label, m] of rows) {
    const perChild = ((m.heap - floor.heap) * 1024) / childCount;
    say(`  ${label.padEnd(42)} ${m.rss.toFixed(0).padStart(7)}   ${m.heap.toFixed(1).padStart(8)}   ${perChild.toFixed(2).padStart(14)}   ${(m.rss / limitMiB).toFixed(2).padStart(9)}`);
  }
  const [projected, whole] = [rows[0]![1], rows[1]![1]];
  say(`  default projection / whole: heap above the floor ${((projected.heap - floor.heap) / (whole.heap - floor.heap)).toFixed(2)}×, RSS ${(projected.rss / whole.rss).toFixed(2)}×`);
} finally {
  server.close();
  for (const n of [ns, empty]) await api.request('DELETE', `/api/v1/namespaces/${n}`).catch(() => undefined);
  for (const plural of ['parts', 'widgets']) await api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${plural}.${group}`).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
