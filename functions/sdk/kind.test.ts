// defineKind refuses, where the kind is defined, what the apiserver would refuse in its CRD.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CrdRefused } from '../../kube/crd.ts';
import { defineKind, t } from './index.ts';
import type { VersionedObject } from './kind.ts';

test('defineKind refuses a kind whose CRD the apiserver would refuse, naming each field', () => {
  assert.throws(
    () => defineKind({ group: 'Broken_Example', version: 'v1', kind: 'broken-thing', spec: t.Object({ replicas: t.Integer({ minimum: 1, default: 0 }), when: t.Date() }), status: t.Object({}) }),
    (err: unknown) => {
      assert.ok(err instanceof CrdRefused);
      assert.deepEqual(err.problems, [
        'kind "broken-thing": must be UpperCamelCase letters and digits, starting with a capital letter (e.g. BrokenThing)',
        "group \"Broken_Example\": must be a DNS subdomain, lowercase letters, digits, '-' and '.' (e.g. broken.example)",
        'spec.properties.replicas.default: 0 is below minimum 1',
        `spec.properties.when.type: "Date" is not a type a CRD's schema has (array, boolean, integer, number, object, string): for a time, use t.String({ format: 'date-time' })`,
      ]);
      return true;
    },
  );
});

test("defineKind checks previous versions' schemas and names too", () => {
  const up = (o: VersionedObject) => o;
  assert.throws(
    () => defineKind({ group: 'demo.example.com', version: 'v2', kind: 'Shirt', spec: t.Object({}), status: t.Object({}), previousVersions: [{ version: 'v1-old', spec: t.Object({ size: t.Union([t.Number(), t.String()]) }), up, down: up }] }),
    /version "v1-old": must be v<N>.*\n {2}v1-old: spec\.properties\.size: a union of number and string has no CRD form/,
  );
});

test('a sound kind is defined as before', () => {
  const Web = defineKind({ group: 'demo.example.com', version: 'v1alpha1', kind: 'Web', spec: t.Object({ size: t.Union([t.Integer(), t.String()], { default: 1 }) }), status: t.Object({}) });
  assert.equal(Web.plural, 'webs');
});

test('defineKind refuses a category and a printer column the apiserver would refuse', () => {
  assert.throws(
    () => defineKind({ group: 'demo.example.com', version: 'v1', kind: 'Web', spec: t.Object({ size: t.Integer() }), status: t.Object({}), categories: ['my webs'], printerColumns: [{ name: 'Size', type: 'integer', jsonPath: 'spec.size' }] }),
    (err: unknown) => {
      assert.ok(err instanceof CrdRefused);
      assert.deepEqual(err.problems, [
        "categories[0] \"my webs\": must be a DNS label, lowercase letters, digits and '-', starting with a letter, at most 63 characters (e.g. mywebs)",
        "printerColumns[0] (Size).jsonPath \"spec.size\": must start with '.', a path from the object's root (e.g. .spec.size)",
      ]);
      return true;
    },
  );
});
