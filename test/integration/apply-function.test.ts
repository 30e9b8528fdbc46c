// Applying a function's RBAC again with fewer namespaces to watch (kfn deploy / kfn manifests
// --apply with a shorter --watch-namespace): the grants in the namespaces dropped go.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applyFunction, loadFunction } from '../../cli/functions.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { join } from 'node:path';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

test("a RoleBinding in a namespace the function no longer watches is removed; the others stay", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const system = await testNamespace(t, cluster, 'rbac-system');
  const [a, b] = [await testNamespace(t, cluster, 'rbac-a'), await testNamespace(t, cluster, 'rbac-b')];
  const reconciler = await loadFunction(join(repoRoot, 'functions', 'podset'));
  // The identity and its grants only: the Reconciler and the CRD would reach other tests' bridges.
  const rbac = (namespaces: string[]) => functionManifests(reconciler, { namespace: system, sinkUri: 'http://127.0.0.1:1/', namespaces }).filter((o) => ['ServiceAccount', 'RoleBinding'].includes((o as { kind: string }).kind));
  // The function's binding and the bridge's for it, in each namespace it serves.
  const bindings = [`kfn-fn-${reconciler.name}:${system}`, `kfn-bridge-${reconciler.name}:${system}`];
  const bound = async (ns: string) => (await Promise.all(bindings.map((b) => api.request('GET', `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings/${encodeURIComponent(b)}`).then(() => 'bound', () => 'none')))).join('+');

  await applyFunction(api, reconciler.name, rbac([a, b]), system);
  assert.deepEqual([await bound(a), await bound(b)], ['bound+bound', 'bound+bound']);
  await applyFunction(api, reconciler.name, rbac([a]), system);
  assert.deepEqual([await bound(a), await bound(b)], ['bound+bound', 'none+none'], 'the grants in the namespace dropped are gone, the function\'s and the bridge\'s');
  await applyFunction(api, reconciler.name, rbac([]), system);
  assert.equal(await bound(a), 'none+none', 'watching every namespace: no RoleBinding of an earlier, narrower apply is left');
});
