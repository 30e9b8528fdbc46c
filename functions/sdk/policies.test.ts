// A function's guards: the ValidatingAdmissionPolicies and bindings its manifests carry, and
// checkAdmission's answers; its declared defaults: the MutatingAdmissionPolicies, and
// applyDefaults' answers. Both held to the apiserver's by test/integration/rules.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { functionManifests } from './manifests.ts';
import { applyDefaults, checkAdmission } from './testing.ts';
import { defaultsAsPolicies, defaultsManifests } from './policies.ts';
import { defineKind, defineReconciler, t } from './index.ts';
import { hasWebhooks } from './webhooks.ts';
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

const Box = defineKind({ group: 'defaults.kfn.test', version: 'v1', kind: 'Box', spec: t.Object({ size: t.Optional(t.Integer()), color: t.Optional(t.String()), labels: t.Optional(t.Record(t.String(), t.String())) }), status: t.Object({}) });
const boxes = defineReconciler({
  name: 'boxes',
  for: Box,
  reconcile: () => ({}),
  defaults: [
    { when: '!has(object.spec.size)', set: { '/spec/size': '1' } },
    { set: { '/spec/color': "has(object.spec.color) ? object.spec.color : 'red'", '/metadata/labels': "{'size': string(object.spec.size)}" } },
  ],
});
const box = (spec: Record<string, unknown>) => ({ apiVersion: Box.apiVersion, kind: 'Box', metadata: { name: 'b', namespace: 'shop' }, spec });

test('declared defaults are MutatingAdmissionPolicies of the version the cluster serves: one JSON Patch each, its `when` a match condition, never an object being deleted', () => {
  const objects = defaultsManifests(boxes, 'admissionregistration.k8s.io/v1beta1', ['team-a']) as { apiVersion: string; kind: string; metadata: { name: string; labels: Record<string, string> }; spec: Record<string, unknown> }[];
  assert.deepEqual(objects.map((o) => `${o.apiVersion} ${o.kind} ${o.metadata.name}`), [
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicy kfn-boxes-boxes.defaults.kfn.test',
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicyBinding kfn-boxes-boxes.defaults.kfn.test',
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicy kfn-boxes-boxes.defaults.kfn.test-2',
    'admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicyBinding kfn-boxes-boxes.defaults.kfn.test-2',
  ]);
  assert.deepEqual(objects[0]!.spec, {
    failurePolicy: 'Fail',
    reinvocationPolicy: 'IfNeeded',
    matchConstraints: { resourceRules: [{ apiGroups: ['defaults.kfn.test'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: ['boxes'] }] },
    matchConditions: [{ name: 'not-being-deleted', expression: '!has(object.metadata.deletionTimestamp)' }, { name: 'when', expression: '!has(object.spec.size)' }],
    mutations: [{ patchType: 'JSONPatch', jsonPatch: { expression: '[JSONPatch{op: "add", path: "/spec/size", value: 1}]' } }],
  });
  assert.equal((objects[2]!.spec.matchConditions as unknown[]).length, 1, 'no `when`: always');
  assert.deepEqual(objects[1]!.spec, { policyName: 'kfn-boxes-boxes.defaults.kfn.test', matchResources: { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['team-a'] }] } } });
  assert.equal(objects[1]!.metadata.labels['kfn.dev/function'], 'boxes', 'kfn undeploy finds them');
  assert.equal(hasWebhooks(defaultsAsPolicies(boxes)), false, 'run by the apiserver: no defaulting webhook');
  assert.equal(hasWebhooks(boxes), true, 'elsewhere the function serves them');
});

test('applyDefaults: each default in order, on what the ones before wrote; other kinds, DELETE and an object being deleted as they are', () => {
  assert.deepEqual(applyDefaults(boxes, { operation: 'CREATE', object: box({}) }), { ...box({ size: 1, color: 'red' }), metadata: { name: 'b', namespace: 'shop', labels: { size: '1' } } });
  assert.deepEqual(applyDefaults(boxes, { operation: 'UPDATE', object: box({ size: 3, color: 'blue' }), oldObject: box({}) })!.spec, { size: 3, color: 'blue' });
  const other = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' } };
  assert.equal(applyDefaults(boxes, { operation: 'CREATE', object: other }), other);
  const going = { ...box({}), metadata: { name: 'b', deletionTimestamp: '2026-01-01T00:00:00Z' } };
  assert.deepEqual(applyDefaults(boxes, { operation: 'UPDATE', object: going, oldObject: going }), going);
});

test('a default that cannot be computed refuses the request, as failurePolicy Fail does; a declaration that cannot be one is refused by defineReconciler', () => {
  const broken = defineReconciler({ name: 'broken', for: Box, reconcile: () => ({}), defaults: [{ set: { '/spec/color': 'object.spec.missing' } }] });
  assert.throws(() => applyDefaults(broken, { operation: 'CREATE', object: box({}) }), /policy 'kfn-broken-boxes\.defaults\.kfn\.test' with binding 'kfn-broken-boxes\.defaults\.kfn\.test' denied request: expression 'object\.spec\.missing' resulted in error: /);
  const orphan = defineReconciler({ name: 'orphan', for: Box, reconcile: () => ({}), defaults: [{ set: { '/status/phase': "'new'" } }] });
  assert.throws(() => applyDefaults(orphan, { operation: 'CREATE', object: box({}) }), /cannot add \/status\/phase: its parent does not exist/);
  assert.throws(() => defineReconciler({ name: 'bad', for: Box, reconcile: () => ({}), defaults: [{ when: 'object.spec.(', set: { 'spec.size': '1', '/metadata/name': "'x'" } }] }), (err: Error) => {
    assert.match(err.message, /^bad: defaults\[0\]\.when: `object\.spec\.\(` is not CEL/);
    assert.match(err.message, /"spec\.size" is not a JSON Pointer/);
    assert.match(err.message, /"\/metadata\/name" is not a JSON Pointer to a field of the object that a default may set/);
    return true;
  });
});
