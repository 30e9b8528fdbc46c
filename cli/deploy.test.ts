// What kfn deploy says of a function's rules on a target that scales to zero: those in the CRD
// hold with the function at zero, the webhooks need it up, and the way to have them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineReconciler } from '../functions/sdk/index.ts';
import MyAppFunction from '../functions/myapp/index.ts';
import MyWebFunction from '../functions/myweb/index.ts';
import { Shop } from '../test/support/rules-cases.ts';
import { rulesAtZero } from './deploy.ts';
import { defaultsAsPolicies } from '../functions/sdk/policies.ts';

test('on Knative: CEL rules hold at zero, webhooks need the function up (and the way to have them); a function with neither: nothing said', () => {
  const shop = defineReconciler({ name: 'shop', for: Shop, reconcile: () => ({}) });
  assert.deepEqual(rulesAtZero(shop), ['shop: 14 rules of Shop run in the apiserver (CEL in its CRD), with the function at zero too']);
  const [cel, webhook, ...more] = rulesAtZero(MyAppFunction);
  assert.equal(more.length, 0);
  assert.equal(cel, 'myapp: 2 rules of MyApp run in the apiserver (CEL in its CRD), with the function at zero too');
  assert.match(webhook!, /^myapp: default is a webhook, which needs the function up .*: on Knative it is not served\. Deploy myapp with --target deployment to have it, or say the rule in CEL/);
  const both = defineReconciler({ name: 'both', for: Shop, default: () => {}, validate: () => [], reconcile: () => ({}) });
  assert.match(rulesAtZero(both)[1]!, /^both: default and validate are webhooks, which need the function up .*: on Knative they are not served\. Deploy both with --target deployment to have them/);
  assert.deepEqual(rulesAtZero(MyWebFunction), []);
  // Where the cluster serves MutatingAdmissionPolicy, MyApp's declared defaults are the apiserver's: nothing needs it up.
  assert.deepEqual(rulesAtZero(defaultsAsPolicies(MyAppFunction)), [cel]);
});
