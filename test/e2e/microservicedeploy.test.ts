// MicroServiceDeploy end to end: Deployment, Service, ConfigMap; an HPA only while autoscaling;
// idle scales to zero.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../kube/api.ts';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

test('MicroServiceDeploy: children, HPA while autoscaling, idle to zero, config updates', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'microservicedeploy');
  const spec = { msName: 'ms-sample', fullName: 'ms-sample-v1s0', version: '1.0', path: 'v1', image: 'kfn.local/nginx:1.22', replicas: 2, autoscaling: true, needAuth: true, config: 'password=12345678', idle: false };
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'custom.ops/v1', kind: 'MicroServiceDeploy', metadata: { name: 'bad' }, spec: { ...spec, replicas: -2 } } }), /spec\.replicas in body should be greater than or equal to 0/);
  await s.api.request('POST', s.objects, { body: { apiVersion: 'custom.ops/v1', kind: 'MicroServiceDeploy', metadata: { name: 'ms-sample-v1s0' }, spec } });
  const ns = `/namespaces/${s.ns}`;
  const hpa = () => s.api.request<{ spec: { minReplicas: number; maxReplicas: number } }>('GET', `/apis/autoscaling/v2${ns}/horizontalpodautoscalers/ms-sample-v1s0`);
  const dep = () => s.api.request<{ spec: { replicas: number } }>('GET', `/apis/apps/v1${ns}/deployments/ms-sample-v1s0`);
  const found = await waitFor('Deployment, Service, ConfigMap and HPA', async () => {
    const [h] = await Promise.all([hpa(), dep(), s.api.request('GET', `/api/v1${ns}/services/ms-sample-v1s0`)]);
    return h;
  }, { timeoutMs: 60_000 });
  assert.deepEqual([found.spec.minReplicas, found.spec.maxReplicas], [2, 6]);
  const cm = await s.api.request<{ data: { config: string } }>('GET', `/api/v1${ns}/configmaps/ms-sample-v1s0-config`);
  assert.equal(cm.data.config, 'password=12345678');

  const patch = (p: object) => s.api.request('PATCH', `${s.objects}/ms-sample-v1s0`, { body: { spec: p }, contentType: 'application/merge-patch+json' });
  await patch({ autoscaling: false, config: 'password=changed' });
  await waitFor('the HPA to be removed and replicas set from the spec', async () => {
    const hpaGone = await hpa().then(() => false, (e) => e instanceof ApiError && e.status === 404);
    return (hpaGone && (await dep()).spec.replicas === 2) || undefined;
  }, { timeoutMs: 60_000 });
  await waitFor('the config to be updated', async () => (await s.api.request<{ data: { config: string } }>('GET', `/api/v1${ns}/configmaps/ms-sample-v1s0-config`)).data.config === 'password=changed' || undefined);

  await patch({ idle: true });
  await waitFor('idle to scale the Deployment to zero', async () => (await dep()).spec.replicas === 0 || undefined);
  await patch({ idle: false, replicas: 3 });
  await waitFor('back to 3 replicas', async () => (await dep()).spec.replicas === 3 || undefined);
});
