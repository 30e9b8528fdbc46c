// Each way a cluster can fail a command — refused, silent, untrusted, credentials missing or
// refused, forbidden — against a loopback server this test starts, and the one line it becomes:
// the kubeconfig file, the context, the server, and what to check. Timeouts are made small here
// so that the silent cases return at once; the test asserts they return, not how fast.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type RequestListener } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { stringify } from 'yaml';
import { generateServingPki } from '../core/certificates.ts';
import { ApiError, KubeApi } from './api.ts';
import { ClientNodeMissing } from './client-node.ts';
import { ClusterUnavailable, checkClusterAnswers, connectCluster, credentialsUnreadable, explainFailure } from './cluster-failures.ts';
import { nodeTransportWith } from './connection.ts';

const limits = { connectMs: 300, handshakeMs: 300, firstAnswerMs: 300 };
const transport = nodeTransportWith(limits);

/** Listens on a free loopback port until the test ends, then closes the server and every connection it took. */
async function listen(t: TestContext, server: Server): Promise<number> {
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => sockets.add(s));
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  t.after(() => {
    for (const s of sockets) s.destroy();
    return new Promise<void>((done) => server.close(() => done()));
  });
  return (server.address() as AddressInfo).port;
}

/** A kubeconfig in a scratch directory whose context "dev" points at `server` with `user`. */
function kubeconfigFor(t: TestContext, server: string, user: Record<string, unknown> = { token: 'abc' }, cluster: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-faults-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'config');
  writeFileSync(file, stringify({ apiVersion: 'v1', kind: 'Config', 'current-context': 'dev', contexts: [{ name: 'dev', context: { cluster: 'dev', user: 'me' } }], clusters: [{ name: 'dev', cluster: { server, ...cluster } }], users: [{ name: 'me', user }] }));
  return { file, cluster: connectCluster({ kubeconfig: file }, { transport }) };
}

const status = (code: number, message: string, reason: string): RequestListener => (_req, res) => {
  res.writeHead(code, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message, reason, code }));
};

/** The error a request through the cluster's connection ends with. */
async function failureOf(cluster: ReturnType<typeof connectCluster>, path = '/api/v1/namespaces'): Promise<Error> {
  return new KubeApi(cluster.connection).request('GET', path).then(
    () => assert.fail('the request should have failed'),
    (err: Error) => err,
  );
}

/** Each message names where the cluster came from: the file, the context, the server. */
function assertNamesTheCluster(message: string, file: string, server: string) {
  assert.ok(message.includes(`context "dev" in ${file}`), message);
  assert.ok(message.includes(`server ${server}`), message);
  assert.ok(!message.includes('\n'), `one line: ${message}`);
}

test('a refused connection names the kubeconfig, context and server, and says to check the cluster runs', async (t) => {
  // A port that was just free: nothing listens there now.
  const closed = createTcpServer();
  await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
  const free = (closed.address() as AddressInfo).port;
  await new Promise<void>((done) => closed.close(() => done()));
  const server = `https://127.0.0.1:${free}`;
  const { file, cluster } = kubeconfigFor(t, server);
  const err = await failureOf(cluster);
  assert.ok(err instanceof ClusterUnavailable);
  assertNamesTheCluster(err.message, file, server);
  assert.match(err.message, /refused the connection/);
  assert.match(err.message, /check that the cluster is running/);
});

test('a server that takes the connection and never completes the TLS handshake fails within the handshake timeout', async (t) => {
  const port = await listen(t, createTcpServer(() => {}));
  const server = `https://127.0.0.1:${port}`;
  const { file, cluster } = kubeconfigFor(t, server);
  const err = await failureOf(cluster);
  assertNamesTheCluster(err.message, file, server);
  assert.match(err.message, /no TLS handshake within 0\.3 s/);
});

test('a server that takes the request and never answers fails within the first-answer timeout; a watch is not cut by it', async (t) => {
  let watchOpen = false;
  const port = await listen(t, createHttpServer((req, res) => {
    if (req.url?.includes('watch=true')) {
      // A watch: headers at once, then nothing for longer than the first-answer timeout.
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.flushHeaders();
      watchOpen = true;
      setTimeout(() => res.end(`${JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'late' } } })}\n`), 3 * limits.firstAnswerMs);
    }
  }));
  const server = `http://127.0.0.1:${port}`;
  const { file, cluster } = kubeconfigFor(t, server);
  const err = await failureOf(cluster);
  assertNamesTheCluster(err.message, file, server);
  assert.match(err.message, /did not answer within 0\.3 s/);
  const lines: unknown[] = [];
  await new KubeApi(cluster.connection).stream('/api/v1/namespaces', { query: { watch: 'true' } }, (l) => lines.push(l));
  assert.ok(watchOpen);
  assert.equal(lines.length, 1, 'the watch stayed open past the first-answer timeout and got its event');
});

test('a server whose certificate the kubeconfig does not trust says so, and to check certificate-authority', async (t) => {
  const pki = generateServingPki('untrusted', [], { ips: ['127.0.0.1'] });
  const port = await listen(t, createHttpsServer({ cert: pki.cert, key: pki.key }, status(200, '', '')));
  const server = `https://127.0.0.1:${port}`;
  const { file, cluster } = kubeconfigFor(t, server);
  const err = await failureOf(cluster);
  assertNamesTheCluster(err.message, file, server);
  assert.match(err.message, /certificate is not trusted/);
  assert.match(err.message, /certificate-authority/);
  // With the CA given, the same server is trusted.
  const trusted = kubeconfigFor(t, server, { token: 'abc' }, { 'certificate-authority-data': Buffer.from(pki.caCert).toString('base64') });
  assert.deepEqual(await new KubeApi(trusted.cluster.connection).request('GET', '/version'), { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: '', reason: '', code: 200 });
});

test('401: the credentials were refused (expired or revoked); 403: forbidden, still an ApiError with its status', async (t) => {
  const port401 = await listen(t, createHttpServer(status(401, 'Unauthorized', 'Unauthorized')));
  const server401 = `http://127.0.0.1:${port401}`;
  const a = kubeconfigFor(t, server401);
  const unauthorized = await failureOf(a.cluster);
  assert.ok(unauthorized instanceof ClusterUnavailable);
  assertNamesTheCluster(unauthorized.message, a.file, server401);
  assert.match(unauthorized.message, /refused the credentials of user "me" \(401 Unauthorized\)/);
  assert.match(unauthorized.message, /expired/);

  const port403 = await listen(t, createHttpServer(status(403, 'namespaces is forbidden: User "me" cannot list resource "namespaces" in API group "" at the cluster scope', 'Forbidden')));
  const server403 = `http://127.0.0.1:${port403}`;
  const b = kubeconfigFor(t, server403);
  const forbidden = await failureOf(b.cluster);
  assert.ok(forbidden instanceof ApiError && forbidden.status === 403, 'callers that look at the status still see 403');
  assertNamesTheCluster(forbidden.message, b.file, server403);
  assert.match(forbidden.message, /namespaces is forbidden: User "me" cannot list/);
  assert.match(forbidden.message, /check the RBAC of user "me"/);
});

test('a credential that cannot be read (a token file or client certificate that is gone) names the file and the user', async (t) => {
  const port = await listen(t, createHttpServer(status(200, '', '')));
  const server = `http://127.0.0.1:${port}`;
  const { file, cluster } = kubeconfigFor(t, server, { tokenFile: 'gone-token' });
  const err = await failureOf(cluster);
  assertNamesTheCluster(err.message, file, server);
  assert.match(err.message, /the credentials of user "me" cannot be read: .*gone-token/);
  assert.throws(() => kubeconfigFor(t, server, { 'client-certificate': 'gone.crt', 'client-key': 'gone.key' }), (e: Error) => {
    assert.match(e.message, /the credentials of user "me" cannot be read: .*gone\.crt/);
    assert.match(e.message, /context "dev" in .*config/);
    return true;
  });
});

test("the first look at a cluster is bounded, and says it did not answer; one that answers passes", async (t) => {
  const silent = await listen(t, createHttpServer(() => {}));
  const { file, cluster } = kubeconfigFor(t, `http://127.0.0.1:${silent}`);
  const err = await checkClusterAnswers(cluster, { withinMs: 200 }).then(() => assert.fail('a silent server passed'), (e: Error) => e);
  assertNamesTheCluster(err.message, file, `http://127.0.0.1:${silent}`);
  assert.match(err.message, /did not answer within 0\.2 s/);
  const answering = await listen(t, createHttpServer(status(200, '', '')));
  await checkClusterAnswers(kubeconfigFor(t, `http://127.0.0.1:${answering}`).cluster, { withinMs: 2000 });
});

test('a host that cannot be reached, and a connection that never completes, say so', () => {
  const where = { where: 'context "dev" in ~/.kube/config', server: 'https://10.0.0.1:6443', user: 'me' };
  assert.match(explainFailure(Object.assign(new Error('connect EHOSTUNREACH 10.0.0.1:6443'), { code: 'EHOSTUNREACH' }), where)!, /cannot reach the server \(EHOSTUNREACH\).*check the network/);
  assert.match(explainFailure(Object.assign(new Error('getaddrinfo ENOTFOUND example.invalid'), { code: 'ENOTFOUND' }), where)!, /cannot resolve the server's host name/);
  assert.equal(explainFailure(new Error('something else'), where), undefined, 'other errors are left as they are');
});

test('a credential plugin whose library is not installed is said alone: what needs it and the command that installs it', () => {
  const missing = new ClientNodeMissing('the user "eks" (context "eks" in ~/.kube/config) authenticates with a credential plugin (exec: aws), which kfn runs through @kubernetes/client-node; it is not installed here. Install it in your project (npm install --save-dev @kubernetes/client-node) and run kfn again.');
  assert.equal(credentialsUnreadable(missing, { where: 'context "eks" in ~/.kube/config', server: 'https://127.0.0.1:1', user: 'eks' }), missing.message);
});
