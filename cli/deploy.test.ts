// What kfn deploy says of a function's rules on a target that scales to zero: those in the CRD
// hold with the function at zero, the webhooks need it up, and the way to have them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineReconciler } from '../functions/sdk/index.ts';
import MyAppFunction from '../functions/myapp/index.ts';
import MyWebFunction from '../functions/myweb/index.ts';
import { Shop } from '../test/support/rules-cases.ts';
import { rulesAtZero } from './deploy.ts';

test('on Knative: CEL rules hold at zero, webhooks need the function up (and the way to have them); a function with neither: nothing said', () => {
  const shop = defineReconciler({ name: 'shop', for: Shop, reconcile: () => ({}) });
  assert.deepEqual(rulesAtZero(shop), ['shop: 6 rules of Shop run in the apiserver (CEL in its CRD), with the function at zero too']);
  const [webhooks, ...more] = rulesAtZero(MyAppFunction);
  assert.equal(more.length, 0);
  assert.match(webhooks!, /^myapp: default and validate are webhooks, which need the function up .*: on Knative they are not served\. Deploy myapp with --target deployment to have them, or say the rule in CEL/);
  assert.deepEqual(rulesAtZero(MyWebFunction), []);
});
