// Who can see what, on the real apiserver: a Reconciler's deliveries carry only what its
// identity — a ServiceAccount that agreed to serve it — may read itself (bridge/identity.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { startBridge } from '../../bridge/main.ts';
import { waitFor } from '../../core/clock.ts';
import type { ReadCondition } from '../../core/conditions.ts';
import { identityForAnnotation } from '../../core/names.ts';
import { applyYaml, installReconcilerCrd, kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { startReceiver } from '../support/receiver.ts';

test("a Reconciler for Secrets delivers nothing its identity may not list, and says why; granting the Role starts deliveries, revoking it stops them; a powerful ServiceAccount that did not agree lends nothing", async (t) => {
  const cluster = await testCluster();
  await installReconcilerCrd(cluster);
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'identity');
  const name = uniqueName('secrets');
  const borrower = uniqueName('borrower');
  const receiver = await startReceiver(t, { kind: 'none' });
  const theirs = await startReceiver(t, { kind: 'none' });
  // Reconcilers from the cluster: an identity is required (the default), reviewed every 500 ms.
  // Its own source: other tests' bridges, which also serve every Reconciler of the cluster, review
  // rights on their own schedule; what this test asserts is this bridge's.
  const source = `kfn://${uniqueName('identity')}/bridge`;
  // The default review period: a grant or a revocation is seen through the bridge's watch of RBAC, not by polling.
  const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, metricsAddr: '0', logLevel: 'fatal', shutdownTimeoutMs: 5000, source });
  const ours = (object: string) => receiver.of(object).filter((d) => d.received.event.source === source);
  t.after(() => running.stop());
  t.after(async () => {
    for (const n of [name, borrower]) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${n}`).catch(() => undefined);
    await api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${borrower}`).catch(() => undefined);
  });

  // The function's identity agrees to serve the Reconciler, but may not read Secrets yet.
  await applyYaml(cluster.kc, stringify({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'fn', namespace: ns, annotations: { [identityForAnnotation]: name } } }));
  // A powerful one that never agreed: bound to cluster-admin.
  await applyYaml(
    cluster.kc,
    [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'admin', namespace: ns } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: borrower }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' }, subjects: [{ kind: 'ServiceAccount', name: 'admin', namespace: ns }] },
    ].map((o) => stringify(o)).join('---\n'),
  );
  await api.request('POST', `/api/v1/namespaces/${ns}/secrets`, { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'pw' }, stringData: { password: 'hunter2' } } });
  const reconciler = (n: string, sink: string, serviceAccount: string) =>
    stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: n }, spec: { for: { apiVersion: 'v1', kind: 'Secret' }, contract: 2, namespaces: [ns], sink: { uri: sink }, serviceAccount: { namespace: ns, name: serviceAccount } } });
  await applyYaml(cluster.kc, reconciler(name, receiver.url, 'fn'));
  await applyYaml(cluster.kc, reconciler(borrower, theirs.url, 'admin'));

  const ready = (n: string, status: string, reason?: string) =>
    waitFor(`Reconciler ${n} Ready=${status}${reason ? ` (${reason})` : ''}`, async () => {
      const r = await api.request<{ status?: { conditions?: ReadCondition[] } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${n}`);
      const c = r.status?.conditions?.find((x) => x.type === 'Ready');
      return c && c.status === status && (!reason || c.reason === reason) ? c : undefined;
    }, { timeoutMs: 60_000 });

  const refused = await ready(name, 'False', 'IdentityForbidden');
  assert.match(refused.message ?? '', new RegExp(`ServiceAccount ${ns}/fn may not list secrets in namespace ${ns}`));
  const borrowed = await ready(borrower, 'False', 'IdentityForbidden');
  assert.match(borrowed.message ?? '', new RegExp(`ServiceAccount ${ns}/admin does not agree to be the identity of Reconciler ${borrower}`));
  assert.deepEqual(ours('pw'), [], 'nothing delivered while its identity may not list Secrets');

  // Granted: deliveries start, the Secret whole (contract 2) — what the identity could read itself.
  const role = { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'read-secrets', namespace: ns }, rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list'] }] };
  const binding = { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'read-secrets', namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'read-secrets' }, subjects: [{ kind: 'ServiceAccount', name: 'fn', namespace: ns }] };
  await applyYaml(cluster.kc, [role, binding].map((o) => stringify(o)).join('---\n'));
  const first = await waitFor('a delivery once the Role is granted', async () => ours('pw')[0], { timeoutMs: 30_000 });
  assert.equal(first.received.data.observed?.primary.metadata.name, 'pw');
  await ready(name, 'True', 'Running');

  // Revoked: Ready=False again; a Secret made meanwhile is delivered only once it is granted again.
  const revoked = Date.now();
  await api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings/read-secrets`);
  await ready(name, 'False', 'IdentityForbidden');
  // Seen through the bridge's watch of RBAC: not at the next review period (30 s when it cannot watch, 10 min when it can).
  assert.ok(Date.now() - revoked < 10_000, `the revocation took effect ${Date.now() - revoked} ms after it was made`);
  await api.request('POST', `/api/v1/namespaces/${ns}/secrets`, { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'later' }, stringData: { password: 'swordfish' } } });
  const regranted = Date.now();
  await applyYaml(cluster.kc, stringify(binding));
  const later = await waitFor('the Secret made while revoked, once granted again', async () => ours('later')[0], { timeoutMs: 30_000 });
  assert.ok(ours('later').every((d) => d.receivedAt >= regranted), `delivered only after the grant (${later.receivedAt - regranted} ms after)`);
  assert.deepEqual(theirs.deliveries, [], 'the Reconciler that borrowed a powerful identity got nothing');
});
