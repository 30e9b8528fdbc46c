import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey, createPublicKey, createSign, createVerify } from 'node:crypto';
import { test } from 'node:test';
import { generateClusterPki } from './pki.ts';

test('the serving certificate is issued by the cluster CA for loopback and the in-cluster names', () => {
  const now = new Date('2026-01-01T00:00:00Z');
  const pki = generateClusterPki('10.96.0.1', now);
  const ca = new X509Certificate(pki.caCert);
  const serving = new X509Certificate(pki.servingCert);
  assert.ok(ca.ca, 'the CA certificate is a CA');
  assert.ok(!serving.ca, 'the serving certificate is not a CA');
  assert.ok(serving.checkIssued(ca), 'issued by the CA');
  assert.ok(serving.verify(ca.publicKey), 'signed with the CA key');
  assert.ok(serving.checkIP('127.0.0.1'));
  assert.ok(serving.checkIP('10.96.0.1'));
  assert.equal(serving.checkHost('kubernetes.default.svc.cluster.local'), 'kubernetes.default.svc.cluster.local');
  assert.equal(serving.checkHost('localhost'), 'localhost');
  assert.equal(serving.checkHost('example.com'), undefined);
  assert.ok(new Date(serving.validFrom) <= now && new Date(serving.validTo) > now);
  assert.ok(createPrivateKey(pki.servingKey).asymmetricKeyType === 'rsa');
});

test('the ServiceAccount key pair signs and verifies (RS256 tokens)', () => {
  const pki = generateClusterPki('10.96.0.1');
  const signature = createSign('RSA-SHA256').update('payload').sign(pki.serviceAccountKey);
  assert.ok(createVerify('RSA-SHA256').update('payload').verify(createPublicKey(pki.serviceAccountPublicKey), signature));
});

test('each call makes new keys', () => {
  const a = generateClusterPki('10.96.0.1');
  const b = generateClusterPki('10.96.0.1');
  assert.notEqual(a.caKey, b.caKey);
  assert.notEqual(a.serviceAccountKey, b.serviceAccountKey);
});
