// RedisCluster without a cluster: config rendered over the pod defaults, a headless Service, a
// StatefulSet whose template changes with the config.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, Service, StatefulSet } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import RedisClusterFunction, { renderConfig } from './index.ts';

const redis = (config: Record<string, string> = {}, size = 3) => ({ metadata: { name: 'cache', namespace: 'demo' }, spec: { size, imagePullPolicy: 'IfNotPresent', config } });
type Sts = { spec: { replicas: number; serviceName: string; template: { metadata: { annotations: Record<string, string> } } } };

test('redis.conf: spec.config over the defaults, keys sorted', () => {
  assert.equal(renderConfig({ maxmemory: '100mb', 'protected-mode': 'yes' }), 'maxmemory 100mb\nprotected-mode yes\n');
  assert.equal(renderConfig({}), 'protected-mode no\n');
});

test('ConfigMap, headless Service and a StatefulSet of spec.size; a config change rolls the pods', async () => {
  const out = await testReconcile(RedisClusterFunction, { object: redis({ maxmemory: '100mb' }), reason: 'created' });
  assert.equal(out.child<{ data: Record<string, string> }>(ConfigMap, 'cache-config')?.data['redis.conf'], 'maxmemory 100mb\nprotected-mode no\n');
  assert.equal(out.child<{ spec: { clusterIP: string } }>(Service, 'cache-headless')?.spec.clusterIP, 'None');
  const sts = out.child<Sts>(StatefulSet, 'cache')!;
  assert.deepEqual([sts.spec.replicas, sts.spec.serviceName], [3, 'cache-headless']);
  const other = await testReconcile(RedisClusterFunction, { object: redis({ maxmemory: '200mb' }) });
  assert.notEqual(other.child<Sts>(StatefulSet, 'cache')!.spec.template.metadata.annotations['redis.kfn.dev/config-sha256'], sts.spec.template.metadata.annotations['redis.kfn.dev/config-sha256']);
});

test('Ready when every pod of the StatefulSet is', async () => {
  const live = (ready: number) => [{ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'cache' }, status: { readyReplicas: ready } }];
  const some = await testReconcile(RedisClusterFunction, { object: redis(), children: live(2) });
  assert.deepEqual([some.status?.readyReplicas, some.ready?.message], [2, '2/3 redis pods ready']);
  assert.equal((await testReconcile(RedisClusterFunction, { object: redis(), children: live(3) })).ready?.status, 'True');
});
