// PodSet end to end: a Deployment of busybox pods, status.nodes tracking its running pods.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

test('PodSet: status.nodes follows its running pods through scale up, a pod deleted, scale down', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'podset');
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'apps.jicki.cn/v1alpha1', kind: 'PodSet', metadata: { name: 'bad' }, spec: { size: -1 } } }), /spec\.size in body should be greater than or equal to 0/);
  await s.api.request('POST', s.objects, { body: { apiVersion: 'apps.jicki.cn/v1alpha1', kind: 'PodSet', metadata: { name: 'ps' }, spec: { size: 2 } } });
  const runningPods = async () =>
    (await s.api.request<{ items: { metadata: { name: string; labels: Record<string, string>; deletionTimestamp?: string }; status: { phase: string } }[] }>('GET', `/api/v1/namespaces/${s.ns}/pods`, { query: { labelSelector: 'podSet_cr=ps' } })).items
      .filter((p) => p.status.phase === 'Running' && !p.metadata.deletionTimestamp)
      .map((p) => p.metadata.name)
      .sort();
  const nodes = async () => ((await s.api.request<{ status?: { nodes?: string[] } }>('GET', `${s.objects}/ps`)).status?.nodes ?? []).join();
  const inSync = (n: number) => waitFor(`status.nodes to list the ${n} running pods`, async () => {
    const pods = await runningPods();
    return (pods.length === n && (await nodes()) === pods.join()) || undefined;
  }, { timeoutMs: 60_000 });

  await inSync(2);
  const pods = await runningPods();
  const sample = await s.api.request<{ metadata: { labels: Record<string, string> }; spec: { containers: { image: string; command: string[] }[] } }>('GET', `/api/v1/namespaces/${s.ns}/pods/${pods[0]}`);
  assert.deepEqual([sample.metadata.labels.app, sample.metadata.labels.podSet_cr], ['podSet', 'ps']);
  assert.deepEqual([sample.spec.containers[0]!.image, ...sample.spec.containers[0]!.command], ['kfn.local/busybox:1.35', 'sleep', '3600']);

  await s.api.request('PATCH', `${s.objects}/ps`, { body: { spec: { size: 4 } }, contentType: 'application/merge-patch+json' });
  await inSync(4);
  // A pod goes away: its replacement shows up in status.
  await s.api.request('DELETE', `/api/v1/namespaces/${s.ns}/pods/${pods[0]}`, { query: { gracePeriodSeconds: 0 } });
  await waitFor('the deleted pod to leave status.nodes', async () => (!(await nodes()).includes(pods[0]!) && (await nodes()).split(',').length === 4) || undefined, { timeoutMs: 60_000 });
  await s.api.request('PATCH', `${s.objects}/ps`, { body: { spec: { size: 1 } }, contentType: 'application/merge-patch+json' });
  await inSync(1);
});
