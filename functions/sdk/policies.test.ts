// A function's guards: the ValidatingAdmissionPolicies and bindings its manifests carry, and
// checkAdmission's answers; its declared defaults: the MutatingAdmissionPolicies, and
// applyDefaults' answers. Both held to the apiserver's by test/integration/rules.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { functionManifests } from './manifests.ts';
import { applyDefaults, checkAdmission } from './testing.ts';
import { defaultsAsPolicies, defaultsManifests, ownWritesPass } from './policies.ts';
import { expressionProblems } from './policy-cel.ts';
import { defineReconciler } from './index.ts';
import { hasWebhooks } from './webhooks.ts';
import { boxes, Box, defaultCases, guardCases, guarding } from '../../test/support/rules-cases.ts';

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

const box = (spec: Record<string, unknown>, metadata: Record<string, unknown> = {}) => ({ apiVersion: Box.apiVersion, kind: 'Box', metadata: { name: 'b', namespace: 'shop', ...metadata }, spec });

test('declared defaults are one MutatingAdmissionPolicy of the version the cluster serves: a mutation per declaration, in order, its `when` inside it; never an object being deleted nor a metadata-only update', () => {
  const objects = defaultsManifests(boxes, 'admissionregistration.k8s.io/v1beta1', ['team-a']) as { apiVersion: string; kind: string; metadata: { name: string; labels: Record<string, string> }; spec: Record<string, unknown> }[];
  assert.deepEqual(objects.map((o) => `${o.apiVersion} ${o.kind} ${o.metadata.name}`), [
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicy kfn-boxes-boxes.defaults.kfn.test',
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicyBinding kfn-boxes-boxes.defaults.kfn.test',
  ]);
  assert.deepEqual(objects[0]!.spec, {
    failurePolicy: 'Fail',
    reinvocationPolicy: 'Never',
    matchConstraints: { resourceRules: [{ apiGroups: ['defaults.kfn.test'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: ['boxes'] }] },
    matchConditions: ownWritesPass,
    mutations: [
      { patchType: 'JSONPatch', jsonPatch: { expression: '(!has(object.spec.size)) ? [JSONPatch{op: "add", path: "/spec/size", value: 1}] : []' } },
      { patchType: 'JSONPatch', jsonPatch: { expression: '[JSONPatch{op: "add", path: "/spec/color", value: has(object.spec.color) ? object.spec.color : \'red\'}, JSONPatch{op: "add", path: "/metadata/labels", value: {\'size\': string(object.spec.size)}}]' } },
      { patchType: 'JSONPatch', jsonPatch: { expression: '(has(object.spec.tags) && !(\'checked\' in object.spec.tags)) ? [JSONPatch{op: "add", path: "/spec/tags/-", value: \'checked\'}] : []' } },
    ],
  });
  assert.deepEqual(objects[1]!.spec, { policyName: 'kfn-boxes-boxes.defaults.kfn.test', matchResources: { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['team-a'] }] } } });
  assert.equal(objects[1]!.metadata.labels['kfn.dev/function'], 'boxes', 'kfn undeploy finds them');
  assert.deepEqual(defaultsManifests(guarding, 'admissionregistration.k8s.io/v1'), [], 'none declared, none written');
  assert.equal(hasWebhooks(defaultsAsPolicies(boxes)), false, 'run by the apiserver: no defaulting webhook');
  assert.equal(hasWebhooks(boxes), true, 'elsewhere the function serves them');
});

for (const c of defaultCases) {
  test(`applyDefaults, ${c.name}: what the apiserver stores`, () => {
    const stored = applyDefaults(boxes, { operation: 'CREATE', object: box(c.spec) })!;
    assert.deepEqual({ spec: stored.spec, labels: (stored.metadata as { labels?: unknown }).labels }, { labels: undefined, ...c.stored });
  });
}

test('applyDefaults: not on a metadata-only update, an object being deleted, DELETE or another kind; on a spec update', () => {
  const stored = box({ size: 1, color: 'red' }, { labels: { size: '1' } });
  const relabelled = box({ size: 1, color: 'red' }, { labels: { size: '1', team: 'a' } });
  assert.deepEqual(applyDefaults(boxes, { operation: 'UPDATE', object: relabelled, oldObject: stored }), relabelled);
  const resized = box({ size: 4, color: 'red' }, { labels: { size: '1' } });
  assert.deepEqual((applyDefaults(boxes, { operation: 'UPDATE', object: resized, oldObject: stored })!.metadata as { labels?: unknown }).labels, { size: '4' });
  const going = box({}, { deletionTimestamp: '2026-01-01T00:00:00Z' });
  assert.deepEqual(applyDefaults(boxes, { operation: 'UPDATE', object: going, oldObject: going }), going);
  const other = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' } };
  assert.equal(applyDefaults(boxes, { operation: 'CREATE', object: other }), other);
});

test('applyDefaults: an array index as the apiserver\'s JSON Patch takes it: 0 to the length inserts, a negative one counts from the end, others refuse', () => {
  const at = (path: string) => defineReconciler({ name: 'at', for: Box, reconcile: () => ({}), defaults: [{ set: { [path]: "'x'" } }] });
  const tags = (path: string) => applyDefaults(at(path), { operation: 'CREATE', object: box({ tags: ['a', 'b'] }) })!.spec.tags;
  assert.deepEqual(tags('/spec/tags/0'), ['x', 'a', 'b']);
  assert.deepEqual(tags('/spec/tags/2'), ['a', 'b', 'x']);
  assert.deepEqual(tags('/spec/tags/-1'), ['a', 'b', 'x']);
  assert.deepEqual(tags('/spec/tags/-3'), ['x', 'a', 'b']);
  for (const bad of ['/spec/tags/3', '/spec/tags/-4', '/spec/tags/first']) assert.throws(() => tags(bad), /cannot add \/spec\/tags\/\S+: no index/, bad);
});

test('a default that cannot be computed refuses the request, as failurePolicy Fail does (Ignore lets it through as it was); a declaration that cannot be one is refused by defineReconciler, an expression that is not CEL by the check kfn runs when it loads the function', () => {
  const broken = defineReconciler({ name: 'broken', for: Box, reconcile: () => ({}), defaults: [{ set: { '/spec/color': 'object.spec.missing' } }] });
  assert.throws(() => applyDefaults(broken, { operation: 'CREATE', object: box({}) }), /policy 'kfn-broken-boxes\.defaults\.kfn\.test' with binding 'kfn-broken-boxes\.defaults\.kfn\.test' denied request: expression 'object\.spec\.missing' resulted in error: /);
  const lenient = { ...broken, admission: { failurePolicy: 'Ignore' as const } };
  assert.deepEqual(applyDefaults(lenient, { operation: 'CREATE', object: box({}) }), box({}));
  assert.equal((defaultsManifests(lenient, 'admissionregistration.k8s.io/v1')[0]!.spec as { failurePolicy: string }).failurePolicy, 'Ignore', 'the policy as lenient as the webhook');
  const notBool = defineReconciler({ name: 'notbool', for: Box, reconcile: () => ({}), defaults: [{ when: 'object.spec', set: { '/spec/size': '1' } }] });
  assert.throws(() => applyDefaults(notBool, { operation: 'CREATE', object: box({}) }), /resulted in error/);
  const orphan = defineReconciler({ name: 'orphan', for: Box, reconcile: () => ({}), defaults: [{ set: { '/status/phase': "'new'" } }] });
  assert.throws(() => applyDefaults(orphan, { operation: 'CREATE', object: box({}) }), /cannot add \/status\/phase: its parent does not exist/);
  assert.throws(() => defineReconciler({ name: 'bad', for: Box, reconcile: () => ({}), defaults: [{ when: 'object.spec.(', set: { 'spec.size': '1', '/metadata/name': "'x'" } }] }), (err: Error) => {
    assert.match(err.message, /^bad: defaults\[0\]\.set: "spec\.size" is not a JSON Pointer/);
    assert.match(err.message, /"\/metadata\/name" is not a JSON Pointer to a field of the object that a default may set/);
    return true;
  });
  const notCel = defineReconciler({ name: 'notcel', for: Box, reconcile: () => ({}), defaults: [{ when: 'object.spec.(', set: { '/spec/size': "1 +" } }] });
  assert.deepEqual(
    expressionProblems(notCel).map((p) => p.replace(/ is not CEL: .*/s, ' is not CEL')),
    ['defaults[0].when: `object.spec.(` is not CEL', 'defaults[0].set["/spec/size"]: `1 +` is not CEL'],
  );
  assert.deepEqual(expressionProblems(orphan), []);
});
