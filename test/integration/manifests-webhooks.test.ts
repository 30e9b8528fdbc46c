// What `kfn manifests --target deployment` writes for a function with webhooks, put to the real
// apiserver (server-side dry run: validated and admitted as if applied, nothing stored): every
// object with kfn's own CA, and the webhook configurations and CRD as cert-manager's cainjector
// expects them (no CA bundle, the inject-ca-from annotation). cert-manager's own kinds
// (Issuer, Certificate) are not served by this cluster and are checked by the unit test only.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { objectPath } from '../../kube/api.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { installReconcilerCrd, kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; annotations?: Record<string, string> } };

/** `kfn manifests` of the function in `dir` (from the repository's root). */
function manifests(dir: string, namespace: string, ...flags: string[]): Obj[] {
  const out = spawnSync(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'manifests', join(repoRoot, dir), '--namespace', namespace, '--target', 'deployment', ...flags], { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  return parseAllDocuments(out.stdout).map((d) => d.toJS() as Obj).filter(Boolean);
}

test('kfn manifests --target deployment with webhooks: the apiserver admits every object, with kfn\'s CA or for cert-manager\'s', async (t) => {
  const cluster = await testCluster();
  // The Reconciler is one of the objects put to the apiserver.
  await installReconcilerCrd(cluster);
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'manifests-webhooks');
  const dryRun = async (obj: Obj) => {
    const resource = await api.resource(obj.apiVersion, obj.kind);
    await api.request('PATCH', objectPath(resource, obj.metadata.name, resource.namespaced ? obj.metadata.namespace : undefined), {
      body: obj,
      contentType: 'application/apply-patch+yaml',
      query: { fieldManager: 'kfn-test', force: true, dryRun: 'All' },
    }).catch((err: Error) => assert.fail(`${obj.kind} ${obj.metadata.name}: ${err.message}`));
  };
  // MyApp's defaulting webhook (its validation is CEL in its CRD; kfn manifests, asking no
  // cluster, writes the webhook), and a validating one (test/support/webhook-fn: a check only code makes).
  for (const [dir, fn, webhook] of [['functions/myapp', 'myapp', 'MutatingWebhookConfiguration'], ['test/support/webhook-fn', 'chores', 'ValidatingWebhookConfiguration']] as const) {
    const own = manifests(dir, ns);
    assert.deepEqual(own.map((o) => o.kind).filter((k) => /Webhook|Secret|Deployment|Service$/.test(k)), ['Secret', 'Deployment', 'Service', webhook]);
    for (const obj of own) await dryRun(obj);
    const managed = manifests(dir, ns, '--webhook-ca', 'cert-manager');
    assert.deepEqual(managed.filter((o) => o.apiVersion.startsWith('cert-manager.io/')).map((o) => o.kind), ['Issuer', 'Certificate']);
    const configs = managed.filter((o) => o.kind.endsWith('WebhookConfiguration'));
    assert.deepEqual(configs.map((o) => o.kind), [webhook]);
    for (const obj of configs) {
      assert.equal(obj.metadata.annotations?.['cert-manager.io/inject-ca-from'], `${ns}/kfn-fn-${fn}-webhook`);
      await dryRun(obj);
    }
  }
});
