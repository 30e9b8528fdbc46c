// The runner's closing summary: each failed test named under its suites, with its error's start.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TestEvent } from 'node:test/reporters';
import countReporter, { errorHead } from '../support/count-reporter.ts';

async function* events(list: unknown[]): AsyncGenerator<TestEvent> {
  for (const e of list) yield e as TestEvent;
}

test('a failed test is named under its suites, with the message node:test wrapped', async () => {
  const file = '/repo/test/x.test.ts';
  const start = (name: string, nesting: number) => ({ type: 'test:start', data: { file, name, nesting } });
  const wrapped = Object.assign(new Error('test failed'), { cause: new Error('one is not two\n\n1 !== 2\n') });
  const out: string[] = [];
  for await (const line of countReporter(events([
    start('outer', 0),
    start('good', 1),
    start('bad', 1),
    { type: 'test:pass', data: { file, name: 'good', nesting: 1, details: { type: 'test' } } },
    { type: 'test:fail', data: { file, name: 'bad', nesting: 1, details: { type: 'test', error: wrapped } } },
    { type: 'test:fail', data: { file, name: 'outer', nesting: 0, details: { type: 'suite', error: new Error('1 subtest failed') } } },
  ]))) out.push(line);
  assert.deepEqual(JSON.parse(out.join('')), { passed: 1, failed: 1, skipped: 0, failures: [{ file, name: 'outer > bad', error: 'one is not two\n\n1 !== 2' }] });
});

test('a long error keeps its first lines and says how many it left out', () => {
  const long = Array.from({ length: 20 }, (_, i) => `line ${i}`).join('\n');
  assert.equal(errorHead(new Error(long), 3), 'line 0\nline 1\nline 2\n… (17 more lines)');
  assert.equal(errorHead('thrown text'), 'thrown text');
});
