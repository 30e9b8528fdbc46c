// A deployed function's webhook certificate: created, kept while good, renewed before it ends or
// when it no longer names the Service — the CA bundle covering the pod's old files meanwhile.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import MyAppFunction from '../functions/myapp/index.ts';
import { functionWorkload } from '../functions/sdk/manifests.ts';
import { webhookSet, webhookTls } from './webhook-tls.ts';
import { renewBeforeMs } from '../functions/sdk/certificate.ts';
import { crdOf, defineKind, defineReconciler, t } from '../functions/sdk/index.ts';

const names = ['kfn-fn-myapp.kfn-system.svc', 'kfn-fn-myapp.kfn-system.svc.cluster.local'];
const pem = (data: Record<string, string>, key: string) => Buffer.from(data[key]!, 'base64').toString();
const cas = (bundle: string) => bundle.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];

test('created when missing, kept while it names the Service with 30 days left, renewed otherwise with both CAs in the bundle', () => {
  const now = new Date('2026-01-01T00:00:00Z');
  const first = webhookTls(undefined, 'kfn-fn-myapp', names, now);
  assert.deepEqual([first.renewed, first.why], [true, 'no certificate yet']);
  const x = new X509Certificate(pem(first.data, 'tls.crt'));
  assert.ok(x.checkHost('kfn-fn-myapp.kfn-system.svc'));
  assert.ok(x.verify(new X509Certificate(pem(first.data, 'ca.crt')).publicKey), 'signed by its CA');
  assert.equal(cas(first.caBundle).length, 1);

  const later = new Date(Date.parse(x.validTo) - renewBeforeMs - 3600_000);
  const kept = webhookTls(first.data, 'kfn-fn-myapp', names, later);
  assert.equal(kept.renewed, false);
  assert.equal(kept.data, first.data);

  const due = new Date(Date.parse(x.validTo) - renewBeforeMs + 3600_000);
  const renewed = webhookTls(first.data, 'kfn-fn-myapp', names, due);
  assert.equal(renewed.renewed, true);
  assert.match(renewed.why!, /expires/);
  assert.notEqual(pem(renewed.data, 'tls.crt'), pem(first.data, 'tls.crt'));
  assert.deepEqual(cas(renewed.caBundle), [pem(renewed.data, 'ca.crt').trim(), pem(first.data, 'ca.crt').trim()], 'the new CA, and the old one while pods still serve the old certificate');

  const moved = webhookTls(first.data, 'kfn-fn-myapp', ['kfn-fn-myapp.other.svc'], later);
  assert.deepEqual([moved.renewed, moved.why], [true, 'it does not name kfn-fn-myapp.other.svc']);
  const garbage = webhookTls({ 'tls.crt': 'bm90IGEgY2VydA==', 'tls.key': 'eA==', 'ca.crt': 'eA==' }, 'kfn-fn-myapp', names, later);
  assert.equal(garbage.renewed, true);
  assert.match(garbage.why!, /cannot be read/);
});

test('a function with webhooks is deployed with its HTTPS listener: port 9443, the certificate mounted, the Service on 443', () => {
  const [deployment, service] = functionWorkload(MyAppFunction, { image: 'kfn.local/fn-myapp:1', namespace: 'kfn-system' }) as [
    { spec: { template: { spec: { containers: { env: { name: string; value?: string }[]; ports: { name: string; containerPort: number }[]; volumeMounts: { name: string; mountPath: string }[] }[]; volumes: { secret: { secretName: string } }[] } } } },
    { spec: { ports: { name: string; port: number; targetPort: string }[] } },
  ];
  const c = deployment.spec.template.spec.containers[0]!;
  assert.ok(c.env.some((e) => e.name === 'KFN_WEBHOOK_CERT_DIR' && e.value === '/var/run/kfn/webhook-tls'));
  assert.ok(c.ports.some((p) => p.name === 'webhook' && p.containerPort === 9443));
  assert.deepEqual(deployment.spec.template.spec.volumes.map((v) => v.secret.secretName), ['kfn-fn-myapp', 'kfn-fn-myapp-webhook-tls'], 'the auth key and the certificate, each mounted');
  assert.deepEqual(c.volumeMounts.map((m) => m.mountPath), ['/var/run/kfn/auth', '/var/run/kfn/webhook-tls']);
  assert.deepEqual(service.spec.ports.find((p) => p.name === 'webhook'), { name: 'webhook', port: 443, targetPort: 'webhook' });
});

test('kfn manifests\' webhooks: kfn\'s own certificate in a TLS Secret and the CA bundle in the configurations and the CRD; or cert-manager\'s, injected', () => {
  const Shelf = defineKind({
    group: 'test.kfn.dev',
    version: 'v2',
    kind: 'Shelf',
    spec: t.Object({}),
    status: t.Object({}),
    previousVersions: [{ version: 'v1', spec: t.Object({}), up: (o) => o, down: (o) => o }],
  });
  const shelves = defineReconciler({ name: 'shelves', for: Shelf, validate: () => [], reconcile: () => ({}) });
  const own = webhookSet(shelves, { namespace: 'shop', ca: { kind: 'kfn' } })!;
  const secret = own.tls[0] as { kind: string; metadata: { name: string }; data: Record<string, string> };
  assert.equal(secret.kind, 'Secret');
  assert.equal(secret.metadata.name, 'kfn-fn-shelves-webhook-tls', 'the Secret the function\'s Deployment mounts');
  const names = new X509Certificate(pem(secret.data, 'tls.crt')).subjectAltName;
  assert.match(names ?? '', /DNS:kfn-fn-shelves\.shop\.svc, DNS:kfn-fn-shelves\.shop\.svc\.cluster\.local/);
  const config = own.configurations[0] as { kind: string; webhooks: { clientConfig: { caBundle: string; service: { name: string; namespace: string; path: string } } }[] };
  assert.deepEqual(own.configurations.map((c) => c.kind), ['ValidatingWebhookConfiguration']);
  assert.equal(Buffer.from(config.webhooks[0]!.clientConfig.caBundle, 'base64').toString(), pem(secret.data, 'ca.crt'));
  assert.deepEqual(config.webhooks[0]!.clientConfig.service, { namespace: 'shop', name: 'kfn-fn-shelves', port: 443, path: '/admission/validate' });
  const crd = crdOf(Shelf, { conversion: own.conversion }) as { spec: { conversion: { webhook: { clientConfig: { caBundle: string } } } } };
  assert.ok(crd.spec.conversion.webhook.clientConfig.caBundle, 'the CRD trusts the same CA for /convert');
  assert.equal(webhookSet(shelves, { namespace: 'shop', ca: { kind: 'kfn', existing: secret.data } })!.renewed, false, 'a good certificate in the cluster is kept');

  const managed = webhookSet(shelves, { namespace: 'shop', ca: { kind: 'cert-manager' } })!;
  assert.deepEqual(managed.tls.map((o) => o.kind), ['Issuer', 'Certificate']);
  const certificate = managed.tls[1] as { metadata: { name: string }; spec: { secretName: string; issuerRef: { name: string } } };
  assert.equal(certificate.spec.secretName, 'kfn-fn-shelves-webhook-tls');
  assert.equal(certificate.spec.issuerRef.name, 'kfn-selfsigned');
  const injected = managed.configurations[0] as { metadata: { annotations: Record<string, string> }; webhooks: { clientConfig: Record<string, unknown> }[] };
  assert.equal(injected.metadata.annotations['cert-manager.io/inject-ca-from'], `shop/${certificate.metadata.name}`);
  assert.equal(injected.webhooks[0]!.clientConfig.caBundle, undefined, 'cert-manager writes it');
  const managedCrd = crdOf(Shelf, { conversion: managed.conversion }) as { metadata: { annotations: Record<string, string> }; spec: { conversion: { webhook: { clientConfig: Record<string, unknown> } } } };
  assert.equal(managedCrd.metadata.annotations['cert-manager.io/inject-ca-from'], `shop/${certificate.metadata.name}`);
  assert.equal(managedCrd.spec.conversion.webhook.clientConfig.caBundle, undefined);
  const byIssuer = webhookSet(shelves, { namespace: 'shop', ca: { kind: 'cert-manager', issuer: { kind: 'ClusterIssuer', name: 'corp-ca' } } })!;
  assert.deepEqual(byIssuer.tls.map((o) => o.kind), ['Certificate'], 'no Issuer of its own');
  assert.equal(webhookSet(defineReconciler({ name: 'plain', for: defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Plain', spec: t.Object({}), status: t.Object({}) }), reconcile: () => ({}) }), { namespace: 'shop', ca: { kind: 'kfn' } }), undefined);
});

test('a function with deliveryTls and no webhooks: its certificate Secret and the CA bundle for its Reconciler\'s sink, no configurations', () => {
  const Crate = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Crate', spec: t.Object({}), status: t.Object({}) });
  const crates = defineReconciler({ name: 'crates', for: Crate, deliveryTls: true, reconcile: () => ({}) });
  const set = webhookSet(crates, { namespace: 'shop', ca: { kind: 'kfn' } })!;
  const secret = set.tls[0] as { metadata: { name: string }; data: Record<string, string> };
  assert.equal(secret.metadata.name, 'kfn-fn-crates-webhook-tls');
  assert.deepEqual([set.configurations, set.conversion], [[], undefined]);
  assert.equal(set.caBundle, pem(secret.data, 'ca.crt'));
  assert.ok(new X509Certificate(pem(secret.data, 'tls.crt')).checkHost('kfn-fn-crates.shop.svc.cluster.local'), 'the host of its https sink');
});
