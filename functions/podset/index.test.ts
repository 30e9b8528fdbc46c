// PodSet's reconcile without a cluster: a Deployment of spec.size, and status.nodes from the
// running pods carrying its label.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import PodSetFunction from './index.ts';

const set = { metadata: { name: 'ps', namespace: 'demo' }, spec: { size: 2 } };
const pod = (name: string, phase: string, owner = 'ps', extra: Record<string, unknown> = {}) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { app: 'podSet', podSet_cr: owner }, ...extra }, spec: { containers: [{ name: 'podset' }] }, status: { phase } });

test('a Deployment of spec.size pods labelled for the set', async () => {
  const out = await testReconcile(PodSetFunction, { object: set, reason: 'created' });
  const dep = out.child<{ spec: { replicas: number; template: { metadata: { labels: Record<string, string> } } } }>(Deployment, 'ps')!;
  assert.equal(dep.spec.replicas, 2);
  assert.equal(dep.spec.template.metadata.labels.podSet_cr, 'ps');
  assert.deepEqual([out.status?.nodes, out.ready?.message], [[], '0/2 pods running']);
});

test('status.nodes: its running pods only — not pending, terminating or another set\'s', async () => {
  const out = await testReconcile(PodSetFunction, {
    object: set,
    existing: [pod('ps-b', 'Running'), pod('ps-a', 'Running'), pod('ps-c', 'Pending'), pod('ps-d', 'Running', 'ps', { deletionTimestamp: '2026-01-01T00:00:00Z' }), pod('other-a', 'Running', 'other')],
  });
  assert.deepEqual(out.status?.nodes, ['ps-a', 'ps-b']);
  assert.equal(out.ready?.status, 'True');
});
