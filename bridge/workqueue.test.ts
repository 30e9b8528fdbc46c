import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { ExponentialBackoff, TokenBucket, WorkQueue, Workers } from './workqueue.ts';

function drain(q: WorkQueue): string[] {
  const keys: string[] = [];
  for (let k = q.get(); k !== undefined; k = q.get()) keys.push(k);
  return keys;
}

/** A handler whose calls finish only when the test says so. */
function controlledHandler() {
  const calls: { key: string; finish: () => void }[] = [];
  const handle = (key: string) => new Promise<void>((resolve) => calls.push({ key, finish: resolve }));
  return { calls, handle };
}

const flush = () => new Promise((r) => setImmediate(r));

describe('WorkQueue', () => {
  test('duplicates coalesce: a key added many times is handed out once', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add('a');
    q.add('b');
    q.add('a');
    q.add('a', 'low');
    assert.deepEqual(drain(q), ['a', 'b']);
    assert.equal(q.length, 0);
  });

  test('a key being processed is not handed out again until done', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add('a');
    assert.equal(q.get(), 'a');
    q.add('a');
    q.add('a');
    assert.equal(q.get(), undefined, 'no second delivery of a key in flight');
    q.done('a');
    assert.equal(q.get(), 'a', 'a change during processing causes one more');
    q.done('a');
    assert.equal(q.get(), undefined, 'and exactly one');
  });

  test('a key done without changes meanwhile is not handed out again', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add('a');
    q.get();
    q.done('a');
    assert.equal(q.get(), undefined);
  });

  test('real changes are served before resync and initial-list work', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add('resync-1', 'low');
    q.add('resync-2', 'low');
    q.add('change-1', 'high');
    q.add('resync-2', 'high'); // a real change to a key waiting at low priority promotes it
    q.add('change-2');
    assert.deepEqual(drain(q), ['change-1', 'resync-2', 'change-2', 'resync-1']);
  });

  test('a low add does not demote a key waiting at high priority', () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add('x', 'low');
    q.add('a', 'high');
    q.add('a', 'low');
    assert.deepEqual(drain(q), ['a', 'x']);
  });

  test('addAfter makes a key ready only when its time comes; the earliest request wins', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter('a', 10_000);
    q.addAfter('a', 30_000);
    q.addAfter('b', 5_000);
    clock.advance(4_999);
    assert.equal(q.get(), undefined);
    clock.advance(1);
    assert.deepEqual(drain(q), ['b']);
    clock.advance(5_000);
    assert.deepEqual(drain(q), ['a']);
    clock.advance(60_000);
    assert.equal(q.get(), undefined, 'the later request for a was dropped');
    assert.equal(q.delayed, 0);
  });

  test('an earlier addAfter replaces a later one', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter('a', 60_000);
    q.addAfter('a', 1_000);
    clock.advance(1_000);
    assert.deepEqual(drain(q), ['a']);
    clock.advance(60_000);
    assert.equal(q.get(), undefined);
  });

  test('a retry still waiting when the key is delivered again gives way to what that delivery asks: it does not bring a requeue an hour early', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, backoff: { baseDelayMs: 100, maxDelayMs: 1000 } });
    q.add('a');
    q.get();
    assert.equal(q.addRateLimited('a'), 100, 'the delivery failed: a retry in 100 ms');
    q.done('a');
    q.add('a'); // a newer change: delivered now, before the retry is due
    assert.equal(q.get(), 'a');
    q.forget('a'); // it succeeded, and asked to be requeued in an hour
    q.addAfter('a', 3_600_000);
    q.done('a');
    clock.advance(100);
    assert.equal(q.get(), undefined, 'not delivered at the failed delivery\'s retry time');
    assert.ok(q.isDelayed('a'), 'the hour is still scheduled');
    clock.advance(3_600_000 - 100 - 1);
    assert.equal(q.get(), undefined);
    clock.advance(1);
    assert.equal(q.get(), 'a', 'delivered after the hour');
  });

  test('a retry asked while a newer change waits gives way to what the delivery of that change asks for', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, backoff: { baseDelayMs: 100, maxDelayMs: 1000 } });
    q.add('a');
    q.get();
    q.add('a'); // a change while the delivery is under way
    q.addRateLimited('a'); // and the delivery fails
    q.done('a');
    assert.equal(q.get(), 'a', 'the change is delivered at once, carrying the newest state');
    q.forget('a');
    q.addAfter('a', 3_600_000);
    q.done('a');
    clock.advance(100);
    assert.equal(q.get(), undefined, 'the retry it made moot does not come');
    clock.advance(3_600_000 - 100);
    assert.equal(q.get(), 'a');
  });

  test('a requeue asked before a newer change is delivered still comes when its wait ends, whatever that delivery asks', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.add('a');
    q.get();
    q.add('a'); // a change while the delivery is under way
    q.forget('a');
    q.addAfter('a', 60_000); // the delivery asked to be requeued in a minute
    q.done('a');
    assert.equal(q.get(), 'a', 'the change first');
    assert.ok(q.isDelayed('a'), 'the requeue still owed while the change is delivered');
    q.forget('a'); // done, and requeued in an hour
    q.addAfter('a', 3_600_000);
    q.done('a');
    clock.advance(60_000);
    assert.equal(q.get(), 'a', 'the first requeue comes when asked');
  });

  test('a retry made moot by a delivery that asks for nothing still comes', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, backoff: { baseDelayMs: 100, maxDelayMs: 1000 } });
    q.add('a');
    q.get();
    q.add('a');
    q.addRateLimited('a'); // a requeue without a delay asks as a retry does (controller-runtime's Requeue)
    q.done('a');
    assert.equal(q.get(), 'a');
    q.forget('a');
    q.done('a');
    clock.advance(100);
    assert.equal(q.get(), 'a');
  });

  test('an addAfter of no delay adds the key now and drops its later timer', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter('a', 60_000);
    q.addAfter('a', 0);
    assert.deepEqual(drain(q), ['a']);
    q.done('a');
    assert.equal(q.delayed, 0);
    clock.advance(60_000);
    assert.equal(q.get(), undefined, 'not a second time');
  });

  test('failures back off exponentially per key from 5 ms to 1000 s, reset by forget', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    const delays: number[] = [];
    for (let i = 0; i < 20; i++) delays.push(q.addRateLimited('a'));
    assert.deepEqual(delays.slice(0, 5), [5, 10, 20, 40, 80]);
    assert.equal(delays[17], 655_360);
    assert.equal(delays[18], 1_000_000, 'capped at 1000 s');
    assert.equal(delays[19], 1_000_000);
    assert.equal(q.retries('a'), 20);
    assert.equal(q.addRateLimited('b'), 5, 'other keys have their own backoff');
    assert.equal(q.addRateLimited('b', 7000), 7000, 'a Retry-After longer than the backoff wins');
    assert.equal(q.retries('b'), 2, 'and still counts as a retry');
    q.forget('a');
    assert.equal(q.addRateLimited('a'), 5, 'forget resets');
  });

  test('a rate-limited key becomes ready after its backoff delay', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, backoff: { baseDelayMs: 100, maxDelayMs: 1000 } });
    q.add('a');
    q.get();
    q.addRateLimited('a');
    q.done('a');
    assert.equal(q.get(), undefined);
    clock.advance(100);
    assert.equal(q.get(), 'a');
    q.addRateLimited('a');
    q.done('a');
    clock.advance(199);
    assert.equal(q.get(), undefined);
    clock.advance(1);
    assert.equal(q.get(), 'a');
  });

  test('shutDown drops waiting and delayed keys and takes no more', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.add('a');
    q.addAfter('b', 1000);
    q.shutDown();
    q.add('c');
    clock.advance(2000);
    assert.equal(q.get(), undefined);
    assert.equal(clock.pendingTimers(), 0);
  });

  test('the observer sees adds, depth, queue and work durations, and retries', () => {
    const clock = new FakeClock();
    const seen: string[] = [];
    const q = new WorkQueue({
      clock,
      observer: {
        added: (k, p) => seen.push(`added ${k} ${p}`),
        queued: (k, ms) => seen.push(`queued ${k} ${ms}`),
        worked: (k, ms) => seen.push(`worked ${k} ${ms}`),
        retried: (k) => seen.push(`retried ${k}`),
      },
    });
    q.add('a');
    clock.advance(30);
    q.get();
    clock.advance(70);
    q.addRateLimited('a');
    q.done('a');
    assert.deepEqual(seen, ['added a high', 'queued a 30', 'retried a', 'worked a 70']);
  });
});

describe('ExponentialBackoff', () => {
  test('does not overflow for very many failures', () => {
    const b = new ExponentialBackoff({ baseDelayMs: 5, maxDelayMs: 1_000_000 });
    let last = 0;
    for (let i = 0; i < 2000; i++) last = b.when('k');
    assert.equal(last, 1_000_000);
  });
});

describe('Workers', () => {
  test('at most `concurrency` keys are processed at once', async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    const { calls, handle } = controlledHandler();
    const workers = new Workers(q, 2, handle);
    for (const k of ['a', 'b', 'c', 'd']) q.add(k);
    await flush();
    assert.deepEqual(calls.map((c) => c.key), ['a', 'b']);
    assert.equal(workers.busy, 2);
    calls[0]!.finish();
    await flush();
    assert.deepEqual(calls.map((c) => c.key), ['a', 'b', 'c']);
    for (const c of calls.slice(1)) c.finish();
    await flush();
    calls[3]!.finish();
    await flush();
    assert.equal(workers.busy, 0);
    assert.equal(await workers.stop(1000), true);
  });

  test('a limit that moves (the adaptive one) is asked at each start: more keys at once as it grows, fewer started as it falls', async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    const { calls, handle } = controlledHandler();
    let limit = 1;
    const workers = new Workers(q, () => limit, handle);
    for (const k of ['a', 'b', 'c', 'd', 'e', 'f']) q.add(k);
    await flush();
    assert.deepEqual(calls.map((c) => c.key), ['a']);
    limit = 3;
    calls[0]!.finish();
    await flush();
    assert.deepEqual(calls.map((c) => c.key), ['a', 'b', 'c', 'd'], 'three at once after the first answer');
    limit = 1;
    calls[1]!.finish();
    calls[2]!.finish();
    await flush();
    assert.equal(calls.length, 4, 'none started while more than the limit are in flight');
    calls[3]!.finish();
    await flush();
    assert.deepEqual(calls.map((c) => c.key), ['a', 'b', 'c', 'd', 'e']);
    assert.equal(workers.busy, 1);
    calls[4]!.finish();
    await flush();
    calls[5]!.finish();
    await flush();
    assert.equal(await workers.stop(1000), true);
  });

  test('a change during a delivery causes exactly one more delivery, after it', async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    const { calls, handle } = controlledHandler();
    const workers = new Workers(q, 4, handle);
    q.add('a');
    await flush();
    q.add('a');
    q.add('a');
    await flush();
    assert.equal(calls.length, 1, 'never two deliveries of one key at once');
    calls[0]!.finish();
    await flush();
    assert.equal(calls.length, 2);
    calls[1]!.finish();
    await flush();
    assert.equal(calls.length, 2);
    await workers.stop(1000);
  });

  test('stop waits for in-flight work and starts no more', async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    const { calls, handle } = controlledHandler();
    const workers = new Workers(q, 1, handle);
    q.add('a');
    q.add('b');
    await flush();
    const stopping = workers.stop(5000);
    calls[0]!.finish();
    assert.equal(await stopping, true);
    assert.equal(calls.length, 1, 'b was not started after stop');
  });

  test('keys whose handling ends at once (held back, nothing to send) do not starve the event loop: timers and I/O run between them', async () => {
    // After a take-over every key can be held back: each handler settles without waiting on
    // anything, and a chain of them in microtasks held a leader's Lease renewal past its
    // deadline at 250,000 keys.
    const q = new WorkQueue({ clock: new FakeClock() });
    const keys = 20_000;
    for (let i = 0; i < keys; i++) q.add(`k${i}`);
    let handled = 0;
    let handledWhenTheLoopTurned: number | undefined;
    setImmediate(() => (handledWhenTheLoopTurned = handled));
    const workers = new Workers(q, 8, async () => void handled++);
    for (let turns = 0; handled < keys && turns < keys; turns++) await flush();
    assert.equal(handled, keys, 'every key handled');
    assert.ok(handledWhenTheLoopTurned !== undefined && handledWhenTheLoopTurned < 1000, `the event loop turned after ${handledWhenTheLoopTurned} of ${keys} keys`);
    assert.equal(await workers.stop(1000), true);
  });

  test('stop gives up after its timeout when a handler hangs', async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    const workers = new Workers(q, 1, () => new Promise(() => {}), clock);
    q.add('a');
    await flush();
    const stopping = workers.stop(20);
    clock.advance(20);
    assert.equal(await stopping, false);
  });
});

describe('the overall rate limit (token bucket)', () => {
  test('a burst, then qps: the bucket refills with time and never beyond the burst', () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket({ qps: 10, burst: 3 }, clock);
    assert.deepEqual([bucket.when(), bucket.when(), bucket.when()], [0, 0, 0], 'the burst is free');
    assert.deepEqual([bucket.when(), bucket.when()], [100, 200], 'then one per 100 ms, queued in order');
    clock.advance(10_000);
    assert.deepEqual([bucket.when(), bucket.when(), bucket.when(), bucket.when()], [0, 0, 0, 100], 'refilled to the burst, not beyond');
  });

  test('200 keys failing at once: the first 100 retry on their backoff, the rest at 10 per second', () => {
    const clock = new FakeClock();
    const seen: number[] = [];
    const q = new WorkQueue({ clock, observer: { throttled: (_k, ms) => seen.push(ms) } });
    const delays = Array.from({ length: 200 }, (_, i) => q.addRateLimited(`k${i}`));
    assert.deepEqual(new Set(delays.slice(0, 100)), new Set([5]), 'within the burst: the per-key backoff (5 ms)');
    assert.equal(delays[100], 100);
    assert.equal(delays[199], 10_000, 'the 200th retry waits 10 s: 100 retries over the burst at 10 qps');
    assert.equal(seen.length, 100, 'each throttled retry is reported');
    // Over the next 5 s only ~50 of the throttled keys become ready, not all at once.
    clock.advance(5_000);
    assert.equal(drain(q).length, 150);
  });

  test('the longer of backoff, rate limit and Retry-After wins', () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, rateLimit: { qps: 1, burst: 1 }, backoff: { baseDelayMs: 50, maxDelayMs: 60_000 } });
    assert.equal(q.addRateLimited('a'), 50, 'the token is there: backoff');
    assert.equal(q.addRateLimited('b'), 1000, 'no token: one second at 1 qps');
    assert.equal(q.addRateLimited('c', 5000), 5000, 'Retry-After beyond both');
  });
});
