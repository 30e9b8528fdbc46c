import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { Holds } from './holds.ts';
import { deadlineGraceMs } from './outcome.ts';

test('a key is held until its time, then free; release ends it early or replaces it', () => {
  const clock = new FakeClock();
  const holds = new Holds(clock);
  holds.hold('r', 'ns/a', clock.now() + 5000);
  assert.equal(holds.until('r', 'ns/a', 30_000), clock.now() + 5000);
  assert.equal(holds.until('r', 'ns/b', 30_000), undefined, 'another key');
  assert.equal(holds.until('other', 'ns/a', 30_000), undefined, 'another Reconciler');
  clock.advance(5000);
  assert.equal(holds.until('r', 'ns/a', 30_000), undefined, 'over at its time');
  holds.hold('r', 'ns/a', clock.now() + 5000);
  holds.release('r', 'ns/a');
  assert.equal(holds.until('r', 'ns/a', 30_000), undefined, 'released: the delivery answered');
  holds.hold('r', 'ns/a', clock.now() + 5000);
  holds.release('r', 'ns/a', clock.now() + 9000);
  assert.equal(holds.until('r', 'ns/a', 30_000), clock.now() + 9000, 'replaced: an answer that may leave the function at work');
});

test('a hand-over lists the keys still held, with the time left, and the next holder holds exactly those', () => {
  const old = new FakeClock();
  const before = new Holds(old);
  before.hold('widgets', 'ns/slow', old.now() + 40_000);
  before.hold('widgets', 'ns/done', old.now() + 1000);
  before.hold('gadgets', 'ns/x', old.now() + 10_000);
  old.advance(2000); // ns/done is over
  const note = before.handOver(() => true);
  assert.deepEqual(JSON.parse(note), { widgets: { 'ns/slow': 38_000 }, gadgets: { 'ns/x': 8000 } });

  // The next holder reads it later, on a clock of its own: it holds for the time left from its now.
  const clock = new FakeClock(5_000);
  const after = new Holds(clock);
  after.takeOver({ from: 'released', note }, () => true);
  assert.equal(after.until('widgets', 'ns/slow', 30_000), clock.now() + 38_000);
  assert.equal(after.until('gadgets', 'ns/x', 30_000), clock.now() + 8000);
  assert.equal(after.until('widgets', 'ns/other', 30_000), undefined, 'keys not handed over are delivered at once');
});

test('a hand-over covers only the keys asked for (a shard), and the taker keeps only those it covers', () => {
  const clock = new FakeClock();
  const holds = new Holds(clock);
  holds.hold('r', 'ns/a', clock.now() + 10_000);
  holds.hold('r', 'ns/b', clock.now() + 10_000);
  const note = holds.handOver((key) => key === 'ns/a');
  assert.deepEqual(JSON.parse(note), { r: { 'ns/a': 10_000 } });
  const next = new Holds(clock);
  next.takeOver({ from: 'released', note: JSON.stringify({ r: { 'ns/a': 10_000, 'ns/b': 10_000 } }) }, (key) => key === 'ns/b');
  assert.equal(next.until('r', 'ns/a', 30_000), undefined);
  assert.equal(next.until('r', 'ns/b', 30_000), clock.now() + 10_000);
});

test('after a holder that left without a word, every key it covered waits its Reconciler\'s timeout plus the grace', () => {
  const clock = new FakeClock();
  const holds = new Holds(clock);
  const said = holds.takeOver({ from: 'expired', holder: 'bridge-a' }, (key) => key.startsWith('ns/'));
  assert.match(said, /bridge-a left without handing over/);
  const start = clock.now();
  assert.equal(holds.until('fast', 'ns/a', 5000), start + 5000 + deadlineGraceMs);
  assert.equal(holds.until('slow', 'ns/a', 60_000), start + 60_000 + deadlineGraceMs);
  assert.equal(holds.until('fast', 'other/a', 5000), undefined, 'a key it did not cover');
  clock.advance(5000 + deadlineGraceMs);
  assert.equal(holds.until('fast', 'ns/a', 5000), undefined);
  assert.equal(holds.until('slow', 'ns/a', 60_000), start + 60_000 + deadlineGraceMs);
});

test('a blanket, or a list too long for an annotation, is handed on as "everything, for this long"', () => {
  const clock = new FakeClock();
  const holds = new Holds(clock);
  holds.longestTimeoutMs = 30_000;
  holds.takeOver({ from: 'expired', holder: 'x' }, () => true);
  clock.advance(10_000);
  assert.deepEqual(JSON.parse(holds.handOver(() => true)), { all: 30_000 + deadlineGraceMs - 10_000 });

  const many = new Holds(clock);
  for (let i = 0; i < 5000; i++) many.hold('widgets', `namespace-${i}/widget-${i}`, clock.now() + 7000);
  const note = many.handOver(() => true);
  assert.ok(note.length < 100, 'short');
  const next = new Holds(clock);
  next.takeOver({ from: 'released', note }, () => true);
  assert.equal(next.until('widgets', 'any/key', 30_000), clock.now() + 7000);
  clock.advance(7000);
  assert.equal(next.until('widgets', 'any/key', 30_000), undefined);
});

test('a hand-over note that is not what a bridge writes holds everything for the longest timeout', () => {
  const clock = new FakeClock();
  const holds = new Holds(clock);
  holds.takeOver({ from: 'released', note: '{not json' }, () => true);
  assert.equal(holds.until('r', 'ns/a', 1000), clock.now() + 900_000 + deadlineGraceMs);
  const other = new Holds(clock);
  assert.doesNotThrow(() => other.takeOver({ from: 'released', note: 'null' }, () => true), 'JSON, but not a hand-over');
  assert.equal(other.until('r', 'ns/a', 1000), clock.now() + 900_000 + deadlineGraceMs);
});
