// The bridge's list+watch through faults that disturb the whole cluster (serial: run alone).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compactEtcd } from '../../cluster/etcd.ts';
import { restartApiserver, testCluster, testNamespace } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { startFaultProxy } from '../support/proxy.ts';
import { recordWatch } from '../support/watch.ts';

test('410 Gone after a long partition: it relists and infers the deletes it missed', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'gone');
  const proxy = await startFaultProxy(cluster.state.ports.apiserver);
  t.after(() => proxy.close());
  for (const name of ['a', 'b']) await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name } } });
  const rec = await recordWatch(t, proxy.kubeConfig(cluster.kc), 'v1', 'ConfigMap', ns);
  proxy.cut();
  await cluster.core.deleteNamespacedConfigMap({ namespace: ns, name: 'a' });
  await cluster.core.patchNamespacedConfigMap({ namespace: ns, name: 'b', body: [{ op: 'add', path: '/data', value: { changed: 'yes' } }] });
  await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'c' } } });
  // Make the watcher's last resourceVersion unservable, as after a long outage.
  await compactEtcd();
  await restartApiserver();
  const cursor = rec.events.length;
  proxy.restore();
  await waitFor('the relist to report what changed during the partition', async () => {
    const after = rec.summary().slice(cursor);
    for (const want of ['delete a (inferred)', 'apply b', 'apply c', 'relisted']) if (!after.includes(want)) throw new Error(`so far: ${after}`);
    return true;
  }, { timeoutMs: 60_000 });
  assert.ok(rec.watcher.stats.gone >= 1, 'it saw 410 Gone');
  assert.equal(rec.watcher.stats.streamed, rec.watcher.stats.lists, 'the relist too was a streaming list');
  assert.deepEqual([...rec.watcher.store.keys()].filter((k) => k.startsWith(`${ns}/`) && !k.endsWith('kube-root-ca.crt')).sort(), [`${ns}/b`, `${ns}/c`]);
  assert.ok(!rec.summary().slice(cursor).includes('delete b (inferred)'), 'objects still there are not reported deleted');
});

test('a kube-apiserver restart mid-stream: the watch resumes and later changes arrive', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'restart');
  const rec = await recordWatch(t, cluster.kc, 'v1', 'ConfigMap', ns);
  await restartApiserver();
  await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'after-restart' } } });
  await waitFor('the change after the restart to arrive', async () => rec.summary().includes('apply after-restart') || undefined, { timeoutMs: 60_000 });
  assert.ok(rec.watcher.stats.watches >= 2, 'the watch was re-established');
});
