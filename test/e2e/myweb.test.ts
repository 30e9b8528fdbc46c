// MyWeb end to end, as in production: the bridge and the function run as separate processes,
// the function under its own ServiceAccount token with the RBAC `kfn manifests` generates.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ApiError, applyObject } from '../../kube/api.ts';
import { testCluster, type TestCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines, stackReport } from '../support/functions.ts';
import { nodePortRange, nodePorts } from '../support/ports.ts';

const myWebStack = (t: TestContext, cluster: TestCluster, extra: { resyncPeriodSeconds?: number; contract?: 1 | 2 } = {}) => functionStack(t, cluster, 'myweb', extra);

/** The function's `reconciled` log lines: what each reconcile cost the apiserver. */
function reconciles(output: string): { reason: string; reads: number; readsOf: Record<string, number>; writes: number; snapshot: boolean }[] {
  return output
    .split('\n')
    .filter((l) => l.includes('"msg":"reconciled"'))
    .map((l) => JSON.parse(l) as { reason: string; reads: number; readsOf: Record<string, number>; writes: number; snapshot: boolean });
}

const web = (name: string, port: number, html = '<h1>Hello, World!</h1>') => ({
  apiVersion: 'operator.k8s-summit.org/v1',
  kind: 'MyWeb',
  metadata: { name },
  spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: port, pageContentHtml: html },
});

interface Obj {
  metadata: { uid: string; resourceVersion: string; ownerReferences?: { uid: string; controller?: boolean }[] };
  data?: Record<string, string>;
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

// NodePorts for these tests: this file's own block (see test/support/ports.ts).
const nextPort = nodePorts('e2e/myweb');

describe('MyWeb end to end', { concurrency: true }, () => {
  test('create → Ready with children; edits roll out; drift is repaired; delete collects children', async (t) => {
    const cluster = await testCluster();
    const s = await myWebStack(t, cluster);
    // What a timed-out wait adds: the journal's and the function's last lines (a refused write shows there).
    const report = () => stackReport(s);
    const port = await nextPort(s.api);
    const applyStarted = Date.now();
    const created = await s.api.request<Obj>('POST', s.objects, { body: web('site', port) });
    const kubectl = promisify(execFile);
    await kubectl(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, '-n', s.ns, 'wait', '--for=condition=Ready', 'myweb/site', '--timeout=90s']);
    t.diagnostic(`apply → Ready (kubectl wait returned): ${Date.now() - applyStarted} ms`);
    const get = (path: string) => s.api.request<Obj>('GET', `/api/v1/namespaces/${s.ns}/${path}`);
    const getApps = (path: string) => s.api.request<Obj>('GET', `/apis/apps/v1/namespaces/${s.ns}/${path}`);
    const cm = await get('configmaps/site-page');
    const dep = await getApps('deployments/site');
    const svc = await get('services/site');
    for (const child of [cm, dep, svc]) assert.ok(child.metadata.ownerReferences?.some((o) => o.uid === created.metadata.uid && o.controller));
    assert.equal(cm.data?.['index.html'], '<h1>Hello, World!</h1>');
    assert.equal((svc.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort, port);
    const status = (await s.api.request<Obj>('GET', `${s.objects}/site`)).status as { completed?: boolean };
    assert.equal(status.completed, true);
    // nginx really serves the page, through kube-proxy's NodePort on 127.0.0.1.
    const served = async () => {
      const res = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(2000) });
      return res.ok ? res.text() : undefined;
    };
    assert.equal(await waitFor(`the page on 127.0.0.1:${port}`, served, { context: report }), '<h1>Hello, World!</h1>');

    // Edit the page: ConfigMap updated, pods roll (new pod-template hash).
    const hashOf = (d: Obj) => ((d.spec as { template: { metadata: { annotations: Record<string, string> } } }).template.metadata.annotations['myweb.kfn.dev/page-sha256']);
    const oldHash = hashOf(dep);
    await s.api.request('PATCH', `${s.objects}/site`, { body: { spec: { pageContentHtml: '<h1>Edited</h1>' } }, contentType: 'application/merge-patch+json' });
    await waitFor('the page ConfigMap to be updated', async () => (await get('configmaps/site-page')).data?.['index.html'] === '<h1>Edited</h1>' || undefined, { context: report });
    await waitFor('the Deployment to roll to a new pod template', async () => hashOf(await getApps('deployments/site')) !== oldHash || undefined, { context: report });
    await waitFor('the edited page to be served once the pods rolled', async () => ((await served()) === '<h1>Edited</h1>') || undefined, { timeoutMs: 90_000, context: report });
    await waitFor('a second ReplicaSet (the pods rolled)', async () => {
      const rs = await s.api.request<{ items: unknown[] }>('GET', `/apis/apps/v1/namespaces/${s.ns}/replicasets`);
      return rs.items.length >= 2 || undefined;
    }, { context: report });
    // Edit the port: Service updated.
    const newPort = await nextPort(s.api);
    await s.api.request('PATCH', `${s.objects}/site`, { body: { spec: { nodePortNumber: newPort } }, contentType: 'application/merge-patch+json' });
    await waitFor('the Service to move to the new port', async () => (((await get('services/site')).spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort === newPort) || undefined, { context: report });

    // Drift: delete the Service, scale the Deployment by hand.
    await s.api.request('DELETE', `/api/v1/namespaces/${s.ns}/services/site`);
    await waitFor('the Service to be recreated', () => get('services/site'), { context: report });
    await s.api.request('PATCH', `/apis/apps/v1/namespaces/${s.ns}/deployments/site`, { body: { spec: { replicas: 3 } }, contentType: 'application/merge-patch+json' });
    await waitFor('the Deployment to be scaled back to 1', async () => (((await getApps('deployments/site')).spec as { replicas: number }).replicas === 1) || undefined, { context: report });

    // Delete: the garbage collector removes the children.
    await s.api.request('DELETE', `${s.objects}/site`);
    await waitFor('the children to be garbage-collected', async () => {
      for (const p of ['configmaps/site-page', 'services/site']) {
        try {
          await get(p);
          throw new Error(`${p} still exists`);
        } catch (err) {
          if (!(err instanceof ApiError && err.status === 404)) throw err;
        }
      }
      return true;
    }, { timeoutMs: 60_000, context: report });
  });

  test('an out-of-range port is rejected by the CRD; a port in use gives Ready=False without a hot loop', async (t) => {
    const cluster = await testCluster();
    const s = await myWebStack(t, cluster);
    await assert.rejects(s.api.request('POST', s.objects, { body: web('bad', 29999) }), new RegExp(`nodePortNumber in body should be greater than or equal to ${nodePortRange.first}`));

    const taken = await nextPort(s.api);
    await applyObject(s.api, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'squatter', namespace: s.ns }, spec: { type: 'NodePort', selector: { x: 'y' }, ports: [{ port: 80, nodePort: taken }] } } as never, 'kfn-test');
    await s.api.request('POST', s.objects, { body: web('clash', taken) });
    const ready = await waitFor('Ready=False with the apiserver reason', async () => {
      const obj = await s.api.request<Obj>('GET', `${s.objects}/clash`);
      const c = (obj.status?.conditions as { type: string; status: string; reason: string; message: string }[] | undefined)?.find((x) => x.type === 'Ready');
      if (c?.status === 'False' && c.reason === 'Invalid') return c;
      throw new Error(`Ready: ${JSON.stringify(c ?? null)}`);
    }, { timeoutMs: 90_000 }).catch((e: Error) => {
      throw new Error(`${e.message}\n${stackReport(s)}`, { cause: e });
    });
    assert.match(ready.message, /provided port is already allocated/);
    // Retried, with backoff rather than in a hot loop. How soon the retries come depends on how
    // fast the apiserver refuses the Service (its allocation takes seconds under load), so the
    // test waits for three deliveries, then counts them over at least 6 s since Ready=False.
    // The backoff's schedule itself is unit-tested on a fake clock (bridge/workqueue.test.ts).
    const since = Date.now();
    const clash = () => journalLines(s.journal).filter((l) => l.key.endsWith('/clash'));
    await waitFor('three deliveries of clash', async () => (clash().length >= 3 ? true : undefined), { timeoutMs: 60_000 });
    await sleep(Math.max(0, since + 6000 - Date.now()));
    const attempts = clash();
    t.diagnostic(`deliveries of clash: ${attempts.map((l) => `${l.time.slice(11, 23)} ${l.reason}#${l.attempt} ${l.outcome} ${l.durationMs.toFixed(0)} ms`).join(', ')}`);
    assert.ok(attempts.length <= 20, `with backoff, not a hot loop: ${attempts.length} deliveries in ${((Date.now() - Date.parse(attempts[0]!.time)) / 1000).toFixed(0)} s since the first answer`);
    // Free the port: the next retry succeeds.
    await s.api.request('DELETE', `/api/v1/namespaces/${s.ns}/services/squatter`);
    await waitFor('Ready=True once the port is free', async () => {
      const obj = await s.api.request<Obj>('GET', `${s.objects}/clash`);
      return (obj.status?.conditions as { type: string; status: string }[] | undefined)?.some((c) => c.type === 'Ready' && c.status === 'True') || undefined;
    }, { timeoutMs: 120_000 });
  });

  for (const contract of [2, 1] as const) test(`50 MyWebs, contract ${contract}: writes per create, and an idle resync makes zero writes${contract === 2 ? ' and zero reads' : ' (a function reading for itself still works)'}`, async (t) => {
    const cluster = await testCluster();
    const s = await myWebStack(t, cluster, { resyncPeriodSeconds: 8, contract });
    const started = new Map<string, number>();
    for (let i = 0; i < 50; i++) {
      started.set(`w${i}`, Date.now());
      await s.api.request('POST', s.objects, { body: web(`w${i}`, await nextPort(s.api)) });
    }
    const readyAt = new Map<string, number>();
    await waitFor('all 50 MyWebs to be Ready', async () => {
      const list = await s.api.request<{ items: (Obj & { metadata: { name: string } })[] }>('GET', s.objects);
      for (const w of list.items) {
        const ready = (w.status?.conditions as { type: string; status: string }[] | undefined)?.some((c) => c.type === 'Ready' && c.status === 'True');
        if (ready && !readyAt.has(w.metadata.name)) readyAt.set(w.metadata.name, Date.now());
      }
      return readyAt.size === 50 || undefined;
    }, { timeoutMs: 180_000, intervalMs: 200 });
    const times = [...readyAt].map(([n, at]) => at - started.get(n)!).sort((a, b) => a - b);
    t.diagnostic(`apply → Ready over 50 MyWebs: median ${times[25]} ms, max ${times[49]} ms`);
    const writesUntilReady = journalLines(s.journal).filter((l) => l.outcome !== 'retry').reduce((n, l) => n + (l.response?.changes?.length ?? 0), 0);
    t.diagnostic(`writes per created MyWeb until Ready: ${(writesUntilReady / 50).toFixed(1)} (children applied + status)`);
    const converging = reconciles(s.output());
    // Reads of what MyWeb owns and of MyWebs; the pods it lists while a Deployment is not
    // available (explainWorkload, to say why) are counted apart.
    const readsUntilReady = converging.reduce((n, l) => n + l.reads - (l.readsOf.pods ?? 0), 0);
    const podLists = converging.reduce((n, l) => n + (l.readsOf.pods ?? 0), 0);
    t.diagnostic(`apiserver reads per created MyWeb until Ready: ${(readsUntilReady / 50).toFixed(2)} (and ${(podLists / 50).toFixed(2)} pod lists) over ${converging.length} reconciles, ${converging.filter((l) => l.snapshot).length} of them from a snapshot (contract ${contract})`);
    if (contract === 2) {
      assert.ok(converging.length > 0 && converging.every((l) => l.snapshot), 'every event carries the observed state');
      assert.ok(readsUntilReady / 50 <= 0.5, `at most 0.5 reads per MyWeb of what the event holds: ${readsUntilReady} in all (${JSON.stringify(converging.filter((l) => l.reads > (l.readsOf.pods ?? 0)).slice(0, 5))})`);
    }

    // Let everything settle, then watch one full resync period.
    await sleep(3000);
    const cursor = journalLines(s.journal).length;
    const outputCursor = s.output().length;
    await waitFor('a resync of every MyWeb', async () => {
      const resynced = new Set(journalLines(s.journal).slice(cursor).filter((l) => l.reason === 'resync').map((l) => l.key));
      return resynced.size === 50 || undefined;
    }, { timeoutMs: 30_000 });
    const resyncs = journalLines(s.journal).slice(cursor).filter((l) => l.reason === 'resync');
    const writes = resyncs.reduce((n, l) => n + (l.response?.changes?.length ?? 0), 0);
    // The function writes its log lines in batches (up to 200 ms late): wait for all fifty.
    const idle = await waitFor('the function\'s log lines of those resyncs', async () => {
      const lines = reconciles(s.output().slice(outputCursor)).filter((l) => l.reason === 'resync');
      return lines.length >= 50 ? lines.slice(-50) : undefined;
    }, { timeoutMs: 10_000 });
    const idleReads = idle.reduce((n, l) => n + l.reads, 0);
    t.diagnostic(`idle resync: ${resyncs.length} deliveries, ${writes} writes, ${idleReads} apiserver reads by the function`);
    assert.equal(writes, 0, 'an idle resync writes nothing');
    if (contract === 2) assert.equal(idleReads, 0, 'an idle resync reads nothing: everything it needs is in the event');
    assert.ok(resyncs.every((l) => l.outcome === 'done'));
  });
});
