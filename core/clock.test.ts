import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { FakeClock, maxTimerMs, systemClock, timerClock, waitFor, WaitAbandoned, within, type TimerPrimitives } from './clock.ts';

/** Platform timers as Node has them — a delay over 2^31-1 ms runs after 1 ms — on a hand-moved time. */
function nodeLikeTimers() {
  let now = 0;
  const pending: { at: number; fn: () => void }[] = [];
  const requested: number[] = [];
  const primitives: TimerPrimitives = {
    now: () => now,
    setTimeout(fn, ms) {
      requested.push(ms);
      const t = { at: now + (ms > maxTimerMs ? 1 : ms), fn };
      pending.push(t);
      return t;
    },
    clearTimeout(t) {
      const i = pending.indexOf(t as (typeof pending)[number]);
      if (i >= 0) pending.splice(i, 1);
    },
  };
  const advance = (ms: number) => {
    const target = now + ms;
    for (;;) {
      pending.sort((a, b) => a.at - b.at);
      const next = pending[0];
      if (!next || next.at > target) break;
      pending.shift();
      now = next.at;
      next.fn();
    }
    now = target;
  };
  return { primitives, advance, requested, pending };
}

const day = 24 * 3600 * 1000;

test('a delay longer than one platform timer fires once, when due, not at once', () => {
  const t = nodeLikeTimers();
  const clock = timerClock(t.primitives);
  let fired = 0;
  clock.setTimer(() => fired++, 75 * day);
  t.advance(1000);
  assert.equal(fired, 0, 'a 75-day requeue does not fire after a second');
  t.advance(74 * day);
  assert.equal(fired, 0);
  t.advance(day - 1001);
  assert.equal(fired, 0, 'not a millisecond early');
  t.advance(1);
  assert.equal(fired, 1);
  t.advance(100 * day);
  assert.equal(fired, 1, 'and only once');
  assert.ok(t.requested.every((ms) => ms <= maxTimerMs), `no platform timer beyond ${maxTimerMs} ms (asked: ${t.requested.join(', ')})`);
});

test('a long delay can be cancelled between its steps; short delays are one timer', () => {
  const t = nodeLikeTimers();
  const clock = timerClock(t.primitives);
  let fired = 0;
  const cancel = clock.setTimer(() => fired++, 60 * day);
  t.advance(30 * day);
  cancel();
  t.advance(60 * day);
  assert.equal(fired, 0);
  assert.equal(t.pending.length, 0);
  clock.setTimer(() => fired++, 250);
  assert.equal(t.requested.at(-1), 250);
  t.advance(250);
  assert.equal(fired, 1);
});

test('a platform timer that fires less than a millisecond early (whole-millisecond timers on a finer clock) counts as due: no second wake for the fraction', () => {
  let now = 0.6;
  const timers: (() => void)[] = [];
  const clock = timerClock({ now: () => now, setTimeout: (fn) => (timers.push(fn), fn), clearTimeout() {} });
  let fired = 0;
  clock.setTimer(() => fired++, 1000); // due at 1000.6
  now = 1000.2; // the platform fires it 0.4 ms before that
  timers.shift()!();
  assert.equal(fired, 1, 'due');
  assert.equal(timers.length, 0, 'no second platform timer for the last fraction of a millisecond');
  clock.setTimer(() => fired++, 1000); // due at 2000.2
  now = 1999.2; // a whole millisecond early: it waits on
  timers.shift()!();
  assert.equal(fired, 1);
  assert.equal(timers.length, 1);
});

test('an awaited delay or waitFor on the system clock keeps the process alive until it is over', () => {
  // A process with nothing else to do: if the wait's timer did not hold it open, node would
  // exit before the wait ends (status 13, "unsettled top-level await") — what `kfn cluster up` did.
  const script = `
    import { delay, systemClock, waitFor } from ${JSON.stringify(new URL('./clock.ts', import.meta.url).href)};
    await delay(systemClock, 30);
    let n = 0;
    await waitFor('three rounds', () => (++n === 3 ? n : undefined), { intervalMs: 20 });
    console.log('waited');
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.deepEqual([run.status, run.stdout.trim()], [0, 'waited'], run.stderr);
});

test('waitFor: a shared deadline, the last value in the timeout, and WaitAbandoned ends the wait at once', async () => {
  const clock = new FakeClock();
  let rounds = 0;
  const timedOut = waitFor('a value', () => (rounds++, false), { clock, deadline: clock.now() + 1000, intervalMs: 100 });
  const failure = assert.rejects(timedOut, /Timed out after 1s waiting for a value\.\nLast value: false/);
  for (let i = 0; i < 12; i++) {
    clock.advance(100);
    await new Promise((resolve) => setImmediate(resolve));
  }
  await failure;
  assert.ok(rounds > 5, 'checked again and again until the deadline');

  let checks = 0;
  await assert.rejects(
    waitFor('a revision', () => {
      checks++;
      throw new WaitAbandoned('the revision failed');
    }, { clock, timeoutMs: 60_000 }),
    (err: Error) => err instanceof WaitAbandoned && err.message === 'the revision failed',
  );
  assert.equal(checks, 1, 'no second check after WaitAbandoned');
});

test("the system clock is monotonic: the machine's time set back an hour neither moves now() back nor stalls a timer", async (t) => {
  const realNow = Date.now;
  const before = systemClock.now();
  let fired = false;
  systemClock.setTimer(() => (fired = true), 30);
  Date.now = () => realNow() - 3_600_000;
  t.after(() => (Date.now = realNow));
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.ok(systemClock.now() >= before, 'now() did not go back');
  assert.ok(Math.abs(systemClock.wall() - (realNow() - 3_600_000)) < 1000, 'wall() is the machine\'s time');
  assert.equal(fired, true, 'a 30 ms timer fired (not an hour later)');
});

test('within: true when the work settles in time (a rejection too), false when the time runs out first; its timer ends with it', async () => {
  const clock = new FakeClock();
  const settles = Promise.withResolvers<void>();
  const done = within(clock, settles.promise, 2000);
  clock.advance(1999);
  settles.resolve();
  assert.equal(await done, true);
  assert.equal(clock.pendingTimers(), 0, 'no timer left behind');

  const failed = within(clock, Promise.reject(new Error('collector down')), 2000);
  assert.equal(await failed, true, 'a rejection is settled, not thrown');

  const hangs = within(clock, new Promise(() => {}), 2000);
  await Promise.resolve();
  clock.advance(2000);
  assert.equal(await hangs, false);
  assert.equal(clock.pendingTimers(), 0);
});
