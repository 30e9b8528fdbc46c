import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { parseReconcileRequest, encodeReconcileEvent, type Observation } from '../core/event.ts';
import { type Credentials } from '../core/authentication.ts';
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import { sendReconcileEvent, sinkFailureOf } from './delivery.ts';
import { settle } from './outcome.ts';

const observation: Observation = {
  reconciler: 'r',
  primary: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'ns', name: 'cm', uid: 'u', resourceVersion: '1' },
  reason: 'created',
  observedAt: Date.now(),
};
const credentials: Credentials = { kind: 'hmac', secret: 'k' };

/** A receiver on 127.0.0.1 that checks each request against the contract, then answers via `respond`. */
async function receiver(t: TestContext, respond: (res: ServerResponse, req: IncomingMessage) => void) {
  const received: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      const parsed = parseReconcileRequest(req.headers, body, credentials);
      received.push(parsed.data.primary.name);
      respond(res, req);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, received };
}

const message = encodeReconcileEvent(observation, 1, 'kfn://test').message;

describe('sendReconcileEvent', () => {
  test('200 with the contract JSON is done, and the receiver got a valid signed event', async (t) => {
    const r = await receiver(t, (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.equal(result.status, 200);
    assert.equal(result.outcome.kind, 'done');
    assert.deepEqual(r.received, ['cm']);
    assert.ok(Number.isInteger(result.durationMs), `a whole number of milliseconds for the journal, not ${result.durationMs}`);
  });

  test('429 with Retry-After is retried after that delay', async (t) => {
    const r = await receiver(t, (res) => res.writeHead(429, { 'retry-after': '3' }).end('busy'));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.deepEqual(result.outcome, { kind: 'retry', afterMs: 3000, why: 'HTTP 429: busy' });
  });

  test('500 is retried with backoff; 400 is terminal', async (t) => {
    let status = 500;
    const r = await receiver(t, (res) => res.writeHead(status).end(`status ${status}`));
    assert.equal((await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 })).outcome.kind, 'retry');
    status = 400;
    const terminal = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.deepEqual(terminal.outcome, { kind: 'terminal', why: 'HTTP 400: status 400' });
  });

  test("400 with the function's clock is a refusal for time alone: retried (nothing runs, nothing is held), the skew measured", async (t) => {
    const r = await receiver(t, (res) => res.writeHead(400, { 'kfn-time': new Date(Date.now() - 300_000).toISOString(), 'content-type': 'application/json' }).end('{"error":"sent ahead of this function\'s clock","reason":"ClockSkew","skewMs":-300000}'));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.equal(result.outcome.kind, 'retry');
    const skew = result.outcome.kind === 'retry' ? result.outcome.clockSkewMs! : Number.NaN;
    assert.ok(Math.abs(skew + 300_000) < 2000, `measured ${skew}`);
    assert.equal(result.mayBeRunning, undefined);
    assert.deepEqual(settle(result, 0, 0).queue, { kind: 'backoff', atLeastMs: 0 }, 'the backoff, not terminal');
  });

  test("a redirect is not followed (the event is not sent on to where it points): the sink is not ready, and the delivery is retried", async (t) => {
    const elsewhere = await receiver(t, (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'));
    const r = await receiver(t, (res) => res.writeHead(307, { location: elsewhere.url }).end('moved'));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.equal(result.status, 307);
    assert.equal(result.outcome.kind, 'retry');
    assert.match(result.outcome.kind === 'retry' ? result.outcome.why : '', /the sink answers HTTP 307 \(a redirect/);
    assert.deepEqual(r.received, ['cm']);
    assert.deepEqual(elsewhere.received, []);
  });

  test('a receiver hanging past the timeout is a retry', async (t) => {
    const r = await receiver(t, () => {
      /* never answers */
    });
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 200 });
    assert.deepEqual(result.outcome, { kind: 'retry', why: 'no answer within 200 ms' });
    assert.equal(result.status, undefined);
  });

  test('a refused connection is a retry naming the error', async () => {
    // A port that was just free and is closed again: nothing listens there.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const closed = `http://127.0.0.1:${port}/`;
    const result = await sendReconcileEvent({ url: closed, message, credentials, timeoutMs: 2000 });
    assert.equal(result.outcome.kind, 'retry');
    assert.match(result.outcome.kind === 'retry' ? result.outcome.why : '', /ECONNREFUSED/);
  });
});

test("a delivery's sink failure is named by its reason, and the function's own answers (done, requeue, its refusals and errors) are none", async (t) => {
  const answers: Record<string, (res: ServerResponse) => void> = {
    done: (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'),
    requeue: (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"requeue","changes":[]}'),
    refused: (res) => res.writeHead(422).end('no'),
    error: (res) => res.writeHead(500).end('boom'),
    throttled: (res) => res.writeHead(429).end('busy'),
    unavailable: (res) => res.writeHead(503).end('cold'),
    gateway: (res) => res.writeHead(502).end('bad gateway'),
    duplicate: (res) => res.writeHead(409).end('have it'),
    misrouted: (res) => res.writeHead(404).end('no route'),
    unauthorized: (res) => res.writeHead(401).end('signature'),
    invalid: (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"maybe"}'),
    clockSkew: (res) => res.writeHead(400, { 'kfn-time': new Date(Date.now() + 120_000).toISOString() }).end('{"error":"…","reason":"ClockSkew"}'),
    silent: () => {},
  };
  let answer = 'done';
  const r = await receiver(t, (res) => answers[answer]!(res));
  const signer = async (_url: string, headers: Record<string, string>) => headers;
  const seen: Record<string, string | undefined> = {};
  for (const name of Object.keys(answers)) {
    answer = name;
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: name === 'silent' ? 100 : 2000, ...(name === 'unauthorized' ? { signer } : {}) });
    seen[name] = sinkFailureOf(result);
  }
  const probe = createServer();
  await new Promise<void>((done) => probe.listen(0, '127.0.0.1', done));
  const closed = `http://127.0.0.1:${(probe.address() as AddressInfo).port}/`;
  await new Promise((done) => probe.close(done));
  seen.closed = sinkFailureOf(await sendReconcileEvent({ url: closed, message, credentials, timeoutMs: 2000 }));
  const noCredentials = async () => {
    throw Object.assign(new Error('Could not load credentials from any providers'), { name: 'CredentialsProviderError' });
  };
  answer = 'done';
  seen.credentials = sinkFailureOf(await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000, signer: noCredentials }));
  assert.deepEqual(seen, {
    done: undefined,
    requeue: undefined,
    refused: undefined,
    error: undefined,
    throttled: 'throttled',
    unavailable: 'unavailable',
    gateway: 'gateway',
    duplicate: 'duplicate',
    misrouted: 'misrouted',
    unauthorized: 'unauthorized',
    invalid: 'invalid_answer',
    clockSkew: 'clock_skew',
    silent: 'timeout',
    closed: 'connection',
    credentials: 'credentials',
  });
});

test("a function's answer is read up to 1 MiB: a sink streaming without end costs the bridge no more", async (t) => {
  let written = 0;
  let closed: () => void;
  const gone = new Promise<void>((resolve) => (closed = resolve));
  const r = await receiver(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const more = () => {
      while (written < 256 << 20) {
        written += 65_536;
        if (!res.write(Buffer.alloc(65_536, 32))) return void res.once('drain', more);
      }
      res.end();
    };
    res.on('close', () => closed());
    more();
  });
  const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 5000 });
  assert.equal(result.outcome.kind, 'retry', 'an answer cut at 1 MiB is no answer: the delivery failed');
  assert.match(result.outcome.kind === 'retry' ? (result.outcome.invalidAnswer ?? '') : '', /larger than the 1 MiB/);
  assert.equal(result.mayBeRunning, undefined, 'the function answered: it is not still at work');
  await gone;
  assert.ok(written < 64 << 20, `the bridge closed the connection after ${written >> 20} MiB rather than read 256 MiB`);
});

describe('a delivery that may still be running holds its key (never two reconciles of one object at once)', () => {
  const held = (result: Awaited<ReturnType<typeof sendReconcileEvent>>) => settle(result, Date.now(), Date.now() + 2000).holdUntil !== undefined;

  test('a connection broken after the request was sent: the function may have it', async (t) => {
    const r = await receiver(t, (res) => res.socket?.destroy());
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.equal(result.outcome.kind, 'retry');
    assert.deepEqual(r.received, ['cm'], 'the function got the event');
    assert.ok(held(result), `held after "${result.outcome.kind === 'retry' && result.outcome.why}"`);
  });

  test("a proxy's 502 or 504: the function behind it may have it", async (t) => {
    for (const status of [502, 504]) {
      const r = await receiver(t, (res) => res.writeHead(status).end('upstream'));
      assert.ok(held(await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 })), `held after ${status}`);
    }
  });

  test('409 from the function (it has this delivery already: a duplicate the network made): retried, and held, since the first copy may still run', async (t) => {
    const r = await receiver(t, (res) => res.writeHead(409, { 'content-type': 'application/json' }).end('{"error":"event x (attempt 1) was already received"}'));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 });
    assert.equal(result.outcome.kind, 'retry', 'not terminal: nothing was refused');
    assert.ok(held(result));
  });

  test('a refused connection or an answer of the function: nothing runs, nothing is held', async (t) => {
    const r = await receiver(t, (res) => res.writeHead(500).end('boom'));
    assert.equal(held(await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 2000 })), false, 'a 500 is the function\'s answer');
    const refused = await sendReconcileEvent({ url: 'http://127.0.0.1:1/', message, credentials, timeoutMs: 2000 });
    assert.match(refused.outcome.kind === 'retry' ? refused.outcome.why : '', /ECONNREFUSED/, 'nothing listens on port 1');
    assert.equal(held(refused), false);
  });

  test("the transport's own timeouts never end a delivery before the bridge's deadline", async (t) => {
    // A client whose header timeout (100 ms; undici checks it about once a second) is shorter
    // than the delivery's (4 s), as undici's 300 s default is shorter than a Reconciler's
    // timeoutSeconds of up to 900.
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(new Agent({ headersTimeout: 100, bodyTimeout: 100 }));
    t.after(() => setGlobalDispatcher(previous));
    const r = await receiver(t, (res) => setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}'), 2000));
    const result = await sendReconcileEvent({ url: r.url, message, credentials, timeoutMs: 4000 });
    assert.equal(result.outcome.kind, 'done', `the answer after 2 s arrives (${result.outcome.kind === 'retry' ? result.outcome.why : ''})`);
  });
});
