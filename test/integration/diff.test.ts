// kfn diff on the real apiserver: what MyWeb would create, change (drift) and delete (a child it
// no longer returns) for one object, shown from server-side dry runs that store nothing.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodePorts } from '../support/ports.ts';
import { test } from 'node:test';
import { promisify } from 'node:util';
import pino from 'pino';
import { encodeReconcileEvent as eventFor } from '../../core/event.ts';
import { ApiError, applyObject } from '../../kube/api.ts';
import { repoRoot } from '../../cluster/paths.ts';
import MyWebFunction, { MyWeb } from '../../functions/myweb/index.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import { receivedFrom } from '../../functions/sdk/replay.ts';
import { reconcileEvent } from '../../functions/sdk/runtime.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

test('kfn diff shows what a function would create, change and delete for one object, and stores nothing', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'diff');
  await applyObject(api, crdOf(MyWeb) as never, 'kfn-test');
  await waitFor('the MyWeb CRD to be served', () => api.resource(MyWeb.apiVersion, MyWeb.kind));
  const port = await nodePorts('integration/diff')(api);
  await api.request('POST', `/apis/${MyWeb.apiVersion}/namespaces/${ns}/mywebs`, { body: { apiVersion: MyWeb.apiVersion, kind: 'MyWeb', metadata: { name: 'site' }, spec: { nodePortNumber: port, pageContentHtml: '<h1>diff</h1>' } } });
  const kfn = (args: string[]) =>
    promisify(execFile)(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'diff', ...args, `--kubeconfig=${cluster.paths.kubeconfig}`], { cwd: repoRoot }).then(
      (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
    );

  // Never reconciled: every child would be created — and nothing is.
  const fresh = await kfn(['functions/myweb', `${ns}/site`]);
  assert.equal(fresh.code, 1, fresh.out + fresh.err);
  for (const child of [`configmaps/site-page`, `deployments/site`, `services/site`]) assert.match(fresh.out, new RegExp(`would create /api.*/namespaces/${ns}/${child} \\(it does not exist now\\)`));
  assert.match(fresh.out, /would change \/apis\/operator\.k8s-summit\.org\/v1\/namespaces\/.*\/mywebs\/site\/status:\n +\+ status: /);
  await assert.rejects(api.request('GET', `/api/v1/namespaces/${ns}/configmaps/site-page`), (err) => err instanceof ApiError && err.status === 404, 'a dry run stores nothing');

  // Reconciled for real once, then someone edits the page's ConfigMap by hand: the drift is shown.
  const { event } = eventFor({ reconciler: 'myweb', primary: { apiVersion: MyWeb.apiVersion, kind: 'MyWeb', namespace: ns, name: 'site' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test');
  await reconcileEvent(MyWebFunction, receivedFrom({ id: event.id, source: event.source, reason: 'created', attempt: 1, data: event.data! }), { api, log: pino({ level: 'silent' }) });
  await api.request('PATCH', `/api/v1/namespaces/${ns}/configmaps/site-page`, { body: { data: { 'index.html': 'edited by hand' } }, contentType: 'application/merge-patch+json' });
  const drift = await kfn(['myweb', `${ns}/site`]);
  assert.equal(drift.code, 1, drift.out + drift.err);
  assert.match(drift.out, new RegExp(`would change /api/v1/namespaces/${ns}/configmaps/site-page:\\n +~ data\\["index\\.html"\\]: "edited by hand" → "<h1>diff</h1>"`));
  assert.doesNotMatch(drift.out, /would (create|change) \/apis\/apps\/v1\/.*deployments/, 'the Deployment is as the function wants it');
  const cm = await api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${ns}/configmaps/site-page`);
  assert.equal(cm.data['index.html'], 'edited by hand', 'still as edited: the dry run stored nothing');

  // A version of the function that no longer returns the Service: it would be pruned.
  const dir = mkdtempSync(join(tmpdir(), 'kfn-diff-'));
  writeFileSync(
    join(dir, 'index.ts'),
    `import base from ${JSON.stringify(join(repoRoot, 'functions', 'myweb', 'index.ts'))};
export default { ...base, async reconcile(o: never, c: never) { const r = await base.reconcile(o, c); return { ...r, children: r.children!.filter((x) => x.kind !== 'Service') }; } };
`,
  );
  const prune = await kfn([dir, `${ns}/site`]);
  assert.equal(prune.code, 1, prune.out + prune.err);
  assert.match(prune.out, new RegExp(`would delete /api/v1/namespaces/${ns}/services/site`));
  await api.request('GET', `/api/v1/namespaces/${ns}/services/site`); // still there: the delete was a dry run

  const missing = await kfn(['myweb', `${ns}/nothere`]);
  assert.equal(missing.code, 2);
  assert.match(missing.err, new RegExp(`there is no MyWeb ${ns}/nothere`));
});
