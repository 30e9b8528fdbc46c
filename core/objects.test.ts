import assert from 'node:assert/strict';
import { test } from 'node:test';
import { groupOf, versionOf } from './objects.ts';

test("an apiVersion's group and version, the core group's too", () => {
  assert.deepEqual([groupOf('apps/v1'), versionOf('apps/v1')], ['apps', 'v1']);
  assert.deepEqual([groupOf('v1'), versionOf('v1')], ['', 'v1']);
  assert.deepEqual([groupOf('admissionregistration.k8s.io/v1beta1'), versionOf('admissionregistration.k8s.io/v1beta1')], ['admissionregistration.k8s.io', 'v1beta1']);
});
