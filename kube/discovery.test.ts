// Discovery's refresh on a miss, against a fake apiserver on a fake clock: a kind that appears
// after its group-version was fetched is found, and a kind that never does costs one request
// per refresh interval, however often it is asked for.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import type { Connection } from './connection.ts';
import { ApiError, Discovery, KubeApi, servedResource } from './api.ts';

/** An apiserver that answers discovery only: `served` by group-version, each request counted. */
function fakeApiserver() {
  const served = new Map<string, string[]>();
  const requests: string[] = [];
  let failNext: string | undefined;
  const answer = (statusCode: number, body: unknown) => ({ statusCode, body: Readable.from([Buffer.from(JSON.stringify(body))]) });
  const connection: Connection = {
    server: 'https://apiserver.invalid',
    source: 'a fake apiserver',
    reset() {},
    headers: () => ({}),
    async send(request) {
      requests.push(request.url.pathname);
      if (failNext) {
        const message = failNext;
        failNext = undefined;
        throw new Error(message);
      }
      const kinds = served.get(request.url.pathname.replace(/^\/apis?\//, ''));
      if (!kinds) return answer(404, { kind: 'Status', message: 'the server could not find the requested resource', reason: 'NotFound' });
      return answer(200, { resources: kinds.map((kind) => ({ name: `${kind.toLowerCase()}s`, kind, namespaced: true, verbs: ['list', 'watch'] })) });
    },
  };
  return { served, requests, connection, fail: (message: string) => void (failNext = message) };
}

/** Lets the fake connection's answers be read (streams take a few turns). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

const notServed = /serves a\.kfn\.test\/v1 but no kind Thing/;

test('a kind missing from a fetched group-version is fetched again on a miss, at most once per refresh interval', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  server.served.set('a.kfn.test/v1', ['Other']);
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock, refreshMs: 1000 }) });

  // A stream of misses — at once and one after another — within one interval: one request.
  await Promise.all(Array.from({ length: 10 }, () => assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), notServed)));
  for (let i = 0; i < 10; i++) await assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), notServed);
  assert.equal(server.requests.length, 1, `one request for 20 misses within the interval, not ${server.requests.length}`);

  // The kind appears (its CRD Established): found at the first miss after the interval, not before.
  server.served.set('a.kfn.test/v1', ['Other', 'Thing']);
  clock.advance(999);
  await assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), notServed);
  assert.equal(server.requests.length, 1);
  clock.advance(1);
  assert.equal((await api.resource('a.kfn.test/v1', 'Thing')).plural, 'things');
  assert.equal(server.requests.length, 2);

  // Found stays found, with no request; another group-version has an interval of its own.
  for (let i = 0; i < 5; i++) await api.resource('a.kfn.test/v1', 'Thing');
  server.served.set('b.kfn.test/v1', ['Thing']);
  await api.resource('b.kfn.test/v1', 'Thing');
  assert.deepEqual(server.requests, ['/apis/a.kfn.test/v1', '/apis/a.kfn.test/v1', '/apis/b.kfn.test/v1']);
});

test('a group-version not served is asked for again at most once per interval, and found once it is served', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock, refreshMs: 1000 }) });
  for (let i = 0; i < 10; i++) {
    await assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), (err) => err instanceof ApiError && err.status === 404 && /does not serve a\.kfn\.test\/v1 \(is its CRD installed\?\)/.test(err.message));
    clock.advance(150);
  }
  assert.equal(server.requests.length, 2, `a request per 1000 ms of misses (1500 ms here), not ${server.requests.length}`);
  server.served.set('a.kfn.test/v1', ['Thing']);
  clock.advance(1000);
  assert.equal((await api.resource('a.kfn.test/v1', 'Thing')).kind, 'Thing');
  assert.equal(server.requests.length, 3);
});

test('a fetch that got no answer is not remembered: the next lookup asks again at once', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  server.served.set('a.kfn.test/v1', ['Thing']);
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock }) });
  server.fail('connection refused');
  await assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), /connection refused/);
  assert.equal((await api.resource('a.kfn.test/v1', 'Thing')).kind, 'Thing');
  assert.equal(server.requests.length, 2);
});

test('clients derived from one (a deadline, a tap) share its discovery and its interval', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  server.served.set('a.kfn.test/v1', ['Other']);
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock }) });
  await assert.rejects(api.resource('a.kfn.test/v1', 'Thing'), notServed);
  await assert.rejects(api.withSignal(new AbortController().signal).resource('a.kfn.test/v1', 'Thing'), notServed);
  await assert.rejects(api.withTap({ request() {} }).resource('a.kfn.test/v1', 'Thing'), notServed);
  assert.equal(server.requests.length, 1);
});

/** Runs `promise` to its end, moving the fake clock `stepMs` at a time; answers its outcome and the time it took. */
async function drive<T>(clock: FakeClock, promise: Promise<T>, stepMs = 50): Promise<{ value?: T; error?: Error; ms: number }> {
  const started = clock.now();
  let outcome: { value?: T; error?: Error } | undefined;
  promise.then((value) => (outcome = { value }), (error: Error) => (outcome = { error }));
  for (let i = 0; i < 10_000 && !outcome; i++) {
    await settle();
    if (!outcome) clock.advance(stepMs);
  }
  assert.ok(outcome, 'the wait ended');
  return { ...outcome, ms: clock.now() - started };
}

test('servedResource waits until discovery lists the kind, asking at most once per interval', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  server.served.set('a.kfn.test/v1', ['Other']);
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock, refreshMs: 1000 }) });
  const appears = clock.setTimer(() => server.served.set('a.kfn.test/v1', ['Other', 'Thing']), 2500);
  const { value, error, ms } = await drive(clock, servedResource(api, 'a.kfn.test/v1', 'Thing', { timeoutMs: 10_000, clock }));
  appears();
  assert.equal(error, undefined);
  assert.equal(value?.plural, 'things');
  assert.ok(ms >= 2500 && ms <= 3500, `found within an interval of its appearing (${ms} ms)`);
  assert.ok(server.requests.length <= 4, `at most a request per interval: ${server.requests.length}`);
});

test('servedResource gives up after its bound, saying what is not served and for how long it waited', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock, refreshMs: 1000 }) });
  const { error, ms } = await drive(clock, servedResource(api, 'a.kfn.test/v1', 'Thing', { timeoutMs: 3000, clock }));
  assert.ok(error instanceof ApiError && error.status === 404, String(error));
  assert.match(error.message, /^the API server does not serve a\.kfn\.test\/v1 \(is its CRD installed\?\); still not served after waiting 3 s for the API server's discovery to list Thing$/);
  assert.ok(ms >= 3000 && ms <= 3300, `gave up at its bound (${ms} ms)`);
  assert.ok(server.requests.length <= 4, `at most a request per interval: ${server.requests.length}`);
});

test('servedResource stops at once on an error that waiting does not mend', async () => {
  const clock = new FakeClock();
  const server = fakeApiserver();
  const api = new KubeApi(server.connection, { discovery: new Discovery({ clock }) });
  server.fail('connection refused');
  const { error, ms } = await drive(clock, servedResource(api, 'a.kfn.test/v1', 'Thing', { timeoutMs: 10_000, clock }));
  assert.match(String(error), /connection refused/);
  assert.equal(ms, 0);
});
