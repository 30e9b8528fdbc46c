// ReverseWordsApp without a cluster: Deployment, Service and the cache ConfigMap (created once,
// outside the app's ownership); two conditions; finalize removes the cache, refuses while locked.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, Deployment, Service } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import ReverseWordsAppFunction, { lockedAnnotation } from './index.ts';

const app = (extra: Record<string, unknown> = {}) => ({ metadata: { name: 'rw', namespace: 'demo', ...extra }, spec: { replicas: 2, appVersion: 'v0.0.2' } });
const cache = (annotations: Record<string, string> = {}) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'reversewords-cache-rw', labels: { app: 'rw' }, annotations }, data: { words: '' } });

test('Deployment of the app version, a Service, and the cache ConfigMap created once, not owned', async () => {
  const out = await testReconcile(ReverseWordsAppFunction, { object: app(), reason: 'created' });
  const dep = out.child<{ spec: { replicas: number; template: { spec: { containers: { image: string }[] } } } }>(Deployment, 'dp-rw')!;
  assert.deepEqual([dep.spec.replicas, dep.spec.template.spec.containers[0]!.image], [2, 'kfn.local/reversewords:v0.0.2']);
  assert.ok(out.child(Service, 'service-rw'));
  const created = out.get<{ metadata: { ownerReferences?: unknown[] } }>(ConfigMap, 'reversewords-cache-rw');
  assert.ok(created, 'the cache exists');
  assert.equal(created.metadata.ownerReferences, undefined, 'not owned: only the finalizer removes it');
  assert.equal(out.writes.filter((w) => w.method === 'POST' && w.path.endsWith('/configmaps')).length, 1);
  const again = await testReconcile(ReverseWordsAppFunction, { object: app(), existing: [cache()] });
  assert.equal(again.writes.filter((w) => w.method === 'POST' && w.path.endsWith('/configmaps')).length, 0, 'an existing cache is kept');
});

test('Ready and ReverseWordsDeploymentNotReady follow the Deployment; appPods lists running pods', async () => {
  const pods = ['rw-1', 'rw-2'].map((name) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { app: 'rw' } }, status: { phase: 'Running' } }));
  const out = await testReconcile(ReverseWordsAppFunction, { object: app(), existing: [cache(), ...pods], children: [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'dp-rw' }, status: { readyReplicas: 2 } }] });
  assert.equal(out.ready?.status, 'True');
  assert.equal(out.condition('ReverseWordsDeploymentNotReady')?.status, 'False');
  assert.deepEqual(out.status?.appPods, ['rw-1', 'rw-2']);
  const notReady = await testReconcile(ReverseWordsAppFunction, { object: app(), existing: [cache()] });
  assert.deepEqual([notReady.ready?.status, notReady.condition('ReverseWordsDeploymentNotReady')?.status], ['False', 'True']);
});

test('deleted: finalize removes the cache and records an Event; a locked cache keeps the object, with the reason', async () => {
  const deleting = app({ finalizers: [ReverseWordsAppFunction.finalizer], deletionTimestamp: '2026-01-01T00:00:00Z' });
  const now = new Date('2026-01-01T00:00:03Z');
  const out = await testReconcile(ReverseWordsAppFunction, { object: deleting, reason: 'deleted', existing: [cache()], now });
  assert.equal(out.error, undefined);
  assert.equal(out.get(ConfigMap, 'reversewords-cache-rw'), undefined);
  assert.ok(out.events.some((e) => e.reason === 'Finalized'));
  const locked = await testReconcile(ReverseWordsAppFunction, { object: deleting, reason: 'deleted', existing: [cache({ [lockedAnnotation]: 'true' })], now });
  assert.match(String(locked.error?.message), /locked/);
  assert.ok(locked.get(ConfigMap, 'reversewords-cache-rw'), 'the cache stays');
  assert.ok(locked.events.some((e) => e.type === 'Warning' && e.reason === 'FinalizeFailed'), locked.events.map((e) => e.reason).join());
});
