// MyApp end to end: the seed's four scenarios of one reconcile loop.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../kube/api.ts';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines } from '../support/functions.ts';

interface Dep {
  metadata: { resourceVersion: string; generation?: number; ownerReferences?: { uid: string }[] };
  spec: { replicas: number; template: { spec: { containers: { image: string }[] } } };
  status?: { readyReplicas?: number; observedGeneration?: number; updatedReplicas?: number };
}

test('MyApp: create (A), image change (B), nothing to do (C), delete (D)', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'myapp', { resyncPeriodSeconds: 3 });
  const deployment = () => s.api.request<Dep>('GET', `/apis/apps/v1/namespaces/${s.ns}/deployments/my-app-instance`);
  // The seed's obvious mistakes are rejected by the CRD.
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'bad' }, spec: { replicas: -1, image: 'nginx' } } }), /replicas in body should be greater than or equal to 0/);
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'bad' }, spec: { replicas: 1 } } }), /spec\.image: Required value/);

  // A: the Deployment does not exist → created.
  const app = await s.api.request<{ metadata: { uid: string } }>('POST', s.objects, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'my-app-instance' }, spec: { replicas: 2, image: 'kfn.local/nginx:1.22' } } });
  const created = await waitFor('scenario A: the Deployment is created and ready', async () => {
    const d = await deployment();
    return d.status?.readyReplicas === 2 ? d : undefined;
  }, { timeoutMs: 60_000 });
  assert.equal(created.spec.replicas, 2);
  assert.equal(created.spec.template.spec.containers[0]!.image, 'kfn.local/nginx:1.22');
  assert.equal(created.metadata.ownerReferences?.[0]?.uid, app.metadata.uid);
  await waitFor('MyApp Ready', async () => {
    const a = await s.api.request<{ status?: { readyReplicas?: number; conditions?: { type: string; status: string }[] } }>('GET', `${s.objects}/my-app-instance`);
    return (a.status?.readyReplicas === 2 && a.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) || undefined;
  });

  // B: the image changes → the Deployment is updated.
  await s.api.request('PATCH', `${s.objects}/my-app-instance`, { body: { spec: { image: 'kfn.local/busybox:1.35' } }, contentType: 'application/merge-patch+json' });
  await waitFor('scenario B: the Deployment runs the new image', async () => (await deployment()).spec.template.spec.containers[0]!.image === 'kfn.local/busybox:1.35' || undefined);

  // C: everything is right → resyncs come and go without a write. First the rollout of B settles
  // (the Deployment controller's own status writes are not the function's).
  // (B's image exits at once, so the rollout never completes: settled means the controller has
  // seen the change and its status stays put between two looks.)
  await settled('the Deployment controller to settle after B', async () => {
    const d = await deployment();
    return d.status?.observedGeneration === d.metadata.generation ? d.metadata.resourceVersion : undefined;
  }, 1500);
  // And the function has answered the settled Deployment: MyApp's status stays put between two
  // looks (its last write may come with the next delivery, which could otherwise be C's first resync).
  await settled('MyApp to settle after B', async () => (await s.api.request<{ metadata: { resourceVersion: string } }>('GET', `${s.objects}/my-app-instance`)).metadata.resourceVersion, 3000);
  // The crash-looping pods keep the Deployment controller writing its status: the function's own
  // writes would change the Deployment's spec, and with it its generation.
  const generation = (await deployment()).metadata.generation;
  const cursor = journalLines(s.journal).length;
  await waitFor('two resyncs', async () => journalLines(s.journal).slice(cursor).filter((l) => l.reason === 'resync').length >= 2 || undefined, { timeoutMs: 15_000 });
  const resyncs = journalLines(s.journal).slice(cursor).filter((l) => l.reason === 'resync');
  assert.deepEqual(resyncs.map((l) => l.response?.changes?.length ?? 0), resyncs.map(() => 0), `scenario C: nothing to do, no writes; the resyncs wrote ${JSON.stringify(resyncs.map((l) => l.response?.changes ?? []))}`);
  assert.equal((await deployment()).metadata.generation, generation, 'the Deployment was not touched');

  // D: the MyApp is deleted → its Deployment goes too.
  await s.api.request('DELETE', `${s.objects}/my-app-instance`);
  await waitFor('scenario D: the Deployment is deleted', async () => deployment().then(() => undefined, (err) => (err instanceof ApiError && err.status === 404) || undefined), { timeoutMs: 60_000 });
});

/** Waits until `look` gives the same defined value at two looks in a row, `intervalMs` apart. */
async function settled(what: string, look: () => Promise<string | undefined>, intervalMs: number): Promise<void> {
  let last: string | undefined;
  await waitFor(what, async () => {
    const now = await look();
    const stable = now !== undefined && now === last;
    last = now;
    return stable || undefined;
  }, { timeoutMs: 60_000, intervalMs });
}
