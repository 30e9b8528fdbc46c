// Issuer and Certificate end to end: real X.509 key pairs, checked with node:crypto.
import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { test } from 'node:test';
import { generateClusterPki } from '../../cluster/pki.ts';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines } from '../support/functions.ts';

interface TlsSecret {
  type: string;
  data: Record<string, string>;
}

test('Certificate: TLS Secrets signed by a CA issuer and a self-signed one, names and validity, renewal; Issuer and CA Secret watched, not polled', async (t) => {
  const cluster = await testCluster();
  const issuers = await functionStack(t, cluster, 'issuer');
  const certs = await functionStack(t, cluster, 'certificate', { namespace: issuers.ns });
  const ns = issuers.ns;
  const api = issuers.api;
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const ca = generateClusterPki('10.96.0.1');
  await api.request('POST', `/api/v1/namespaces/${ns}/secrets`, { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'root-ca' }, type: 'kubernetes.io/tls', data: { 'tls.crt': b64(ca.caCert), 'tls.key': b64(ca.caKey) } } });
  const issuer = (name: string, spec: object) => api.request('POST', issuers.objects, { body: { apiVersion: 'certs.kfn.dev/v1alpha1', kind: 'Issuer', metadata: { name }, spec } });
  await issuer('company-ca', { ca: { secretName: 'root-ca' } });
  await issuer('selfsigned', { selfSigned: {} });
  await issuer('broken', { ca: { secretName: 'missing' } });
  const certificate = (name: string, spec: object) => api.request('POST', certs.objects, { body: { apiVersion: 'certs.kfn.dev/v1alpha1', kind: 'Certificate', metadata: { name }, spec } });
  await assert.rejects(certificate('bad', { secretName: 's', dnsNames: [], issuerRef: { name: 'company-ca' } }), /spec\.dnsNames: Invalid value: 0: spec\.dnsNames in body should have at least 1 items/);
  await assert.rejects(certificate('bad', { secretName: 's', dnsNames: ['a'], issuerRef: { name: 'company-ca' }, duration: '90 days' }), /spec\.duration in body should match/);

  await certificate('web', { secretName: 'web-tls', dnsNames: ['foo.example.com', 'bar.example.com'], issuerRef: { name: 'company-ca', kind: 'Issuer' }, duration: '24h', renewBefore: '1h' });
  await certificate('self', { secretName: 'self-tls', dnsNames: ['self.example.com'], issuerRef: { name: 'selfsigned' } });
  await certificate('orphan', { secretName: 'orphan-tls', dnsNames: ['x.example.com'], issuerRef: { name: 'broken' } });
  const secret = (name: string) => waitFor(`Secret ${name}`, () => api.request<TlsSecret>('GET', `/api/v1/namespaces/${ns}/secrets/${name}`), { timeoutMs: 60_000 });

  const web = await secret('web-tls');
  assert.equal(web.type, 'kubernetes.io/tls');
  const cert = new X509Certificate(Buffer.from(web.data['tls.crt']!, 'base64'));
  const caCert = new X509Certificate(ca.caCert);
  assert.ok(cert.checkIssued(caCert) && cert.verify(caCert.publicKey), 'signed by the issuer CA');
  assert.equal(cert.checkHost('foo.example.com'), 'foo.example.com');
  assert.equal(cert.checkHost('bar.example.com'), 'bar.example.com');
  assert.equal(cert.checkHost('evil.example.com'), undefined);
  assert.ok(cert.checkPrivateKey(createPrivateKey(Buffer.from(web.data['tls.key']!, 'base64'))), 'the key matches');
  const lifetime = Date.parse(cert.validTo) - Date.parse(cert.validFrom);
  assert.ok(Math.abs(lifetime - (24 * 3600_000 + 60_000)) < 5_000, `valid for the requested 24h (${lifetime} ms)`);
  const status = await waitFor('web Ready with notAfter', async () => {
    const c = await api.request<{ status?: { notAfter?: string; conditions?: { type: string; status: string }[] } }>('GET', `${certs.objects}/web`);
    return c.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'True') ? c.status : undefined;
  });
  assert.equal(Date.parse(status.notAfter!), Date.parse(cert.validTo));

  const self = new X509Certificate(Buffer.from((await secret('self-tls')).data['tls.crt']!, 'base64'));
  assert.ok(self.issuer === self.subject && self.verify(self.publicKey), 'self-signed');

  const orphan = await waitFor('a certificate of a broken issuer to be not Ready', async () => {
    const c = await api.request<{ status?: { conditions?: { type: string; status: string; reason: string }[] } }>('GET', `${certs.objects}/orphan`);
    return c.status?.conditions?.find((x) => x.type === 'Ready' && x.status === 'False');
  });
  assert.equal(orphan.reason, 'IssuerNotReady');

  // Renewal: due renewBefore its expiry, the function reissues on its own requeue.
  await certificate('short', { secretName: 'short-tls', dnsNames: ['short.example.com'], issuerRef: { name: 'company-ca' }, duration: '60s', renewBefore: '55s' });
  const first = new X509Certificate(Buffer.from((await secret('short-tls')).data['tls.crt']!, 'base64')).serialNumber;
  await waitFor('the short-lived certificate to be renewed', async () => {
    const s = await api.request<TlsSecret>('GET', `/api/v1/namespaces/${ns}/secrets/short-tls`);
    return new X509Certificate(Buffer.from(s.data['tls.crt']!, 'base64')).serialNumber !== first || undefined;
  }, { timeoutMs: 30_000 });

  // Watches that map by reference, not polling: the broken Issuer and its Certificate were not
  // delivered again while nothing changed; the CA Secret appearing reconciles the Issuer naming
  // it (spec.ca.secretName), and the Issuer turning Ready reconciles the Certificate naming it
  // (spec.issuerRef.name).
  const deliveries = (journal: string, name: string) => journalLines(journal).filter((l) => l.key === `${ns}/${name}`);
  assert.deepEqual(deliveries(certs.journal, 'orphan').filter((l) => l.reason === 'requeue'), [], 'the Certificate of a broken Issuer is not polled');
  assert.deepEqual(deliveries(issuers.journal, 'broken').filter((l) => l.reason === 'requeue'), [], 'nor is the broken Issuer');
  await api.request('POST', `/api/v1/namespaces/${ns}/secrets`, { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'missing' }, type: 'kubernetes.io/tls', data: { 'tls.crt': b64(ca.caCert), 'tls.key': b64(ca.caKey) } } });
  const repaired = new X509Certificate(Buffer.from((await secret('orphan-tls')).data['tls.crt']!, 'base64'));
  assert.ok(repaired.checkIssued(caCert), 'issued once its Issuer could sign');
  const byIssuer = deliveries(issuers.journal, 'broken').find((l) => l.reason === 'mapped' && l.trigger?.kind === 'Secret' && l.trigger.name === 'missing');
  assert.ok(byIssuer, 'the Issuer was reconciled because the Secret it names appeared');
  const byCert = deliveries(certs.journal, 'orphan').find((l) => l.reason === 'mapped' && l.trigger?.kind === 'Issuer' && l.trigger.name === 'broken');
  assert.ok(byCert, 'the Certificate was reconciled because the Issuer it names changed');
});
