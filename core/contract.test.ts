import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CloudEvent, HTTP } from 'cloudevents';
import { authenticate, sign, signatureHeader, type Credentials } from './authentication.ts';
import { ClockSkewError, ContractError, encodeReconcileEvent, eventBudgetBytes, eventId, fitObserved, parseReconcileRequest, reconcileEventType, type Observation, type ObservedState } from './event.ts';
import { classifyResponse, retryAfterMs } from './response.ts';

const observation: Observation = {
  reconciler: 'myweb',
  primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: 'demo', name: 'site', uid: 'u-1', resourceVersion: '42', generation: 3 },
  reason: 'updated',
  observedAt: Date.parse('2026-01-02T03:04:05.000Z'),
};
const hmac: Credentials = { kind: 'hmac', secret: 's3cret' };

function headersOf(entries: Record<string, string>) {
  return { get: (name: string) => entries[name.toLowerCase()] ?? null };
}

function expectContractError(fn: () => unknown, status: number, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ContractError, `expected a ContractError, got ${String(err)}`);
    assert.equal(err.status, status);
    assert.match(err.message, pattern);
    return true;
  });
}

describe('reconcile events', () => {
  test('are binary-mode CloudEvents with the kfn extensions, valid for the CloudEvents SDK', () => {
    const { message } = encodeReconcileEvent(observation, 1, 'kfn://local/bridge');
    assert.equal(message.headers['ce-specversion'], '1.0');
    assert.equal(message.headers['ce-type'], reconcileEventType);
    assert.equal(message.headers['ce-subject'], 'demo/site');
    assert.equal(message.headers['ce-time'], '2026-01-02T03:04:05.000Z');
    assert.equal(message.headers['ce-kfnreason'], 'updated');
    assert.equal(message.headers['ce-kfnkind'], 'MyWeb');
    assert.equal(message.headers['ce-kfnnamespace'], 'demo');
    assert.equal(message.headers['ce-kfngeneration'], '3');
    assert.equal(message.headers['ce-kfnattempt'], '1');
    assert.equal(message.headers['content-type'], 'application/json');
    const received = HTTP.toEvent({ headers: message.headers, body: message.body }) as CloudEvent;
    assert.equal(received.validate(), true);
    assert.deepEqual(received.data, { contract: 1, reconciler: 'myweb', primary: observation.primary });
  });

  test('ids: a retry keeps its id; every new observation, a resync or requeue of an unchanged object too, gets a new one', () => {
    const first = encodeReconcileEvent(observation, 1, 'kfn://a').message.headers['ce-id'];
    const retry = encodeReconcileEvent(observation, 2, 'kfn://a').message.headers['ce-id'];
    assert.equal(first, retry);
    assert.equal(first, eventId(observation));
    const changed = eventId({ ...observation, primary: { ...observation.primary, resourceVersion: '43' } });
    const resync = eventId({ ...observation, reason: 'resync' });
    const child = eventId({ ...observation, reason: 'child', trigger: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'demo', name: 'page', uid: 'c1', resourceVersion: '9' } });
    const laterResync = eventId({ ...observation, reason: 'resync', observedAt: observation.observedAt + 300_000 });
    const requeue = eventId({ ...observation, reason: 'requeue' });
    const laterRequeue = eventId({ ...observation, reason: 'requeue', observedAt: observation.observedAt + 1 });
    assert.equal(new Set([first, changed, resync, child, laterResync, requeue, laterRequeue]).size, 7);
  });

  test('a cluster-scoped primary has a bare-name subject and no namespace attribute', () => {
    const { message } = encodeReconcileEvent({ ...observation, primary: { apiVersion: 'v1', kind: 'Node', name: 'n1' } }, 1, 'kfn://a');
    assert.equal(message.headers['ce-subject'], 'n1');
    assert.equal(message.headers['ce-kfnnamespace'], undefined);
  });
});

describe('parseReconcileRequest', () => {
  const signed = () => authenticate(encodeReconcileEvent(observation, 2, 'kfn://local/bridge').message, hmac);

  test('accepts a signed binary-mode event and returns its data, reason and attempt', () => {
    const { headers, body } = signed();
    const got = parseReconcileRequest(headers, body, hmac);
    assert.equal(got.reason, 'updated');
    assert.equal(got.attempt, 2);
    assert.deepEqual(got.data.primary, observation.primary);
  });

  test('accepts the same event in structured mode', () => {
    const { event } = encodeReconcileEvent(observation, 1, 'kfn://local/bridge');
    const structured = HTTP.structured(new CloudEvent(event));
    const body = String(structured.body);
    const headers: Record<string, string> = { ...(structured.headers as Record<string, string>) };
    const parsed = JSON.parse(body) as { id: string; time: string; kfnreason: string; kfnattempt: string };
    headers[signatureHeader] = sign('s3cret', parsed, body);
    assert.equal(parseReconcileRequest(headers, body, hmac).data.reconciler, 'myweb');
  });

  test('refuses unsigned, wrongly signed and altered requests with 401', () => {
    const { headers, body } = signed();
    const { [signatureHeader]: _, ...unsigned } = headers;
    expectContractError(() => parseReconcileRequest(unsigned, body, hmac), 401, /unsigned request/);
    expectContractError(() => parseReconcileRequest(headers, body, { kind: 'hmac', secret: 'other' }), 401, /bad signature/);
    expectContractError(() => parseReconcileRequest(headers, body.replace('site', 'evil'), hmac), 401, /bad signature/);
    expectContractError(() => parseReconcileRequest({ ...headers, 'ce-id': 'forged' }, body, hmac), 401, /bad signature/);
  });

  test('every attribute the function acts on is signed: a captured request with another reason, attempt, deadline or time left is refused', () => {
    const deadline = Date.now() + 30_000;
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 2, 'kfn://local/bridge', deadline).message, hmac);
    assert.equal(parseReconcileRequest(headers, body, hmac).attempt, 2);
    for (const [header, value] of [['ce-kfnreason', 'deleted'], ['ce-kfnattempt', '1'], ['ce-kfndeadline', new Date(deadline + 600_000).toISOString()], ['ce-kfntimeleft', '600000'], ['ce-time', new Date().toISOString()]]) {
      expectContractError(() => parseReconcileRequest({ ...headers, [header!]: value! }, body, hmac), 401, /bad signature/);
    }
    const { 'ce-kfndeadline': _, ...withoutDeadline } = headers;
    expectContractError(() => parseReconcileRequest(withoutDeadline, body, hmac), 401, /bad signature/);
    expectContractError(() => parseReconcileRequest({ ...headers, [signatureHeader]: `v1=${'0'.repeat(64)}` }, body, hmac), 401, /a v1 signature/);
    expectContractError(() => parseReconcileRequest({ ...headers, [signatureHeader]: `v2=${'0'.repeat(64)}` }, body, hmac), 401, /a v2 signature, which leaves the time the function has/);
    const timed = authenticate(encodeReconcileEvent(observation, 2, 'kfn://local/bridge', deadline, undefined, 25_000).message, hmac);
    assert.equal(parseReconcileRequest(timed.headers, timed.body, hmac).timeLeftMs, 25_000, 'the time left travels, in milliseconds');
    expectContractError(() => parseReconcileRequest({ ...timed.headers, 'ce-kfntimeleft': 'soon' }, timed.body, { kind: 'none' }), 400, /kfntimeleft must be a whole number of milliseconds/);
  });

  test('the signed deadline and time left are the time window: a request sent again after it, or before it opened, is refused', () => {
    const deadline = Date.parse('2026-06-01T12:00:00Z');
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://local/bridge', deadline, undefined, 30_000).message, hmac);
    assert.equal(parseReconcileRequest(headers, body, hmac, deadline - 1000).reason, 'updated', 'within the deadline');
    assert.equal(parseReconcileRequest(headers, body, hmac, deadline + 30_000).reason, 'updated', 'a clock a little ahead');
    assert.equal(parseReconcileRequest(headers, body, hmac, deadline - 30_000 - 59_000).reason, 'updated', 'a clock a little behind');
    expectContractError(() => parseReconcileRequest(headers, body, hmac, deadline + 120_000), 400, /deadline .* passed .* ago by this function's clock/);
    expectContractError(() => parseReconcileRequest(headers, body, hmac, deadline - 3_600_000), 400, /sent .* ahead of this function's clock/);
  });

  test("a refusal for the event's time alone is a ClockSkewError with the function's clock and the skew, whichever way the clock is wrong", () => {
    const deadline = Date.parse('2026-06-01T12:00:00Z');
    const sentAt = deadline - 30_000;
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://local/bridge', deadline, undefined, 30_000).message, hmac);
    for (const skew of [-61_000, -600_000, 91_000, 3_600_000]) {
      assert.throws(() => parseReconcileRequest(headers, body, hmac, sentAt + skew), (err: unknown) => {
        assert.ok(err instanceof ClockSkewError, `${skew}: expected a ClockSkewError, got ${String(err)}`);
        assert.deepEqual([err.status, err.skewMs, err.at], [400, skew, sentAt + skew]);
        return true;
      });
    }
    // A clock more than 60 s behind is refused whatever the Reconciler's timeout: the window is
    // the time the event was given, so the SDK's memory of the deliveries it took covers it all.
    const long = authenticate(encodeReconcileEvent(observation, 1, 'kfn://local/bridge', deadline, undefined, 900_000).message, hmac);
    assert.throws(() => parseReconcileRequest(long.headers, long.body, hmac, deadline - 900_000 - 61_000), ClockSkewError);
    assert.equal(parseReconcileRequest(long.headers, long.body, hmac, deadline + 59_000).reason, 'updated', 'a delivery may take all its time to arrive');
    // Malformed or unauthenticated: not a question of clocks.
    assert.throws(() => parseReconcileRequest(headers, body.replace('site', 'evil'), hmac, sentAt + 91_000), (err: unknown) => err instanceof ContractError && !(err instanceof ClockSkewError) && err.status === 401);
  });

  test('checks bearer tokens', () => {
    const bearer: Credentials = { kind: 'bearer', token: 'tok' };
    const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://a').message, bearer);
    assert.equal(parseReconcileRequest(headers, body, bearer).reason, 'updated');
    expectContractError(() => parseReconcileRequest({ ...headers, authorization: 'Bearer nope' }, body, bearer), 401, /bearer token/);
  });

  test('a bearer token does not carry contract 2: it signs neither the body nor the time, and such an event carries whole objects', () => {
    const bearer: Credentials = { kind: 'bearer', token: 'tok' };
    const observed: ObservedState = { primary: { apiVersion: observation.primary.apiVersion, kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', resourceVersion: '42' }, spec: {} }, kinds: [{ apiVersion: 'v1', kind: 'ConfigMap', resourceVersion: '42', plural: 'configmaps', namespaced: true }], children: [] };
    const v2 = authenticate(encodeReconcileEvent(observation, 1, 'kfn://a', Date.now() + 30_000, observed, 30_000).message, bearer);
    expectContractError(() => parseReconcileRequest(v2.headers, v2.body, bearer), 401, /bearer token .* contract 2 .* HMAC/);
    const signed = authenticate(encodeReconcileEvent(observation, 1, 'kfn://a', Date.now() + 30_000, observed, 30_000).message, hmac);
    const parsed = parseReconcileRequest(signed.headers, signed.body, hmac).data;
    assert.equal(parsed.contract, 2);
    assert.deepEqual(parsed.observed?.kinds, observed.kinds, 'a kind with its resource passes the check');
  });

  test('refuses malformed requests with a clear 400 and never anything else', () => {
    const none: Credentials = { kind: 'none' };
    const { headers, body } = encodeReconcileEvent(observation, 1, 'kfn://a').message;
    const cases: [Record<string, string>, string, RegExp][] = [
      [{ 'content-type': 'application/json' }, '{}', /not a valid CloudEvent/],
      [{ 'content-type': 'text/plain' }, 'garbage', /not a valid CloudEvent/],
      [{ ...headers, 'ce-specversion': '0.1' }, body, /not a valid CloudEvent/],
      [{ ...headers, 'ce-type': 'com.example.other' }, body, /unexpected event type/],
      [{ ...headers, 'ce-time': 'yesterday' }, body, /not a valid CloudEvent: time must be an RFC 3339 timestamp/],
      [Object.fromEntries(Object.entries(headers).filter(([k]) => k !== 'ce-source')), body, /not a valid CloudEvent: source is required/],
      [{ ...headers, 'ce-Bad_Name': 'x' }, body, /not a valid CloudEvent: attribute name "bad_name"/],
      [{ 'content-type': 'application/cloudevents+json' }, '{"specversion":"1.0","id":"1","source":"s","type":"dev.kfn.reconcile.v1","data_base64":"e30="}', /data_base64 is not accepted/],
      [headers, '{"contract":1}', /data\.reconciler is missing/],
      [headers, '{"contract":3,"reconciler":"x","primary":{}}', /unsupported contract version 3; this function speaks versions 1 and 2/],
      [headers, '{"contract":1,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod","name":"p"},"observed":{}}', /data\.observed is part of contract 2/],
      [headers, '{"contract":2,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod","name":"p"},"observed":{"kinds":[],"children":[]}}', /data\.observed: primary must be an object/],
      [headers, '{"contract":2,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod","name":"p"},"observed":{"primary":{"metadata":{"name":"p"}},"kinds":[{"kind":"Pod"}],"children":[]}}', /data\.observed: kinds must list/],
      // A kind's plural goes into the paths the function writes to: a resource name, never a path.
      ...['"../secrets"', '"Pods"', '""', '7'].map((plural): [Record<string, string>, string, RegExp] => [headers, `{"contract":2,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod","name":"p"},"observed":{"primary":{"metadata":{"name":"p"}},"kinds":[{"apiVersion":"v1","kind":"ConfigMap","resourceVersion":"1","plural":${plural},"namespaced":true}],"children":[]}}`, /data\.observed: kinds: ConfigMap's resource must be a plural/]),
      [headers, '{"contract":2,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod","name":"p"},"observed":{"primary":{"metadata":{"name":"p"}},"kinds":[{"apiVersion":"v1","kind":"ConfigMap","resourceVersion":"1","plural":"configmaps"}],"children":[]}}', /ConfigMap's resource must be a plural \(a lower-case DNS label\) with namespaced true or false/],
      [headers, '{"contract":1,"reconciler":"x","primary":{"apiVersion":"v1","kind":"Pod"}}', /data\.primary\.name is missing/],
      [{ ...headers, 'ce-kfnreason': 'because' }, body, /kfnreason must be one of/],
      [headers, 'not json', /.+/],
      [{ 'content-type': 'application/cloudevents-batch+json' }, '[]', /batched CloudEvents/],
    ];
    for (const [h, b, pattern] of cases) {
      assert.throws(() => parseReconcileRequest(h, b, none), (err: unknown) => {
        assert.ok(err instanceof ContractError, `${b}: expected ContractError, got ${String(err)}`);
        assert.equal(err.status, 400, `${b}: ${err.message}`);
        assert.match(err.message, pattern);
        return true;
      });
    }
  });
});

describe('classifyResponse', () => {
  const none = headersOf({});
  test('2xx is done; requeueAfterSeconds or result requeue asks for a requeue', () => {
    assert.equal(classifyResponse(200, none, '{"result":"done","changes":[]}').kind, 'done');
    assert.equal(classifyResponse(204, none, '').kind, 'done');
    assert.deepEqual(classifyResponse(200, none, '{"result":"done","requeueAfterSeconds":30,"changes":[]}'), {
      kind: 'requeue',
      afterMs: 30_000,
      response: { result: 'done', requeueAfterSeconds: 30, changes: [] },
    });
    const bare = classifyResponse(200, none, '{"result":"requeue","changes":[]}');
    assert.equal(bare.kind, 'requeue');
    assert.equal(bare.kind === 'requeue' && bare.afterMs, undefined, 'without seconds: backoff');
  });

  test('429 and 503 honour Retry-After; other 5xx retry with backoff; other 4xx are terminal', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    assert.deepEqual(classifyResponse(429, headersOf({ 'retry-after': '7' }), 'slow down'), { kind: 'retry', afterMs: 7000, why: 'HTTP 429: slow down' });
    const dated = classifyResponse(503, headersOf({ 'retry-after': 'Thu, 01 Jan 2026 00:00:12 GMT' }), '', now);
    assert.equal(dated.kind === 'retry' && dated.afterMs, 12_000);
    const plain = classifyResponse(500, none, 'boom');
    assert.equal(plain.kind, 'retry');
    assert.equal(plain.kind === 'retry' && plain.afterMs, undefined);
    assert.equal(classifyResponse(400, none, 'bad').kind, 'terminal');
    assert.equal(classifyResponse(422, none, 'invalid').kind, 'terminal');
  });

  test("400 with the function's clock (kfn-time) is a refusal for the event's time alone: retried with the skew measured, not terminal", () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    const ahead = classifyResponse(400, headersOf({ 'kfn-time': new Date(now + 75_000).toISOString() }), '{"error":"…","reason":"ClockSkew"}', now);
    assert.equal(ahead.kind, 'retry');
    assert.equal(ahead.kind === 'retry' && ahead.clockSkewMs, 75_000);
    assert.match(ahead.kind === 'retry' ? ahead.why : '', /clock is 75\.0 s ahead of the bridge's/);
    const behind = classifyResponse(400, headersOf({ 'kfn-time': new Date(now - 120_500).toISOString() }), '', now);
    assert.equal(behind.kind === 'retry' && behind.clockSkewMs, -120_500);
    assert.match(behind.kind === 'retry' ? behind.why : '', /clock is 120\.5 s behind the bridge's/);
    assert.equal(classifyResponse(400, headersOf({ 'kfn-time': 'yesterday' }), 'bad', now).kind, 'terminal', 'no time to measure: a plain refusal');
    assert.equal(classifyResponse(422, headersOf({ 'kfn-time': new Date(now).toISOString() }), 'invalid', now).kind, 'terminal', 'only 400 is a refusal for time');
  });

  test('a redirect, 404 and 405 are the sink not being ready, not the function\'s verdict: retried, with a problem for the Reconciler', () => {
    for (const status of [301, 307, 404, 405]) {
      const outcome = classifyResponse(status, none, '404 page not found');
      assert.equal(outcome.kind, 'retry', `HTTP ${status} is retried`);
      assert.match(outcome.kind === 'retry' ? (outcome.sinkProblem ?? '') : '', new RegExp(`the sink answers HTTP ${status}.*not the function`));
    }
    const fromFunction = classifyResponse(500, none, 'boom');
    assert.equal(fromFunction.kind === 'retry' && fromFunction.sinkProblem, undefined, "a 5xx is the function's");
  });

  test('Retry-After and requeueAfterSeconds have a ceiling (an hour, a day); no value overflows a date or a timer', () => {
    assert.equal(retryAfterMs('99999999999999'), 3_600_000);
    assert.equal(retryAfterMs('Fri, 01 Jan 2100 00:00:00 GMT', Date.parse('2026-01-01T00:00:00Z')), 3_600_000);
    const far = classifyResponse(200, none, '{"result":"done","requeueAfterSeconds":9e12,"changes":[]}');
    assert.equal(far.kind === 'requeue' && far.afterMs, 86_400_000);
    const infinite = classifyResponse(200, none, '{"result":"done","requeueAfterSeconds":1e400,"changes":[]}');
    assert.equal(infinite.kind === 'requeue' && infinite.afterMs, 86_400_000, 'JSON\'s 1e400 is Infinity: cut to the ceiling');
  });

  test('retryAfterMs ignores nonsense', () => {
    assert.equal(retryAfterMs(undefined), undefined);
    assert.equal(retryAfterMs('soon'), undefined);
    assert.equal(retryAfterMs('0'), 0);
  });
});

describe('contract 2 events stay within what a function takes', () => {
  const big = (n: number) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `c${n}`, namespace: 'demo' }, data: { blob: 'x'.repeat(200_000) } });
  const observed = (children: number, primaryBytes = 10): ObservedState => ({
    primary: { apiVersion: 'v1', kind: 'X', metadata: { name: 'site', namespace: 'demo' }, spec: { pad: 'p'.repeat(primaryBytes) } },
    kinds: [{ apiVersion: 'v1', kind: 'ConfigMap', resourceVersion: '7' }],
    children: Array.from({ length: children }, (_, i) => big(i)),
  });
  const bytes = (o: ObservedState | undefined) => Buffer.byteLength(encodeReconcileEvent(observation, 1, 'kfn://a', undefined, o).message.body);

  test('small enough: carried whole', () => {
    const o = observed(2);
    assert.equal(fitObserved(o, bytes), o);
  });

  test('children too large: the primary alone (the function lists the owned kinds); a primary too large: nothing', () => {
    const fitted = fitObserved(observed(8), bytes)!;
    assert.deepEqual([fitted.kinds, fitted.children], [[], []]);
    assert.ok(bytes(fitted) <= eventBudgetBytes);
    assert.equal(fitObserved(observed(0, 1_100_000), bytes), undefined);
  });
});
