// Project's reconcile without a cluster: the password only in a Secret, the Deployment reading it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment, Secret } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import ProjectFunction from './index.ts';

const project = { metadata: { name: 'p', namespace: 'demo' }, spec: { image: 'kfn.local/nginx:1.22', password: 's3cret' } };

test('the password goes into a Secret and reaches the container only by reference', async () => {
  const out = await testReconcile(ProjectFunction, { object: project, reason: 'created' });
  const secret = out.child<{ data: Record<string, string> }>(Secret, 'p-credentials')!;
  assert.equal(Buffer.from(secret.data.password!, 'base64').toString(), 's3cret');
  const dep = out.child<{ spec: { template: { spec: { containers: { env: unknown[] }[] } } } }>(Deployment, 'p')!;
  assert.deepEqual(dep.spec.template.spec.containers[0]!.env, [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'p-credentials', key: 'password' } } }]);
  assert.doesNotMatch(JSON.stringify(dep), /s3cret/);
  assert.deepEqual([out.status?.Ready, out.ready?.status], [false, 'False']);
});

test('Ready once the Deployment is available', async () => {
  const out = await testReconcile(ProjectFunction, { object: project, children: [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'p' }, status: { availableReplicas: 1 } }] });
  assert.deepEqual([out.status?.Ready, out.ready?.status], [true, 'True']);
});
