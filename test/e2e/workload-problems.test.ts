// What a user sees when their workload cannot run, on the real node: MyApp's Ready=False
// message says why its Deployment is not available, from its pods (explainWorkload) — an image
// tag the node cannot pull, then a container that keeps crashing — and stays put while the
// cause does (no status write on every resync).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, stackReport } from '../support/functions.ts';

interface App {
  metadata: { resourceVersion: string };
  status?: { conditions?: { type: string; status: string; reason: string; message: string }[] };
}

test('MyApp says why its pods do not run: an image that cannot be pulled (with the image), then a crash loop (with the exit code)', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'myapp', { resyncPeriodSeconds: 3 });
  const app = () => s.api.request<App>('GET', `${s.objects}/broken`);
  const ready = async () => (await app()).status?.conditions?.find((c) => c.type === 'Ready');
  await s.api.request('POST', s.objects, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'broken' }, spec: { replicas: 1, image: 'kfn.local/nginx:no-such-tag' } } });
  const pull = await waitFor('Ready=False naming the image the node cannot pull', async () => {
    const r = await ready();
    return r?.status === 'False' && /cannot pull image kfn\.local\/nginx:no-such-tag/.test(r.message) ? r : undefined;
  }, { timeoutMs: 90_000, context: () => stackReport(s) });
  t.diagnostic(`Ready=False: ${pull.message}`);
  assert.equal(pull.reason, 'ReplicasNotReady');
  assert.match(pull.message, /^0\/1 replicas ready: Deployment broken: pod broken-\S+: container app cannot pull image kfn\.local\/nginx:no-such-tag \(Err\w+/);
  // The cause is the same over several resyncs, and so is the status: not rewritten each time.
  const before = (await app()).metadata.resourceVersion;
  await new Promise((r) => setTimeout(r, 8000));
  const after = await app();
  assert.equal((await ready())?.message, pull.message, 'the message stays put while the cause does');
  assert.equal(after.metadata.resourceVersion, before, 'no status write while nothing changed');

  // busybox's shell exits at once: the container restarts and restarts.
  await s.api.request('PATCH', `${s.objects}/broken`, { body: { spec: { image: 'kfn.local/busybox:1.35' } }, contentType: 'application/merge-patch+json' });
  const crash = await waitFor('Ready=False saying the container keeps crashing', async () => {
    const r = await ready();
    return r?.status === 'False' && /keeps crashing/.test(r.message) ? r : undefined;
  }, { timeoutMs: 120_000, context: () => stackReport(s) });
  t.diagnostic(`Ready=False: ${crash.message}`);
  assert.match(crash.message, /container app keeps crashing \(CrashLoopBackOff; last exit code 0 \(Completed\)\)/);
});
