// Using an identity is a right over it, on the real apiserver (bridge/identity-policy.ts): who may
// edit Reconcilers but not impersonate the ServiceAccount one names cannot create it nor change
// its spec; the ServiceAccount's owner can. And a withdrawn consent stops deliveries in seconds.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { startBridge } from '../../bridge/main.ts';
import { waitFor } from '../../core/clock.ts';
import type { ReadCondition } from '../../core/conditions.ts';
import { identityForAnnotation } from '../../core/names.ts';
import { ApiError, KubeApi } from '../../kube/api.ts';
import { connectionFromKubeconfigText } from '../../kube/kubeconfig.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { applyYaml, installReconcilerCrd, kubeApi, testCluster, testNamespace, uniqueName, type TestCluster } from '../support/cluster.ts';
import { startReceiver } from '../support/receiver.ts';

const reconcilers = '/apis/kfn.dev/v1alpha1/reconcilers';

/** A client acting as ServiceAccount `name` of `ns` (a bound token). */
async function actingAs(cluster: TestCluster, ns: string, name: string): Promise<KubeApi> {
  const token = await requestServiceAccountToken(kubeApi(cluster.kc), { namespace: ns, name }, 3600);
  return new KubeApi(connectionFromKubeconfigText(kubeconfigForToken(cluster.paths.kubeconfig, token), `ServiceAccount ${ns}/${name}`));
}

test("naming an identity needs the right to impersonate it: an author who may edit Reconcilers but not that cannot create one, move its sink, drop its auth, or widen what it watches; the ServiceAccount's owner can", async (t) => {
  const cluster = await testCluster();
  await installReconcilerCrd(cluster);
  const admin = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'identity-policy');
  const name = uniqueName('vault');
  const editors = uniqueName('reconciler-editors');
  t.after(async () => {
    await admin.request('DELETE', `${reconcilers}/${name}`).catch(() => undefined);
    await admin.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${editors}`).catch(() => undefined);
    await admin.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${editors}`).catch(() => undefined);
  });
  // `vault` reads Secrets and agreed to serve the Reconciler. `author` may edit every Reconciler
  // (a cluster-scoped resource); `owner` may too, and may impersonate `vault` in its namespace.
  await applyYaml(
    cluster.kc,
    [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'vault', namespace: ns, annotations: { [identityForAnnotation]: name } } },
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'author', namespace: ns } },
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'owner', namespace: ns } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: editors }, rules: [{ apiGroups: ['kfn.dev'], resources: ['reconcilers'], verbs: ['get', 'list', 'create', 'update', 'patch', 'delete'] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: editors }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: editors }, subjects: ['author', 'owner'].map((n) => ({ kind: 'ServiceAccount', name: n, namespace: ns })) },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'use-vault', namespace: ns }, rules: [{ apiGroups: [''], resources: ['serviceaccounts'], resourceNames: ['vault'], verbs: ['impersonate'] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'use-vault', namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'use-vault' }, subjects: [{ kind: 'ServiceAccount', name: 'owner', namespace: ns }] },
    ].map((o) => stringify(o)).join('---\n'),
  );
  const author = await actingAs(cluster, ns, 'author');
  const owner = await actingAs(cluster, ns, 'owner');
  const spec = { for: { apiVersion: 'v1', kind: 'Secret' }, contract: 2, namespaces: [ns], owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }], sink: { uri: 'https://vault-fn.example/' }, auth: { secretRef: { name: 'vault-key', namespace: 'kfn-system' } }, serviceAccount: { namespace: ns, name: 'vault' } };
  const body = { apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec };

  // The policy is loaded by the apiserver a moment after it is created: waited for by its effect.
  const refused = await waitFor('the identity policy in force', async () => {
    const err = await author.request('POST', reconcilers, { body }).then(
      async () => {
        await admin.request('DELETE', `${reconcilers}/${name}`);
        return undefined;
      },
      (e: Error) => e,
    );
    return err && /impersonate/.test(err.message) ? err : undefined;
  }, { timeoutMs: 60_000 });
  assert.match(refused.message, new RegExp(`Reconciler ${name} names ServiceAccount ${ns}/vault as its identity.*needs the right to impersonate that ServiceAccount \\(kubectl auth can-i impersonate serviceaccount/vault -n ${ns}\\)`));

  // Its owner can create it.
  await owner.request('POST', reconcilers, { body });

  // The author can do nothing that changes where, or what, the identity's reads go.
  const patch = (api: KubeApi, p: object) => api.request('PATCH', `${reconcilers}/${name}`, { body: p, contentType: 'application/merge-patch+json' });
  for (const [what, p] of [
    ['move its sink', { spec: { sink: { uri: 'http://elsewhere.example/' } } }],
    ['drop its auth', { spec: { auth: null } }],
    ['move its sink and drop its auth at once', { spec: { sink: { uri: 'http://elsewhere.example/' }, auth: null } }],
    ['widen its namespaces', { spec: { namespaces: [] } }],
    ['widen what it owns', { spec: { owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }, { apiVersion: 'v1', kind: 'Secret' }] } }],
    ['widen the children it watches', { spec: { owns: [{ apiVersion: 'v1', kind: 'ConfigMap', labelSelector: '' }] } }],
    ['widen the fields it carries', { spec: { owns: [{ apiVersion: 'v1', kind: 'ConfigMap', fields: ['*'] }] } }],
    ['name another identity', { spec: { serviceAccount: { namespace: ns, name: 'author' } } }],
  ] as const) {
    const err = await patch(author, p).then(
      () => assert.fail(`the author could ${what}`),
      (e: Error) => e,
    );
    assert.ok(err instanceof ApiError && err.status === 403, `${what}: ${err.message}`);
    assert.match(err.message, /needs the right to impersonate that ServiceAccount/, what);
  }
  const stored = await admin.request<{ spec: typeof spec }>('GET', `${reconcilers}/${name}`);
  assert.equal(stored.spec.sink.uri, spec.sink.uri);
  assert.deepEqual(stored.spec.auth, { type: 'hmac', ...spec.auth });

  // What lends nothing new is left to whoever may edit Reconcilers: labels, annotations.
  await patch(author, { metadata: { labels: { team: 'payments' } } });

  // The owner may change the spec.
  await patch(owner, { spec: { sink: { uri: 'https://vault-fn-v2.example/' } } });
  assert.equal((await admin.request<{ spec: typeof spec }>('GET', `${reconcilers}/${name}`)).spec.sink.uri, 'https://vault-fn-v2.example/');

  // A Reconciler naming no identity lends none: the policy has nothing to say (the bridge refuses it).
  const anonymous = uniqueName('anonymous');
  t.after(() => admin.request('DELETE', `${reconcilers}/${anonymous}`).catch(() => undefined));
  await author.request('POST', reconcilers, { body: { ...body, metadata: { name: anonymous }, spec: { ...spec, serviceAccount: undefined } } });
});

test('a ServiceAccount that withdraws its consent stops deliveries within seconds, and the Reconciler says why', async (t) => {
  const cluster = await testCluster();
  await installReconcilerCrd(cluster);
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'consent');
  const name = uniqueName('consent');
  const receiver = await startReceiver(t, { kind: 'none' });
  const source = `kfn://${uniqueName('consent')}/bridge`;
  // The default review period (ten minutes while RBAC and ServiceAccounts are watched): what stops
  // the deliveries is the watch of ServiceAccounts, not a poll.
  const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, metricsAddr: '0', logLevel: 'fatal', shutdownTimeoutMs: 5000, source });
  t.after(() => running.stop());
  t.after(() => api.request('DELETE', `${reconcilers}/${name}`).catch(() => undefined));
  const ours = (object: string) => receiver.of(object).filter((d) => d.received.event.source === source);
  await applyYaml(
    cluster.kc,
    [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'fn', namespace: ns, annotations: { [identityForAnnotation]: name } } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'fn', namespace: ns }, rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'fn', namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'fn' }, subjects: [{ kind: 'ServiceAccount', name: 'fn', namespace: ns }] },
    ].map((o) => stringify(o)).join('---\n'),
  );
  await applyYaml(cluster.kc, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion: 'v1', kind: 'ConfigMap' }, namespaces: [ns], sink: { uri: receiver.url }, serviceAccount: { namespace: ns, name: 'fn' } } }));
  const configMap = (n: string) => api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: n }, data: { a: '1' } } });
  await configMap('before');
  await waitFor('the delivery while it consents', async () => ours('before')[0], { timeoutMs: 60_000 });

  await api.request('PATCH', `/api/v1/namespaces/${ns}/serviceaccounts/fn`, { body: { metadata: { annotations: { [identityForAnnotation]: null } } }, contentType: 'application/merge-patch+json' });
  const withdrawnAt = Date.now();
  const ready = await waitFor('Ready=False once the consent is withdrawn', async () => {
    const r = await api.request<{ status?: { conditions?: ReadCondition[] } }>('GET', `${reconcilers}/${name}`);
    const c = r.status?.conditions?.find((x) => x.type === 'Ready');
    return c?.status === 'False' ? c : undefined;
  }, { timeoutMs: 30_000 });
  const seconds = (Date.now() - withdrawnAt) / 1000;
  assert.equal(ready.reason, 'IdentityForbidden');
  assert.match(ready.message ?? '', /does not agree to be the identity of Reconciler/);
  assert.ok(seconds < 15, `the withdrawal took effect after ${seconds} s`);
  // Nothing of it is watched any more: the bridge holds none of its objects, and cannot deliver them.
  await waitFor('its watch let go', async () => (running.bridge.watchList().some((w) => w.users.includes(name)) ? undefined : true), { timeoutMs: 10_000 });
  await configMap('after');
  assert.deepEqual(ours('after'), [], 'nothing delivered once the consent is withdrawn');
});
