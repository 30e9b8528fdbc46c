// When a serving certificate is due, and the CA bundle around a renewal: the rule the CLI and
// the running function share.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { generateServingPki } from '../../core/certificates.ts';
import { caBundleAfter, certificateEnd, pemCertificates, renewBeforeMs, renewalDue, secretPem, serviceDnsNames, tlsSecretData } from './certificate.ts';

const day = 24 * 3600_000;
const names = { dnsNames: serviceDnsNames('kfn-fn-shelves', 'shop') };

test('due when missing, unreadable, short of a name, or within 30 days of its end; kept otherwise', () => {
  const made = new Date('2026-03-01T00:00:00Z');
  const data = tlsSecretData(generateServingPki('kfn-fn-shelves', names.dnsNames, { now: made }));
  const end = certificateEnd(data)!;
  assert.equal(end.getTime(), made.getTime() + 365 * day, 'a year');
  assert.equal(renewalDue(undefined, names, made), 'no certificate yet');
  assert.equal(renewalDue({ 'tls.crt': data['tls.crt']! }, names, made), 'no certificate yet');
  assert.equal(renewalDue(data, names, made), undefined);
  assert.equal(renewalDue(data, names, new Date(end.getTime() - renewBeforeMs - 1)), undefined, 'a day more than 30 left: kept');
  assert.equal(renewalDue(data, names, new Date(end.getTime() - renewBeforeMs + 1)), `it expires ${end.toISOString()}`);
  assert.equal(renewalDue(data, { dnsNames: serviceDnsNames('kfn-fn-shelves', 'other') }, made), 'it does not name kfn-fn-shelves.other.svc', 'the Service moved');
  assert.equal(renewalDue(data, { ...names, ips: ['127.0.0.1'] }, made), 'it does not name 127.0.0.1');
  assert.match(renewalDue({ ...data, 'tls.crt': Buffer.from('not a certificate').toString('base64') }, names, made)!, /^it cannot be read/);
});

test('names are DNS names and IP addresses; a short validity for tests', () => {
  const now = new Date('2026-03-01T00:00:00Z');
  const pki = generateServingPki('t', ['localhost'], { ips: ['127.0.0.1'], now, validityMs: 10 * day });
  const x = new X509Certificate(pki.cert);
  assert.ok(x.checkIP('127.0.0.1') && x.checkHost('localhost'));
  assert.ok(x.verify(new X509Certificate(pki.caCert).publicKey));
  assert.equal(renewalDue(tlsSecretData(pki), { dnsNames: ['localhost'], ips: ['127.0.0.1'] }, now), `it expires ${new Date(now.getTime() + 10 * day).toISOString()}`, 'ten days: within the window at once');
  assert.equal(secretPem(tlsSecretData(pki), 'tls.key'), pki.key);
});

test('the bundle after a renewal: the new CA, then the previous ones still valid, each once', () => {
  const now = new Date('2026-03-01T00:00:00Z');
  const [a, b, old] = [generateServingPki('a', ['a']), generateServingPki('b', ['b']), generateServingPki('old', ['old'], { now: new Date(now.getTime() - 400 * day) })];
  assert.equal(caBundleAfter(a.caCert, undefined, now), a.caCert, 'alone, as it is');
  assert.deepEqual(pemCertificates(caBundleAfter(a.caCert, b.caCert, now)), [a.caCert.trim(), b.caCert.trim()]);
  assert.deepEqual(pemCertificates(caBundleAfter(a.caCert, [`${b.caCert}${a.caCert}`, b.caCert, old.caCert, 'garbage'], now)), [a.caCert.trim(), b.caCert.trim()], 'no duplicate, nothing expired or unreadable');
});
