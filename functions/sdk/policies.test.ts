// A function's guards: the ValidatingAdmissionPolicies and bindings its manifests carry, and
// checkAdmission's answers, held to the apiserver's by test/integration/rules.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { functionManifests } from './manifests.ts';
import { checkAdmission } from './testing.ts';
import { guardCases, guarding } from '../../test/support/rules-cases.ts';

test('each guard is a policy (Fail) and a binding (Deny), limited to the namespaces the function watches, labelled as the function\'s', () => {
  const objects = functionManifests(guarding, { namespaces: ['team-a'] }) as { kind: string; metadata: { name: string; labels: Record<string, string> }; spec: Record<string, unknown> }[];
  const policies = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicy');
  assert.deepEqual(policies.map((p) => p.metadata.name), ['kfn-guard-test-deployments.apps', 'kfn-guard-test-configmaps.core']);
  assert.deepEqual(policies[1]!.spec, { failurePolicy: 'Fail', matchConstraints: { resourceRules: [{ apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'], operations: ['DELETE'] }] }, validations: [{ expression: "!has(oldObject.metadata.labels) || !('protect' in oldObject.metadata.labels)", message: 'is protected' }] });
  const binding = objects.find((o) => o.kind === 'ValidatingAdmissionPolicyBinding')!;
  assert.deepEqual(binding.spec, { policyName: 'kfn-guard-test-deployments.apps', validationActions: ['Deny'], matchResources: { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['team-a'] }] } } });
  assert.equal(binding.metadata.labels['kfn.dev/function'], 'guard-test', 'kfn undeploy finds it');
  assert.equal(objects.at(-1)!.kind, 'Reconciler', 'the Reconciler still last');
});

for (const c of guardCases) {
  test(`${c.name}: ${c.refusals.length ? 'refused, in the apiserver\'s words' : 'allowed'}`, () => {
    const said = checkAdmission(guarding, { operation: c.operation, object: c.object, oldObject: c.oldObject });
    assert.deepEqual(said.map((s) => s.replace(/^ValidatingAdmissionPolicy '([^']+)' with binding '\1' denied request: /, '')), c.refusals);
  });
}
