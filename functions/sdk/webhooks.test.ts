// The webhook listener: HTTPS with the certificate in a folder, and a rotated certificate
// served to new connections without a restart.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from 'node:tls';
import { Hono } from 'hono';
import { generateServingPki } from '../../core/certificates.ts';
import { serveWebhooks } from './webhooks.ts';

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
