// Project end to end: the password reaches the Deployment through a Secret, and nowhere else.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { testCluster, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines } from '../support/functions.ts';

test('Project: Secret + Deployment reading it; the password appears in no ConfigMap, log, journal or status', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'project', { resyncPeriodSeconds: 3 });
  const password = `pw-${uniqueName('secret')}`;
  await assert.rejects(s.api.request('POST', s.objects, { body: { apiVersion: 'xyz.com/v1', kind: 'Project', metadata: { name: 'bad' }, spec: { password } } }), /spec\.image: Required value/);
  await s.api.request('POST', s.objects, { body: { apiVersion: 'xyz.com/v1', kind: 'Project', metadata: { name: 'abc-department' }, spec: { image: 'kfn.local/nginx:1.22', password } } });
  const project = await waitFor('status.Ready', async () => {
    const p = await s.api.request<{ status?: { Ready?: boolean } }>('GET', `${s.objects}/abc-department`);
    return p.status?.Ready === true ? p : undefined;
  }, { timeoutMs: 60_000 });
  const secret = await s.api.request<{ data: { password: string } }>('GET', `/api/v1/namespaces/${s.ns}/secrets/abc-department-credentials`);
  assert.equal(Buffer.from(secret.data.password, 'base64').toString(), password);
  const dep = await s.api.request<{ spec: { template: { spec: { containers: { env: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[] }[] } } } }>('GET', `/apis/apps/v1/namespaces/${s.ns}/deployments/abc-department`);
  const env = dep.spec.template.spec.containers[0]!.env[0]!;
  assert.deepEqual(env, { name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'abc-department-credentials', key: 'password' } } });

  // Wait for two resyncs (each re-reads and may rewrite the status), then look everywhere the
  // password must not be — the status read after them, not the one from before.
  await waitFor('two resyncs of the Project', async () => (journalLines(s.journal).filter((l) => l.reason === 'resync').length >= 2 ? true : undefined), { timeoutMs: 30_000 });
  const after = await s.api.request<{ status?: Record<string, unknown> }>('GET', `${s.objects}/abc-department`);
  assert.ok(after.status && Object.keys(after.status).length > 0, 'the status is there to check');
  assert.ok(!JSON.stringify(after.status).includes(password), 'not in the status');
  assert.ok(!JSON.stringify(project.status).includes(password), 'nor in the status seen at Ready');
  const configMaps = await s.api.request<{ items: unknown[] }>('GET', `/api/v1/namespaces/${s.ns}/configmaps`);
  assert.ok(!JSON.stringify(configMaps).includes(password), 'not in any ConfigMap');
  for (const file of readdirSync(s.dir).filter((f) => f.endsWith('.log') || f.endsWith('.jsonl'))) {
    assert.ok(!readFileSync(join(s.dir, file), 'utf8').includes(password), `not in ${file}`);
  }
  const resyncs = journalLines(s.journal).filter((l) => l.reason === 'resync');
  // The children are never rewritten by a resync: the Secret (data given base64) compares equal
  // to the live one. (The status may still change on a resync if the Deployment's availability
  // did meanwhile — seen once on a loaded machine — which is the status doing its job.)
  const rewritten = resyncs.flatMap((l) => (l.response?.changes ?? []).filter((c) => c.action !== 'status').map((c) => JSON.stringify(c)));
  assert.ok(resyncs.length > 0 && rewritten.length === 0, `an idle Project rewrites no child (the Secret compares equal); resyncs wrote: ${rewritten.join('; ')}`);
});
