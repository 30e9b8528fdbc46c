// Faults the bridge must survive, produced on the real control plane: etcd compaction (old
// resourceVersions become unservable: 410 Gone) and kube-apiserver restarts, after which the
// rest of the local cluster must work at once. These disturb
// every client of the cluster, so the runner runs this file alone, after the parallel tests.
import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { get } from 'node:http';
import { test } from 'node:test';
import { Watch } from '@kubernetes/client-node';
import { compactEtcd, etcdReadAt } from '../../cluster/etcd.ts';
import { kubeApi, restartApiserver, testCluster, testNamespace } from '../support/cluster.ts';
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

test('after kube-apiserver restarts a minute apart, the node starts a new pod and cluster DNS answers for its Service at once', async (t) => {
  // client-go's watch retries back off (doubling to 30 s, jittered up to 60 s, reset only after
  // two quiet minutes): after the third restart in a row, a kubelet or a CoreDNS left running
  // saw new pods and Services a minute late or more. restartApiserver restarts and rolls them.
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  for (let i = 0; i < 3; i++) await restartApiserver();
  const ns = await testNamespace(t, cluster, 'routed');
  const labels = { app: 'web' };
  const started = Date.now();
  const command = ['sh', '-c', 'echo ok > /tmp/index.html; exec httpd -f -p 8080 -h /tmp'];
  await api.request('POST', `/apis/apps/v1/namespaces/${ns}/deployments`, {
    body: { metadata: { name: 'web' }, spec: { replicas: 1, selector: { matchLabels: labels }, template: { metadata: { labels }, spec: { containers: [{ name: 'web', image: 'kfn.local/busybox:1.35', command, readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } }] } } } },
  });
  const service = await api.request<{ spec: { clusterIP: string } }>('POST', `/api/v1/namespaces/${ns}/services`, { body: { metadata: { name: 'web' }, spec: { selector: labels, ports: [{ port: 80, targetPort: 8080 }] } } });
  // 20 s: a pod starts here in 1–2 s; with the backoff it took 60 s to 90 s and more.
  await waitFor('the kubelet to start the new pod (Ready)', async () => {
    const pods = await api.request<{ items: { status?: { conditions?: { type: string; status: string }[] } }[] }>('GET', `/api/v1/namespaces/${ns}/pods`);
    return pods.items.some((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) || undefined;
  }, { timeoutMs: 20_000 - (Date.now() - started) });
  const resolver = new Resolver({ timeout: 1000, tries: 1 });
  resolver.setServers([cluster.state.network.dnsServiceIp]);
  await waitFor('cluster DNS to answer for the new Service', async () => ((await resolver.resolve4(`web.${ns}.svc.cluster.local`)).includes(service.spec.clusterIP) ? true : undefined), { timeoutMs: 20_000 });
  const body = await waitFor('the Service to route to the pod', () => getText(`http://${service.spec.clusterIP}/`), { timeoutMs: 20_000 });
  assert.equal(body.trim(), 'ok');
});

/** One GET on a connection of its own (none kept from an attempt before the route existed). */
function getText(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent: false, timeout: 1000 }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c)).on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`HTTP ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 1 s')));
    req.on('error', reject);
  });
}
