// An https sink with a caBundle is trusted by that CA alone: a loopback HTTPS server whose
// certificate that CA signed is delivered to; one signed by another CA (a tenant answering on a
// Service's address) is refused, and so is the sink's own CA when the bundle names another —
// nothing is sent, and the Reconciler's Ready condition says why.
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { generateServingPki, type ServingPki } from '../core/certificates.ts';
import { encodeReconcileEvent } from '../core/event.ts';
import { reconcilerObject } from '../core/reconciler-spec.ts';
import { KubeApi } from '../kube/api.ts';
import { connectionFromOptions } from '../kube/connection.ts';
import { parseReconciler } from './config.ts';
import { sinkFailureOf } from './delivery.ts';
import { Sink } from './sink.ts';

const silent = { info: () => {}, warn: () => {}, error: () => {} };
const message = encodeReconcileEvent({ reconciler: 'r', primary: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'ns', name: 'cm', uid: 'u', resourceVersion: '1' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test').message;

/** A function on 127.0.0.1 over HTTPS with this certificate; counts what reaches it. */
async function httpsFunction(t: TestContext, pki: ServingPki) {
  let received = 0;
  const server = createServer({ cert: pki.cert, key: pki.key }, (req, res) => {
    received++;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/`, received: () => received };
}

/** The bridge's Sink for a Reconciler delivering to `uri`, trusting `caBundle`; the problems it reports. */
function sinkFor(uri: string, caBundle?: string) {
  const config = parseReconciler(reconcilerObject({ name: 'r' }, { for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink: { uri, ...(caBundle ? { caBundle } : {}) } }));
  const problems: (string | undefined)[] = [];
  // No auth, no ref: the sink never asks the apiserver.
  const api = new KubeApi(connectionFromOptions({ server: 'https://127.0.0.1:1' }));
  return { sink: new Sink(config, api, silent, (p) => problems.push(p)), problems };
}

test('an https sink is delivered to when its CA is the bundle\'s, and refused when another CA signed its certificate', async (t) => {
  const own = generateServingPki('fn', [], { ips: ['127.0.0.1'] });
  const other = generateServingPki('tenant', [], { ips: ['127.0.0.1'] });
  const fn = await httpsFunction(t, own);
  const impostor = await httpsFunction(t, other);

  const trusted = sinkFor(fn.url, own.caCert);
  const delivered = await trusted.sink.send(message, 2000);
  assert.equal(delivered.result.outcome.kind, 'done');
  assert.equal(fn.received(), 1);

  // The same bundle, another server on the sink's address (a certificate from another CA).
  const taken = sinkFor(impostor.url, own.caCert);
  const refused = await taken.sink.send(message, 2000);
  assert.equal(refused.result.outcome.kind, 'retry');
  assert.equal(impostor.received(), 0, 'nothing was sent');
  assert.equal(refused.result.mayBeRunning, undefined, 'the request never reached a function: no hold');
  assert.equal(sinkFailureOf(refused.result), 'tls');
  assert.match(taken.problems[0] ?? '', /^the TLS certificate of 127\.0\.0\.1:\d+ was refused \((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY): .*spec\.sink\.caBundle/);

  // Only the bundle's CAs: the function's own certificate is refused when the bundle is another's.
  assert.equal((await sinkFor(fn.url, other.caCert).sink.send(message, 2000)).result.outcome.kind, 'retry');
  // And without a bundle, only public roots: a function's own CA is not one.
  assert.equal((await sinkFor(fn.url).sink.send(message, 2000)).result.outcome.kind, 'retry');
  // A bundle of both (the old and the new CA around a renewal) takes either.
  assert.equal((await sinkFor(impostor.url, `${own.caCert}${other.caCert}`).sink.send(message, 2000)).result.outcome.kind, 'done');
  assert.equal(fn.received(), 1);
});
