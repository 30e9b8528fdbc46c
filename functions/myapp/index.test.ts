// MyApp's reconcile without a cluster: the Deployment follows the spec; readyReplicas and Ready
// follow the live Deployment (the seed's scenarios, as far as they are the function's).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment } from '../sdk/index.ts';
import { applyDefaults, testReconcile } from '../sdk/testing.ts';
import { admit, parseAdmissionReview } from '../sdk/admission.ts';
import MyAppFunction, { MyApp } from './index.ts';
import { checkRules } from '../sdk/rules.ts';
import { myAppDefaultCases, myAppRefusals } from '../../test/support/rules-cases.ts';

const app = (replicas: number, image = 'kfn.local/nginx:1.22') => ({ metadata: { name: 'a', namespace: 'demo' }, spec: { replicas, image } });
type Dep = { spec: { replicas: number; template: { spec: { containers: { image: string }[] } } } };

test('the Deployment has the spec replicas and image', async () => {
  const out = await testReconcile(MyAppFunction, { object: app(3, 'kfn.local/nginx:1.23'), reason: 'created' });
  const dep = out.child<Dep>(Deployment, 'a')!;
  assert.deepEqual([dep.spec.replicas, dep.spec.template.spec.containers[0]!.image], [3, 'kfn.local/nginx:1.23']);
  assert.deepEqual([out.status?.readyReplicas, out.ready?.reason], [0, 'ReplicasNotReady']);
});

test('readyReplicas from the live Deployment; Ready when all are', async () => {
  const live = (ready: number) => [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'a' }, status: { readyReplicas: ready } }];
  const partly = await testReconcile(MyAppFunction, { object: app(3), children: live(2) });
  assert.deepEqual([partly.status?.readyReplicas, partly.ready?.message], [2, '2/3 replicas ready']);
  const all = await testReconcile(MyAppFunction, { object: app(3), children: live(3) });
  assert.equal(all.ready?.status, 'True');
  const zero = await testReconcile(MyAppFunction, { object: app(0) });
  assert.equal(zero.ready?.status, 'True', 'zero replicas wanted, zero ready');
});

test('defaulting (declared in CEL, the apiserver\'s or the webhook\'s): an image without a tag gets :latest; validation (CEL in the CRD): more than 10 replicas and a bad image are refused, each by its field, in the apiserver\'s words', async () => {
  const object = (image: string) => ({ apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'a' }, spec: { replicas: 1, image } });
  const review = (image: string) => parseAdmissionReview(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', kind: { group: 'app.example.com', version: 'v1', kind: 'MyApp' }, operation: 'CREATE', object: object(image) } }));
  for (const c of myAppDefaultCases) {
    // As the apiserver's MutatingAdmissionPolicy writes it …
    assert.equal(applyDefaults(MyAppFunction, { operation: 'CREATE', object: object(c.image) })?.spec.image, c.stored, c.image);
    // … and as the function's defaulting webhook does where the cluster serves no such policy.
    const r = await admit(MyAppFunction, 'default', review(c.image));
    const patch = r.response?.patch ? JSON.parse(Buffer.from(r.response.patch, 'base64').toString()) : [];
    assert.deepEqual(patch, c.stored === c.image ? [] : [{ op: 'replace', path: '/spec/image', value: c.stored }], c.image);
  }
  assert.equal(MyAppFunction.default, undefined, 'no code of its own: the declaration is the default');
  assert.equal(MyAppFunction.validate, undefined, 'no validating webhook: nothing needs the function up to refuse');
  for (const image of ['nginx:1.22', 'kfn.local/nginx:1.22', 'localhost:5000/team/app:1', `app@sha256:${'a'.repeat(64)}`]) assert.deepEqual(checkRules(MyApp, { spec: { replicas: 10, image } }), [], image);
  assert.deepEqual(checkRules(MyApp, { spec: { replicas: 11, image: 'Nginx:latest' } }), myAppRefusals);
});
