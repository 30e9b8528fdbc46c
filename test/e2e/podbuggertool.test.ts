// PodBuggerTool end to end: matching pods get one ephemeral debug container each.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines } from '../support/functions.ts';

interface LivePod {
  spec: { ephemeralContainers?: { name: string; image: string }[] };
  status?: { ephemeralContainerStatuses?: { name: string; state?: { running?: { startedAt: string } } }[] };
}

test('PodBuggerTool: pods matching the selector get a debug container, once; status lists them', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'podbuggertool');
  const pod = (name: string, labels: Record<string, string>) => s.api.request('POST', `/api/v1/namespaces/${s.ns}/pods`, { body: { apiVersion: 'v1', kind: 'Pod', metadata: { name, labels }, spec: { containers: [{ name: 'main', image: 'kfn.local/nginx:1.22' }] } } });
  await pod('before-1', { app: 'shop', tier: 'web' });
  await pod('ignored', { app: 'other' });
  await s.api.request('POST', s.objects, {
    body: { apiVersion: 'apps.jicki.cn/v1alpha1', kind: 'PodBuggerTool', metadata: { name: 'bugger' }, spec: { selector: { matchLabels: { app: 'shop' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['web', 'api'] }] }, image: 'kfn.local/busybox:1.35' } },
  });
  const debugged = async () => ((await s.api.request<{ status?: { debuggedPods?: string[] } }>('GET', `${s.objects}/bugger`)).status?.debuggedPods ?? []).join();
  await waitFor('the existing matching pod to be debugged', async () => (await debugged()) === 'before-1' || undefined, { timeoutMs: 60_000 });
  // A pod created later is mapped to the tool by its selector.
  await pod('after-1', { app: 'shop', tier: 'api' });
  await waitFor('the new matching pod to be debugged too', async () => (await debugged()) === 'after-1,before-1' || undefined, { timeoutMs: 60_000 });
  const p = await s.api.request<LivePod>('GET', `/api/v1/namespaces/${s.ns}/pods/before-1`);
  assert.deepEqual(p.spec.ephemeralContainers?.map((c) => [c.name, c.image]), [['podbugger-bugger', 'kfn.local/busybox:1.35']]);
  // The kubelet really starts it in the target pod.
  await waitFor('the debug container to run in pod before-1', async () => {
    const live = await s.api.request<LivePod>('GET', `/api/v1/namespaces/${s.ns}/pods/before-1`);
    return live.status?.ephemeralContainerStatuses?.find((c) => c.name === 'podbugger-bugger')?.state?.running || undefined;
  }, { timeoutMs: 60_000 });
  const ignored = await s.api.request<LivePod>('GET', `/api/v1/namespaces/${s.ns}/pods/ignored`);
  assert.equal(ignored.spec.ephemeralContainers, undefined, 'a pod the selector does not match is left alone');
  // Once: more events (a label change on a debugged pod) add nothing.
  const patched = await s.api.request<{ metadata: { resourceVersion: string } }>('PATCH', `/api/v1/namespaces/${s.ns}/pods/before-1`, { body: { metadata: { labels: { extra: 'x' } } }, contentType: 'application/merge-patch+json' });
  const delivery = await waitFor('the label change to be delivered to the tool', async () =>
    journalLines(s.journal).find((l) => l.reason === 'mapped' && l.trigger?.name === 'before-1' && Number(l.trigger.resourceVersion) >= Number(patched.metadata.resourceVersion) && l.outcome === 'done'),
  );
  assert.equal(delivery.attempt, 1, 'answered at once, not failed on a second debug container');
  const again = await s.api.request<LivePod>('GET', `/api/v1/namespaces/${s.ns}/pods/before-1`);
  assert.equal(again.spec.ephemeralContainers?.length, 1);
});
