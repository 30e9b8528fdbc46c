// RedisCluster end to end: StatefulSet, headless Service, rendered redis.conf, ready replicas.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

test('RedisCluster: StatefulSet of size, headless Service, redis.conf, status ready replicas, config change rolls', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'rediscluster');
  const body = (spec: object) => ({ apiVersion: 'redis.io/v1beta1', kind: 'RedisCluster', metadata: { name: 'my-release' }, spec });
  await assert.rejects(s.api.request('POST', s.objects, { body: body({ size: 0 }) }), /spec\.size in body should be greater than or equal to 1/);
  await assert.rejects(s.api.request('POST', s.objects, { body: body({ size: 1, imagePullPolicy: 'Sometimes' }) }), /spec\.imagePullPolicy/);
  await s.api.request('POST', s.objects, { body: body({ size: 3, imagePullPolicy: 'IfNotPresent', resources: { requests: { cpu: '50m', memory: '32Mi' }, limits: { cpu: '500m', memory: '256Mi' } }, config: { maxclients: '10000', appendonly: 'yes' } }) });
  await waitFor('status.readyReplicas 3', async () => (await s.api.request<{ status?: { readyReplicas?: number } }>('GET', `${s.objects}/my-release`)).status?.readyReplicas === 3 || undefined, { timeoutMs: 90_000 });
  const svc = await s.api.request<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${s.ns}/services/my-release-headless`);
  assert.equal(svc.spec.clusterIP, 'None');
  const conf = () => s.api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${s.ns}/configmaps/my-release-config`).then((c) => c.data['redis.conf']);
  assert.equal(await conf(), 'appendonly yes\nmaxclients 10000\nprotected-mode no\n');
  // redis really runs the rendered config: redis-cli from a pod, through the headless Service's DNS.
  const cli = async (name: string, args: string) => {
    await s.api.request('POST', `/api/v1/namespaces/${s.ns}/pods`, {
      body: { apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { restartPolicy: 'Never', containers: [{ name: 'cli', image: 'kfn.local/redis:7.0', command: ['sh', '-c', `redis-cli -h my-release-0.my-release-headless ${args}`] }] } },
    });
    await waitFor(`redis-cli pod ${name} to finish`, async () => (await s.api.request<{ status?: { phase?: string } }>('GET', `/api/v1/namespaces/${s.ns}/pods/${name}`)).status?.phase === 'Succeeded' || undefined, { timeoutMs: 60_000 });
    return s.api.text('GET', `/api/v1/namespaces/${s.ns}/pods/${name}/log`);
  };
  assert.equal(await cli('cli-1', 'CONFIG GET maxclients'), 'maxclients\n10000\n');
  assert.equal(await cli('cli-2', 'CONFIG GET appendonly'), 'appendonly\nyes\n');
  const sts = () => s.api.request<{ spec: { replicas: number; template: { metadata: { annotations: Record<string, string> } } } }>('GET', `/apis/apps/v1/namespaces/${s.ns}/statefulsets/my-release`);
  const before = (await sts()).spec.template.metadata.annotations['redis.kfn.dev/config-sha256'];
  await s.api.request('PATCH', `${s.objects}/my-release`, { body: { spec: { size: 2, config: { maxclients: '500' } } }, contentType: 'application/merge-patch+json' });
  await waitFor('the new config rendered and rolled out at size 2', async () => {
    const st = await sts();
    return ((await conf()) === 'appendonly yes\nmaxclients 500\nprotected-mode no\n' && st.spec.replicas === 2 && st.spec.template.metadata.annotations['redis.kfn.dev/config-sha256'] !== before) || undefined;
  }, { timeoutMs: 60_000 });
  await waitFor('redis pod 0 to run the new config', async () => {
    const name = `cli-${Date.now()}`;
    return (await cli(name, 'CONFIG GET maxclients')) === 'maxclients\n500\n' || undefined;
  }, { timeoutMs: 120_000, intervalMs: 2000 });
});
