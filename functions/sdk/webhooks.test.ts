// The webhook listener: HTTPS with the certificate in a folder, and a rotated certificate
// served to new connections without a restart; and which requests the apiserver asks the
// webhooks about (their matchConditions, evaluated as CEL here).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from 'node:tls';
import { Hono } from 'hono';
import { generateServingPki } from '../../core/certificates.ts';
import { admit, parseAdmissionReview } from './admission.ts';
import { defineKind, defineReconciler, t } from './index.ts';
import { compiled } from './rules.ts';
import { serveWebhooks, webhookConfigurations } from './webhooks.ts';

/** The serial number of the certificate the server presents, trusting `ca`. */
function presented(port: number, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => {
      resolve(socket.getPeerX509Certificate()!.serialNumber);
      socket.end();
    });
    socket.once('error', reject);
  });
}

test('webhooks are served over TLS with the folder\'s certificate, and a rotated one is picked up without a restart', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-webhook-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const write = (pki: ReturnType<typeof generateServingPki>) => {
    writeFileSync(join(dir, 'tls.key'), pki.key);
    writeFileSync(join(dir, 'tls.crt'), pki.cert);
  };
  const first = generateServingPki('t', ['localhost'], { ips: ['127.0.0.1'] });
  write(first);
  const app = new Hono().post('/admission/validate', (c) => c.json({ ok: true }));
  let reloaded: (err?: Error) => void = () => {};
  const server = await serveWebhooks(app, { port: 0, hostname: '127.0.0.1', certDir: dir, onReload: (err) => reloaded(err) });
  t.after(() => server.close());
  const port = (server.address() as { port: number }).port;
  const firstSerial = await presented(port, first.caCert);

  const second = generateServingPki('t', ['localhost'], { ips: ['127.0.0.1'] });
  const reload = new Promise<Error | undefined>((resolve) => (reloaded = resolve));
  write(second);
  assert.equal(await reload, undefined, 'the new pair loads');
  const secondSerial = await presented(port, second.caCert);
  assert.notEqual(secondSerial, firstSerial, 'new connections get the rotated certificate');
  await assert.rejects(presented(port, first.caCert), /self-signed|unable to verify|certificate/i, 'the old CA no longer verifies it');
});

/** A Box as the apiserver may send it: a spec, or none (an object stored before its kind required one). */
type Box = { apiVersion: string; kind: string; metadata: Record<string, unknown>; spec?: { size: number; color?: string } };
const Box = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Box', spec: t.Object({ size: t.Integer(), color: t.Optional(t.String()) }), status: t.Object({}) });
const boxes = defineReconciler({
  for: Box,
  reconcile: () => ({}),
  default(box) {
    const { spec } = box as unknown as Box;
    if (spec) spec.color ??= 'brown';
  },
  validate(box) {
    const { spec } = box as unknown as Box;
    if (!spec) return ['spec: required'];
    return spec.size > 10 ? ['spec.size: must be ≤ 10'] : [];
  },
});
const box = (spec: Box['spec'], metadata: Record<string, unknown> = {}): Box => ({ apiVersion: 'test.kfn.dev/v1', kind: 'Box', metadata: { name: 'b', namespace: 'ns', uid: 'u', ...metadata }, ...(spec ? { spec } : {}) });
const terminating = { deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: ['kfn.dev/finalizer'] };

/**
 * What the apiserver answers for an UPDATE from `old` to `object` through the function's `mode`
 * webhook: not asked (its matchConditions do not all hold: allowed as it is), or the webhook's answer.
 */
async function throughWebhook(mode: 'default' | 'validate', old: Box, object: Box): Promise<{ asked: boolean; allowed: boolean; message?: string; patch?: string }> {
  const configuration = webhookConfigurations(boxes, { client: { url: 'https://x' }, caBundle: 'PEM' }).find((c) => c.kind === (mode === 'default' ? 'MutatingWebhookConfiguration' : 'ValidatingWebhookConfiguration')) as { webhooks: { matchConditions: { expression: string }[] }[] };
  const vars = { object, oldObject: old, request: { operation: 'UPDATE' } } as never;
  for (const { expression } of configuration.webhooks[0]!.matchConditions) {
    const holds = compiled(expression)(vars);
    assert.equal(typeof holds, 'boolean', `${expression} gives a bool`);
    if (holds === false) return { asked: false, allowed: true };
  }
  const body = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'r', kind: { group: 'test.kfn.dev', version: 'v1', kind: 'Box' }, operation: 'UPDATE', name: 'b', namespace: 'ns', object, oldObject: old } });
  const { response } = await admit(boxes, mode, parseAdmissionReview(body));
  return { asked: true, allowed: response!.allowed, message: response!.status?.message, patch: response!.patch };
}

test('an object being deleted: a change of its spec is validated and defaulted as any other update', async () => {
  const invalid = await throughWebhook('validate', box({ size: 1, color: 'red' }, terminating), box({ size: 20, color: 'red' }, terminating));
  assert.deepEqual([invalid.asked, invalid.allowed], [true, false], 'an invalid spec is refused, Terminating or not');
  assert.match(invalid.message ?? '', /spec\.size: must be ≤ 10/);
  const valid = await throughWebhook('validate', box({ size: 1, color: 'red' }, terminating), box({ size: 2, color: 'red' }, terminating));
  assert.deepEqual([valid.asked, valid.allowed], [true, true]);
  const defaulted = await throughWebhook('default', box({ size: 1, color: 'red' }, terminating), box({ size: 2 }, terminating));
  assert.equal(defaulted.asked, true, 'the defaulting webhook is asked too');
  assert.deepEqual(JSON.parse(Buffer.from(defaulted.patch ?? '', 'base64').toString()), [{ op: 'add', path: '/spec/color', value: 'brown' }]);
});

test('an object being deleted: kfn removing its finalizer is never refused, whatever its spec (or none) says now', async () => {
  const removal = (spec: Box['spec']) => [box(spec, terminating), box(spec, { ...terminating, finalizers: [] })] as const;
  for (const mode of ['validate', 'default'] as const) {
    const invalid = await throughWebhook(mode, ...removal({ size: 20 }));
    assert.deepEqual([invalid.asked, invalid.allowed], [false, true], `${mode}: a spec a rule tightened since refuses is not asked about`);
    const none = await throughWebhook(mode, ...removal(undefined));
    assert.deepEqual([none.asked, none.allowed], [false, true], `${mode}: an object without a spec is not asked about either`);
  }
  const noted = await throughWebhook('validate', box({ size: 20 }, terminating), box({ size: 20 }, { ...terminating, annotations: { 'kfn.dev/finalize-failing-since': '2026-01-01T00:01:00Z' } }));
  assert.deepEqual([noted.asked, noted.allowed], [false, true], 'nor is its note of when finalize first failed');
});
