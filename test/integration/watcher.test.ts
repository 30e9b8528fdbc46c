// The bridge's list+watch on the real apiserver: initial list, changes, metadata-only objects,
// resuming after a partition, and the inactivity watchdog on a half-open connection.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startFaultProxy } from '../support/proxy.ts';
import { testCluster, testNamespace, kubeApi } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { recordWatch } from '../support/watch.ts';
import { Watcher } from '../../bridge/watcher.ts';
import type { WatchEvent } from '../../bridge/store.ts';

describe('Watcher', { concurrency: true }, () => {
  test('lists existing objects, then streams creates, updates and deletes', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'watch');
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'before' }, data: { k: 'v' } } });
    const rec = await recordWatch(t, cluster.kc, 'v1', 'ConfigMap', ns);
    assert.ok(rec.summary().includes('apply before'), `initial list reported: ${rec.summary()}`);
    assert.ok(rec.watcher.store.has(`${ns}/before`));

    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'after' } } });
    await cluster.core.patchNamespacedConfigMap({ namespace: ns, name: 'after', body: [{ op: 'add', path: '/metadata/labels', value: { x: 'y' } }] });
    await cluster.core.deleteNamespacedConfigMap({ namespace: ns, name: 'before' });
    await waitFor('create, update and delete to be reported', async () => {
      const s = rec.summary().filter((e) => e !== 'synced' && !e.includes('kube-root-ca.crt'));
      if (s.join() !== 'apply before,apply after,apply after,delete before') throw new Error(`so far: ${s}`);
      return true;
    });
    const update = rec.events.filter((e) => e.type === 'apply' && e.object.metadata.name === 'after')[1];
    assert.ok(update?.type === 'apply' && update.old, 'an update carries the previous version');
    assert.equal(update.old.metadata.labels, undefined);
    assert.deepEqual(update.object.metadata.labels, { x: 'y' });
  });

  test('metadata projection keeps metadata only (no data), full keeps the object', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'projection');
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cm', labels: { a: 'b' } }, data: { big: 'x'.repeat(1000) } } });
    const meta = await recordWatch(t, cluster.kc, 'v1', 'ConfigMap', ns, { projection: 'metadata' });
    const full = await recordWatch(t, cluster.kc, 'v1', 'ConfigMap', ns, { projection: 'full' });
    const m = meta.watcher.store.get(`${ns}/cm`)!;
    const f = full.watcher.store.get(`${ns}/cm`)!;
    assert.equal(m.data, undefined);
    assert.deepEqual(m.metadata.labels, { a: 'b' });
    assert.equal(m.kind, 'ConfigMap');
    assert.equal((f.data as Record<string, string>).big?.length, 1000);
  });

  test('a tenant\'s objects with large annotations do not make one huge list page: pages shrink until each is under the bound', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'bigpages');
    // 24 ConfigMaps with 100 KiB of annotations each: one 500-object page would be 2.4 MB.
    for (let i = 0; i < 24; i++) await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: `big-${i}`, annotations: { note: 'x'.repeat(100 * 1024) } } } });
    const logs: string[] = [];
    const rec = await recordWatch(t, cluster.kc, 'v1', 'ConfigMap', ns, { projection: 'metadata', lists: 'pages', maxPageBytes: 512 * 1024, log: (_level, msg) => logs.push(msg) });
    assert.equal([...rec.watcher.store.keys()].filter((k) => k.includes('/big-')).length, 24, 'every object listed');
    assert.ok(logs.some((m) => /a list page was larger than 524288 bytes: asking for \d+ objects a page/.test(m)), logs.join('\n'));
  });

  test('after a network partition it resumes from its last resourceVersion and misses nothing', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'partition');
    const proxy = await startFaultProxy(cluster.state.ports.apiserver);
    t.after(() => proxy.close());
    const rec = await recordWatch(t, proxy.kubeConfig(cluster.kc), 'v1', 'ConfigMap', ns);
    const listsBefore = rec.watcher.stats.lists;
    proxy.cut();
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'during-partition' } } });
    await waitFor('the watcher to notice the broken connection', async () => rec.watcher.stats.errors > 0 || undefined);
    proxy.restore();
    await waitFor('the change made during the partition to arrive', async () => rec.summary().includes('apply during-partition') || undefined, { timeoutMs: 30_000 });
    assert.equal(rec.watcher.stats.lists, listsBefore, 'resumed the watch without relisting');
  });

  test('the inactivity watchdog restarts a watch that went silent (half-open connection)', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'watchdog');
    const proxy = await startFaultProxy(cluster.state.ports.apiserver);
    t.after(() => proxy.close());
    const rec = await recordWatch(t, proxy.kubeConfig(cluster.kc), 'v1', 'ConfigMap', ns, { inactivityMs: 1500 });
    // A change seen through the watch proves the stream is live on an existing connection.
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'before-silence' } } });
    await waitFor('the watch to be streaming', async () => rec.summary().includes('apply before-silence') || undefined);
    proxy.freeze(); // the connection stays open; nothing gets through
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'while-silent' } } });
    await waitFor('the change to arrive over a new watch', async () => rec.summary().includes('apply while-silent') || undefined, { timeoutMs: 30_000 });
    assert.ok(rec.watcher.stats.watchdogRestarts >= 1, 'the watchdog restarted the watch');
  });

  test('this apiserver serves a streaming list: one request and no LIST, only the selected objects, synced at its bookmark, and the watch goes on in the same request', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'stream');
    for (let i = 0; i < 30; i++) await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: `cm-${i}`, labels: { half: String(i % 2) } } } });
    const api = kubeApi(cluster.kc);
    const asked: string[] = [];
    const [request, stream] = [api.request.bind(api), api.stream.bind(api)];
    api.request = ((method: string, path: string, ...rest: unknown[]) => (asked.push(`${method} ${path}`), (request as (...a: unknown[]) => unknown)(method, path, ...rest))) as typeof api.request;
    api.stream = ((path: string, options: { query?: Record<string, unknown> }, ...rest: unknown[]) => (asked.push(`WATCH ${path}${options.query?.sendInitialEvents ? ' with initial events' : ''}`), (stream as (...a: unknown[]) => Promise<void>)(path, options, ...rest))) as typeof api.stream;
    const watcher = new Watcher(api, await api.resource('v1', 'ConfigMap'), { projection: 'metadata', namespace: ns, labelSelector: 'half=0' });
    const events: WatchEvent[] = [];
    watcher.subscribe((e) => events.push(e));
    asked.length = 0;
    watcher.start();
    t.after(() => watcher.stop());
    await watcher.waitForSync();
    assert.deepEqual(asked, [`WATCH /api/v1/namespaces/${ns}/configmaps with initial events`], 'one request, a streaming list');
    assert.equal(watcher.store.size, 15, 'the selected half');
    assert.deepEqual([watcher.stats.streamed, watcher.stats.lists], [1, 1]);
    assert.match(watcher.resourceVersion, /^\d+$/, "the bookmark's version");
    assert.deepEqual(events.at(-1), { type: 'synced', relist: false, streamed: true });
    await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'later', labels: { half: '0' } } } });
    await waitFor('the change, over the same request', async () => watcher.store.has(`${ns}/later`) || undefined);
    assert.equal(asked.length, 1, 'still the one request');
  });

  test('a kind the apiserver does not serve is a clear error', async () => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    await assert.rejects(api.resource('nope.kfn.test/v1', 'Thing'), /does not serve nope\.kfn\.test\/v1 \(is its CRD installed\?\)/);
    await assert.rejects(api.resource('v1', 'Thing'), /serves v1 but no kind Thing/);
  });
});
