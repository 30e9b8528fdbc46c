// Kubernetes' quantity library in kfn's CEL: every function of it on about a hundred forms of
// quantity, held to the answers of the apiserver's own library (test/support/quantity-oracle,
// evaluated in cel-go), and test/integration/rules.test.ts holds a CRD's rules on the real
// apiserver to checkRules' answers.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { isCelError } from '@bufbuild/cel';
import { compiled } from './rules.ts';

const run = (expression: string) => compiled(expression)({});

test('quantities compare and add by exact value, whatever their form', () => {
  assert.equal(run("quantity('1Gi') == quantity('1024Mi')"), true);
  assert.equal(run("quantity('0.5') == quantity('500m')"), true);
  assert.equal(run("quantity('1G') == quantity('1Gi')"), false);
  assert.equal(run("quantity('1Gi').isGreaterThan(quantity('1G'))"), true);
  assert.equal(run("quantity('999m').isLessThan(quantity('1'))"), true);
  assert.equal(run("quantity('1Ki').compareTo(quantity('1024'))"), 0n);
  assert.equal(run("quantity('1Ki').add(24).asInteger()"), 1048n);
  assert.equal(run("quantity('1Ki').sub(quantity('1k')).asInteger()"), 24n);
  assert.equal(run("sign(quantity('-5m'))"), -1n);
  assert.equal(run("sign(quantity('0'))"), 0n);
  assert.equal(run("quantity('0.1Ki').asApproximateFloat()"), 102.4);
  assert.equal(run("isQuantity('1 Gi')"), false);
  assert.equal(run("isQuantity('+3e-2')"), true);
});

test('an integer as the apiserver keeps one: by the form written, not only the value', () => {
  for (const [q, whole] of [['2Mi', true], ['1k', true], ['5.', true], ['3e6', true], ['1000m', false], ['1.0', false], ['1.5Gi', false], ['1234567890123456789', false]] as const) {
    assert.equal(run(`quantity('${q}').isInteger()`), whole, q);
  }
  assert.equal(run("quantity('1k').add(quantity('1m')).isInteger()"), false, 'a sum is whole when both sides are');
  assert.equal(run("quantity('1k').add(2).isInteger()"), true);
});

test('what is not a quantity, or not an integer, is an evaluation error that says so', () => {
  const bad = run("quantity('lots')");
  assert.ok(isCelError(bad) && /quantities must match/.test(bad.message));
  const fraction = run("quantity('1.5').asInteger()");
  assert.ok(isCelError(fraction) && /cannot convert value to integer/.test(fraction.message));
});

test("every expression of the oracle gets the apiserver library's answer (numbers as float64, any error as an error)", () => {
  const lines = readFileSync(new URL('../../test/support/quantity-oracle/answers.tsv', import.meta.url), 'utf8').split('\n').filter(Boolean);
  assert.ok(lines.length > 1000, `${lines.length} answers`);
  const wrong: string[] = [];
  for (const line of lines) {
    const [expression, expected] = line.split('\t') as [string, string];
    const got = run(expression);
    const answer = isCelError(got) ? 'error' : String(got);
    const same = expected.startsWith('error:') ? answer === 'error' : expected === answer || (/^[-+0-9.e]+$/.test(expected) && Number(expected) === Number(answer));
    if (!same) wrong.push(`${expression}: the apiserver says ${expected}, kfn ${answer}`);
  }
  assert.deepEqual(wrong, []);
});

test('a power of ten far beyond int64: compared and tested without arithmetic, summed with it only within ±10,000 (an error beyond, not seconds of CPU)', () => {
  assert.equal(run("isQuantity('1e99999999')"), true);
  assert.equal(run("quantity('1e99999999').compareTo(quantity('1'))"), 1n);
  assert.equal(run("quantity('-1e99999999').isLessThan(quantity('-1'))"), true);
  assert.equal(run("quantity('1e-99999999').compareTo(quantity('1n'))"), 0n, 'rounded up to 1n, as the apiserver keeps it');
  assert.equal(run("quantity('1e99999999').isInteger()"), false);
  const sum = run("quantity('1e99999999').add(1)");
  assert.ok(isCelError(sum) && /beyond ±10000/.test(sum.message), String(sum));
});
