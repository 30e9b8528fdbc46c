// Conversion without a cluster: ConversionReview in, the objects at the desired version out.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { convertObject, convertReview, parseConversionReview } from './conversion.ts';
import { crdOf, createApp, defineReconciler } from './index.ts';
import { shirtKind } from './testdata/shirt.ts';

const Shirt = shirtKind();

const meta = { name: 'tee', namespace: 'shop', uid: 'u1', resourceVersion: '7' };
const review = (desired: string, objects: unknown[]) => JSON.stringify({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'ConversionReview', request: { uid: 'r1', desiredAPIVersion: desired, objects } });

describe('conversion', () => {
  test('up and down, metadata kept as it came, the same version untouched', () => {
    const old = { apiVersion: 'shop.kfn.test/v1alpha1', kind: 'Shirt', metadata: meta, spec: { chestCm: 96 } };
    assert.deepEqual(convertObject(Shirt, old, 'shop.kfn.test/v1'), { apiVersion: 'shop.kfn.test/v1', kind: 'Shirt', metadata: meta, spec: { chest: { value: 96, unit: 'cm' } } });
    const inches = { apiVersion: 'shop.kfn.test/v1', kind: 'Shirt', metadata: meta, spec: { chest: { value: 40, unit: 'in' } } };
    assert.deepEqual(convertObject(Shirt, inches, 'shop.kfn.test/v1alpha1'), { apiVersion: 'shop.kfn.test/v1alpha1', kind: 'Shirt', metadata: meta, spec: { chestCm: 102 } });
    assert.equal(convertObject(Shirt, inches, 'shop.kfn.test/v1'), inches);
  });

  test('a review: every object converted; an unknown version fails the review naming the object', () => {
    const ok = convertReview(Shirt, parseConversionReview(review('shop.kfn.test/v1', [{ apiVersion: 'shop.kfn.test/v1alpha1', kind: 'Shirt', metadata: meta, spec: { chestCm: 90 } }])));
    assert.deepEqual([ok.response?.uid, ok.response?.result.status, ok.response?.convertedObjects.length], ['r1', 'Success', 1]);
    const bad = convertReview(Shirt, parseConversionReview(review('shop.kfn.test/v2', [{ apiVersion: 'shop.kfn.test/v1', kind: 'Shirt', metadata: meta, spec: {} }])));
    assert.equal(bad.response?.result.status, 'Failure');
    assert.equal(bad.response?.result.message, 'converting Shirt tee from shop.kfn.test/v1 to shop.kfn.test/v2: Shirt has no version v2 (it serves v1, v1alpha1)');
  });

  test('the function answers /convert; a malformed review is a 400 saying why', async () => {
    const app = createApp(defineReconciler({ for: Shirt, reconcile: () => ({}) }), { credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
    const post = (body: string) => app.request('/convert', { method: 'POST', body });
    const res = await post(review('shop.kfn.test/v1alpha1', [{ apiVersion: 'shop.kfn.test/v1', kind: 'Shirt', metadata: meta, spec: { chest: { value: 90, unit: 'cm' } } }]));
    assert.deepEqual(((await res.json()) as { response: { convertedObjects: { spec: unknown }[] } }).response.convertedObjects[0]!.spec, { chestCm: 90 });
    const malformed = await post(JSON.stringify({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'ConversionReview', request: { uid: 'x' } }));
    assert.equal(malformed.status, 400);
    assert.match(((await malformed.json()) as { error: string }).error, /needs request.uid, request.desiredAPIVersion and request.objects/);
  });

  test('the CRD serves every version, stores the current one, and names its conversion webhook; without one it is an error', () => {
    const crd = crdOf(Shirt, { conversion: { client: { url: 'https://127.0.0.1:9443' }, caBundle: 'PEM' } }) as { spec: { versions: { name: string; served: boolean; storage: boolean }[]; conversion: { strategy: string; webhook: { clientConfig: { url: string }; conversionReviewVersions: string[] } } } };
    assert.deepEqual(crd.spec.versions.map((v) => [v.name, v.served, v.storage]), [['v1', true, true], ['v1alpha1', true, false]]);
    assert.equal(crd.spec.conversion.strategy, 'Webhook');
    assert.equal(crd.spec.conversion.webhook.clientConfig.url, 'https://127.0.0.1:9443/convert');
    assert.deepEqual(crd.spec.conversion.webhook.conversionReviewVersions, ['v1']);
    assert.throws(() => crdOf(Shirt), /Shirt has previous versions \(v1alpha1\): its CRD needs a conversion webhook/);
  });
});
