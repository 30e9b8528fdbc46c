// A kubeconfig whose user authenticates with an exec credential plugin — how EKS, GKE and AKS
// kubeconfigs work — reaches the real apiserver as the identity the plugin's token names.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { KubeApi } from '../../kube/api.ts';
import { loadConnection } from '../../kube/kubeconfig.ts';
import { requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { testCluster, testNamespace } from '../support/cluster.ts';

test('an exec credential plugin authenticates kfn to the apiserver as the identity of its token', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'exec');
  await cluster.core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: 'robot' } } });
  const token = await requestServiceAccountToken(new KubeApi(loadConnection(cluster.paths.kubeconfig)), { namespace: ns, name: 'robot' }, 600);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-exec-kubeconfig-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const plugin = join(dir, 'credential-plugin.sh');
  writeFileSync(plugin, `#!/bin/sh\ncat <<'EOF'\n${JSON.stringify({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: { token } })}\nEOF\n`, { mode: 0o755 });
  const server = cluster.kc.getCurrentCluster()!;
  const kubeconfig = join(dir, 'config');
  writeFileSync(kubeconfig, stringify({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'cloud',
    clusters: [{ name: 'cloud', cluster: { server: server.server, ...(server.caData ? { 'certificate-authority-data': server.caData } : { 'certificate-authority': server.caFile }) } }],
    users: [{ name: 'cloud-user', user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, interactiveMode: 'Never' } } }],
    contexts: [{ name: 'cloud', context: { cluster: 'cloud', user: 'cloud-user' } }],
  }));
  const api = new KubeApi(loadConnection(kubeconfig));
  const review = await api.request<{ status: { userInfo: { username: string } } }>('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } });
  assert.equal(review.status.userInfo.username, `system:serviceaccount:${ns}:robot`);
});
