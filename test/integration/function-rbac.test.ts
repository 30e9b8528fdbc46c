// A function's own permissions and the bridge's for it, checked by the real apiserver's RBAC
// authorizer: limited to namespaces, each may do what the function declares there, and nothing
// elsewhere.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applyObject } from '../../kube/api.ts';
import { ConfigMap, defineKind, defineReconciler, Deployment, Secret, t as types } from '../../functions/sdk/index.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { discoveredScopes } from '../../cli/functions.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import CertificateFunction from '../../functions/certificate/index.ts';
import IssuerFunction from '../../functions/issuer/index.ts';
import { waitFor } from '../../core/clock.ts';
import type { Reconciler } from '../../functions/sdk/reconciler.ts';

const execFileAsync = promisify(execFile);

test('a function limited to namespaces is allowed there and refused elsewhere (SubjectAccessReview)', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const home = await testNamespace(t, cluster, 'rbac-home');
  const served = await testNamespace(t, cluster, 'rbac-served');
  const other = await testNamespace(t, cluster, 'rbac-other');
  const Gadget = defineKind({ group: `${uniqueName('rbac')}.kfn.test`, version: 'v1', kind: 'Gadget', spec: types.Object({}), status: types.Object({}) });
  const fn = defineReconciler({ name: uniqueName('gadgets'), for: Gadget, owns: [ConfigMap, Deployment], uses: [{ kind: Secret, verbs: ['get'], names: ['gadget-settings'] }], reconcile: () => ({}) });
  const rbac = functionManifests(fn, { namespace: home, namespaces: [served] }).filter((o) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind as string));
  for (const obj of rbac) {
    await applyObject(api, obj as never, 'kfn-test');
    const m = obj.metadata as { name: string; namespace?: string };
    if (obj.kind === 'ClusterRole') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${m.name}`).catch(() => undefined));
    if (obj.kind === 'ClusterRoleBinding') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${encodeURIComponent(m.name)}`).catch(() => undefined));
  }
  const user = `system:serviceaccount:${home}:kfn-fn-${fn.name}`;
  const can = async (verb: string, group: string, resource: string, namespace: string, name?: string) => {
    const review = await api.request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { user, groups: ['system:serviceaccounts', `system:serviceaccounts:${home}`, 'system:authenticated'], resourceAttributes: { namespace, verb, group, resource, ...(name ? { name } : {}) } } },
    });
    return review.status.allowed;
  };
  assert.equal(await can('create', 'apps', 'deployments', served), true, 'its children in the namespace it serves');
  assert.equal(await can('patch', Gadget.group, 'gadgets/status', served), true, 'its objects\' status there');
  assert.equal(await can('create', '', 'events', served), true);
  assert.equal(await can('create', 'apps', 'deployments', other), false, 'refused in another namespace');
  assert.equal(await can('create', 'apps', 'deployments', 'default'), false, 'refused in default');
  assert.equal(await can('delete', '', 'configmaps', other), false);
  assert.equal(await can('get', '', 'secrets', served), false, 'nothing it did not declare');
  assert.equal(await can('get', '', 'secrets', served, 'gadget-settings'), true, 'the Secret it names, where it is served');
  assert.equal(await can('get', '', 'secrets', served, 'payroll'), false, 'no other Secret');
  assert.equal(await can('get', '', 'secrets', other, 'gadget-settings'), false, 'not where it is not served');
});

test('kubectl auth can-i, as each identity kfn generates: the function and the bridge may do what the function declares, where it is served, and nothing else', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const home = await testNamespace(t, cluster, 'cani-home');
  const served = await testNamespace(t, cluster, 'cani-served');
  const other = await testNamespace(t, cluster, 'cani-other');
  // The certificate function: owns Secrets, watches Issuers, reads an Issuer's CA Secret by name.
  // Renamed, so its cluster-wide names are this test's alone; the bridge identity is one of this
  // test's namespace, bound by nothing else.
  const fn = { ...CertificateFunction, name: uniqueName('certs') } as Reconciler;
  const rbac = functionManifests(fn, { namespace: home, namespaces: [served], bridgeNamespace: home }).filter((o) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind as string));
  for (const obj of rbac) {
    await applyObject(api, obj as never, 'kfn-test');
    const m = obj.metadata as { name: string };
    if (obj.kind === 'ClusterRole') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${m.name}`).catch(() => undefined));
  }
  // kubectl resolves a resource through discovery: the kinds' CRDs must be served (the same
  // CRDs the certificate example installs; left in place, as other tests use them).
  for (const f of [CertificateFunction, IssuerFunction]) await applyObject(api, functionManifests(f)[0] as never, 'kfn-test');
  await waitFor('the certs.kfn.dev kinds to be served', async () => (await api.resource('certs.kfn.dev/v1alpha1', 'Issuer').then(() => api.resource('certs.kfn.dev/v1alpha1', 'Certificate')).catch(() => undefined)) && true);
  const kubectl = join(cluster.state.binDir, 'kubectl');
  const canI = (who: string, verb: string, resource: string, namespace?: string) => {
    const args = ['--kubeconfig', cluster.paths.kubeconfig, 'auth', 'can-i', verb, resource, `--as=system:serviceaccount:${home}:${who}`, ...(namespace ? ['-n', namespace] : ['--all-namespaces'])];
    return execFileAsync(kubectl, args).then(({ stdout }) => stdout.trim(), (err: { stdout?: string }) => (err.stdout ?? '').trim());
  };
  const account = `kfn-fn-${fn.name}`;
  const expect: [string, string, string, string | undefined, 'yes' | 'no'][] = [
    [account, 'create', 'secrets', served, 'yes'], // its children
    [account, 'delete', 'secrets', served, 'yes'],
    [account, 'get', 'issuers.certs.kfn.dev', served, 'yes'], // what it watches, by name
    [account, 'list', 'issuers.certs.kfn.dev', served, 'no'], // not listed: declared without list
    [account, 'patch', 'certificates.certs.kfn.dev/status', served, 'yes'],
    [account, 'delete', 'certificates.certs.kfn.dev', served, 'no'], // never its own objects
    [account, 'create', 'secrets', other, 'no'], // not where it is not served
    [account, 'list', 'secrets', undefined, 'no'], // not cluster-wide
    [account, 'list', 'configmaps', served, 'no'], // nothing it did not declare
    ['kfn-bridge', 'watch', 'secrets', served, 'yes'], // the bridge watches its kinds where it is served
    ['kfn-bridge', 'list', 'certificates.certs.kfn.dev', served, 'yes'],
    ['kfn-bridge', 'list', 'secrets', other, 'no'], // and nowhere else
    ['kfn-bridge', 'list', 'secrets', undefined, 'no'],
    ['kfn-bridge', 'get', 'secrets', served, 'no'], // it lists and watches; it reads no Secret's data by name
    ['kfn-bridge', 'create', 'secrets', served, 'no'],
  ];
  const seen = [];
  for (const [who, verb, resource, ns] of expect) seen.push(`${who === account ? 'function' : 'bridge'} ${verb} ${resource} ${ns ? `in ${ns === served ? 'served' : 'other'}` : 'everywhere'}: ${await canI(who, verb, resource, ns)}`);
  assert.deepEqual(seen, expect.map(([who, verb, resource, ns, want]) => `${who === account ? 'function' : 'bridge'} ${verb} ${resource} ${ns ? `in ${ns === served ? 'served' : 'other'}` : 'everywhere'}: ${want}`));
});

test('a cluster-scoped kind kfn does not know is granted cluster-wide once discovery names its scope', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const home = await testNamespace(t, cluster, 'scope-home');
  const served = await testNamespace(t, cluster, 'scope-served');
  // CSIDriver: cluster-scoped, and not in kfn's list of built-in cluster-scoped kinds.
  const CSIDriver = { apiVersion: 'storage.k8s.io/v1', kind: 'CSIDriver' };
  const Gadget = defineKind({ group: `${uniqueName('scope')}.kfn.test`, version: 'v1', kind: 'Gadget', spec: types.Object({}), status: types.Object({}) });
  const fn = defineReconciler({ name: uniqueName('gadgets'), for: Gadget, owns: [ConfigMap, CSIDriver], reconcile: () => ({}) });
  const scopeOf = await discoveredScopes(api, fn);
  assert.equal(scopeOf(CSIDriver), 'Cluster');
  assert.equal(scopeOf(ConfigMap), 'Namespaced');
  const rbac = functionManifests(fn, { namespace: home, namespaces: [served], scopeOf }).filter((o) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind as string));
  for (const obj of rbac) {
    await applyObject(api, obj as never, 'kfn-test');
    const m = obj.metadata as { name: string };
    if (obj.kind === 'ClusterRole') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${m.name}`).catch(() => undefined));
    if (obj.kind === 'ClusterRoleBinding') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${encodeURIComponent(m.name)}`).catch(() => undefined));
  }
  const user = `system:serviceaccount:${home}:kfn-fn-${fn.name}`;
  const can = async (verb: string, group: string, resource: string, namespace?: string) => {
    const review = await api.request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { user, groups: ['system:serviceaccounts', `system:serviceaccounts:${home}`, 'system:authenticated'], resourceAttributes: { ...(namespace ? { namespace } : {}), verb, group, resource } } },
    });
    return review.status.allowed;
  };
  assert.equal(await can('create', 'storage.k8s.io', 'csidrivers'), true, 'the cluster-scoped child, by a ClusterRoleBinding');
  assert.equal(await can('create', '', 'configmaps', served), true);
  assert.equal(await can('create', '', 'configmaps', home), false, 'the namespaced ones still only where it is served');
});
