// An https sink with a caBundle is trusted by that CA alone: a loopback HTTPS server whose
// certificate that CA signed is delivered to; one signed by another CA (a tenant answering on a
// Service's address) is refused, and so is the sink's own CA when the bundle names another —
// nothing is sent, and the Reconciler's Ready condition says why.
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { generateServingPki, type ServingPki } from '../core/certificates.ts';
import { encodeReconcileEvent } from '../core/event.ts';
import { reconcilerObject } from '../core/reconciler-spec.ts';
import { KubeApi } from '../kube/api.ts';
import { connectionFromOptions } from '../kube/connection.ts';
import { parseReconciler } from './config.ts';
import { sinkFailureOf } from './delivery.ts';
import { clusterLocalHost, Sink } from './sink.ts';

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

/** A function on 127.0.0.1 over plain HTTP; counts what reaches it. */
async function httpFunction(t: TestContext) {
  let received = 0;
  const server = createHttpServer((req, res) => {
    received++;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, received: () => received };
}

test('a bearer token does not carry contract 2: nothing is sent, and the Reconciler says to use hmac', async (t) => {
  const fn = await httpFunction(t);
  const bearer = parseReconciler(reconcilerObject({ name: 'r' }, { for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink: { uri: `http://127.0.0.1:${fn.port}/` }, auth: { type: 'bearer', secretRef: { name: 'tok', namespace: 'kfn-system' } } }));
  const problems: (string | undefined)[] = [];
  // The check comes before the Secret is read: this apiserver answers nothing.
  const sink = new Sink({ ...bearer, contract: 2 }, new KubeApi(connectionFromOptions({ server: 'https://127.0.0.1:1' })), silent, (p) => problems.push(p));
  const sent = await sink.send(message, 2000);
  assert.equal(sent.result.outcome.kind, 'retry');
  assert.equal(fn.received(), 0, 'nothing was sent');
  assert.match(problems[0] ?? '', /spec\.auth\.type is bearer.*contract 2.*use hmac/);
});

test('plain http:// goes to a host inside the cluster (a Service) or on this machine only, unless allowed explicitly', async (t) => {
  for (const host of ['fn', 'kfn-fn-web.kfn-system.svc', 'kfn-fn-web.kfn-system.svc.cluster.local', 'KFN-FN-WEB.KFN-SYSTEM.SVC.CLUSTER.LOCAL.', 'localhost', 'dev.localhost', '127.0.0.1', '127.1.2.3', '[::1]', '0.0.0.0', '[::]']) assert.equal(clusterLocalHost(host), true, host);
  for (const host of ['example.com', 'fn.example.com', 'svc.example.com', 'web.svc.example.com', '10.0.0.7', '192.168.1.5', '8.8.8.8', '[2001:db8::1]', 'cluster.local.example.com']) assert.equal(clusterLocalHost(host), false, host);

  const outside = sinkFor('http://fn.example.com/');
  const refused = await outside.sink.send(message, 2000);
  assert.equal(refused.result.outcome.kind, 'retry');
  assert.match(outside.problems[0] ?? '', /^the sink http:\/\/fn\.example\.com\/ is plain http to a host outside the cluster .*https:\/\//);

  const fn = await httpFunction(t);
  const local = sinkFor(`http://127.0.0.1:${fn.port}/`);
  assert.equal((await local.sink.send(message, 2000)).result.outcome.kind, 'done');
  assert.deepEqual([fn.received(), local.problems], [1, []]);

  // Allowed: the request goes (to an address that answers nothing, here), and the sink is not refused.
  const config = parseReconciler(reconcilerObject({ name: 'r' }, { for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink: { uri: 'http://192.0.2.1:9/' } }));
  const problems: (string | undefined)[] = [];
  const allowed = new Sink(config, new KubeApi(connectionFromOptions({ server: 'https://127.0.0.1:1' })), silent, (p) => problems.push(p), { allowPlainHttp: true });
  const tried = await allowed.send(message, 200);
  assert.equal(tried.result.outcome.kind, 'retry');
  assert.ok(!problems.some((p) => p?.includes('plain http')), problems.join('; '));
});
