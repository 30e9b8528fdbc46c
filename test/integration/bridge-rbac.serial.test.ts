// The shipped manifests (manifests/): applied to the real cluster, their least-privilege RBAC
// lets a bridge running under the kfn-bridge ServiceAccount's token do its whole job — read
// Reconcilers and write their status, hold its Lease, read the auth Secret, watch the kinds it
// is granted, write Events — configured from Reconciler resources, not a file.
//
// Serial: its bridge acts on every Reconciler in the cluster with the narrow rights of the
// shipped RBAC, so beside other tests it would write their Reconcilers' status ("may not
// list/watch …") over what their own bridges write.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { startBridge } from '../../bridge/main.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { applyYaml, installCrd, testCluster, testNamespace, uniqueName, kubeApi } from '../support/cluster.ts';
import { KubeApi } from '../../kube/api.ts';
import { connectionFromKubeconfigText } from '../../kube/kubeconfig.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { waitFor } from '../../core/clock.ts';
import { authForAnnotation, identityForAnnotation } from '../../core/names.ts';
import { answerDone, startReceiver } from '../support/receiver.ts';
import type { Condition } from '../../core/conditions.ts';

test('the bridge runs under its ServiceAccount with only the shipped RBAC', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  // kustomize as kubectl ships it (the cluster's own kubectl build).
  const rendered = execFileSync(join(cluster.state.binDir, 'kubectl'), ['kustomize', join(repoRoot, 'manifests')], { encoding: 'utf8' });
  // Everything but the bridge's Deployment: this test runs the bridge itself, under the
  // ServiceAccount's token; replicas in the cluster would take every test's Reconcilers.
  const docs = rendered.split(/^---$/m).filter((d) => !/^kind: Deployment$/m.test(d));
  assert.equal(docs.length, rendered.split(/^---$/m).length - 1, 'the manifests hold one Deployment, the bridge');
  await applyYaml(cluster.kc, docs.join('---\n'));
  await waitFor('the Reconciler CRD to be served', () => api.resource('kfn.dev/v1alpha1', 'Reconciler'));

  // A function's kinds, granted to the bridge through an aggregated ClusterRole.
  const ns = await testNamespace(t, cluster, 'rbac-bridge');
  const group = `${uniqueName('rbac')}.kfn.test`;
  await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  const grant = uniqueName('kfn-bridge-widgets');
  await applyYaml(
    cluster.kc,
    stringify({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: grant, labels: { 'kfn.dev/aggregate-to-bridge': 'true' } },
      rules: [{ apiGroups: [group], resources: ['widgets'], verbs: ['list', 'watch'] }],
    }),
  );
  t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${grant}`).catch(() => undefined));
  await waitFor('the grant to be aggregated into kfn-bridge', async () => {
    const role = await api.request<{ rules?: { apiGroups?: string[] }[] }>('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles/kfn-bridge');
    return role.rules?.some((r) => r.apiGroups?.includes(group)) || undefined;
  });

  const secretName = uniqueName('fn-key');
  const key = uniqueName('k');
  const reconciler = uniqueName('widgets');
  // Marked for that Reconciler alone (kfn.dev/auth-for): another Reconciler naming it gets nothing.
  await cluster.core.createNamespacedSecret({ namespace: 'kfn-system', body: { metadata: { name: secretName, annotations: { [authForAnnotation]: reconciler } }, stringData: { secret: key } } });
  t.after(() => cluster.core.deleteNamespacedSecret({ namespace: 'kfn-system', name: secretName }).catch(() => undefined));
  const receiver = await startReceiver(t, { kind: 'hmac', secret: key });
  receiver.answer = (d, res) => (d.name === 'refused' ? void res.writeHead(400).end('refused on purpose') : answerDone(d, res));

  // The bridge, authenticated only as system:serviceaccount:kfn-system:kfn-bridge.
  const token = await requestServiceAccountToken(kubeApi(cluster.kc), { namespace: 'kfn-system', name: 'kfn-bridge' }, 3600);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-rbac-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'bridge.kubeconfig');
  writeFileSync(kubeconfig, kubeconfigForToken(cluster.paths.kubeconfig, token));
  const leaseName = uniqueName('kfn-bridge-test');
  const running = await startBridge({ kubeconfig, leaderElect: true, leaseNamespace: 'kfn-system', leaseName, metricsAddr: '127.0.0.1:0', logLevel: process.env.KFN_TEST_LOG ?? 'warn', shutdownTimeoutMs: 5000 });
  t.after(() => running.stop());

  // A Reconciler that cannot work: the CRD refuses an invalid spec (one schema with the bridge's
  // validation), so it names a kind the API does not serve.
  const invalid = uniqueName('unserved');
  const thief = uniqueName('thief');
  // Each Reconciler's identity: a ServiceAccount that agrees to serve them and may list Widgets
  // in the namespace (what the bridge reviews with the rights the manifests give it).
  const identity = 'widgets-fn';
  await applyYaml(
    cluster.kc,
    [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: identity, namespace: ns, annotations: { [identityForAnnotation]: `${reconciler},${thief},${invalid}` } } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: identity, namespace: ns }, rules: [{ apiGroups: [group], resources: ['widgets'], verbs: ['get', 'list'] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: identity, namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: identity }, subjects: [{ kind: 'ServiceAccount', name: identity, namespace: ns }] },
    ].map((o) => stringify(o)).join('---\n'),
  );
  const reconcilerBody = (name: string, kind: string) => ({
    apiVersion: 'kfn.dev/v1alpha1',
    kind: 'Reconciler',
    metadata: { name },
    spec: { for: { apiVersion: `${group}/v1`, kind }, sink: { uri: receiver.url }, namespaces: [ns], auth: { secretRef: { name: secretName, namespace: 'kfn-system' } }, serviceAccount: { name: identity, namespace: ns } },
  });
  // A confused deputy: whoever may write a Reconciler names another function's key and a sink of
  // their own. The Secret does not name that Reconciler: the bridge sends nothing, and says why.
  const theirs = await startReceiver(t, { kind: 'none' });
  // Removed whatever happens below: a Reconciler left behind would be another test's.
  t.after(async () => {
    for (const name of [reconciler, invalid, thief]) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined);
  });
  await applyYaml(cluster.kc, stringify({ ...reconcilerBody(thief, 'Widget'), spec: { ...reconcilerBody(thief, 'Widget').spec, sink: { uri: theirs.url } } }));
  await applyYaml(cluster.kc, stringify(reconcilerBody(reconciler, 'Widget')));
  await applyYaml(cluster.kc, stringify({ ...reconcilerBody(invalid, 'Gadget'), spec: { ...reconcilerBody(invalid, 'Gadget').spec, for: { apiVersion: `unserved.${group}/v1`, kind: 'Gadget' } } }));

  const readyOf = async (name: string) => {
    const obj = await api.request<{ status?: { conditions?: Condition[] } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`);
    return obj.status?.conditions?.find((c) => c.type === 'Ready');
  };
  const ready = await waitFor('the Reconciler to report Ready=True', async () => {
    const c = await readyOf(reconciler);
    return c?.status === 'True' ? c : undefined;
  }, { timeoutMs: 60_000 });
  assert.equal(ready.reason, 'Running');
  const notReady = await waitFor('the Reconciler of an unserved kind to report Ready=False', async () => {
    const c = await readyOf(invalid);
    return c?.status === 'False' ? c : undefined;
  });
  assert.equal(notReady.reason, 'WatchFailed');
  assert.match(notReady.message, /does not serve unserved\./);

  const widgets = `/apis/${group}/v1/namespaces/${ns}/widgets`;
  await api.request('POST', widgets, { body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 1 } } });
  const delivered = await waitFor('a signed delivery for the Widget', async () => receiver.of('w1')[0]);
  assert.equal(delivered.reason, 'created');
  assert.deepEqual(receiver.refused, []);

  await api.request('POST', widgets, { body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'refused' }, spec: {} } });
  await waitFor('a Warning Event written under the bridge identity', async () => {
    const events = await cluster.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=refused' });
    return events.items.find((e) => e.reason === 'ReconcileRejected');
  });

  const refusedKey = await waitFor('the Reconciler naming a Secret not marked for it to report Ready=False', async () => {
    const c = await readyOf(thief);
    return c?.status === 'False' ? c : undefined;
  });
  assert.match(refusedKey.message, /is not marked for Reconciler thief-[a-z0-9]+, so the bridge does not send its key/);
  assert.deepEqual(theirs.deliveries, [], 'nothing reached the other sink');
  assert.deepEqual(theirs.refused, [], 'not even an unsigned request');

  const lease = await api.request<{ spec: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/kfn-system/leases/${leaseName}`);
  assert.ok(lease.spec.holderIdentity, 'the bridge holds its Lease');
  const metrics = await fetch(`http://${running.address}/metrics`).then((r) => r.text());
  assert.match(metrics, new RegExp(`leader_election_master_status\\{name="${leaseName}"\\} 1`));

  // And nothing more than that: it cannot get a Secret outside its namespace (other functions'
  // grants may let it list and watch kinds they own, never get or write them), nor write the
  // objects it watches.
  const asBridge = new KubeApi(connectionFromKubeconfigText(kubeconfigForToken(cluster.paths.kubeconfig, token), 'the bridge\'s ServiceAccount'));
  await cluster.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'private' }, stringData: { k: 'v' } } });
  await assert.rejects(asBridge.request('GET', `/api/v1/namespaces/${ns}/secrets/private`), /forbidden/);
  await assert.rejects(asBridge.request('POST', widgets, { body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'x' } } }), /forbidden/);
});

test('a bridge whose Reconciler names namespaces needs rights in those namespaces only: every watch is per namespace', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'rbac-scoped');
  const group = `${uniqueName('scoped')}.kfn.test`;
  await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  // A ServiceAccount that may read widgets, ConfigMaps and Secrets in `ns` alone — nothing cluster-wide.
  await applyYaml(
    cluster.kc,
    [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'scoped-bridge', namespace: ns } },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: { name: 'scoped-bridge', namespace: ns },
        rules: [
          { apiGroups: [group], resources: ['widgets'], verbs: ['list', 'watch'] },
          { apiGroups: [''], resources: ['configmaps', 'secrets'], verbs: ['list', 'watch'] },
          { apiGroups: [''], resources: ['events'], verbs: ['create', 'get', 'patch'] },
        ],
      },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'scoped-bridge', namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'scoped-bridge' }, subjects: [{ kind: 'ServiceAccount', name: 'scoped-bridge', namespace: ns }] },
    ].map((o) => stringify(o)).join('---\n'),
  );
  const token = await requestServiceAccountToken(kubeApi(cluster.kc), { namespace: ns, name: 'scoped-bridge' }, 3600);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-scoped-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'bridge.kubeconfig');
  writeFileSync(kubeconfig, kubeconfigForToken(cluster.paths.kubeconfig, token));
  const receiver = await startReceiver(t, { kind: 'none' });
  const config = join(dir, 'bridge.yaml');
  writeFileSync(
    config,
    stringify({
      apiVersion: 'kfn.dev/v1alpha1',
      kind: 'Reconciler',
      metadata: { name: 'scoped' },
      spec: {
        for: { apiVersion: `${group}/v1`, kind: 'Widget' },
        owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
        watches: [{ apiVersion: 'v1', kind: 'Secret', mapping: { label: 'widget' } }],
        sink: { uri: receiver.url },
        namespaces: [ns],
      },
    }),
  );
  const running = await startBridge({ kubeconfig, configFile: config, metricsAddr: '0', logLevel: 'fatal', shutdownTimeoutMs: 5000 });
  t.after(() => running.stop());
  const widgets = `/apis/${group}/v1/namespaces/${ns}/widgets`;
  const w = await api.request<{ metadata: { uid: string } }>('POST', widgets, { body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'w' }, spec: {} } });
  await waitFor('the created delivery, through namespace-scoped rights alone', async () => receiver.of('w').find((d) => d.reason === 'created'), { timeoutMs: 30_000 });
  await cluster.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'c', labels: { 'app.kubernetes.io/managed-by': 'kfn' }, ownerReferences: [{ apiVersion: `${group}/v1`, kind: 'Widget', name: 'w', uid: w.metadata.uid, controller: true }] } } });
  await waitFor('the child delivery', async () => receiver.of('w').find((d) => d.reason === 'child'));
  await cluster.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 's', labels: { widget: 'w' } } } });
  await waitFor('the mapped delivery', async () => receiver.of('w').find((d) => d.reason === 'mapped'));
  assert.deepEqual(running.bridge.watchList().map((x) => [x.kind, x.namespace, x.problem]).sort(), [[`${group}/v1/Widget`, ns, undefined], ['v1/ConfigMap', ns, undefined], ['v1/Secret', ns, undefined]].sort());
});
