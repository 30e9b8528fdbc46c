// Certificate without a cluster: waits for its Issuer, issues a real X.509 pair for the names,
// keeps it while it is good, renews before expiry.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { Issuer } from '../issuer/index.ts';
import { Secret } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import CertificateFunction from './index.ts';

const cert = { metadata: { name: 'web', namespace: 'demo' }, spec: { secretName: 'web-tls', dnsNames: ['web.demo.svc', 'web'], issuerRef: { name: 'self' }, duration: '2160h', renewBefore: '360h' } };
const readyIssuer = { apiVersion: Issuer.apiVersion, kind: 'Issuer', metadata: { name: 'self' }, spec: { selfSigned: {} }, status: { conditions: [{ type: 'Ready', status: 'True' }] } };
type TlsSecret = { data: Record<string, string> };
const pemOf = (s: TlsSecret) => new X509Certificate(Buffer.from(s.data['tls.crt']!, 'base64').toString());

test('no ready Issuer: not Ready, issues nothing, and does not poll — the Issuer is watched', async () => {
  const out = await testReconcile(CertificateFunction, { object: cert });
  assert.deepEqual([out.ready?.reason, out.ready?.message, out.result?.requeueAfterSeconds], ['IssuerNotReady', 'Issuer self does not exist', undefined]);
  assert.equal(out.children.length, 0);
  const watch = CertificateFunction.watches?.find((w) => w.kind === 'Issuer');
  assert.deepEqual(watch?.mapping, { referenceField: 'spec.issuerRef.name' }, 'an Issuer change reconciles the Certificates naming it');
});

test('a self-signed Issuer: a key pair for the names, valid for the duration, renewed 360 h before it ends', async () => {
  const out = await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer], reason: 'created' });
  assert.equal(out.error, undefined);
  const x = pemOf(out.child<TlsSecret>(Secret, 'web-tls')!);
  assert.equal(x.subjectAltName, 'DNS:web.demo.svc, DNS:web');
  assert.ok(x.verify(x.publicKey), 'self-signed');
  const lifetimeHours = (Date.parse(x.validTo) - Date.parse(x.validFrom)) / 3_600_000;
  assert.ok(Math.abs(lifetimeHours - 2160) < 0.1, `${lifetimeHours} h`);
  assert.ok(Math.abs(out.result!.requeueAfterSeconds! - (2160 - 360) * 3600) < 120, `requeue in ${out.result!.requeueAfterSeconds} s`);
  assert.deepEqual(out.events.map((e) => e.reason), ['Issued']);
  assert.equal(out.status?.serialNumber, x.serialNumber);

  // The same certificate is kept while it serves the spec; a new name issues a new one.
  const live = out.child<TlsSecret>(Secret, 'web-tls')!;
  const kept = await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer], children: [live] });
  assert.equal(pemOf(kept.child<TlsSecret>(Secret, 'web-tls')!).serialNumber, x.serialNumber);
  assert.deepEqual(kept.events, []);
  const renamed = await testReconcile(CertificateFunction, { object: { ...cert, spec: { ...cert.spec, dnsNames: ['api'] } }, existing: [readyIssuer], children: [live] });
  assert.notEqual(pemOf(renamed.child<TlsSecret>(Secret, 'web-tls')!).serialNumber, x.serialNumber);
});

test('renewal follows ctx.now(): kept before renewBefore its end, reissued after, with the clock of the test', async () => {
  const issuedAt = new Date('2026-01-01T00:00:00Z');
  const first = await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer], now: issuedAt });
  const x = pemOf(first.child<TlsSecret>(Secret, 'web-tls')!);
  assert.equal(Date.parse(x.validTo), issuedAt.getTime() + 2160 * 3_600_000, 'valid from the clock of the test');
  const live = first.child<TlsSecret>(Secret, 'web-tls')!;
  const at = (hours: number) => new Date(issuedAt.getTime() + hours * 3_600_000);
  const early = await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer], children: [live], now: at(2160 - 361) });
  assert.equal(pemOf(early.child<TlsSecret>(Secret, 'web-tls')!).serialNumber, x.serialNumber, 'kept 361 h before its end');
  assert.ok(Math.abs(early.result!.requeueAfterSeconds! - 3600) < 120, `asks again when renewal is due (${early.result!.requeueAfterSeconds} s)`);
  const due = await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer], children: [live], now: at(2160 - 359) });
  assert.notEqual(pemOf(due.child<TlsSecret>(Secret, 'web-tls')!).serialNumber, x.serialNumber, 'reissued 359 h before its end');
  assert.deepEqual(due.events.map((e) => e.reason), ['Issued']);
});
