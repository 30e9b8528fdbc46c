// RedisCluster end to end: StatefulSet, headless Service, rendered redis.conf, ready replicas.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster, waitFor } from '../support/cluster.ts';
import { functionStack } from '../support/functions.ts';

test('RedisCluster: StatefulSet of size, headless Service, redis.conf, status ready replicas, config change rolls', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'rediscluster');
  const body = (spec: object) => ({ apiVersion: 'redis.io/v1beta1', kind: 'RedisCluster', metadata: { name: 'my-release' }, spec });
  await assert.rejects(s.api.request('POST', s.objects, { body: body({ size: 0 }) }), /spec\.size in body should be greater than or equal to 1/);
  await assert.rejects(s.api.request('POST', s.objects, { body: body({ size: 1, imagePullPolicy: 'Sometimes' }) }), /spec\.imagePullPolicy/);
  await s.api.request('POST', s.objects, { body: body({ size: 3, imagePullPolicy: 'IfNotPresent', resources: { limits: { cpu: '1000m', memory: '1Gi' } }, config: { maxclients: '10000', appendonly: 'yes' } }) });
  await waitFor('status.readyReplicas 3', async () => (await s.api.request<{ status?: { readyReplicas?: number } }>('GET', `${s.objects}/my-release`)).status?.readyReplicas === 3 || undefined, { timeoutMs: 90_000 });
  const svc = await s.api.request<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${s.ns}/services/my-release-headless`);
  assert.equal(svc.spec.clusterIP, 'None');
  const conf = () => s.api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${s.ns}/configmaps/my-release-config`).then((c) => c.data['redis.conf']);
  assert.equal(await conf(), 'appendonly yes\nmaxclients 10000\n');
  const sts = () => s.api.request<{ spec: { replicas: number; template: { metadata: { annotations: Record<string, string> } } } }>('GET', `/apis/apps/v1/namespaces/${s.ns}/statefulsets/my-release`);
  const before = (await sts()).spec.template.metadata.annotations['redis.kfn.dev/config-sha256'];
  await s.api.request('PATCH', `${s.objects}/my-release`, { body: { spec: { size: 2, config: { maxclients: '500' } } }, contentType: 'application/merge-patch+json' });
  await waitFor('the new config rendered and rolled out at size 2', async () => {
    const st = await sts();
    return ((await conf()) === 'appendonly yes\nmaxclients 500\n' && st.spec.replicas === 2 && st.spec.template.metadata.annotations['redis.kfn.dev/config-sha256'] !== before) || undefined;
  }, { timeoutMs: 60_000 });
});
