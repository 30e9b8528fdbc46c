// A function's own permissions, checked by the real apiserver's RBAC authorizer: limited to
// namespaces, it may write its children there and is refused everywhere else.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applyObject } from '../../kube/api.ts';
import { ConfigMap, defineKind, defineReconciler, Deployment, t as types } from '../../functions/sdk/index.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';

test('a function limited to namespaces is allowed there and refused elsewhere (SubjectAccessReview)', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const home = await testNamespace(t, cluster, 'rbac-home');
  const served = await testNamespace(t, cluster, 'rbac-served');
  const other = await testNamespace(t, cluster, 'rbac-other');
  const Gadget = defineKind({ group: `${uniqueName('rbac')}.kfn.test`, version: 'v1', kind: 'Gadget', spec: types.Object({}), status: types.Object({}) });
  const fn = defineReconciler({ name: uniqueName('gadgets'), for: Gadget, owns: [ConfigMap, Deployment], reconcile: () => ({}) });
  const rbac = functionManifests(fn, { namespace: home, namespaces: [served] }).filter((o) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind as string));
  for (const obj of rbac) {
    await applyObject(api, obj as never, 'kfn-test');
    const m = obj.metadata as { name: string; namespace?: string };
    if (obj.kind === 'ClusterRole') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterroles/${m.name}`).catch(() => undefined));
    if (obj.kind === 'ClusterRoleBinding') t.after(() => api.request('DELETE', `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${encodeURIComponent(m.name)}`).catch(() => undefined));
  }
  const user = `system:serviceaccount:${home}:kfn-fn-${fn.name}`;
  const can = async (verb: string, group: string, resource: string, namespace: string) => {
    const review = await api.request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { user, groups: ['system:serviceaccounts', `system:serviceaccounts:${home}`, 'system:authenticated'], resourceAttributes: { namespace, verb, group, resource } } },
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
});
