import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseQuantity, sameQuantity } from './quantity.ts';

test('quantities in every form the apiserver accepts, as numbers', () => {
  const cases: [unknown, number][] = [
    ['512Mi', 512 * 2 ** 20],
    ['250m', 0.25],
    [2, 2],
    ['1.5Gi', 1.5 * 2 ** 30],
    ['1e3', 1000],
    ['1E3', 1000],
    ['12e-3', 0.012],
    ['+3k', 3000],
    ['-1', -1],
    ['.5', 0.5],
    ['5.', 5],
    ['100n', 1e-7],
    ['1Ei', 2 ** 60],
  ];
  for (const [q, n] of cases) assert.ok(Math.abs(parseQuantity(q)! - n) <= 1e-12 * Math.max(1, Math.abs(n)), `${String(q)} → ${n}, not ${parseQuantity(q)}`);
});

test('what is not a quantity is undefined', () => {
  for (const q of ['', 'Mi', '1.2.3', '1 Mi', '1mi', '1KiB', 'e3', '1e', '1e3Mi', '0x10', null, {}, Number.NaN]) assert.equal(parseQuantity(q), undefined, String(q));
});

test('quantities compare by exact value, whatever the form (the apiserver stores the canonical one)', () => {
  assert.ok(sameQuantity('1024Mi', '1Gi'));
  assert.ok(sameQuantity('0.5', '500m'));
  assert.ok(sameQuantity('1e3', '1k'));
  assert.ok(sameQuantity(1000, '1k'));
  assert.ok(!sameQuantity('1000001', '1M'), 'one apart at a million: not the same');
  assert.ok(!sameQuantity('1Ki', '1k'));
  assert.ok(!sameQuantity('x', 'x'), 'not quantities: never the same by value');
  assert.ok(sameQuantity('0.0000000001', '1n'), 'below 1n the apiserver rounds up, and so does the comparison');
});
