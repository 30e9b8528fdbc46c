import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { ResyncSchedule } from './resync.ts';

function run(keys: number, periodMs: number, periods: number, batch = false) {
  const clock = new FakeClock();
  const perTick: number[] = [];
  const perKey = new Map<string, number>();
  let current = 0;
  const schedule = new ResyncSchedule({
    periodMs,
    clock,
    enqueue: (key) => {
      current++;
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
    },
    batch,
  });
  for (let i = 0; i < keys; i++) schedule.track(`ns/obj-${i}`);
  schedule.start();
  for (let s = 0; s < (periodMs / 1000) * periods; s++) {
    clock.advance(1000);
    perTick.push(current);
    current = 0;
  }
  schedule.stop();
  return { perTick, perKey, schedule, clock };
}

test('every key is resynced exactly once per period', () => {
  const { perKey } = run(1000, 300_000, 3);
  assert.equal(perKey.size, 1000);
  for (const [key, n] of perKey) assert.equal(n, 3, key);
});

test('1,000 objects over 300 s never make a burst: at most a few per second', () => {
  for (let trial = 0; trial < 20; trial++) {
    const { perTick } = run(1000, 300_000, 1);
    const max = Math.max(...perTick);
    const mean = 1000 / 300;
    assert.ok(max <= Math.ceil(mean) + 2, `max ${max} per second, mean ${mean.toFixed(2)}`);
    assert.ok(Math.min(...perTick) >= Math.floor(mean) - 2, 'no gaps either');
  }
});

test('untracked keys are no longer resynced; tracked ones join the schedule', () => {
  const clock = new FakeClock();
  const seen: string[] = [];
  const s = new ResyncSchedule({ periodMs: 10_000, clock, enqueue: (k) => seen.push(k) });
  s.track('a');
  s.track('b');
  s.start();
  s.untrack('a');
  s.track('c');
  clock.advance(10_000);
  assert.deepEqual(seen.sort(), ['b', 'c']);
  assert.equal(s.size, 2);
  s.stop();
  assert.equal(clock.pendingTimers(), 0);
});

test('a period of 0 disables resync', () => {
  const clock = new FakeClock();
  const seen: string[] = [];
  const s = new ResyncSchedule({ periodMs: 0, clock, enqueue: (k) => seen.push(k) });
  s.track('a');
  s.start();
  clock.advance(1_000_000);
  assert.deepEqual(seen, []);
});

test('changing the period re-spreads the keys over the new period', () => {
  const clock = new FakeClock();
  const seen = new Map<string, number>();
  const s = new ResyncSchedule({ periodMs: 100_000, clock, enqueue: (k) => seen.set(k, (seen.get(k) ?? 0) + 1) });
  for (let i = 0; i < 50; i++) s.track(`k${i}`);
  s.setPeriod(10_000);
  s.start();
  clock.advance(10_000);
  assert.equal(seen.size, 50);
  s.stop();
});

test("a period of a day holds no more than one bucket per key: memory follows the keys, not the period's length", () => {
  const clock = new FakeClock();
  const seen = new Set<string>();
  const schedule = new ResyncSchedule({ periodMs: 86_400_000, clock, enqueue: (key) => seen.add(key) });
  for (let i = 0; i < 10; i++) schedule.track(`ns/obj-${i}`);
  assert.ok(schedule.bucketCount <= 10, `${schedule.bucketCount} buckets for 10 keys`);
  schedule.start();
  clock.advance(86_400_000);
  assert.equal(seen.size, 10, 'each key once in the day');
  for (let i = 0; i < 10; i++) schedule.untrack(`ns/obj-${i}`);
  assert.equal(schedule.bucketCount, 0, 'an emptied bucket goes');
  schedule.stop();
});

test('to a serverless sink, one batch per period: every key at the same tick, once a period, and nothing between — a function at zero is woken once', () => {
  const { perTick, perKey } = run(200, 3_600_000, 3, true);
  const ticksWithWork = perTick.map((n, i) => [i, n] as const).filter(([, n]) => n > 0);
  assert.equal(ticksWithWork.length, 3, `work on ${ticksWithWork.length} ticks in 3 hours`);
  assert.ok(ticksWithWork.every(([, n]) => n === 200), 'each a whole batch');
  assert.deepEqual(ticksWithWork.slice(1).map(([i], k) => i - ticksWithWork[k]![0]), [3600, 3600], 'one period apart');
  for (const [key, n] of perKey) assert.equal(n, 3, key);
});

test('a key tracked later joins the next batch, not a tick of its own', () => {
  const clock = new FakeClock();
  const at: number[] = [];
  const schedule = new ResyncSchedule({ periodMs: 60_000, clock, enqueue: () => at.push(clock.now()), batch: true, random: () => 0.5 });
  schedule.track('a');
  schedule.start();
  clock.advance(10_000);
  schedule.track('b');
  clock.advance(110_000);
  schedule.stop();
  assert.equal(new Set(at).size, 2, `two batches, at ${[...new Set(at)].join(', ')}`);
  assert.equal(at.length, 4, 'both keys in each');
});

/** A fake clock that counts the timers that fire: each is a wake of an idle process. */
function countingClock() {
  const clock = new FakeClock();
  let fired = 0;
  const setTimer = clock.setTimer.bind(clock);
  clock.setTimer = (fn, ms) => setTimer(() => (fired++, fn()), ms);
  return { clock, fired: () => fired };
}

test('at rest the schedule wakes only when a key is due: three keys over three periods are three wakes a period, and none without keys', () => {
  const { clock, fired } = countingClock();
  const seen: string[] = [];
  const schedule = new ResyncSchedule({ periodMs: 300_000, clock, enqueue: (k) => seen.push(k) });
  schedule.start();
  clock.advance(600_000);
  assert.equal(fired(), 0, 'no keys, no timer');
  for (const k of ['a', 'b', 'c']) schedule.track(k);
  clock.advance(900_000);
  assert.equal(seen.length, 9, 'each key once a period');
  assert.ok(fired() <= 9, `${fired()} wakes for 9 resyncs`);
  schedule.stop();
  assert.equal(clock.pendingTimers(), 0);
});

test('keys tracked while the schedule waits for a later slot are resynced in their own slot, exactly one period apart', () => {
  const clock = new FakeClock();
  const at = new Map<string, number[]>();
  let i = 0;
  // Slots chosen by the sequence land before and after the one already armed.
  const schedule = new ResyncSchedule({ periodMs: 100_000, clock, enqueue: (k) => at.set(k, [...(at.get(k) ?? []), clock.now()]), random: () => 0.9 });
  schedule.track('first');
  schedule.start();
  for (const wait of [3_000, 17_000, 1_000, 40_000]) {
    clock.advance(wait);
    schedule.track(`k${i++}`);
  }
  schedule.untrack('first');
  clock.advance(300_000);
  for (let k = 0; k < i; k++) {
    const times = at.get(`k${k}`) ?? [];
    assert.ok(times.length >= 2, `k${k} resynced ${times.length} times`);
    assert.deepEqual(times.slice(1).map((t, j) => t - times[j]!), times.slice(1).map(() => 100_000), `k${k} at ${times.join(', ')}`);
  }
  schedule.stop();
});

test('a timer that fires late (a blocked event loop) does not make the schedule skip the ticks it passed', () => {
  const clock = new FakeClock();
  const setTimer = clock.setTimer.bind(clock);
  let lateOnce = true;
  clock.setTimer = (fn, ms) => {
    if (lateOnce && clock.now() - start > 20_000) {
      lateOnce = false;
      return setTimer(fn, ms + 1_500);
    }
    return setTimer(fn, ms);
  };
  const start = clock.now();
  const perKey = new Map<string, number>();
  const schedule = new ResyncSchedule({ periodMs: 10_000, clock, enqueue: (k) => perKey.set(k, (perKey.get(k) ?? 0) + 1) });
  for (let i = 0; i < 10; i++) schedule.track(`k${i}`);
  schedule.start();
  for (let s = 0; s < 50; s++) clock.advance(1000);
  schedule.stop();
  assert.equal(lateOnce, false, 'a timer was late');
  for (let i = 0; i < 10; i++) assert.equal(perKey.get(`k${i}`), 5, `k${i}: ${perKey.get(`k${i}`)} resyncs in 5 periods`);
});

/** A fake clock that counts the timers set and records when each fires. */
function timerLog(start?: number) {
  const clock = new FakeClock(start);
  const firedAt: number[] = [];
  let set = 0;
  const setTimer = clock.setTimer.bind(clock);
  clock.setTimer = (fn, ms) => (set++, setTimer(() => (firedAt.push(clock.now()), fn()), ms));
  return { clock, firedAt, set: () => set };
}

test('three keys over a 1-hour period wake the schedule at most three times an hour, not 3,600; over a 10-hour period the same', () => {
  for (const periodMs of [3_600_000, 36_000_000]) {
    const { clock, firedAt } = timerLog();
    const seen: string[] = [];
    const schedule = new ResyncSchedule({ periodMs, clock, enqueue: (k) => seen.push(k) });
    for (const k of ['a', 'b', 'c']) schedule.track(k);
    schedule.start();
    clock.advance(2 * periodMs);
    schedule.stop();
    assert.equal(seen.length, 6, 'each key once a period');
    assert.ok(firedAt.length <= 6, `${firedAt.length} wakes in two periods of ${periodMs / 3_600_000} h`);
  }
});

test('a key tracked for a later slot than the one armed sets no timer; an earlier one moves it', () => {
  const { clock, set } = timerLog();
  // The sequence from 0.5 over 100 slots: 50, then 11 (the golden step, 0.618…, wraps), then 73.
  const schedule = new ResyncSchedule({ periodMs: 100_000, clock, enqueue: () => {}, random: () => 0.5 });
  schedule.start();
  assert.equal(set(), 0, 'no keys, no timer');
  schedule.track('a');
  assert.equal(set(), 1, 'the first key arms');
  schedule.track('b');
  assert.equal(set(), 2, 'a key due sooner moves the timer');
  schedule.track('c');
  assert.equal(set(), 2, 'a key due later leaves it');
  schedule.stop();
});

test('untracking the last key cancels the timer: a schedule without keys sets none', () => {
  const { clock, firedAt } = timerLog();
  const schedule = new ResyncSchedule({ periodMs: 300_000, clock, enqueue: () => {} });
  schedule.track('a');
  schedule.start();
  assert.equal(clock.pendingTimers(), 1);
  schedule.untrack('a');
  assert.equal(clock.pendingTimers(), 0, 'no timer left for a schedule without keys');
  clock.advance(600_000);
  assert.deepEqual(firedAt, [], 'and no wake');
});

test('untracking the keys of the slot armed moves the timer to the next slot with keys: no wake for an empty slot', () => {
  const { clock, firedAt } = timerLog();
  const at = new Map<string, number>();
  const schedule = new ResyncSchedule({ periodMs: 100_000, clock, enqueue: (k) => at.set(k, clock.now()), random: () => 0.5 });
  for (const k of ['a', 'b', 'c']) schedule.track(k);
  schedule.start();
  schedule.untrack('b'); // the first due (slot 11, before a's 50 and c's 73)
  clock.advance(100_000);
  schedule.stop();
  assert.deepEqual([...at.keys()].sort(), ['a', 'c']);
  assert.deepEqual(firedAt, [...at.values()].sort((x, y) => x - y), 'each wake served a key');
});

test("schedules started at different moments tick on the same instants of the clock, so the Reconcilers' resyncs due in one second share a wake", () => {
  const { clock, firedAt } = timerLog(1_700_000_000_300);
  let resyncs = 0;
  const schedules = [0.1, 0.35].map((r) => new ResyncSchedule({ periodMs: 10_000, clock, enqueue: () => resyncs++, random: () => r }));
  schedules[0]!.start();
  clock.advance(450);
  schedules[1]!.start();
  for (const s of schedules) for (let i = 0; i < 10; i++) s.track(`k${i}`);
  clock.advance(20_000);
  for (const s of schedules) s.stop();
  assert.equal(resyncs, 40, 'each key of each schedule, once a period');
  assert.ok(firedAt.length > 0);
  assert.deepEqual(firedAt.filter((t) => t % 1000 !== 0), [], 'every tick on a whole second of the clock');
});
