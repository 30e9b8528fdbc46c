// The function's HTTP surface without a cluster: what it refuses, and both adapters with real
// request shapes. (Reconciling against the apiserver is covered end to end in test/e2e.)
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { authenticate } from '../../core/authentication.ts';
import { encodeReconcileEvent, type Observation } from '../../core/event.ts';
import { classifyResponse, functionTimeHeader } from '../../core/response.ts';
import MyWebFunction from '../myweb/index.ts';
import { contains } from './fields.ts';
import { createApp, credentialsFromEnv } from './app.ts';
import { lambdaHandler } from './lambda/index.ts';
import { FakeClock } from '../../core/clock.ts';
import { defineReconciler } from './reconciler.ts';
import { memoryApi } from './testing.ts';
import { FunctionMetrics } from './metrics.ts';
import { traceInMemory } from '../../test/support/tracing.ts';

const silent = pino({ level: 'silent' });
const credentials = { kind: 'hmac', secret: 'k' } as const;
const observation: Observation = {
  reconciler: 'myweb',
  primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: 'demo', name: 'site', uid: 'u', resourceVersion: '1', generation: 1 },
  reason: 'created',
  observedAt: Date.parse('2026-01-01T00:00:00Z'),
};
const signed = () => authenticate(encodeReconcileEvent(observation, 1, 'kfn://test').message, credentials);

describe('function HTTP surface', () => {
  const app = createApp(MyWebFunction, { credentials, log: silent });

  test('a body over the limit is refused with 413 before it is read whole, with or without a length', async () => {
    const small = createApp(MyWebFunction, { credentials, log: silent, maxBodyBytes: { event: 1024, review: 4096 } });
    let sent = 0;
    const endless = () =>
      new ReadableStream<Uint8Array>({
        pull(controller) {
          sent += 65_536;
          if (sent > 64 << 20) return controller.close();
          controller.enqueue(new Uint8Array(65_536));
        },
      });
    for (const path of ['/', '/admission/validate', '/convert']) {
      sent = 0;
      const chunked = await small.request(path, { method: 'POST', body: endless(), duplex: 'half' } as RequestInit);
      assert.equal(chunked.status, 413, `${path}: a chunked body`);
      assert.match(((await chunked.json()) as { error: string }).error, /larger than \d+ bytes, the limit for a (reconcile event|admission review|conversion review)/);
      assert.ok(sent < 1 << 20, `${path}: stopped reading after ${sent} bytes, not 64 MiB`);
      const declared = await small.request(path, { method: 'POST', headers: { 'content-length': String(10 << 20) }, body: 'x'.repeat(5000) });
      assert.equal(declared.status, 413, `${path}: a declared length over the limit`);
    }
    const { headers, body } = signed();
    assert.notEqual((await small.request('/', { method: 'POST', headers, body })).status, 413, 'an event is far under the limit');
  });

  test('refuses unsigned, badly signed and malformed requests with a clear 4xx', async () => {
    const { headers, body } = signed();
    const { 'kfn-signature': _, ...unsigned } = headers;
    const cases: [Record<string, string>, string, number, RegExp][] = [
      [unsigned, body, 401, /unsigned request/],
      [{ ...headers, 'kfn-signature': 'v3=00' }, body, 401, /bad signature/],
      [headers, body.replace('site', 'other'), 401, /bad signature/],
      [{ 'content-type': 'application/json' }, 'not json at all', 401, /unsigned/],
    ];
    for (const [h, b, status, pattern] of cases) {
      const res = await app.request('/', { method: 'POST', headers: h, body: b });
      assert.equal(res.status, status);
      assert.match(((await res.json()) as { error: string }).error, pattern);
    }
    const insecure = createApp(MyWebFunction, { credentials: { kind: 'none' }, log: silent });
    const garbage = await insecure.request('/', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '\u0000garbage' });
    assert.equal(garbage.status, 400);
  });

  test('refuses events for another kind', async () => {
    const other = authenticate(encodeReconcileEvent({ ...observation, primary: { ...observation.primary, kind: 'Other' } }, 1, 'kfn://test').message, credentials);
    const res = await app.request('/', { method: 'POST', headers: other.headers, body: other.body });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { error: string }).error, /reconciles operator\.k8s-summit\.org\/v1 MyWeb, not/);
  });

  test('the Lambda adapter takes API Gateway v2 and v1 events (and refuses them unsigned)', async () => {
    const handler = lambdaHandler(MyWebFunction, { credentials, log: silent });
    const { headers, body } = signed();
    const v2 = {
      version: '2.0',
      routeKey: '$default',
      rawPath: '/',
      rawQueryString: '',
      headers: { ...headers, 'kfn-signature': 'v3=bad' },
      requestContext: { http: { method: 'POST', path: '/', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' }, requestId: 'r', routeKey: '$default', stage: '$default', timeEpoch: 0 },
      body,
      isBase64Encoded: false,
    };
    const res2 = (await handler(v2 as never, {} as never)) as { statusCode: number; body: string };
    assert.equal(res2.statusCode, 401);
    assert.match(res2.body, /bad signature/);
    const v1 = {
      httpMethod: 'POST',
      path: '/',
      headers: { ...headers, 'kfn-signature': 'v3=bad' },
      multiValueHeaders: {},
      requestContext: { httpMethod: 'POST', path: '/', requestId: 'r', stage: 'prod' },
      body: Buffer.from(body).toString('base64'),
      isBase64Encoded: true,
    };
    const res1 = (await handler(v1 as never, {} as never)) as { statusCode: number; body: string };
    assert.equal(res1.statusCode, 401);
  });

  test('GET /healthz answers', async () => {
    assert.equal((await app.request('/healthz')).status, 200);
  });
});

describe('SDK pieces', () => {
  test('credentials come from the environment; none configured is a startup error', () => {
    assert.deepEqual(credentialsFromEnv({ KFN_AUTH_SECRET: 's' }), { kind: 'hmac', secret: 's' });
    assert.deepEqual(credentialsFromEnv({ KFN_AUTH_TOKEN: 't' }), { kind: 'bearer', token: 't' });
    assert.deepEqual(credentialsFromEnv({ KFN_INSECURE: '1' }), { kind: 'none' });
    assert.throws(() => credentialsFromEnv({}), /no authentication configured: set KFN_AUTH_SECRET/);
  });

  test('contains: live holds every desired field (defaults added by the apiserver are fine)', () => {
    const desired = { spec: { replicas: 1, ports: [{ port: 80 }], template: { metadata: { labels: { a: 'b' } } } } };
    assert.equal(contains({ spec: { replicas: 1, strategy: {}, ports: [{ port: 80, protocol: 'TCP' }], template: { metadata: { labels: { a: 'b' } } } } }, desired), true);
    assert.equal(contains({ spec: { replicas: 3, ports: [{ port: 80 }], template: { metadata: { labels: { a: 'b' } } } } }, desired), false);
    assert.equal(contains({ spec: { replicas: 1, ports: [], template: { metadata: { labels: { a: 'b' } } } } }, desired), false);
    assert.equal(contains({ spec: { replicas: 1, ports: [{ port: 80 }, { port: 81 }], template: { metadata: { labels: { a: 'b' } } } } }, desired), false, 'an extra list item is a difference');
    assert.equal(contains(undefined, desired), false);
    assert.equal(contains({ limits: { memory: '1Gi', cpu: '500m' } }, { limits: { memory: '1024Mi', cpu: '0.5' } }), true, 'quantities compare by value');
    assert.equal(contains({ limits: { memory: '1Gi' } }, { limits: { memory: '1G' } }), false);
    assert.equal(contains({ image: 'nginx:1.20' }, { image: 'nginx:1.25' }), false);
  });
});

describe("a delivery's time, counted on the function's own clock", () => {
  const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
  /** A signed event sent now (bridge time), with `timeoutMs` for the function to work in. */
  const sent = (timeoutMs: number) => authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + timeoutMs, undefined, timeoutMs).message, credentials);

  for (const skew of [50_000, -50_000]) {
    test(`a function whose clock is ${Math.abs(skew / 1000)} s ${skew > 0 ? 'ahead' : 'behind'} reconciles and writes`, async () => {
      // A reconcile that takes a turn of the event loop, as any that awaits I/O does.
      const takesATurn = defineReconciler({ ...MyWebFunction, reconcile: async (w, ctx) => (await new Promise((r) => setTimeout(r, 5)), MyWebFunction.reconcile(w as never, ctx as never)) });
      const app = createApp(takesATurn, { credentials, log: silent, record: false, now: () => new Date(Date.now() + skew), api: memoryApi(takesATurn, { object: web }) });
      const { headers, body } = sent(30_000);
      const res = await app.request('/', { method: 'POST', headers, body });
      const answer = (await res.json()) as { changes?: { action: string }[]; error?: string };
      assert.equal(res.status, 200, answer.error);
      assert.ok(answer.changes!.some((c) => c.action === 'applied'), 'it wrote its children');
    });
  }

  test('a function whose clock is 50 s behind stops when the time it was given has run out, counted from receipt, not at the wall-clock deadline', async () => {
    const clock = new FakeClock();
    let started!: () => void;
    const began = new Promise<void>((resolve) => (started = resolve));
    const slow = defineReconciler({
      ...MyWebFunction,
      async reconcile(_web, ctx) {
        started();
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
        return {};
      },
    });
    const app = createApp(slow, { credentials, log: silent, record: false, clock, now: () => new Date(Date.now() - 50_000), api: memoryApi(slow, { object: web }) });
    const { headers, body } = sent(1_000);
    const answer = Promise.resolve(app.request('/', { method: 'POST', headers, body }));
    await began;
    clock.advance(999);
    let done = false;
    void answer.then(() => (done = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(done, false, 'still at work within its time');
    clock.advance(1);
    const res = await Promise.race([answer, new Promise<undefined>((r) => setTimeout(r, 2000, undefined))]);
    assert.ok(res, 'the reconcile stopped when its time ran out on the function\'s clock');
    assert.equal(res.status, 500);
    assert.match(((await res.json()) as { error: string }).error, /time .* ran out/);
  });
});

describe('a captured event cannot be replayed', () => {
  test('the same signed request twice: the second is refused (409), naming the event; a retry (the next attempt) is taken', async () => {
    const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, api: memoryApi(MyWebFunction, { object: web }) });
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000).message, credentials);
    assert.equal((await app.request('/', { method: 'POST', headers, body })).status, 200);
    const again = await app.request('/', { method: 'POST', headers, body });
    assert.equal(again.status, 409);
    assert.match(((await again.json()) as { error: string }).error, /already received.*replayed/);
    const retry = authenticate(encodeReconcileEvent(observation, 2, 'kfn://test', Date.now() + 30_000).message, credentials);
    assert.equal((await app.request('/', { method: 'POST', headers: retry.headers, body: retry.body })).status, 200);
  });
});

describe("a function whose clock is wrong says so, and is not taken for one refusing the event", () => {
  const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
  const sent = () => authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000, undefined, 30_000).message, credentials);

  for (const skew of [120_000, -120_000]) {
    test(`${Math.abs(skew / 1000)} s ${skew > 0 ? 'ahead' : 'behind'}: 400 with its clock in kfn-time and the reason ClockSkew, which the bridge retries with the skew`, async () => {
      const app = createApp(MyWebFunction, { credentials, log: silent, record: false, now: () => new Date(Date.now() + skew), api: memoryApi(MyWebFunction, { object: web }) });
      const { headers, body } = sent();
      const res = await app.request('/', { method: 'POST', headers, body });
      const text = await res.text();
      assert.equal(res.status, 400, text);
      const answer = JSON.parse(text) as { error: string; reason?: string; skewMs?: number };
      assert.equal(answer.reason, 'ClockSkew', text);
      assert.ok(Math.abs(answer.skewMs! - skew) < 2000, `the skew it measured: ${answer.skewMs}`);
      assert.ok(Math.abs(Date.parse(res.headers.get(functionTimeHeader) ?? '') - (Date.now() + skew)) < 2000, `its clock: ${res.headers.get(functionTimeHeader)}`);
      const outcome = classifyResponse(res.status, res.headers, text);
      const measured = outcome.kind === 'retry' ? outcome.clockSkewMs : undefined;
      assert.ok(measured !== undefined && Math.abs(measured - skew) < 2000, `the bridge retries, measuring ${measured} (${outcome.kind})`);
    });
  }

  test('10 minutes behind: a request is not taken, nor a copy of it sent once the memory of deliveries has let it go', async () => {
    const clock = new FakeClock();
    const behind = -600_000;
    const wall = Date.now() - clock.now();
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, clock, now: () => new Date(wall + behind + clock.now()), api: memoryApi(MyWebFunction, { object: web }) });
    const { headers, body } = sent();
    const first = await app.request('/', { method: 'POST', headers, body });
    clock.advance(200_000);
    const copy = await app.request('/', { method: 'POST', headers, body });
    assert.deepEqual([first.status, copy.status], [400, 400]);
  });
});

describe('an event older than one the function has taken for the object is refused (contract 2: it carries the object)', () => {
  const web = (resourceVersion: string, image: string) => ({ apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u', resourceVersion }, spec: { image, nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } });
  const event = (resourceVersion: string, observedAt: number, carried = true) =>
    authenticate(
      encodeReconcileEvent({ ...observation, primary: { ...observation.primary, resourceVersion }, reason: carried ? 'updated' : 'replay', observedAt }, 1, 'kfn://test', Date.now() + 30_000, carried ? { primary: web(resourceVersion, `nginx:${resourceVersion}`), kinds: [], children: [] } : undefined, 30_000).message,
      credentials,
    );

  test('version 10 after version 11 (a captured request sent again): 409, naming both; the same version again and another object are taken', async () => {
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, api: memoryApi(MyWebFunction, { object: web('11', 'nginx:11') }) });
    const send = (m: { headers: Record<string, string>; body: string }) => app.request('/', { method: 'POST', headers: m.headers, body: m.body });
    const t = Date.parse('2026-01-01T00:00:00Z');
    assert.equal((await send(event('11', t + 2))).status, 200);
    const old = await send(event('10', t + 1));
    assert.equal(old.status, 409);
    assert.match(((await old.json()) as { error: string }).error, /at resourceVersion 10, older than 11, which this function has already taken/);
    assert.equal((await send(event('11', t + 3))).status, 200, 'a resync of the same version');
    assert.equal((await send(event('9', t + 4, false))).status, 200, 'an event without the object (kfn replay, contract 1): the function reads it as it is now');
    assert.equal((await send(event('12', t + 5))).status, 200, 'a newer version');
  });
});

describe('GET /metrics', () => {
  test("counts the function's reconciles by kind and result, their writes and time, and the requests it refused, in Prometheus' text format", async () => {
    const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
    const clock = new FakeClock();
    const metrics = new FunctionMetrics();
    const api = memoryApi(MyWebFunction, { object: web });
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, clock, metrics, api });
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000).message, credentials);
    assert.equal((await app.request('/', { method: 'POST', headers, body })).status, 200);
    assert.equal((await app.request('/', { method: 'POST', headers, body })).status, 409, 'a replay, refused');
    const res = await app.request('/metrics');
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    const series = (name: string) => text.split('\n').filter((l) => l.startsWith(name));
    assert.deepEqual(series('kfn_function_reconcile_total'), ['success 1', 'requeue 0', 'requeue_after 0', 'error 0'].map((r) => `kfn_function_reconcile_total{function="myweb",kind="MyWeb",result="${r.split(' ')[0]}"} ${r.split(' ')[1]}`));
    assert.deepEqual(series('kfn_function_info'), ['kfn_function_info{function="myweb",kind="MyWeb"} 1']);
    const writes = series('kfn_function_writes_total');
    assert.equal(writes.length, 1);
    assert.match(writes[0]!, /^kfn_function_writes_total\{function="myweb",kind="MyWeb"\} [1-9]\d*$/, 'its Deployment, Service, ConfigMap and status');
    assert.deepEqual(series('kfn_function_refused_requests_total'), ['kfn_function_refused_requests_total{function="myweb",status="409"} 1']);
    // On the fake clock no time passed: the reconcile is in the first bucket and every one after.
    assert.ok(series('kfn_function_reconcile_time_seconds_bucket').every((l) => l.endsWith(' 1')), text);
    assert.deepEqual(series('kfn_function_reconcile_time_seconds_count'), ['kfn_function_reconcile_time_seconds_count{function="myweb",kind="MyWeb"} 1']);
    assert.match(text, /^process_resident_memory_bytes \d+$/m);
    assert.match(text, /^process_cpu_seconds_total [\d.]+$/m);
  });
});

describe('tracing', () => {
  test("a reconcile continues the bridge's trace (its traceparent header): a span per step under the reconcile span, and each write named by its span in the answer", async (t) => {
    const exported = traceInMemory(t);
    const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, metrics: new FunctionMetrics(), api: memoryApi(MyWebFunction, { object: web }) });
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000).message, credentials);
    const bridgeSpan = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7' };
    const res = await app.request('/', { method: 'POST', headers: { ...headers, traceparent: `00-${bridgeSpan.traceId}-${bridgeSpan.spanId}-01` }, body });
    assert.equal(res.status, 200);
    const answer = (await res.json()) as { changes: { action: string; ref: { kind: string }; traceparent?: string }[] };
    const spans = exported.getFinishedSpans();
    const reconcile = spans.find((s) => s.name === 'reconcile MyWeb')!;
    assert.ok(reconcile, spans.map((s) => s.name).join(', '));
    assert.equal(reconcile.spanContext().traceId, bridgeSpan.traceId, "the bridge's trace");
    assert.equal(reconcile.parentSpanContext?.spanId, bridgeSpan.spanId, "under the bridge's delivery span");
    assert.deepEqual([reconcile.attributes['cloudevents.event_type'], reconcile.attributes['kfn.reason'], reconcile.attributes['kfn.object.name'], reconcile.attributes['kfn.result']], ['dev.kfn.reconcile.v1', 'created', 'site', 'success']);
    const steps = spans.filter((s) => s.parentSpanContext?.spanId === reconcile.spanContext().spanId).map((s) => s.name);
    for (const step of ['reconcile', 'applying Deployment demo/site', 'applying Service demo/site', 'writing the status']) assert.ok(steps.includes(step), `a span for ${step} (${steps.join(', ')})`);
    // Each write in the answer names the span that made it.
    for (const change of answer.changes.filter((c) => c.action === 'applied' || c.action === 'status')) {
      const span = spans.find((s) => change.traceparent === `00-${s.spanContext().traceId}-${s.spanContext().spanId}-01`);
      assert.ok(span, `${change.action} ${change.ref.kind}: ${change.traceparent}`);
      assert.match(span.name, change.action === 'status' ? /^writing the status$/ : new RegExp(`^applying ${change.ref.kind} `));
    }
  });

  test('with tracing off the answer carries no traceparent and nothing is recorded', async () => {
    const web = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u' }, spec: { image: 'nginx', nodePortNumber: 30080, pageContentHtml: '<p>hi</p>' } };
    const app = createApp(MyWebFunction, { credentials, log: silent, record: false, metrics: new FunctionMetrics(), api: memoryApi(MyWebFunction, { object: web }) });
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000).message, credentials);
    const res = await app.request('/', { method: 'POST', headers: { ...headers, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }, body });
    const answer = (await res.json()) as { changes: { traceparent?: string }[] };
    assert.ok(answer.changes.length > 0);
    assert.ok(answer.changes.every((c) => c.traceparent === undefined));
  });
});
