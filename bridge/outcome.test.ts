import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DeliveryResult } from './delivery.ts';
import { ClockSkewReport, deadlineGraceMs, journalEntryOf, settle } from './outcome.ts';

const now = 1_000_000;
const deadline = now - 10;

test('done forgets the key and finishes its observation', () => {
  assert.deepEqual(settle({ outcome: { kind: 'done' }, status: 200, durationMs: 5 }, now, deadline), { result: 'success', queue: { kind: 'forget' }, finished: true });
});

test('requeue goes through the backoff; requeueAfter resets it and waits, recording the requeue only when nothing newer is pending', () => {
  const plain = settle({ outcome: { kind: 'requeue' }, status: 200, durationMs: 5 }, now, deadline);
  assert.deepEqual([plain.result, plain.queue, plain.finished, plain.requeue], ['requeue', { kind: 'backoff', atLeastMs: 0 }, true, { observedAt: now }]);
  const after = settle({ outcome: { kind: 'requeue', afterMs: 30_000 }, status: 200, durationMs: 5 }, now, deadline);
  assert.deepEqual([after.result, after.queue, after.requeue], ['requeue_after', { kind: 'after', ms: 30_000 }, { observedAt: now + 30_000 }]);
});

test('a retry keeps the observation (the same event id) and honours Retry-After', () => {
  const s = settle({ outcome: { kind: 'retry', afterMs: 7000, why: 'HTTP 503' }, status: 503, durationMs: 5 }, now, deadline);
  assert.deepEqual(s, { result: 'error', queue: { kind: 'backoff', atLeastMs: 7000 }, finished: false, error: 'retry' });
});

test('a timed-out delivery holds the key until its deadline plus the grace', () => {
  const late = now + 60_000;
  const s = settle({ outcome: { kind: 'retry', why: 'no answer' }, durationMs: 60_000, mayBeRunning: true }, now, late);
  assert.equal(s.holdUntil, late + deadlineGraceMs);
  assert.deepEqual(s.queue, { kind: 'backoff', atLeastMs: late + deadlineGraceMs - now });
});

test('terminal forgets the key and finishes its observation, counted as a terminal error', () => {
  const s = settle({ outcome: { kind: 'terminal', why: 'HTTP 400' }, status: 400, durationMs: 5 }, now, deadline);
  assert.deepEqual([s.queue, s.finished, s.error], [{ kind: 'forget' }, true, 'terminal']);
});

const skewed = (clockSkewMs: number): DeliveryResult => ({ outcome: { kind: 'retry', why: 'the function refused the event for its time', clockSkewMs }, status: 400, durationMs: 5 });
const answered: DeliveryResult = { outcome: { kind: 'done' }, status: 200, durationMs: 5 };

test("a refusal for the event's time is a retry through the backoff, the observation kept: the object is reconciled once the clock is right", () => {
  const s = settle(skewed(120_000), now, deadline);
  assert.deepEqual(s, { result: 'error', queue: { kind: 'backoff', atLeastMs: 0 }, finished: false, error: 'retry' });
});

test("a function's clock is reported once however many deliveries it refuses, again when the skew moves by a second, and cleared by its first answer after", () => {
  const report = new ClockSkewReport();
  const first = report.after(skewed(75_300));
  assert.equal(first?.skewSeconds, 75.3);
  assert.match(first?.problem ?? '', /^the function's clock is 75 s ahead of the bridge's, more than the 60 s the contract allows: it refuses every event for its time\. Set the machines' time right \(NTP\); deliveries are retried and resume by themselves/);
  assert.equal(report.after(skewed(75_900)), undefined, 'the same skew, measured again');
  assert.equal(report.after({ outcome: { kind: 'retry', why: 'HTTP 503' }, status: 503, durationMs: 5 }), undefined, "not the function's answer: says nothing of its clock");
  assert.equal(report.after({ outcome: { kind: 'retry', why: 'no answer' }, durationMs: 5, transport: 'timeout' }), undefined);
  assert.match(report.after(skewed(-90_000))?.problem ?? '', /clock is 90 s behind the bridge's/);
  assert.deepEqual(report.after(answered), { problem: undefined, skewSeconds: 0 });
  assert.equal(report.after(answered), undefined);
  assert.deepEqual(report.after(skewed(61_000))?.skewSeconds, 61, 'skewed again');
  assert.deepEqual(report.after({ outcome: { kind: 'retry', why: 'HTTP 500: boom' }, status: 500, durationMs: 5 }), { problem: undefined, skewSeconds: 0 }, 'a failed reconcile: its time was taken');
});

test("a new controller's report says the clock is fine at its first answer (clearing what one before it reported)", () => {
  assert.deepEqual(new ClockSkewReport().after(answered), { problem: undefined, skewSeconds: 0 });
});

test('the journal line names the delivery, its outcome and the answer', () => {
  const observation = { reconciler: 'web', primary: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'a', name: 'b' }, reason: 'updated' as const, observedAt: now - 5 };
  const response = { result: 'done' as const, changes: [] };
  const entry = journalEntryOf({ id: 'e1', key: 'a/b', attempt: 2, observation, sink: 'http://fn', result: { outcome: { kind: 'done', response }, status: 200, durationMs: 9 }, now });
  assert.deepEqual(entry, {
    time: new Date(now).toISOString(),
    id: 'e1',
    reconciler: 'web',
    key: 'a/b',
    reason: 'updated',
    attempt: 2,
    primary: observation.primary,
    trigger: undefined,
    observedAt: new Date(now - 5).toISOString(),
    sink: 'http://fn',
    status: 200,
    outcome: 'done',
    why: undefined,
    durationMs: 9,
    response,
  });
});
