// Admission webhooks from the same function, called by the real kube-apiserver: MyApp's
// defaults are visible on the stored object, a Chore's validate() (test/support/webhook-fn)
// refuses with the field path (as kubectl prints it), and a function that cannot answer fails
// the write naming the webhook.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { cachedBinaries } from '../../cluster/build.ts';
import { testCluster, untilDefaultsApply, untilWebhookRefuses } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack } from '../support/functions.ts';

interface MyAppObject {
  metadata: { name: string };
  spec: { replicas: number; image: string };
  status?: { conditions?: { type: string; status: string }[] };
}

test("MyApp's webhook on the apiserver: defaulting stored, then the CRD's rules refuse by field (on the defaulted object), a function that is down fails the write by name", async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'myapp', { webhooks: true });
  const body = (name: string, spec: object) => ({ apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name }, spec });

  // The apiserver takes a moment to start calling a new webhook (until then writes go through
  // undefaulted): wait until one is defaulted, then every write below meets it.
  await untilDefaultsApply<MyAppObject>(s.api, s.objects, (n) => body(`probe-${n}`, { replicas: 1, image: 'kfn.local/nginx' }), (o) => o.spec.image === 'kfn.local/nginx:latest');

  // Defaulting: the stored object carries what default() set; the reconcile sees it too.
  const created = await s.api.request<MyAppObject>('POST', s.objects, { body: body('web', { replicas: 1, image: 'kfn.local/nginx' }) });
  assert.equal(created.spec.image, 'kfn.local/nginx:latest', 'defaulted before it was stored');
  assert.equal((await s.api.request<MyAppObject>('GET', `${s.objects}/web`)).spec.image, 'kfn.local/nginx:latest');
  await waitFor('the Deployment of the defaulted MyApp', async () => {
    const d = await s.api.request<{ spec: { template: { spec: { containers: { image: string }[] } } } }>('GET', `/apis/apps/v1/namespaces/${s.ns}/deployments/web`);
    return d.spec.template.spec.containers[0]!.image === 'kfn.local/nginx:latest' || undefined;
  });

  // Validation, the CRD's rules: refused with every problem by its field, on create and on update.
  await assert.rejects(
    s.api.request('POST', s.objects, { body: body('big', { replicas: 11, image: 'Nginx' }) }),
    (err: Error) => {
      assert.match(err.message, /spec\.replicas: Invalid value: 11: must be ≤ 10/);
      assert.match(err.message, /spec\.image: Invalid value: "Nginx:latest": is not an image reference/, 'validated after defaulting');
      return true;
    },
  );
  await assert.rejects(s.api.request('PATCH', `${s.objects}/web`, { body: { spec: { replicas: 12 } }, contentType: 'application/merge-patch+json' }), /spec\.replicas: Invalid value: 12: must be ≤ 10/);
  await assert.rejects(s.api.request('GET', `${s.objects}/big`), /not found/i, 'nothing stored');

  // What a user sees: kubectl apply prints the apiserver's refusal, field by field.
  const kubectl = spawnSync(cachedBinaries()!.path('kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, 'apply', '-n', s.ns, '-f', '-'], {
    input: JSON.stringify(body('applied', { replicas: 20, image: 'Nginx' })),
    encoding: 'utf8',
  });
  assert.notEqual(kubectl.status, 0);
  assert.match(kubectl.stderr, /spec\.replicas: Invalid value: 20: must be ≤ 10/, kubectl.stderr);
  assert.match(kubectl.stderr, /spec\.image: Invalid value: "Nginx:latest": is not an image reference/, kubectl.stderr);
  t.diagnostic(`kubectl apply printed: ${kubectl.stderr.trim()}`);

  // The function down: failurePolicy Fail refuses the write, naming the webhook and why.
  s.process!.kill('SIGKILL');
  await waitFor('the function to be gone', async () => (s.process!.exitCode !== null || s.process!.signalCode !== null) || undefined);
  await assert.rejects(s.api.request('POST', s.objects, { body: body('later', { replicas: 1, image: 'nginx:1' }) }), /failed calling webhook "default\.myapps\.app\.example\.com".*connect: connection refused/s);

  // The webhooks never block a write of metadata alone — kfn's own finalizer removal from an
  // object being deleted among them — even with the function down.
  const web = `${s.objects}/web`;
  await s.api.request('PATCH', web, { body: { metadata: { finalizers: ['test.kfn.dev/hold'] } }, contentType: 'application/merge-patch+json' });
  await s.api.request('DELETE', web);
  await s.api.request('PATCH', web, { body: { metadata: { finalizers: null } }, contentType: 'application/merge-patch+json' });
  await waitFor('the MyApp, its finalizer removed, to be gone', async () => s.api.request('GET', web).then(() => undefined, (err: Error) => (/not found/i.test(err.message) ? true : undefined)));
});

test('a validating webhook on the apiserver: what only code can check is refused before it is stored, by field', async (t) => {
  const cluster = await testCluster();
  // test/support/webhook-fn: a Chore's cron schedule, checked by its function's validate.
  const s = await functionStack(t, cluster, 'test/support/webhook-fn', { webhooks: true });
  const body = (name: string, schedule: string) => ({ apiVersion: 'chores.kfn.test/v1', kind: 'Chore', metadata: { name }, spec: { schedule } });
  // The apiserver takes a moment to start calling a new webhook: until then a write is let through.
  const refusal = await untilWebhookRefuses(s.api, s.objects, (n) => body(`late-${n}`, '0 25 * * *'), 'the webhook to refuse an hour out of range');
  assert.match(refusal.message, /Chore\.chores\.kfn\.test "late-\d+" is invalid: spec\.schedule: hour 25 is not within 0–23/);
  await assert.rejects(s.api.request('POST', s.objects, { body: body('short', '* * *') }), /spec\.schedule: has 3 fields, not 5/);
  await s.api.request('POST', s.objects, { body: body('fine', '*/15 9-17 * * 1-5') });
});
