// Two examples as one shared host, as a user deploys them: the bridge from manifests/ in the
// cluster, `kfn deploy --host pair functions/podset functions/project` (one image, one Deployment
// and Service kfn-host-pair, one ServiceAccount serving both Reconcilers), a sample of each made
// Ready by the one pod, each delivered to its own path; then `kfn undeploy --host pair`. Serial:
// the in-cluster bridge takes every Reconciler in the cluster, and the Reconcilers `podset` and
// `project` are cluster-wide names other tests use.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { followBridgeJournal, installBridge } from '../../cli/incluster.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { waitFor } from '../../core/clock.ts';
import type { ReadCondition } from '../../core/conditions.ts';
import type { JournalEntry } from '../../core/journal.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

const exec = promisify(execFile);
const system = 'kfn-system';
const log = (line: string) => console.error(`[shared-host] ${line}`);

interface Listed {
  items: { metadata: { name: string; namespace?: string; deletionTimestamp?: string; annotations?: Record<string, string> }; status?: { conditions?: ReadCondition[] } }[];
}

test('kfn deploy --host: PodSet and Project served by one process, each Reconciler delivered to its own path, both samples Ready; kfn undeploy --host removes it all', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const kfn = (...args: string[]) => exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { cwd: repoRoot, env: { ...process.env, KUBECONFIG: cluster.paths.kubeconfig }, maxBuffer: 16 * 1024 * 1024 });
  const ns = await testNamespace(t, cluster, 'shared-host');
  const journal: JournalEntry[] = [];
  let follow: AbortController | undefined;
  t.after(async () => {
    follow?.abort();
    for (const name of ['podset', 'project']) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined);
    await api.request('DELETE', `/api/v1/namespaces/${system}`).catch(() => undefined);
    await waitFor(`namespace ${system} to be gone`, () => api.request('GET', `/api/v1/namespaces/${system}`).then(() => undefined, () => true), { timeoutMs: 120_000 });
  });

  await installBridge(api, cluster.state.binDir, 'kfn-test', log);
  await waitFor('a bridge to hold the Lease', async () => (await api.request<{ spec?: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/${system}/leases/kfn-bridge`).catch(() => undefined))?.spec?.holderIdentity, { timeoutMs: 120_000 });
  follow = followBridgeJournal(api, system, (e) => journal.push(e));

  // Not with webhooks, nor on Knative: refused before anything is built.
  const withWebhooks = await kfn('deploy', '--host', 'pair', 'functions/podset', 'functions/myapp').then(() => undefined, (err: { stderr: string }) => err.stderr);
  assert.match(withWebhooks ?? 'deployed', /kfn deploy --host pair: myapp \(default\) needs a TLS listener of its own/);
  const onKnative = await kfn('deploy', '--host', 'pair', '--target', 'knative', 'functions/podset').then(() => undefined, (err: { stderr: string }) => err.stderr);
  assert.match(onKnative ?? 'deployed', /runs on the Deployment target only/);

  const deployed = await kfn('deploy', '--host', 'pair', 'functions/podset', 'functions/project', '--watch-namespace', ns);
  assert.match(deployed.stderr, /Host pair runs in the cluster: Deployment and Service kfn-system\/kfn-host-pair, serving podset on \/podset\/, project on \/project\//);
  t.diagnostic(deployed.stderr.trim().split('\n').filter((l) => /Bundling|built|imported/.test(l)).join('; '));

  // One workload for both, under one identity that serves both Reconcilers.
  const workloads = await api.request<Listed>('GET', `/apis/apps/v1/namespaces/${system}/deployments`, { query: { labelSelector: 'app.kubernetes.io/managed-by=kfn' } });
  assert.deepEqual(workloads.items.map((d) => d.metadata.name).filter((n) => /^kfn-(fn|host)-/.test(n)), ['kfn-host-pair'], 'no Deployment of either function of its own');
  const account = await api.request<Listed['items'][number]>('GET', `/api/v1/namespaces/${system}/serviceaccounts/kfn-host-pair`);
  assert.equal(account.metadata.annotations?.['kfn.dev/identity-for'], 'podset,project');
  for (const name of ['podset', 'project']) {
    const reconciler = await api.request<{ spec: { sink: { uri: string }; serviceAccount: { name: string } } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`);
    assert.equal(reconciler.spec.sink.uri, `http://kfn-host-pair.${system}.svc.cluster.local/${name}/`);
    assert.equal(reconciler.spec.serviceAccount.name, 'kfn-host-pair');
  }
  await waitFor('both Reconcilers Ready (the host\'s identity may see what each is sent)', async () => {
    const ready = await Promise.all(['podset', 'project'].map(async (name) => (await api.request<Listed['items'][number]>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`)).status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True'));
    return ready.every(Boolean) || undefined;
  }, { timeoutMs: 60_000 });

  await api.request('POST', `/apis/apps.jicki.cn/v1alpha1/namespaces/${ns}/podsets`, { body: { apiVersion: 'apps.jicki.cn/v1alpha1', kind: 'PodSet', metadata: { name: 'ps' }, spec: { size: 1 } } });
  await api.request('POST', `/apis/xyz.com/v1/namespaces/${ns}/projects`, { body: { apiVersion: 'xyz.com/v1', kind: 'Project', metadata: { name: 'abc-department' }, spec: { image: 'kfn.local/nginx:1.22', password: 'P@ssw0rd' } } });
  const readyOf = async (path: string) => (await api.request<Listed['items'][number]>('GET', path)).status?.conditions?.find((c) => c.type === 'Ready');
  for (const path of [`/apis/apps.jicki.cn/v1alpha1/namespaces/${ns}/podsets/ps`, `/apis/xyz.com/v1/namespaces/${ns}/projects/abc-department`]) {
    let last: ReadCondition | undefined;
    await waitFor(`${path} Ready`, async () => ((last = await readyOf(path))?.status === 'True') || undefined, { timeoutMs: 120_000, context: () => `Ready: ${JSON.stringify(last)}; deliveries: ${journal.slice(-6).map((e) => `${e.reconciler} ${e.key} → ${e.sink}: ${e.outcome}${e.why ? ` (${e.why})` : ''}`).join('; ')}` });
  }

  // Both functions answered, each on its own path of the one Service, from the one pod.
  for (const [name, key] of [['podset', `${ns}/ps`], ['project', `${ns}/abc-department`]] as const) {
    const done = await waitFor(`the bridge's journal to show ${name} answering`, async () => journal.find((e) => e.reconciler === name && e.key === key && e.outcome === 'done'), { timeoutMs: 30_000 });
    assert.equal(done.sink, `http://kfn-host-pair.${system}.svc.cluster.local/${name}/`);
  }
  const pods = await api.request<Listed>('GET', `/api/v1/namespaces/${system}/pods`, { query: { labelSelector: 'kfn.dev/host=pair' } });
  const live = pods.items.filter((p) => !p.metadata.deletionTimestamp);
  assert.equal(live.length, 1, 'one pod serves both');
  const hostLog = await api.text('GET', `/api/v1/namespaces/${system}/pods/${live[0]!.metadata.name}/log`);
  assert.match(hostLog, /kfn host pair listening on :8080, serving podset \(PodSet\) on \/podset\/, project \(Project\) on \/project\//);
  assert.match(hostLog, new RegExp(`"object":"PodSet ${ns}/ps"`));
  assert.match(hostLog, new RegExp(`"object":"Project ${ns}/abc-department"`));
  const metrics = await api.text('GET', `/api/v1/nodes/${(await api.request<{ spec: { nodeName: string } }>('GET', `/api/v1/namespaces/${system}/pods/${live[0]!.metadata.name}`)).spec.nodeName}/proxy/metrics/resource`).catch(() => '');
  const workingSet = metrics.match(new RegExp(`^container_memory_working_set_bytes\\{container="function",namespace="${system}",pod="${live[0]!.metadata.name}"\\} (\\S+)`, 'm'))?.[1];
  if (workingSet) t.diagnostic(`the host of two functions: ${(Number(workingSet) / 2 ** 20).toFixed(0)} MiB working set`);

  // One function alone cannot go while the host mounts its key: the host would not start again.
  const alone = await kfn('undeploy', 'podset').then(() => undefined, (err: { stderr: string }) => err.stderr);
  assert.match(alone ?? 'undeployed', /podset is served by the shared host pair, which mounts its auth Secret/);
  // Everything kfn made for the host goes; the kinds' CRDs and objects stay (the user's data).
  const undeployed = await kfn('undeploy', '--host', 'pair');
  assert.match(undeployed.stderr, /host pair: podset: removed Reconciler podset/);
  assert.match(undeployed.stderr, /host pair: project: removed Reconciler project/);
  assert.match(undeployed.stderr, /host pair: removed Deployment kfn-system\/kfn-host-pair/);
  for (const path of [`/apis/apps/v1/namespaces/${system}/deployments/kfn-host-pair`, `/api/v1/namespaces/${system}/services/kfn-host-pair`, `/api/v1/namespaces/${system}/serviceaccounts/kfn-host-pair`, `/api/v1/namespaces/${system}/secrets/kfn-fn-podset`, `/api/v1/namespaces/${system}/secrets/kfn-fn-project`, '/apis/kfn.dev/v1alpha1/reconcilers/podset', '/apis/kfn.dev/v1alpha1/reconcilers/project', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kfn-fn-podset:kfn-system']) {
    await waitFor(`${path} to be gone`, () => api.request('GET', path).then(() => undefined, (err) => /404|not found/i.test(String(err)) || undefined), { timeoutMs: 60_000 });
  }
  await api.request('GET', `/apis/apps.jicki.cn/v1alpha1/namespaces/${ns}/podsets/ps`);
  const again = await kfn('undeploy', '--host', 'pair');
  assert.match(again.stderr, /nothing of host pair was found in the cluster/);
});
