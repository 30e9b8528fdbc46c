// The adaptive limit on a fake clock with made-up answers: how it grows, when it falls, and that
// it stays between 1 and the Reconciler's ceiling.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { AdaptiveLimit } from './concurrency.ts';

/** `rounds` rounds of `ms` each; in each, every delivery the limit allows is answered after `ms` with `status`. */
function run(limit: AdaptiveLimit, clock: FakeClock, rounds: number, ms: number, status = 200): number[] {
  const seen: number[] = [];
  for (let r = 0; r < rounds; r++) {
    clock.advance(ms);
    const n = limit.current;
    // Saturated: each answer comes while the window is full (the queue refills it at once).
    for (let i = 0; i < n; i++) limit.answered({ status, durationMs: ms, inFlight: n });
    seen.push(limit.current);
  }
  return seen;
}

test('starts at one delivery at a time and grows by about one per round while the function keeps its pace, up to the ceiling and no further', () => {
  const clock = new FakeClock();
  const limit = new AdaptiveLimit(8, clock);
  assert.equal(limit.current, 1);
  const seen = run(limit, clock, 12, 20);
  assert.deepEqual(seen.slice(0, 4), [2, 3, 4, 5]);
  assert.equal(seen.at(-1), 8);
  assert.ok(seen.every((n) => n <= 8));
});

test('a window never filled gives no reason to grow', () => {
  const clock = new FakeClock();
  const limit = new AdaptiveLimit(8, clock);
  for (let i = 0; i < 100; i++) {
    clock.advance(20);
    limit.answered({ status: 200, durationMs: 20, inFlight: 0 + 1 });
    limit.answered({ status: 200, durationMs: 20, inFlight: 1 });
  }
  assert.equal(limit.current, 2, 'it grew to 2 at the first full window, and deliveries never filled 2');
});

test('pushback (429, 503, no answer) halves the limit, once per episode; the ceiling of 1 never moves', () => {
  const clock = new FakeClock();
  const limit = new AdaptiveLimit(16, clock);
  run(limit, clock, 30, 20);
  assert.equal(limit.current, 16);
  for (const status of [429, 503, undefined]) limit.answered({ status, durationMs: 5, inFlight: 16 });
  assert.equal(limit.current, 8, 'three refusals of one episode halve it once');
  clock.advance(1000);
  assert.equal(limit.answered({ status: 503, durationMs: 5, inFlight: 8 }), true);
  assert.equal(limit.current, 4);
  for (let i = 0; i < 10; i++) (clock.advance(1000), limit.answered({ status: 429, durationMs: 5, inFlight: 1 }));
  assert.equal(limit.current, 1, 'never below one');

  const single = new AdaptiveLimit(1, clock);
  run(single, clock, 20, 10);
  single.answered({ status: 429, durationMs: 5, inFlight: 1 });
  assert.equal(single.current, 1);
});

test('a function made slow mid-run gets fewer deliveries within seconds', () => {
  const clock = new FakeClock();
  const limit = new AdaptiveLimit(8, clock);
  run(limit, clock, 20, 20);
  assert.equal(limit.current, 8);
  // Ten times slower from here on: within 2 s it is given fewer, within 6 s at most two at once.
  const seen = run(limit, clock, 30, 200);
  assert.ok(seen[9]! < 8, `after 2 s: ${seen.slice(0, 10)}`);
  assert.ok(seen[29]! <= 2, `after 6 s: ${seen}`);
});

test('a little jitter on a fast function is not a slowdown', () => {
  const clock = new FakeClock();
  const limit = new AdaptiveLimit(8, clock);
  for (let r = 0; r < 40; r++) {
    clock.advance(5);
    const n = limit.current;
    for (let i = 0; i < n; i++) limit.answered({ status: 200, durationMs: r % 2 ? 2 : 9, inFlight: n });
  }
  assert.equal(limit.current, 8);
});
