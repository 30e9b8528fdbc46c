// Faults the bridge must survive, produced on the real control plane: etcd compaction (old
// resourceVersions become unservable: 410 Gone) and a kube-apiserver restart. These disturb
// every client of the cluster, so the runner runs this file alone, after the parallel tests.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Watch } from '@kubernetes/client-node';
import { compactEtcd, etcdReadAt } from '../../cluster/etcd.ts';
import { restartApiserver, testCluster, testNamespace } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

interface WatchOutcome {
  /** HTTP status of a failed watch request, or the code of an ERROR event. */
  code?: number;
  reason?: string;
  events: string[];
}

/** Opens a watch from `resourceVersion` and reports how the apiserver answered it. */
async function watchFrom(cluster: Awaited<ReturnType<typeof testCluster>>, path: string, resourceVersion: string): Promise<WatchOutcome> {
  const outcome: WatchOutcome = { events: [] };
  let controller: AbortController | undefined;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 5000);
    new Watch(cluster.kc)
      .watch(
        path,
        { resourceVersion, allowWatchBookmarks: true },
        (type, obj: { code?: number; reason?: string }) => {
          outcome.events.push(type);
          if (type === 'ERROR') {
            outcome.code = obj.code;
            outcome.reason = obj.reason;
            clearTimeout(timer);
            resolve();
          }
        },
        (err: { statusCode?: number } | null) => {
          if (err?.statusCode) outcome.code = err.statusCode;
          clearTimeout(timer);
          resolve();
        },
      )
      .then((c) => (controller = c));
  });
  controller?.abort();
  return outcome;
}

test('after etcd compaction and an apiserver restart, a watch from an old resourceVersion gets 410 Gone', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'compact');
  const first = await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'c' }, data: { n: '0' } } });
  const oldVersion = first.metadata!.resourceVersion!;
  for (let i = 1; i <= 5; i++) {
    await cluster.core.patchNamespacedConfigMap({ namespace: ns, name: 'c', body: [{ op: 'replace', path: '/data/n', value: String(i) }] });
  }
  const path = `/api/v1/namespaces/${ns}/configmaps`;
  const before = await watchFrom(cluster, path, oldVersion);
  assert.equal(before.code, undefined, `before compaction the old version is watchable (got ${JSON.stringify(before)})`);
  assert.equal(before.events.filter((e) => e === 'MODIFIED').length, 5, `and replays the 5 changes made since (got ${before.events})`);

  await etcdReadAt(Number(oldVersion));
  const revision = await compactEtcd();
  assert.ok(revision > Number(oldVersion), 'compacted past the old version');
  await assert.rejects(etcdReadAt(Number(oldVersion)), /required revision has been compacted/);

  // A running apiserver may still serve the old window from its watch cache; after a restart
  // (as after any outage) the old version can only come from etcd, where it is gone.
  await restartApiserver();
  const after = await waitFor('the apiserver to answer a watch after its restart', async () => {
    const o = await watchFrom(cluster, path, oldVersion);
    return o.code !== undefined ? o : undefined;
  });
  assert.equal(after.code, 410, `expected 410 Gone, got ${JSON.stringify(after)}`);
  assert.equal(after.reason, 'Expired');
});

test('kube-apiserver restarts and the API comes back with its data', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'restart');
  await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'survives' }, data: { k: 'v' } } });
  const pidBefore = cluster.state.processes.find((p) => p.name === 'kube-apiserver')?.pid;
  await restartApiserver();
  const cm = await waitFor('the ConfigMap to be readable after the restart', () => cluster.core.readNamespacedConfigMap({ namespace: ns, name: 'survives' }));
  assert.equal(cm.data?.k, 'v');
  const { clusterStatus } = await import('../../cluster/controlplane.ts');
  const status = await clusterStatus(cluster.paths);
  const apiserver = status.components.find((c) => c.name === 'kube-apiserver');
  assert.ok(apiserver?.running, 'the new apiserver process is recorded and running');
  assert.notEqual(apiserver?.pid, pidBefore, 'it is a new process');
  assert.ok(status.healthy);
});
