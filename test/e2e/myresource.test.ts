// MyResource end to end: a ConfigMap and a Job, status.state following the Job, the seed's
// `kubectl get` columns and short names.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ApiError } from '../../kube/api.ts';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

const run = promisify(execFile);

test('MyResource: ConfigMap and Job, state follows the Job, kubectl columns, update, drift, delete', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'myresource');
  const kubectl = (...args: string[]) => run(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, '-n', s.ns, ...args]).then((r) => r.stdout);
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'mygroup.example.com/v1alpha1', kind: 'MyResource', metadata: { name: 'bad' }, spec: { memory: '1Gi' } } }), /spec\.image: Required value/);
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'mygroup.example.com/v1alpha1', kind: 'MyResource', metadata: { name: 'bad' }, spec: { image: 'nginx', memory: '-5' } } }), /spec\.memory/);

  await s.api.request('POST', s.objects, { body: { apiVersion: 'mygroup.example.com/v1alpha1', kind: 'MyResource', metadata: { name: 'myres1' }, spec: { image: 'kfn.local/busybox:1.35', memory: '1024Mi' } } });
  const state = async () => (await s.api.request<{ status?: { state?: string } }>('GET', `${s.objects}/myres1`)).status?.state;
  await waitFor('state Succeeded once the Job completes', async () => (await state()) === 'Succeeded' || undefined, { timeoutMs: 90_000 });
  const cm = await s.api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${s.ns}/configmaps/myres1`);
  assert.deepEqual(cm.data, { image: 'kfn.local/busybox:1.35', memory: '1024Mi' });
  const jobs = async () => (await s.api.request<{ items: { metadata: { name: string }; spec: { template: { spec: { containers: { image: string }[] } } } }[] }>('GET', `/apis/batch/v1/namespaces/${s.ns}/jobs`)).items;
  assert.equal((await jobs()).length, 1);

  // The seed's `kubectl get` view, by plural and by short names.
  const table = await kubectl('get', 'myresources');
  assert.match(table, /^NAME\s+IMAGE\s+MEMORY\s+AGE\n/);
  assert.match(table, /myres1\s+kfn\.local\/busybox:1\.35\s+1024Mi\s+\S+/);
  for (const short of ['my', 'myres']) assert.match(await kubectl('get', short), /myres1/);

  // Update: a new Job for the new spec; the old one is pruned; state follows the new Job.
  await s.api.request('PATCH', `${s.objects}/myres1`, { body: { spec: { image: 'kfn.local/node:24' } }, contentType: 'application/merge-patch+json' });
  await waitFor('one Job, running the new image', async () => {
    const js = await jobs();
    return (js.length === 1 && js[0]!.spec.template.spec.containers[0]!.image === 'kfn.local/node:24') || undefined;
  }, { timeoutMs: 60_000 });
  await waitFor('state Succeeded for the new Job', async () => (await state()) === 'Succeeded' || undefined, { timeoutMs: 90_000 });

  // Drift: the ConfigMap is deleted by hand and comes back.
  await s.api.request('DELETE', `/api/v1/namespaces/${s.ns}/configmaps/myres1`);
  await waitFor('the ConfigMap to be recreated', () => s.api.request('GET', `/api/v1/namespaces/${s.ns}/configmaps/myres1`));

  await s.api.request('DELETE', `${s.objects}/myres1`);
  await waitFor('children gone', async () => {
    const cmGone = await s.api.request('GET', `/api/v1/namespaces/${s.ns}/configmaps/myres1`).then(() => false, (e) => e instanceof ApiError && e.status === 404);
    return (cmGone && (await jobs()).length === 0) || undefined;
  }, { timeoutMs: 60_000 });
});
