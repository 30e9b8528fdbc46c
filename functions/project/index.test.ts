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

for (const contract of [2, 1] as const) {
  test(`the password, a field the kind marks sensitive, is in no record, log, message or answer — even one the apiserver echoes (contract ${contract})`, async () => {
    const echoed = `Secret "p-credentials" is invalid: metadata.annotations: Invalid value: "s3cret"`;
    const out = await testReconcile(ProjectFunction, { object: project, reason: 'created', contract, refuse: (w) => (w.path.includes('/secrets') ? { status: 422, message: echoed } : undefined) });
    const everything = JSON.stringify({ event: out.event, reads: out.reads, writes: out.writes, logs: out.logs, ready: out.ready, status: out.status, result: out.result, error: out.error?.message });
    assert.doesNotMatch(everything, /s3cret/);
    // The primary as the record has it: in the event (contract 2), or as it was read (contract 1).
    const primary = (contract === 2 ? out.event.data.observed!.primary : out.reads.find((r) => r.path.endsWith('/projects/p'))!.response) as { spec: { password: string } };
    assert.match(primary.spec.password, /^redacted:hmac:[0-9a-f]{16}$/, 'the record keeps a digest');
    assert.match(out.ready?.message ?? '', /Invalid value: "redacted:hmac:[0-9a-f]{16}"/, 'the refusal is still explained');
  });
}
