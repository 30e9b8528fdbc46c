// What the apiserver refuses in a CRD, refused here first, each problem naming its field: the
// same cases are sent to a real apiserver by test/integration/crd-refusals.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Type as t, type TSchema } from '@sinclair/typebox';
import { CrdRefused, crdRefusals, customResourceDefinition, openApi, type CrdOptions } from './crd.ts';
import { reconcilerCrd } from '../bridge/config.ts';

/** A one-version, namespaced kind with this spec (and names unless overridden). */
function options(spec: TSchema, names: Partial<Pick<CrdOptions, 'group' | 'kind' | 'plural'>> & { version?: string } = {}): CrdOptions {
  return { group: names.group ?? 'demo.example.com', kind: names.kind ?? 'Thing', plural: names.plural ?? 'things', scope: 'Namespaced', versions: [{ name: names.version ?? 'v1', spec, storage: true }] };
}

/** The problems kfn finds in the CRD it would have written (the check bypassed). */
const refusals = (spec: TSchema, names?: Parameters<typeof options>[1]) => crdRefusals(customResourceDefinition(options(spec, names), { check: false }));

test('a kind kfn can write is written, with nothing refused', () => {
  const spec = t.Object({
    replicas: t.Integer({ minimum: 1, maximum: 10, default: 1 }),
    name: t.String({ minLength: 3, pattern: '^[a-z]+$', default: 'web' }),
    mode: t.Union([t.Literal('fast'), t.Literal('safe')], { default: 'safe' }),
    labels: t.Optional(t.Record(t.String(), t.String())),
    ports: t.Array(t.Object({ port: t.Integer({ minimum: 1 }) }), { default: [{ port: 80 }], maxItems: 3 }),
  });
  assert.deepEqual(refusals(spec), []);
  assert.doesNotThrow(() => customResourceDefinition(options(spec)));
});

test("kfn's own Reconciler CRD passes its checks", () => {
  assert.deepEqual(crdRefusals(reconcilerCrd()), []);
});

test('a string-or-integer union gets x-kubernetes-int-or-string, which is what the apiserver accepts for it', () => {
  for (const union of [t.Union([t.Integer(), t.String()]), t.Union([t.String(), t.Integer()])]) {
    const out = openApi(t.Object({ size: union }));
    assert.deepEqual((out.properties as Record<string, unknown>).size, { 'x-kubernetes-int-or-string': true });
    assert.deepEqual(refusals(t.Object({ size: union })), []);
  }
  // A default that is either is fine; one that is neither is not.
  assert.deepEqual(refusals(t.Object({ size: t.Union([t.Integer(), t.String()], { default: '1Gi' }) })), []);
  assert.deepEqual(refusals(t.Object({ size: t.Union([t.Integer(), t.String()], { default: true }) })), ['spec.properties.size.default: true is neither an integer nor a string']);
});

test('without its marker, an integer-or-string anyOf is refused as not structural', () => {
  const crd = customResourceDefinition(options(t.Object({ size: t.Integer() })), { check: false });
  const schema = (crd.spec as { versions: { schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, unknown> } } } } }[] }).versions[0]!.schema.openAPIV3Schema.properties.spec;
  schema.properties.size = { anyOf: [{ type: 'integer' }, { type: 'string' }] };
  assert.deepEqual(crdRefusals(crd), ["spec.properties.size.type: must be set: a CRD's schema is structural (every field says its type); an integer-or-string field needs x-kubernetes-int-or-string: true"]);
});

test('other unions of several types are refused: a CRD has no form for them', () => {
  assert.deepEqual(refusals(t.Object({ size: t.Union([t.Number(), t.String()]) })), [
    'spec.properties.size: a union of number and string has no CRD form (only integer | string has, as x-kubernetes-int-or-string): use one type',
  ]);
  assert.deepEqual(refusals(t.Object({ name: t.Union([t.String(), t.Null()]) })), [
    "spec.properties.name: a union of string and null has no CRD form (only integer | string has, as x-kubernetes-int-or-string): use one type (t.Optional for a field that may be absent)",
  ]);
});

test('types JSON Schema lacks are refused, naming the field', () => {
  assert.deepEqual(refusals(t.Object({ when: t.Date() })), [
    `spec.properties.when.type: "Date" is not a type a CRD's schema has (array, boolean, integer, number, object, string): for a time, use t.String({ format: 'date-time' })`,
  ]);
  assert.deepEqual(refusals(t.Object({ big: t.BigInt() })), [`spec.properties.big.type: "bigint" is not a type a CRD's schema has (array, boolean, integer, number, object, string)`]);
});

test('non-structural schemas are refused: a field without a type, an intersection, a strict object, a tuple', () => {
  assert.deepEqual(refusals(t.Object({ anything: t.Unknown() })), [
    "spec.properties.anything.type: must be set: a CRD's schema is structural (every field says its type); for free-form data use t.Unsafe({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true })",
  ]);
  assert.deepEqual(refusals(t.Object({ both: t.Intersect([t.Object({ a: t.String() }), t.Object({ b: t.String() })]) })), [
    'spec.properties.both.allOf[0]: a branch of allOf may only constrain values (no type, properties, items, description or default): write one t.Object with all the fields instead of t.Intersect',
    'spec.properties.both.allOf[1]: a branch of allOf may only constrain values (no type, properties, items, description or default): write one t.Object with all the fields instead of t.Intersect',
  ]);
  assert.deepEqual(refusals(t.Object({ strict: t.Object({ a: t.String() }, { additionalProperties: false }) })), [
    'spec.properties.strict.additionalProperties: false cannot go with properties in a CRD (the apiserver prunes unknown fields instead): drop additionalProperties: false',
  ]);
  assert.deepEqual(refusals(t.Object({ pair: t.Tuple([t.String(), t.Integer()]) })), ['spec.properties.pair.items: must be one schema, not a list of them (a CRD has no tuples): use an object with named fields']);
  assert.deepEqual(refusals(t.Object({ tags: t.Array(t.String(), { uniqueItems: true }) })), ["spec.properties.tags.uniqueItems: the apiserver refuses uniqueItems: true: use t.Array(…, { 'x-kubernetes-list-type': 'set' })"]);
});

test('defaults that break their own constraints are refused', () => {
  assert.deepEqual(refusals(t.Object({ replicas: t.Integer({ minimum: 1, default: 0 }) })), ['spec.properties.replicas.default: 0 is below minimum 1']);
  assert.deepEqual(refusals(t.Object({ replicas: t.Integer({ maximum: 5, default: 6 }) })), ['spec.properties.replicas.default: 6 is above maximum 5']);
  assert.deepEqual(refusals(t.Object({ replicas: t.Integer({ default: 1.5 }) })), ['spec.properties.replicas.default: 1.5 is not an integer']);
  assert.deepEqual(refusals(t.Object({ name: t.String({ minLength: 3, default: 'ab' }) })), ['spec.properties.name.default: "ab" is shorter than minLength 3']);
  assert.deepEqual(refusals(t.Object({ name: t.String({ maxLength: 2, default: 'abc' }) })), ['spec.properties.name.default: "abc" is longer than maxLength 2']);
  assert.deepEqual(refusals(t.Object({ name: t.String({ pattern: '^[a-z]+$', default: 'Web' }) })), ['spec.properties.name.default: "Web" does not match pattern ^[a-z]+$']);
  assert.deepEqual(refusals(t.Object({ mode: t.Union([t.Literal('fast'), t.Literal('safe')], { default: 'slow' }) })), ['spec.properties.mode.default: "slow" is not one of "fast", "safe"']);
  assert.deepEqual(refusals(t.Object({ ratio: t.Number({ exclusiveMinimum: 0, default: 0 }) })), ['spec.properties.ratio.default: 0 is not above exclusiveMinimum 0']);
  assert.deepEqual(refusals(t.Object({ ports: t.Array(t.Integer({ minimum: 1 }), { default: [80, 0] }) })), ['spec.properties.ports.default[1]: 0 is below minimum 1']);
  assert.deepEqual(refusals(t.Object({ ports: t.Array(t.Integer(), { minItems: 1, default: [] }) })), ['spec.properties.ports.default: 0 items, fewer than minItems 1']);
  assert.deepEqual(refusals(t.Object({ web: t.Object({ port: t.Integer(), host: t.String() }, { default: { port: 80, extra: 1 } }) })), [
    'spec.properties.web.default.extra: not in the schema (the apiserver would prune it, and refuses such a default)',
    'spec.properties.web.default.host: required, missing',
  ]);
});

test('bounds that no value can meet are refused: minimum above maximum, minLength above maxLength, minItems above maxItems', () => {
  assert.deepEqual(refusals(t.Object({ replicas: t.Integer({ minimum: 5, maximum: 1 }) })), ['spec.properties.replicas: minimum 5 is above maximum 1, so no value is valid']);
  assert.deepEqual(refusals(t.Object({ name: t.String({ minLength: 5, maxLength: 1 }) })), ['spec.properties.name: minLength 5 is above maxLength 1, so no value is valid']);
  assert.deepEqual(refusals(t.Object({ tags: t.Array(t.String(), { minItems: 3, maxItems: 2 }) })), ['spec.properties.tags: minItems 3 is above maxItems 2, so no value is valid']);
  assert.deepEqual(refusals(t.Object({ ratio: t.Number({ exclusiveMinimum: 1, exclusiveMaximum: 1 }) })), ['spec.properties.ratio: exclusiveMinimum 1 is not below exclusiveMaximum 1, so no value is valid']);
});

test("TypeBox's numeric exclusiveMinimum and exclusiveMaximum become OpenAPI v3.0's boolean form", () => {
  assert.deepEqual(openApi(t.Number({ exclusiveMinimum: 0, exclusiveMaximum: 5 })), { type: 'number', minimum: 0, exclusiveMinimum: true, maximum: 5, exclusiveMaximum: true });
});

test('names the apiserver refuses, or that break Kubernetes naming, are refused', () => {
  const spec = t.Object({});
  assert.deepEqual(refusals(spec, { kind: 'broken-thing' }), ['kind "broken-thing": must be UpperCamelCase letters and digits, starting with a capital letter (e.g. BrokenThing)']);
  assert.deepEqual(refusals(spec, { group: 'Broken_Example' }), ['group "Broken_Example": must be a DNS subdomain, lowercase letters, digits, \'-\' and \'.\' (e.g. broken.example)']);
  assert.deepEqual(refusals(spec, { group: 'example' }), ['group "example": must have at least one dot, a domain you own (e.g. example.com)']);
  assert.deepEqual(refusals(spec, { group: 'things.k8s.io' }), ['group "things.k8s.io": *.k8s.io and *.kubernetes.io are for APIs the Kubernetes project approves (the apiserver wants an api-approved.kubernetes.io annotation): use a domain of your own']);
  assert.deepEqual(refusals(spec, { version: 'version1' }), ['version "version1": must be v<N>, v<N>alpha<M> or v<N>beta<M> (e.g. v1, v1alpha1, v2beta3)']);
  assert.deepEqual(refusals(spec, { version: 'v1.0' }), ['version "v1.0": must be v<N>, v<N>alpha<M> or v<N>beta<M> (e.g. v1, v1alpha1, v2beta3)']);
  assert.deepEqual(refusals(spec, { plural: 'Things' }), ["plural \"Things\": must be a DNS label, lowercase letters, digits and '-', starting with a letter, at most 63 characters (e.g. things)"]);
  assert.deepEqual(refusals(spec, { kind: `A${'b'.repeat(59)}` }), [`kind "A${'b'.repeat(59)}": at most 59 characters (its list kind, ${'A'}${'b'.repeat(59)}List, must fit a DNS label's 63)`]);
});

test('customResourceDefinition refuses with every problem, each on its line', () => {
  assert.throws(
    () => customResourceDefinition(options(t.Object({ replicas: t.Integer({ minimum: 1, default: 0 }), when: t.Date() }), { kind: 'broken-thing' })),
    (err: unknown) => {
      assert.ok(err instanceof CrdRefused);
      assert.equal(err.problems.length, 3);
      assert.match(err.message, /^the apiserver would refuse the CRD of broken-thing \(demo\.example\.com\):\n {2}kind "broken-thing": must be UpperCamelCase/);
      assert.match(err.message, /\n {2}spec\.properties\.replicas\.default: 0 is below minimum 1/);
      return true;
    },
  );
});

test('with previous versions, each problem names its version', () => {
  const o: CrdOptions = { ...options(t.Object({ a: t.String() })), versions: [{ name: 'v2', spec: t.Object({ a: t.String() }), storage: true }, { name: 'v1', spec: t.Object({ a: t.Integer({ minimum: 2, default: 1 }) }), storage: false }] };
  assert.deepEqual(crdRefusals(customResourceDefinition(o, { check: false })), ['v1: spec.properties.a.default: 1 is below minimum 2']);
});

test('categories the apiserver refuses are refused: each must be a DNS label, as a short name must', () => {
  const crd = (categories: string[]) => crdRefusals(customResourceDefinition({ ...options(t.Object({})), categories }, { check: false }));
  assert.deepEqual(crd(['all', 'demo-things']), []);
  assert.deepEqual(crd(['my things', 'Demo']), [
    "categories[0] \"my things\": must be a DNS label, lowercase letters, digits and '-', starting with a letter, at most 63 characters (e.g. mythings)",
    "categories[1] \"Demo\": must be a DNS label, lowercase letters, digits and '-', starting with a letter, at most 63 characters (e.g. demo)",
  ]);
});

test('printer columns the apiserver refuses are refused: a jsonPath must start with ".", from the object\'s root', () => {
  const crd = (printerColumns: CrdOptions['printerColumns']) => crdRefusals(customResourceDefinition({ ...options(t.Object({ size: t.Integer() })), printerColumns }, { check: false }));
  assert.deepEqual(crd([{ name: 'Size', type: 'integer', jsonPath: '.spec.size' }, { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' }]), []);
  assert.deepEqual(crd([{ name: 'Size', type: 'integer', jsonPath: 'spec.size' }, { name: 'Ready', type: 'string', jsonPath: '' }]), [
    "printerColumns[0] (Size).jsonPath \"spec.size\": must start with '.', a path from the object's root (e.g. .spec.size)",
    "printerColumns[1] (Ready).jsonPath: must be set, a path from the object's root (e.g. .status.phase)",
  ]);
  assert.deepEqual(crd([{ name: '', type: 'text' as 'string', jsonPath: '.spec.size' }]), [
    'printerColumns[0].name: must be set: the heading kubectl get shows',
    'printerColumns[0].type "text": must be one of boolean, date, integer, number, string',
  ]);
});
