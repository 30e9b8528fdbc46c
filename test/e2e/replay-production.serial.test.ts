// "Why did the operator do that?", answered on a cluster deployed as the docs say and left at its
// defaults: the bridge from `kubectl apply -k manifests/` (after `kfn image build bridge`), which
// journals every delivery into a bounded volume of its pod, and MyWeb from `kfn deploy`, which
// records its reconciles in its log — no --journal, no --record given. A MyWeb is created and
// edited; `kfn replay cluster:bridge --object` reads its deliveries out of the bridge's pod
// (pods/exec) and replays the last one with --dry-run; `kfn replay cluster:myweb` replays the
// function's records of it offline. Serial: an in-cluster bridge takes every Reconciler in the
// cluster, so it must not run beside the other tests' Reconcilers.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../../cluster/paths.ts';
import { waitFor } from '../../core/clock.ts';
import { nodePorts } from '../support/ports.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

const exec = promisify(execFile);

interface Pod {
  metadata: { name: string };
  spec: { containers: { args?: string[]; volumeMounts?: { name: string; mountPath: string }[] }[]; volumes?: { name: string; emptyDir?: { sizeLimit?: string } }[] };
  status?: { conditions?: { type: string; status: string }[] };
}

test('deployed with its defaults, the bridge journals and the function records: kfn replay finds an object\'s reconciles in the cluster and replays them', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const kubectl = (...args: string[]) => exec(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, ...args]);
  const env = { ...process.env, KUBECONFIG: cluster.paths.kubeconfig };
  const kfn = (...args: string[]) => exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { cwd: repoRoot, env, maxBuffer: 64 * 1024 * 1024 });
  /** `kfn replay …` with its exit status, output and errors. */
  const replay = (...args: string[]) =>
    kfn('replay', ...args).then(
      (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
    );
  const ns = await testNamespace(t, cluster, 'replay-prod');
  t.after(async () => {
    await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/myweb').catch(() => undefined);
    await api.request('DELETE', '/api/v1/namespaces/kfn-system').catch(() => undefined);
    await waitFor('namespace kfn-system to be gone', () => api.request('GET', '/api/v1/namespaces/kfn-system').then(() => undefined, () => true), { timeoutMs: 120_000 });
  });

  // 1. As docs/deploy.md says, with nothing added.
  await kfn('image', 'build', 'bridge');
  await kubectl('apply', '-k', join(repoRoot, 'manifests'));
  const bridge = await waitFor('the bridge pod ready', async () => {
    const pods = await api.request<{ items: Pod[] }>('GET', '/api/v1/namespaces/kfn-system/pods', { query: { labelSelector: 'app.kubernetes.io/name=kfn-bridge' } });
    return pods.items.find((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
  }, { timeoutMs: 120_000 });
  const container = bridge.spec.containers[0]!;
  assert.ok(container.args?.includes('--journal=/var/lib/kfn/journal/journal.jsonl'), `the bridge journals by default: ${container.args?.join(' ')}`);
  assert.deepEqual(bridge.spec.volumes?.find((v) => v.name === 'journal')?.emptyDir, { sizeLimit: '256Mi' }, 'into a bounded volume');
  await kfn('deploy', 'functions/myweb', '--watch-namespace', ns);
  const fn = await api.request<{ spec: { template: { spec: { containers: { env: { name: string; value?: string }[] }[] } } } }>('GET', '/apis/apps/v1/namespaces/kfn-system/deployments/kfn-fn-myweb');
  assert.deepEqual(fn.spec.template.spec.containers[0]!.env.find((e) => e.name === 'KFN_RECORD'), { name: 'KFN_RECORD', value: 'stdout' }, 'the function records by default');

  // 2. A MyWeb created, then edited.
  // The incluster test's block: serial files never run together.
  const port = await nodePorts('e2e/replay-production')(api);
  const webs = `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`;
  await api.request('POST', webs, { body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site' }, spec: { nodePortNumber: port, pageContentHtml: '<h1>first</h1>' } } });
  await kubectl('-n', ns, 'wait', '--for=condition=Ready', 'myweb/site', '--timeout=120s');
  await api.request('PATCH', `${webs}/site`, { body: { spec: { pageContentHtml: '<h1>second</h1>' } }, contentType: 'application/merge-patch+json' });
  await waitFor('the edited page in its ConfigMap', async () => {
    const cm = await api.request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${ns}/configmaps/site-page`);
    return Object.values(cm.data ?? {}).some((v) => v.includes('<h1>second</h1>'));
  }, { timeoutMs: 60_000 });
  await kubectl('-n', ns, 'wait', '--for=condition=Ready', 'myweb/site', '--timeout=120s');

  // 3. The bridge's journal, read out of its pod: the object's deliveries, the creation and the edit among them.
  const object = `${ns}/site`;
  const listed = await waitFor('the creation and the edit in the bridge\'s journal', async () => {
    const r = await replay('cluster:bridge', '--object', object);
    const reasons = [...r.out.matchAll(new RegExp(`^delivery \\S+\\s+myweb\\s+MyWeb ${object}\\s+reason (\\w+)`, 'gm'))].map((m) => m[1]);
    return r.code === 0 && reasons.includes('created') && reasons.includes('updated') ? r : undefined;
  }, { timeoutMs: 60_000 });
  t.diagnostic(listed.err.trim().split('\n').filter((l) => l.startsWith('cluster:bridge')).join('; '));
  assert.match(listed.out, /\n {2}changes: applied ConfigMap .*\/site-page/, 'with what the function wrote');
  assert.match(listed.out, /deliver(y|ies) from the journal, listed/);

  // 4. One of them replayed against the cluster now: read live, every write a dry run.
  const dry = await replay('cluster:bridge', '--object', object, '--last', '--dry-run');
  assert.equal(dry.code, 0, dry.out + dry.err);
  assert.match(dry.out, new RegExp(`^delivery \\S+\\s+myweb\\s+MyWeb ${object}\\s`, 'm'));
  assert.match(dry.out, /dry-run against the cluster: [1-9]\d* read\(s\), 0 write\(s\) it would make now/);
  assert.match(dry.out, /nothing would change in the cluster now/, 'the object is as the function wants it');

  // 5. The function's own records of it, from its pod's log: replayed offline, to the same writes.
  const offline = await replay('cluster:myweb', '--object', object, '--expect-same');
  assert.equal(offline.code, 0, offline.out + offline.err);
  const records = [...offline.out.matchAll(/^record \w+\s+myweb\s+MyWeb \S+\s+reason (\w+)/gm)].map((m) => m[1]);
  assert.ok(records.includes('created') && records.includes('updated'), `records of the creation and of the edit: ${records.join(', ')}`);

  // 6. The journal's metrics, which the alert KfnJournalFailing reads: exported, nothing failed.
  const metrics = await api.text('GET', `/api/v1/namespaces/kfn-system/pods/${bridge.metadata.name}:8081/proxy/metrics`);
  assert.match(metrics, /^kfn_bridge_journal_failures_total 0$/m);
  assert.match(metrics, /^kfn_bridge_journal_dropped_lines_total 0$/m);
});
