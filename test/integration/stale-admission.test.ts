// What kfn deploy and kfn manifests --apply take away when a function no longer has it: a webhook
// configuration (its defaults now the apiserver's policies, or a target with no TLS listener of
// its own), and a policy its manifests no longer hold. On the real apiserver.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TestContext } from 'node:test';
import { removeStaleWebhooks } from '../../cli/deploy.ts';
import { applyFunction } from '../../cli/functions.ts';
import { functionLabels } from '../../core/names.ts';
import type { KubeApi } from '../../kube/api.ts';
import type { Reconciler } from '../../functions/sdk/index.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';

const admission = '/apis/admissionregistration.k8s.io/v1';

/** A webhook configuration labelled as function `name`'s, for a group nothing uses (and Ignore): it holds up no other test. */
async function webhookConfiguration(t: TestContext, api: KubeApi, plural: 'mutatingwebhookconfigurations' | 'validatingwebhookconfigurations', name: string): Promise<() => Promise<boolean>> {
  const kind = plural === 'mutatingwebhookconfigurations' ? 'MutatingWebhookConfiguration' : 'ValidatingWebhookConfiguration';
  const metaName = `kfn-${name}-${plural.slice(0, 8)}`;
  await api.request('POST', `${admission}/${plural}`, {
    body: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind,
      metadata: { name: metaName, labels: functionLabels(name) },
      webhooks: [{
        name: `${plural.slice(0, 8)}.${name}.kfn.test`,
        clientConfig: { url: 'https://127.0.0.1:1/admission' },
        rules: [{ apiGroups: ['stale.kfn.test'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['nothings'] }],
        failurePolicy: 'Ignore',
        sideEffects: 'None',
        admissionReviewVersions: ['v1'],
      }],
    },
  });
  t.after(() => api.request('DELETE', `${admission}/${plural}/${metaName}`).catch(() => undefined));
  return () => api.request('GET', `${admission}/${plural}/${metaName}`).then(() => true, () => false);
}

test("a webhook configuration the function no longer has is removed before its pods change; the one it has stays; on Knative neither stays", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const name = uniqueName('stale');
  // Its defaults are now the apiserver's policies (none left for a webhook), its validate is still a webhook.
  const reconciler = { name, validate: () => [] } as unknown as Reconciler;
  const mutating = await webhookConfiguration(t, api, 'mutatingwebhookconfigurations', name);
  const validating = await webhookConfiguration(t, api, 'validatingwebhookconfigurations', name);
  const said: string[] = [];
  await removeStaleWebhooks(api, reconciler, false, (line) => said.push(line));
  assert.deepEqual([await mutating(), await validating()], [false, true]);
  assert.deepEqual(said, [`Removed MutatingWebhookConfiguration kfn-${name}-mutating: ${name} no longer has that webhook`]);
  await removeStaleWebhooks(api, reconciler, true, (line) => said.push(line));
  assert.equal(await validating(), false, 'on Knative nothing serves it');
});

test('a policy of the function its manifests no longer hold is removed; another function\'s stays', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const system = await testNamespace(t, cluster, 'stale-system');
  const [name, other] = [uniqueName('stale'), uniqueName('other')];
  const policy = (owner: string, policyName: string) => ({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name: policyName, labels: functionLabels(owner) },
    spec: { failurePolicy: 'Ignore', matchConstraints: { resourceRules: [{ apiGroups: ['stale.kfn.test'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['nothings'] }] }, validations: [{ expression: 'true' }] },
  });
  const present = (policyName: string) => api.request('GET', `${admission}/validatingadmissionpolicies/${policyName}`).then(() => true, () => false);
  const [kept, dropped, others] = [`${name}-kept`, `${name}-dropped`, `${other}-policy`];
  for (const [owner, policyName] of [[name, kept], [name, dropped], [other, others]] as const) {
    await api.request('POST', `${admission}/validatingadmissionpolicies`, { body: policy(owner, policyName) });
    t.after(() => api.request('DELETE', `${admission}/validatingadmissionpolicies/${policyName}`).catch(() => undefined));
  }
  await applyFunction(api, name, [policy(name, kept)], system);
  assert.deepEqual([await present(kept), await present(dropped), await present(others)], [true, false, true]);
});
