// The bridge's first watch of a kind, on a fake clock: a kind that discovery does not list yet
// (its CRD just Established) is waited for, a bounded time, and a kind that stays unserved fails
// with a clear message and is not waited for again at every retry.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Bridge } from './bridge.ts';
import { parseReconciler } from './config.ts';
import { FakeClock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';
import { FakeApiServer } from '../test/support/fake-apiserver.ts';

const quiet = { info() {}, warn() {}, error() {} };
const config = parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: 'http://127.0.0.1:9/' } } });

/** A bridge whose apiserver serves the Widget kind only once `serve()` is called; lookups counted. */
function setup(t: TestContext) {
  const server = new FakeApiServer();
  const clock = new FakeClock();
  let served = false;
  let lookups = 0;
  const api = {
    ...server.api(),
    async resource() {
      lookups++;
      if (!served) throw new ApiError(404, 'the API server does not serve example.com/v1 (is its CRD installed?)', 'NotFound');
      return server.resource;
    },
  } as unknown as KubeApi;
  const bridge = new Bridge({ api, log: quiet, clock, discoveryWaitMs: 5000, watcher: { backoffMs: [1, 2] } });
  t.after(() => bridge.stop(1000));
  return { bridge, clock, serve: () => void (served = true), lookups: () => lookups };
}

/** Runs `promise` to its end, moving the fake clock 50 ms at a time (`at` is told each time); answers it and the time it took. */
async function drive<T>(clock: FakeClock, promise: Promise<T>, at: (ms: number) => void = () => {}): Promise<{ value: T; ms: number }> {
  const started = clock.now();
  let done: { value: T } | undefined;
  let failed: unknown;
  promise.then((value) => (done = { value }), (err) => (failed = err ?? new Error('rejected')));
  for (let i = 0; i < 2000 && !done && !failed; i++) {
    for (let j = 0; j < 5; j++) await new Promise((r) => setImmediate(r));
    if (done || failed) break;
    clock.advance(50);
    at(clock.now() - started);
  }
  if (failed) throw failed;
  assert.ok(done, 'it ended');
  return { value: done.value, ms: clock.now() - started };
}

test('the first watch of a kind not served yet waits for discovery to serve it, then starts', async (t) => {
  const { bridge, clock, serve } = setup(t);
  const { value: failed, ms } = await drive(clock, bridge.setReconcilers([config]), (ms) => ms >= 1200 && serve());
  assert.deepEqual([...failed.entries()].map(([name, err]) => `${name}: ${err.message}`), [], 'started, not failed');
  assert.ok(ms >= 1200 && ms < 2000, `started once served (${ms} ms)`);
  assert.deepEqual(bridge.reconcilers().map((c) => c.name), ['widgets']);
});

test('a kind still not served after the wait fails, saying so; it is not waited for again, and starts once served', async (t) => {
  const { bridge, clock, serve, lookups } = setup(t);
  const first = await drive(clock, bridge.setReconcilers([config]));
  assert.ok(first.ms >= 5000 && first.ms < 5500, `gave up at the bound (${first.ms} ms)`);
  assert.match(first.value.get('widgets')?.message ?? '', /^the API server does not serve example\.com\/v1 \(is its CRD installed\?\); still not served after waiting 5 s for the API server's discovery to list Widget$/);
  assert.deepEqual(bridge.reconcilers(), []);

  // The retry (bridge/reconcilers.ts, every few seconds) looks once: a missing CRD does not hold
  // up the other Reconcilers' start each time.
  const before = lookups();
  const second = await drive(clock, bridge.setReconcilers([config]));
  assert.equal(second.ms, 0, 'no wait the second time');
  assert.match(second.value.get('widgets')?.message ?? '', /^the API server does not serve example\.com\/v1 \(is its CRD installed\?\)$/);
  assert.equal(lookups() - before, 1, "looked up once");

  serve();
  const third = await drive(clock, bridge.setReconcilers([config]));
  assert.deepEqual([...third.value.keys()], []);
  assert.deepEqual(bridge.reconcilers().map((c) => c.name), ['widgets']);
});
