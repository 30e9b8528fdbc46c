// MyApp's reconcile without a cluster: the Deployment follows the spec; readyReplicas and Ready
// follow the live Deployment (the seed's scenarios, as far as they are the function's).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import MyAppFunction from './index.ts';

const app = (replicas: number, image = 'kfn.local/nginx:1.22') => ({ metadata: { name: 'a', namespace: 'demo' }, spec: { replicas, image } });
type Dep = { spec: { replicas: number; template: { spec: { containers: { image: string }[] } } } };

test('the Deployment has the spec replicas and image', async () => {
  const out = await testReconcile(MyAppFunction, { object: app(3, 'kfn.local/nginx:1.23'), reason: 'created' });
  const dep = out.child<Dep>(Deployment, 'a')!;
  assert.deepEqual([dep.spec.replicas, dep.spec.template.spec.containers[0]!.image], [3, 'kfn.local/nginx:1.23']);
  assert.deepEqual([out.status?.readyReplicas, out.ready?.reason], [0, 'ReplicasNotReady']);
});

test('readyReplicas from the live Deployment; Ready when all are', async () => {
  const live = (ready: number) => [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'a' }, status: { readyReplicas: ready } }];
  const partly = await testReconcile(MyAppFunction, { object: app(3), children: live(2) });
  assert.deepEqual([partly.status?.readyReplicas, partly.ready?.message], [2, '2/3 replicas ready']);
  const all = await testReconcile(MyAppFunction, { object: app(3), children: live(3) });
  assert.equal(all.ready?.status, 'True');
  const zero = await testReconcile(MyAppFunction, { object: app(0) });
  assert.equal(zero.ready?.status, 'True', 'zero replicas wanted, zero ready');
});
