// What a function remembers of the events it took, on a fake clock: each delivery once, and the
// newest version of each object, so that an older event cannot take a reconcile back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../../core/clock.ts';
import { clockSkewMs, maxDeliveryMs } from '../../core/event.ts';
import { NewestVersions, ReplayGuard } from './replays.ts';

test('a delivery is taken once for as long as its window is open, then forgotten', () => {
  const clock = new FakeClock();
  const replays = new ReplayGuard(clock);
  assert.equal(replays.admit('e1', 1, 30_000), true);
  assert.equal(replays.admit('e1', 1, 30_000), false, 'a copy');
  assert.equal(replays.admit('e1', 2, 30_000), true, 'the next attempt');
  clock.advance(30_000 + 2 * clockSkewMs);
  assert.equal(replays.admit('e1', 1, 30_000), false, 'still within the window');
  clock.advance(1);
  assert.equal(replays.admit('e1', 1, 30_000), true, 'the window has closed: the time check refuses it now');
});

test('an older version of an object is refused once a newer one was taken; versions compare as numbers', () => {
  const versions = new NewestVersions(new FakeClock());
  assert.equal(versions.take('u1', '11', true), undefined);
  assert.equal(versions.take('u1', '9', true), '11', '9 < 11, though "9" > "11" as text');
  assert.equal(versions.take('u1', '10', true), '11');
  assert.equal(versions.take('u1', '11', true), undefined, 'the same version again (a resync)');
  assert.equal(versions.take('u2', '3', true), undefined, 'another object');
  assert.equal(versions.take('u1', '12', true), undefined);
  assert.equal(versions.take('u1', '11', true), '12');
  assert.equal(versions.take('u1', '5', false), undefined, 'an event that does not carry the object is never refused…');
  assert.equal(versions.take('u1', '11', true), '12', '…and does not take the newest back');
  assert.equal(versions.take('u1', undefined, true), undefined, 'no version: nothing to compare');
  assert.equal(versions.take('u1', 'abc', true), undefined, 'not a number: nothing to compare');
  assert.equal(versions.take('u1', '11', true), '12');
});

test('the newest version is remembered as long as an older event could still be in its window, and memory is bounded', () => {
  const clock = new FakeClock();
  const versions = new NewestVersions(clock, 2);
  versions.take('u1', '11', true);
  clock.advance(maxDeliveryMs + 2 * clockSkewMs);
  assert.equal(versions.take('u1', '10', true), '11', 'an event sent before it may still be in its window');
  clock.advance(1);
  assert.equal(versions.take('u1', '10', true), undefined, "every older event's window has closed: the time check refuses a copy now");
  versions.take('u2', '5', true);
  versions.take('u3', '5', true);
  assert.equal(versions.size, 2, 'at most maxEntries, the least recently taken forgotten first');
  assert.equal(versions.take('u1', '1', true), undefined, 'u1 was forgotten');
});
