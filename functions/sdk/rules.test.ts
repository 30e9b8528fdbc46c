// A kind's CEL rules evaluated without a cluster, as the apiserver evaluates them: where they go
// in the CRD, int and double as the schema says, transition rules only on updates, and each
// refusal at its field in the apiserver's words. test/integration/rules.test.ts holds these
// answers to the real apiserver's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crdOf, defineKind, t } from './index.ts';
import { ruleCases, Shop } from '../../test/support/rules-cases.ts';
import { checkRules } from './testing.ts';

test("a kind's rules go into its CRD on the spec, beside the rules of its fields", () => {
  const schema = (crdOf(Shop) as { spec: { versions: { schema: { openAPIV3Schema: { properties: { spec: Record<string, unknown> & { properties: Record<string, Record<string, unknown>> } } } } }[] } }).spec.versions[0]!.schema.openAPIV3Schema.properties.spec;
  assert.deepEqual((schema['x-kubernetes-validations'] as { rule: string }[]).map((r) => r.rule), ['self.replicas <= 10', '!has(self.minReplicas) || self.minReplicas + 1 <= self.replicas + 1', "self.image.matches('^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$')"]);
  assert.deepEqual(schema.properties.region!['x-kubernetes-validations'], [{ rule: 'self == oldSelf', message: 'is immutable' }]);
  assert.equal((Shop.options.spec as Record<string, unknown>)['x-kubernetes-validations'], undefined, "the kind's own TypeBox schema is left as it was");
});

for (const c of ruleCases) {
  test(`${c.name}: ${c.refusals.length ? c.refusals.length + ' refusal(s), each at its field in the apiserver\'s words' : 'allowed'}`, () => {
    assert.deepEqual(checkRules(Shop, { spec: c.spec }, c.old && { spec: c.old }), c.refusals);
  });
}

test('a rule that is not CEL is named', () => {
  const Broken = defineKind({ group: 'rules.kfn.test', version: 'v1', kind: 'Broken', spec: t.Object({ n: t.Integer() }), status: t.Object({}), rules: [{ rule: 'self.n >' }] });
  assert.throws(() => checkRules(Broken, { spec: { n: 1 } }), /`self\.n >` is not CEL/);
});
