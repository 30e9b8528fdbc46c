// Issuer without a cluster: self-signed is Ready; a CA issuer checks its Secret.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import CertificateFunction from '../certificate/index.ts';
import { Secret } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import IssuerFunction, { Issuer } from './index.ts';

const cert = { metadata: { name: 'web', namespace: 'demo' }, spec: { secretName: 'web-tls', dnsNames: ['web'], issuerRef: { name: 'self' }, duration: '2160h', renewBefore: '360h' } };
const readyIssuer = { apiVersion: Issuer.apiVersion, kind: 'Issuer', metadata: { name: 'self' }, spec: { selfSigned: {} }, status: { conditions: [{ type: 'Ready', status: 'True' }] } };
type TlsSecret = { data: Record<string, string> };

test('self-signed is Ready; a CA Secret that is missing or not a CA is not, with the reason', async () => {
  assert.equal((await testReconcile(IssuerFunction, { object: { metadata: { name: 'self' }, spec: { selfSigned: {} } } })).ready?.status, 'True');
  const missing = await testReconcile(IssuerFunction, { object: { metadata: { name: 'ca' }, spec: { ca: { secretName: 'ca-key-pair' } } } });
  assert.deepEqual([missing.ready?.reason, missing.ready?.message], ['CannotSign', 'Secret ca-key-pair needs tls.crt and tls.key']);
  assert.equal(missing.result?.requeueAfterSeconds, undefined, 'no polling: the Secret is watched');
  assert.deepEqual(IssuerFunction.watches?.find((w) => w.kind === 'Secret')?.mapping, { referenceField: 'spec.ca.secretName' });
  const leaf = (await testReconcile(CertificateFunction, { object: cert, existing: [readyIssuer] })).child<TlsSecret>(Secret, 'web-tls')!;
  const notCa = await testReconcile(IssuerFunction, { object: { metadata: { name: 'ca' }, spec: { ca: { secretName: 'leaf' } } }, existing: [{ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'leaf' }, data: leaf.data }] });
  assert.equal(notCa.ready?.message, 'the certificate in leaf is not a CA');
});
