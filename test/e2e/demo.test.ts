// `npm start` is the main job a newcomer runs: here it runs against the test cluster (through
// KUBECONFIG), deploys every example with its samples, and stops itself once they are Ready —
// with the bridge and functions as local processes (--local) here, as pods in
// demo-incluster.serial.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kubeApi, testCluster } from '../support/cluster.ts';
import { runDemo } from '../support/demo.ts';

test('the demo deploys the samples, narrates the deliveries, and stops what it started', async () => {
  const cluster = await testCluster();
  // What an unclean stop leaves behind: the demo namespace terminating, held by an object whose
  // kfn finalizer no running function will remove. The next start must get past it by itself.
  const api = kubeApi(cluster.kc);
  await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: 'kfn-demo' } } }).catch(() => undefined);
  await api.request('POST', '/api/v1/namespaces/kfn-demo/configmaps', { body: { metadata: { name: 'stale', finalizers: ['kfn.dev/leftover'] } } });
  await api.request('DELETE', '/api/v1/namespaces/kfn-demo');
  const { code, output } = await runDemo(cluster, '--local');
  assert.equal(code, 0, output);
  assert.match(output, /The previous run stopped before its functions finalized 1 object\(s\); letting them go: ConfigMap stale \(kfn\.dev\/leftover\)/);
  assert.match(output, /^Using context "[^"]+" \(server https:\/\/127\.0\.0\.1:\d+\) from \S*kubeconfig/m, 'one line names the cluster of $KUBECONFIG before the demo acts');
  assert.match(output, /MyWeb kfn-demo\/hello created → myweb → 200 in \d+ ms: applied ConfigMap\/hello-page, Deployment\/hello, Service\/hello/, 'delivered at the first attempt');
  assert.match(output, /status Ready=True/);
  assert.match(output, /All \d+ samples are Ready\./);
  // Nothing it started is left: its function and bridge ports are free again.
  for (const port of [18081, 18090]) {
    await assert.rejects(fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) }), `port ${port} is closed`);
  }
});
