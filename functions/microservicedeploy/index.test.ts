// MicroServiceDeploy without a cluster: the HPA comes and goes with autoscaling, idle scales to
// zero (and drops the HPA), resource requirements reach the container.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment, HorizontalPodAutoscaler } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import MicroServiceDeployFunction from './index.ts';

const ms = (spec: Record<string, unknown> = {}) => ({
  metadata: { name: 'orders', namespace: 'demo' },
  spec: { msName: 'orders', fullName: 'orders-v1', version: '1.0.0', path: 'v1', image: 'kfn.local/nginx:1.22', replicas: 2, autoscaling: false, needAuth: false, config: 'A=1', idle: false, ...spec },
});
type Dep = { spec: { replicas?: number; template: { spec: { containers: { resources?: unknown }[] } } } };

test('without autoscaling: the Deployment has the replicas, no HPA', async () => {
  const out = await testReconcile(MicroServiceDeployFunction, { object: ms(), reason: 'created' });
  assert.deepEqual(out.children.map((c) => c.kind), ['ConfigMap', 'Deployment', 'Service']);
  assert.equal(out.child<Dep>(Deployment, 'orders-v1')?.spec.replicas, 2);
});

test('autoscaling: an HPA owns the replica count (the Deployment leaves it out); switched off, the HPA is pruned', async () => {
  const on = await testReconcile(MicroServiceDeployFunction, { object: ms({ autoscaling: true }) });
  const hpa = on.child<{ spec: { minReplicas: number; maxReplicas: number } }>(HorizontalPodAutoscaler, 'orders-v1')!;
  assert.deepEqual([hpa.spec.minReplicas, hpa.spec.maxReplicas], [2, 6]);
  assert.equal(on.child<Dep>(Deployment, 'orders-v1')?.spec.replicas, undefined);
  const off = await testReconcile(MicroServiceDeployFunction, { object: ms(), children: [on.child(HorizontalPodAutoscaler, 'orders-v1')!] });
  assert.deepEqual(off.pruned.map((p) => `${p.kind}/${p.name}`), ['HorizontalPodAutoscaler/orders-v1']);
});

test('idle: zero replicas, no HPA even with autoscaling, Ready with none available', async () => {
  const out = await testReconcile(MicroServiceDeployFunction, { object: ms({ idle: true, autoscaling: true }) });
  assert.equal(out.child<Dep>(Deployment, 'orders-v1')?.spec.replicas, 0);
  assert.equal(out.child(HorizontalPodAutoscaler, 'orders-v1'), undefined);
  assert.equal(out.ready?.status, 'True');
});

test('resource requirements reach the container; Ready from available replicas', async () => {
  const resources = { limits: { cpu: '500m', memory: '256Mi' } };
  const out = await testReconcile(MicroServiceDeployFunction, { object: ms({ resourceRequirements: resources }), children: [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'orders-v1' }, status: { availableReplicas: 1 } }] });
  assert.deepEqual(out.child<Dep>(Deployment, 'orders-v1')?.spec.template.spec.containers[0]!.resources, resources);
  assert.deepEqual([out.ready?.status, out.ready?.message], ['False', '1 of at least 2 replicas available']);
});
