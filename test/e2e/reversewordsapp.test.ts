// ReverseWordsApp end to end: the seed's Deployment and Service, appPods and both conditions,
// and a finalizer that cleans up before deletion but never blocks it forever.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../kube/api.ts';
import { lockedAnnotation } from '../../functions/reversewordsapp/index.ts';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

interface Cond {
  type: string;
  status: string;
  reason: string;
}

test('ReverseWordsApp: children, appPods, conditions, finalizer cleanup, bounded finalizer retries', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'reversewordsapp');
  const body = (name: string, spec: Record<string, unknown>) => ({ apiVersion: 'apps.linuxera.org/v1alpha1', kind: 'ReverseWordsApp', metadata: { name }, spec });
  await assert.rejects(s.api.request('POST', s.objects, { body: body('bad', { replicas: 0 }) }), /spec\.replicas in body should be greater than or equal to 1/);
  await s.api.request('POST', s.objects, { body: body('rw', { replicas: 2 }) });
  const app = () => s.api.request<{ metadata: { finalizers?: string[] }; status?: { appPods?: string[]; conditions?: Cond[] } }>('GET', `${s.objects}/rw`);
  const ready = await waitFor('Ready with two appPods', async () => {
    const a = await app();
    return (a.status?.appPods?.length === 2 && a.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) ? a : undefined;
  }, { timeoutMs: 60_000 });
  const notReady = ready.status!.conditions!.find((c) => c.type === 'ReverseWordsDeploymentNotReady');
  assert.deepEqual([notReady?.status, notReady?.reason], ['False', 'ReverseWordsDeploymentNotReady']);
  assert.deepEqual(ready.metadata.finalizers, ['kfn.dev/reversewordsapp']);
  const dep = await s.api.request<{ spec: { template: { spec: { containers: { image: string; ports: { containerPort: number }[]; livenessProbe: { httpGet: { path: string } } }[] } } } }>('GET', `/apis/apps/v1/namespaces/${s.ns}/deployments/dp-rw`);
  const c = dep.spec.template.spec.containers[0]!;
  assert.equal(c.image, 'kfn.local/reversewords:latest', 'appVersion defaults to latest');
  assert.equal(c.ports[0]!.containerPort, 8080);
  assert.equal(c.livenessProbe.httpGet.path, '/health');
  const svc = await s.api.request<{ spec: { type: string; ports: { port: number }[] } }>('GET', `/api/v1/namespaces/${s.ns}/services/service-rw`);
  assert.deepEqual([svc.spec.type, svc.spec.ports[0]!.port], ['LoadBalancer', 8080]);
  await s.api.request('GET', `/api/v1/namespaces/${s.ns}/configmaps/reversewords-cache-rw`);

  // Delete: the finalizer removes the cache first, then the object goes.
  await s.api.request('DELETE', `${s.objects}/rw`);
  const gone = (path: string) => s.api.request('GET', path).then(() => undefined, (e) => (e instanceof ApiError && e.status === 404) || undefined);
  await waitFor('the object to be gone after cleanup', () => gone(`${s.objects}/rw`), { timeoutMs: 30_000 });
  assert.ok(await gone(`/api/v1/namespaces/${s.ns}/configmaps/reversewords-cache-rw`), 'the cache was cleaned up');

  // A cleanup that keeps failing: retried with backoff, then given up on with an Event.
  await s.api.request('POST', s.objects, { body: body('stuck', { replicas: 1 }) });
  await waitFor('the cache of stuck', () => s.api.request('GET', `/api/v1/namespaces/${s.ns}/configmaps/reversewords-cache-stuck`));
  await s.api.request('PATCH', `/api/v1/namespaces/${s.ns}/configmaps/reversewords-cache-stuck`, { body: { metadata: { annotations: { [lockedAnnotation]: 'true' } } }, contentType: 'application/merge-patch+json' });
  await s.api.request('DELETE', `${s.objects}/stuck`);
  await waitFor('deletion to finish despite the failing cleanup', () => gone(`${s.objects}/stuck`), { timeoutMs: 60_000 });
  const events = await s.api.request<{ items: { reason: string; message: string }[] }>('GET', `/api/v1/namespaces/${s.ns}/events`, { query: { fieldSelector: 'involvedObject.name=stuck' } });
  const gaveUp = events.items.find((e) => e.reason === 'FinalizerGaveUp');
  assert.ok(gaveUp, 'a Warning Event says the finalizer gave up');
  assert.match(gaveUp.message, /cleanup kept failing for \d+s since its first failure \(finalizeTimeoutSeconds 15\), last: .*is locked/);
  assert.ok(events.items.some((e) => e.reason === 'FinalizeFailed'), 'each failure before that said why the object stayed');
});
