// The bridge installed the way operators are installed: `helm install` of charts/kfn (with the
// bridge image kfn builds, and two replicas: a leader and a standby), then `helm upgrade` to two
// shards — a rollout in which one shard layout delivers at a time — and `helm uninstall`.
// Serial: an in-cluster bridge takes every Reconciler in the cluster, so it must not run beside
// the other tests' Reconcilers.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ensureHelm } from '../../cluster/helm.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { waitFor } from '../../core/clock.ts';
import { kubeApi, testCluster } from '../support/cluster.ts';

const exec = promisify(execFile);

interface Pod {
  metadata: { name: string };
  spec: { containers: { args: string[] }[] };
  status?: { conditions?: { type: string; status: string }[] };
}

test('helm install, helm upgrade to two shards, helm uninstall: the bridge runs, rolls and goes as the chart says', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const helm = await ensureHelm();
  const env = { ...process.env, KUBECONFIG: cluster.paths.kubeconfig, HELM_CACHE_HOME: join(cluster.paths.dir, 'helm', 'cache'), HELM_CONFIG_HOME: join(cluster.paths.dir, 'helm', 'config'), HELM_DATA_HOME: join(cluster.paths.dir, 'helm', 'data') };
  const run = (cmd: string, ...args: string[]) => exec(cmd, args, { cwd: repoRoot, env, maxBuffer: 16 * 1024 * 1024 });
  t.after(async () => {
    await run(helm, 'uninstall', 'kfn', '-n', 'kfn-system', '--wait').catch(() => undefined);
    await api.request('DELETE', '/api/v1/namespaces/kfn-system').catch(() => undefined);
    await waitFor('namespace kfn-system to be gone', () => api.request('GET', '/api/v1/namespaces/kfn-system').then(() => undefined, () => true), { timeoutMs: 120_000 });
  });
  await run(process.execPath, join(repoRoot, 'cli', 'kfn.ts'), 'image', 'build', 'bridge');
  const readyPods = async (count: number, what: string) =>
    waitFor(what, async () => {
      const pods = await api.request<{ items: Pod[] }>('GET', '/api/v1/namespaces/kfn-system/pods', { query: { labelSelector: 'app.kubernetes.io/name=kfn-bridge' } });
      const ready = pods.items.filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
      return ready.length === count && pods.items.length === count ? ready : undefined;
    }, { timeoutMs: 180_000 });

  // --take-ownership: the cluster-scoped RBAC of an earlier `kubectl apply -k manifests/` (the
  // same objects) is adopted, as a user moving from the kustomize base to the chart does.
  // Two replicas, as docs/operations.md says to run a standby (the chart's default is one).
  const installed = await run(helm, 'install', 'kfn', join(repoRoot, 'charts', 'kfn'), '-n', 'kfn-system', '--create-namespace', '--set', 'replicas=2', '--wait', '--timeout', '3m', '--take-ownership', '--force-conflicts');
  assert.match(installed.stdout, /STATUS: deployed/);
  await api.request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/reconcilers.kfn.dev');
  await readyPods(2, 'two bridge replicas ready');
  const holder = await waitFor('a replica to hold the Lease', async () => (await api.request<{ spec?: { holderIdentity?: string } }>('GET', '/apis/coordination.k8s.io/v1/namespaces/kfn-system/leases/kfn-bridge')).spec?.holderIdentity);
  t.diagnostic(`leader: ${holder}`);

  const upgraded = await run(helm, 'upgrade', 'kfn', join(repoRoot, 'charts', 'kfn'), '-n', 'kfn-system', '--reuse-values', '--set', 'shards=2', '--wait', '--timeout', '3m');
  assert.match(upgraded.stdout, /has been upgraded/);
  const pods = await readyPods(2, 'two sharded replicas ready (the rollout done)');
  assert.ok(pods.every((p) => p.spec.containers[0]!.args.includes('--shards=2')), 'every replica runs with --shards=2');
  for (const shard of ['kfn-bridge-0-of-2', 'kfn-bridge-1-of-2']) {
    await waitFor(`the shard Lease ${shard} to be held`, async () => (await api.request<{ spec?: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/kfn-system/leases/${shard}`).catch(() => undefined))?.spec?.holderIdentity, { timeoutMs: 120_000 });
  }
  const layout = await api.request<{ spec?: { holderIdentity?: string } }>('GET', '/apis/coordination.k8s.io/v1/namespaces/kfn-system/leases/kfn-bridge-layout');
  assert.equal(layout.spec?.holderIdentity, 'shards=2', 'the layout record names the new layout');

  await run(helm, 'uninstall', 'kfn', '-n', 'kfn-system', '--wait');
  await waitFor('the bridge Deployment to be gone', () => api.request('GET', '/apis/apps/v1/namespaces/kfn-system/deployments/kfn-bridge').then(() => undefined, (err) => /404|not found/i.test(String(err)) || undefined), { timeoutMs: 60_000 });
  await api.request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/reconcilers.kfn.dev'); // Helm keeps CRDs: the Reconcilers are the user's
});
