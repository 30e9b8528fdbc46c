// Admission webhooks without a cluster: AdmissionReview in, AdmissionReview out.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { admit, jsonPatch, parseAdmissionReview } from './admission.ts';
import { createApp, defineKind, defineReconciler, t } from './index.ts';
import { webhookConfigurations } from './webhooks.ts';

const Box = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Box', spec: t.Object({ size: t.Integer(), color: t.Optional(t.String()) }), status: t.Object({}) });
const boxes = defineReconciler({
  for: Box,
  reconcile: () => ({}),
  default(box) {
    box.spec.color ??= 'brown';
  },
  validate(box, old) {
    const problems: ({ field: string; message: string } | string)[] = [];
    if (box.spec.size > 10) problems.push('spec.size: must be ≤ 10');
    if (old && old.spec.color !== box.spec.color) problems.push({ field: 'spec.color', message: `cannot change (was ${old.spec.color})` });
    if (box.metadata.name === 'boom') throw new Error('validator crashed');
    return problems;
  },
});

const review = (operation: string, object: unknown, oldObject?: unknown) =>
  JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u-1', kind: { group: 'test.kfn.dev', version: 'v1', kind: 'Box' }, operation, name: 'b', namespace: 'ns', object, oldObject } });
const box = (spec: object, name = 'b') => ({ apiVersion: 'test.kfn.dev/v1', kind: 'Box', metadata: { name, namespace: 'ns' }, spec });
const decode = (patch: string) => JSON.parse(Buffer.from(patch, 'base64').toString()) as unknown;

describe('admission', () => {
  test('default: a JSONPatch of what default() changed; nothing changed, no patch', async () => {
    const out = await admit(boxes, 'default', parseAdmissionReview(review('CREATE', box({ size: 1 }))));
    assert.equal(out.response?.uid, 'u-1');
    assert.equal(out.response?.allowed, true);
    assert.equal(out.response?.patchType, 'JSONPatch');
    assert.deepEqual(decode(out.response!.patch!), [{ op: 'add', path: '/spec/color', value: 'brown' }]);
    const same = await admit(boxes, 'default', parseAdmissionReview(review('CREATE', box({ size: 1, color: 'red' }))));
    assert.deepEqual([same.response?.allowed, same.response?.patch], [true, undefined]);
  });

  test('validate: allowed, or denied with every problem as field: message (422, causes), old object on update', async () => {
    assert.equal((await admit(boxes, 'validate', parseAdmissionReview(review('CREATE', box({ size: 3 }))))).response?.allowed, true);
    const denied = await admit(boxes, 'validate', parseAdmissionReview(review('UPDATE', box({ size: 11, color: 'red' }), box({ size: 1, color: 'brown' }))));
    assert.equal(denied.response?.allowed, false);
    assert.equal(denied.response?.status?.code, 422);
    assert.equal(denied.response?.status?.message, 'Box.test.kfn.dev "b" is invalid: spec.size: must be ≤ 10, spec.color: cannot change (was brown)');
    assert.deepEqual(denied.response?.status?.details?.causes.map((c) => c.field), ['spec.size', 'spec.color']);
    assert.equal((await admit(boxes, 'validate', parseAdmissionReview(review('DELETE', null, box({ size: 99 }))))).response?.allowed, true, 'deletes are not validated');
  });

  test('malformed reviews are refused with a clear message (400), a crashing validator is a 500 naming it; no crash', async () => {
    const app = createApp(boxes, { credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
    const post = (path: string, body: string) => app.request(path, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    for (const [body, message] of [
      ['not json', /not JSON/],
      [JSON.stringify({ apiVersion: 'v1', kind: 'Pod' }), /expected apiVersion admission.k8s.io\/v1, kind AdmissionReview; got v1 Pod/],
      [JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { kind: {} } }), /no request.uid/],
    ] as const) {
      const res = await post('/admission/validate', body);
      assert.equal(res.status, 400);
      assert.match(((await res.json()) as { error: string }).error, message);
    }
    const crash = await post('/admission/validate', review('CREATE', box({ size: 1 }, 'boom')));
    assert.equal(crash.status, 500);
    assert.match(((await crash.json()) as { error: string }).error, /validate failed: validator crashed/);
    const ok = await post('/admission/default', review('CREATE', box({ size: 1 })));
    assert.equal(((await ok.json()) as { response: { allowed: boolean } }).response.allowed, true);
  });

  test('a review of another kind is refused', async () => {
    const other = JSON.parse(review('CREATE', box({ size: 1 }))) as { request: { kind: { kind: string } } };
    other.request.kind.kind = 'Crate';
    const out = await admit(boxes, 'validate', parseAdmissionReview(JSON.stringify(other)));
    assert.equal(out.response?.allowed, false);
    assert.match(out.response!.status!.message, /admits Box.test.kfn.dev, not Crate/);
  });

  test('jsonPatch: add, remove, replace, escaped keys, lists replaced whole', () => {
    assert.deepEqual(jsonPatch({ a: 1, b: { c: 2, 'x/y': 1 }, l: [1] }, { a: 2, b: { 'x/y': 2, d: 3 }, l: [1, 2] }), [
      { op: 'replace', path: '/a', value: 2 },
      { op: 'remove', path: '/b/c' },
      { op: 'replace', path: '/b/x~1y', value: 2 },
      { op: 'add', path: '/b/d', value: 3 },
      { op: 'replace', path: '/l', value: [1, 2] },
    ]);
  });

  test('configurations: one mutating and one validating, for the kind, sideEffects None, Fail by default, the CA bundle', () => {
    const [mutating, validating] = webhookConfigurations(boxes, { client: { url: 'https://127.0.0.1:9443' }, caBundle: 'PEM' }) as { kind: string; webhooks: { name: string; clientConfig: { url: string; caBundle: string }; rules: unknown[]; sideEffects: string; failurePolicy: string; timeoutSeconds: number }[] }[];
    assert.equal(mutating!.kind, 'MutatingWebhookConfiguration');
    assert.equal(validating!.kind, 'ValidatingWebhookConfiguration');
    const w = validating!.webhooks[0]!;
    assert.equal(w.name, 'validate.boxes.test.kfn.dev');
    assert.equal(w.clientConfig.url, 'https://127.0.0.1:9443/admission/validate');
    assert.equal(Buffer.from(w.clientConfig.caBundle, 'base64').toString(), 'PEM');
    assert.deepEqual(w.rules, [{ apiGroups: ['test.kfn.dev'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: ['boxes'], scope: 'Namespaced' }]);
    assert.deepEqual([w.sideEffects, w.failurePolicy, w.timeoutSeconds], ['None', 'Fail', 10]);
    assert.deepEqual(
      (w as unknown as { matchConditions: { name: string }[] }).matchConditions.map((c) => c.name),
      ['not-metadata-only'],
      'never asked about an update of metadata alone (kfn\'s finalizer removal), of an object being deleted or not',
    );
    const service = webhookConfigurations(boxes, { client: { service: { namespace: 'kfn-system', name: 'kfn-fn-boxes' } }, caBundle: 'PEM' })[0] as { webhooks: { clientConfig: { service: unknown } }[] };
    assert.deepEqual(service.webhooks[0]!.clientConfig.service, { namespace: 'kfn-system', name: 'kfn-fn-boxes', port: 443, path: '/admission/default' });
    assert.deepEqual(webhookConfigurations(defineReconciler({ for: Box, reconcile: () => ({}) }), { client: { url: 'https://x' }, caBundle: '' }), [], 'none without default or validate');
    const owned = webhookConfigurations(boxes, { client: { url: 'https://x' }, caBundle: '', owner: { apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', name: 'boxes', uid: 'u1' } }) as { metadata: { ownerReferences?: { kind: string; uid: string }[] } }[];
    assert.deepEqual(owned.map((c) => c.metadata.ownerReferences?.map((r) => `${r.kind} ${r.uid}`)), [['Reconciler u1'], ['Reconciler u1']], 'each owned by the function\'s Reconciler: they go when it goes');
  });
});
