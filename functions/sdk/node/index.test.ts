// The function as its container runs it: SIGTERM during a reconcile lets that reconcile finish
// and answer (a kept-alive connection it came on is then closed), refuses new connections, then exits.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { encodeReconcileEvent } from '../../../core/event.ts';
import { repoRoot } from '../../../cluster/paths.ts';
import { freePort } from '../../../test/support/bridge.ts';
import { FakeClock, waitFor } from '../../../core/clock.ts';
import pino from 'pino';
import { generateServingPki } from '../../../core/certificates.ts';
import { defineKind, defineReconciler, t as t2 } from '../index.ts';
import { memoryApi } from '../testing.ts';
import { serve } from './index.ts';

/** The slow function (a 2 s reconcile) started as its container runs it, once it listens. */
async function startSlowFunction(t: TestContext) {
  const port = await freePort();
  const child = spawn(process.execPath, [join(repoRoot, 'functions', 'sdk', 'testdata', 'slow-function.ts')], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  const seen = { output: '' };
  child.stdout.on('data', (c) => (seen.output += c));
  child.stderr.on('data', (c) => (seen.output += c));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await waitFor('the function to listen', async () => seen.output.includes('listening on') || undefined, { timeoutMs: 20_000 });
  return { port, child, seen, exited };
}

test('SIGTERM during a reconcile: it finishes and answers, new connections are refused, then the process exits', async (t) => {
  const { port, child, seen, exited } = await startSlowFunction(t);

  const { message } = encodeReconcileEvent(
    { reconciler: 'slow', primary: { apiVersion: 'slow.kfn.test/v1', kind: 'Slow', namespace: 'demo', name: 'a', uid: 'uid-of-a' }, reason: 'updated', observedAt: Date.now() },
    1,
    'kfn://test',
    Date.now() + 30_000,
  );
  const url = `http://127.0.0.1:${port}/`;
  const answer = fetch(url, { method: 'POST', headers: message.headers, body: message.body }).then(async (r) => ({ status: r.status, body: await r.text(), at: Date.now() }));
  await waitFor('the reconcile to start', async () => seen.output.includes('reconcile started') || undefined, { timeoutMs: 10_000 });
  child.kill('SIGTERM');
  const signalledAt = Date.now();
  await waitFor('the function to take the signal', async () => seen.output.includes('taking no new requests') || undefined, { timeoutMs: 5000 });
  await assert.rejects(fetch(url, { method: 'POST', headers: message.headers, body: message.body }), 'a new connection after SIGTERM is refused');

  const { status, body, at } = await answer;
  assert.equal(status, 200, body);
  assert.equal((JSON.parse(body) as { result: string }).result, 'done');
  assert.ok(seen.output.includes('reconcile finished'), 'the reconcile ran to its end');
  assert.equal(await exited, 0);
  assert.ok(at - signalledAt > 1000, `answered ${at - signalledAt} ms after the signal: it waited for the reconcile`);
  assert.match(seen.output, /slow: stopped/);
});

test('SIGTERM with a kept-alive connection busy: its answer closes the connection, nothing more is served on it, and the process exits', async (t) => {
  const { port, child, seen, exited } = await startSlowFunction(t);

  // One kept-alive connection, as the bridge's pool holds: the reconcile in flight at SIGTERM is on it.
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  const post = () =>
    new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
      const { message } = encodeReconcileEvent({ reconciler: 'slow', primary: { apiVersion: 'slow.kfn.test/v1', kind: 'Slow', namespace: 'demo', name: 'a', uid: 'uid-of-a' }, reason: 'updated', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
      const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent, headers: message.headers }, (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
      });
      req.on('error', reject);
      req.end(message.body);
    });
  const first = await post();
  assert.equal(first.connection, 'keep-alive', 'before the signal the connection is kept alive');
  const inFlight = post();
  await waitFor('the second reconcile to start', async () => seen.output.split('reconcile started').length > 2 || undefined, { timeoutMs: 10_000 });
  child.kill('SIGTERM');
  await waitFor('the function to take the signal', async () => seen.output.includes('taking no new requests') || undefined, { timeoutMs: 5000 });
  const answered = await inFlight;
  assert.equal(answered.status, 200, answered.body);
  assert.equal(answered.connection, 'close', 'the answer in flight at SIGTERM closes its connection');
  const started = seen.output.split('reconcile started').length - 1;
  await assert.rejects(post(), 'the next request needs a new connection, which is refused');
  assert.equal(await exited, 0);
  assert.equal(seen.output.split('reconcile started').length - 1, started, 'no reconcile started after the signal');
});

/** A serving certificate for 127.0.0.1 in a folder of its own, as a listener reads it (tls.crt, tls.key). */
function certificateFiles(t: TestContext, name: string) {
  const dir = mkdtempSync(join(tmpdir(), `kfn-${name}-`));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pki = generateServingPki(name, ['localhost'], { ips: ['127.0.0.1'] });
  writeFileSync(join(dir, 'tls.crt'), pki.cert);
  writeFileSync(join(dir, 'tls.key'), pki.key);
  return { dir, pki };
}

test('close() with an admission call in flight on a kept-alive HTTPS connection: the webhook listener answers it with Connection: close, then stops', async (t) => {
  const { dir, pki } = certificateFiles(t, 'close');
  let release = () => {};
  let entered = () => {};
  const inValidate = new Promise<void>((r) => (entered = r));
  const Box = defineKind({ group: 'close.kfn.test', version: 'v1', kind: 'Box', spec: t2.Object({}), status: t2.Object({}) });
  const reconciler = defineReconciler({
    for: Box,
    reconcile: () => ({}),
    validate: () => {
      entered();
      return new Promise<void>((r) => (release = r));
    },
  });
  const webhookPort = await freePort();
  const server = await serve(reconciler, { port: await freePort(), hostname: '127.0.0.1', webhooks: { port: webhookPort, certDir: dir }, api: memoryApi(reconciler, { object: { metadata: { name: 'b', namespace: 'ns' }, spec: {} } }), credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: 1, ca: pki.caCert });
  t.after(() => agent.destroy());
  const review = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u-1', kind: { group: 'close.kfn.test', version: 'v1', kind: 'Box' }, operation: 'CREATE', name: 'b', namespace: 'ns', object: { apiVersion: 'close.kfn.test/v1', kind: 'Box', metadata: { name: 'b', namespace: 'ns' }, spec: {} } } });
  const answer = new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
    const req = httpsRequest({ host: '127.0.0.1', port: webhookPort, method: 'POST', path: '/admission/validate', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
    });
    req.on('error', reject);
    req.end(review);
  });
  await inValidate;
  const closed = new Promise<void>((r) => server.close(() => r()));
  release();
  const { status, connection } = await answer;
  assert.equal(status, 200);
  assert.equal(connection, 'close', 'the call in flight at close() ends its connection');
  await closed;
});

test('with its HTTPS listener, the server checks its certificate at start and on its clock after, until it closes', async (t) => {
  const { dir } = certificateFiles(t, 'renewing');
  const Box = defineKind({ group: 'renewing.kfn.test', version: 'v1', kind: 'Box', spec: t2.Object({}), status: t2.Object({}) });
  const reconciler = defineReconciler({ for: Box, reconcile: () => ({}), validate: () => [] });
  const clock = new FakeClock();
  const asked: string[] = [];
  const lines: string[] = [];
  // An apiserver that knows no Secret: each check fails, is logged, and is tried again.
  const api = { request: async (method: string, path: string) => (asked.push(`${method} ${path}`), Promise.reject(new Error('no such Secret'))) };
  const renewal = { secret: { namespace: 'ns', name: 'tls' }, names: { dnsNames: ['localhost'] }, issuer: 'renewing', holders: [], connect: () => api, clock, log: (l: string) => lines.push(l) };
  const server = await serve(reconciler, { port: await freePort(), hostname: '127.0.0.1', webhooks: { port: await freePort(), certDir: dir }, renewal, credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
  clock.advance(0);
  await waitFor('the first check', () => lines.length === 1);
  assert.deepEqual(asked, ['GET /api/v1/namespaces/ns/secrets/tls']);
  assert.match(lines[0]!, /could not be checked or renewed: no such Secret; trying again in 10 min/);
  clock.advance(10 * 60_000);
  await waitFor('the check after a failure, 10 minutes later', () => lines.length === 2);
  await new Promise<void>((r) => server.close(() => r()));
  assert.equal(clock.pendingTimers(), 0, 'closing stops the checks');
});

test('deployed where the apiserver runs its declared defaults ($KFN_DEFAULTS_AS_POLICIES), the function applies none itself; elsewhere its webhook does', async (t) => {
  const { default: MyAppFunction } = await import('../../myapp/index.ts');
  const review = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', kind: { group: 'app.example.com', version: 'v1', kind: 'MyApp' }, operation: 'CREATE', object: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'a', namespace: 'ns' }, spec: { replicas: 1, image: 'nginx' } } } });
  const patchOf = async (asPolicies: boolean) => {
    if (asPolicies) process.env.KFN_DEFAULTS_AS_POLICIES = 'true';
    else delete process.env.KFN_DEFAULTS_AS_POLICIES;
    const port = await freePort();
    const server = await serve(MyAppFunction, { port, hostname: '127.0.0.1', credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
    t.after(() => void server.close());
    const res = await fetch(`http://127.0.0.1:${port}/admission/default`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: review });
    return ((await res.json()) as { response: { allowed: boolean; patch?: string } }).response;
  };
  t.after(() => delete process.env.KFN_DEFAULTS_AS_POLICIES);
  const served = await patchOf(false);
  assert.deepEqual(JSON.parse(Buffer.from(served.patch!, 'base64').toString()), [{ op: 'replace', path: '/spec/image', value: 'nginx:latest' }]);
  const asPolicies = await patchOf(true);
  assert.deepEqual(asPolicies, { uid: 'u', allowed: true }, 'allowed as sent: the apiserver has defaulted it already');
});

test("a function serving deliveries, /healthz and /metrics answers them itself: Node's fetch (undici) is never loaded; a webhook's path loads Hono's adapter", async (t) => {
  const port = await freePort();
  const child = spawn(process.execPath, [join(repoRoot, 'functions', 'sdk', 'testdata', 'served-function.ts')], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  await waitFor('the function to listen', async () => output.includes('listening') || undefined, { timeoutMs: 20_000 });
  const fetchLoaded = async () => {
    const from = output.length;
    child.kill('SIGUSR2');
    return waitFor('the function to say', async () => output.slice(from).match(/fetch loaded: (true|false)/)?.[1], { timeoutMs: 5000 });
  };
  // Node's own client, so that nothing is asked of the test's fetch either.
  const send = (method: string, path: string, body?: string) =>
    new Promise<{ status: number; type: string | undefined; text: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, method, path, agent: false, headers: body ? { 'content-type': 'application/json' } : {} }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], text }));
      });
      req.on('error', reject);
      req.end(body);
    });
  const { message } = encodeReconcileEvent({ reconciler: 'served', primary: { apiVersion: 'served.kfn.test/v1', kind: 'Box', namespace: 'demo', name: 'a' }, reason: 'updated', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
  const delivered = await new Promise<{ status: number; type: string | undefined; text: string }>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent: false, headers: message.headers }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], text }));
    });
    req.on('error', reject);
    req.end(message.body);
  });
  assert.equal(delivered.status, 200, delivered.text);
  assert.equal(delivered.type, 'application/json');
  assert.equal((JSON.parse(delivered.text) as { result: string }).result, 'done');
  const refused = await send('POST', '/?from=test', '{"not":"an event"}');
  assert.equal(refused.status, 400, 'a malformed event: the contract\'s 400, with a query string too');
  assert.match((JSON.parse(refused.text) as { error: string }).error, /not a valid CloudEvent/);
  assert.deepEqual(await send('GET', '/healthz'), { status: 200, type: 'text/plain; charset=UTF-8', text: 'ok' });
  assert.deepEqual(await send('HEAD', '/healthz'), { status: 200, type: 'text/plain; charset=UTF-8', text: '' }, 'HEAD as GET, without the body');
  const metrics = await send('GET', '/metrics');
  assert.match(metrics.text, /kfn_function_reconcile_total\{function="served",kind="Box",result="success"\} 1/);
  assert.equal(metrics.type?.startsWith('text/plain'), true, metrics.type);
  assert.equal(await fetchLoaded(), 'false', 'neither Hono\'s Node adapter nor Node\'s fetch was loaded');

  // Any other path goes through the Hono app (here its 404), loading the adapter on the way.
  assert.equal((await send('POST', '/admission/nothing-here', '{}')).status, 404);
  assert.equal(await fetchLoaded(), 'true');
});

test('through the Node server, an event over the size limit is refused with 413 (and its connection closed), with or without a declared length', async (t) => {
  const Box = defineKind({ group: 'limit.kfn.test', version: 'v1', kind: 'Box', spec: t2.Object({}), status: t2.Object({}) });
  const reconciler = defineReconciler({ for: Box, reconcile: () => ({}) });
  const port = await freePort();
  const server = await serve(reconciler, { port, hostname: '127.0.0.1', maxBodyBytes: { event: 1024 }, api: memoryApi(reconciler, { object: { metadata: { name: 'b', namespace: 'ns' }, spec: {} } }), credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
  t.after(() => void server.close());
  const post = (chunks: string[], headers: Record<string, string | number>) =>
    new Promise<{ status: number; connection: string | undefined; text: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent: false, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, text }));
      });
      req.on('error', reject);
      for (const c of chunks) req.write(c);
      req.end();
    });
  const big = 'x'.repeat(600);
  const declared = await post([big, big], { 'content-length': 1200 });
  assert.deepEqual([declared.status, declared.connection], [413, 'close']);
  assert.match(declared.text, /larger than 1024 bytes, the limit for a reconcile event/);
  const chunked = await post([big, big, big], { 'transfer-encoding': 'chunked' });
  assert.deepEqual([chunked.status, chunked.connection], [413, 'close'], 'counted as it is read');
  const small = await post(['{}'], { 'content-length': 2 });
  assert.equal(small.status, 400, 'under the limit: read, and refused as no event');
});
