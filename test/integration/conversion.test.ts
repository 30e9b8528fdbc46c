// A kind with two versions on the real apiserver: it stores v1 and calls the function's
// conversion webhook (/convert, over TLS) for every read and write at v1alpha1 — objects
// written at either version read back at both, lists included.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import pino from 'pino';
import { applyObject } from '../../kube/api.ts';
import { generateServingPki } from '../../core/certificates.ts';
import { crdOf, defineReconciler, serve } from '../../functions/sdk/index.ts';
import { shirtKind } from '../../functions/sdk/testdata/shirt.ts';
import { freePort } from '../support/bridge.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

test('a two-version kind: written at either version, read at both (get and list) through the conversion webhook; the webhook down fails reads by name', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'conversion');
  const group = `${uniqueName('shirts')}.kfn.test`;
  const Shirt = shirtKind(group);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-conversion-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pki = generateServingPki('shirts', ['localhost'], { ips: ['127.0.0.1'] });
  mkdirSync(join(dir, 'tls'));
  writeFileSync(join(dir, 'tls', 'tls.crt'), pki.cert);
  writeFileSync(join(dir, 'tls', 'tls.key'), pki.key);
  const webhookPort = await freePort();
  const server = await serve(defineReconciler({ for: Shirt, reconcile: () => ({}) }), { port: await freePort(), hostname: '127.0.0.1', webhooks: { port: webhookPort, certDir: join(dir, 'tls') }, api, credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
  let closed = false;
  t.after(() => void (closed || server.close()));

  await applyObject(api, crdOf(Shirt, { conversion: { client: { url: `https://127.0.0.1:${webhookPort}` }, caBundle: pki.caCert } }) as never, 'kfn-test');
  t.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/shirts.${group}`).catch(() => undefined));
  await waitFor('both versions to be served', async () => (await api.resource(`${group}/v1`, 'Shirt')) && (await api.resource(`${group}/v1alpha1`, 'Shirt')));
  const at = (version: string, name = '') => `/apis/${group}/${version}/namespaces/${ns}/shirts${name ? `/${name}` : ''}`;

  await waitFor('the first write at v1alpha1', () => api.request('POST', at('v1alpha1'), { body: { apiVersion: `${group}/v1alpha1`, kind: 'Shirt', metadata: { name: 'old' }, spec: { chestCm: 96 } } }), { timeoutMs: 30_000 });
  await api.request('POST', at('v1'), { body: { apiVersion: `${group}/v1`, kind: 'Shirt', metadata: { name: 'new' }, spec: { chest: { value: 40, unit: 'in' } } } });

  const oldAtV1 = await api.request<{ apiVersion: string; spec: unknown }>('GET', at('v1', 'old'));
  assert.deepEqual([oldAtV1.apiVersion, oldAtV1.spec], [`${group}/v1`, { chest: { value: 96, unit: 'cm' } }], 'written at v1alpha1, read at v1');
  const newAtOld = await api.request<{ apiVersion: string; spec: unknown }>('GET', at('v1alpha1', 'new'));
  assert.deepEqual([newAtOld.apiVersion, newAtOld.spec], [`${group}/v1alpha1`, { chestCm: 102 }], 'written at v1, read at v1alpha1');
  const list = await api.request<{ items: { metadata: { name: string }; spec: unknown }[] }>('GET', at('v1alpha1'));
  assert.deepEqual(list.items.map((i) => [i.metadata.name, i.spec]).sort(), [['new', { chestCm: 102 }], ['old', { chestCm: 96 }]]);
  // An update at the old version lands in the stored v1 object.
  await api.request('PATCH', at('v1alpha1', 'old'), { body: { spec: { chestCm: 100 } }, contentType: 'application/merge-patch+json' });
  assert.deepEqual((await api.request<{ spec: unknown }>('GET', at('v1', 'old'))).spec, { chest: { value: 100, unit: 'cm' } });

  // The function down: a read at the other version fails, and the apiserver says which webhook.
  closed = true;
  await new Promise((r) => server.close(r));
  // A call the apiserver had in flight at close() is still answered, and its connection then ends.
  const refused = await waitFor('a read at v1alpha1 to fail without the webhook', () => api.request('GET', at('v1alpha1', 'new')).then(() => undefined, (err: Error) => err), { timeoutMs: 15_000 });
  assert.match(refused.message, /conversion webhook for .*Shirt failed: .*connect: connection refused/);
  t.diagnostic(`with the function down: ${refused.message}`);
});
