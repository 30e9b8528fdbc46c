import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { isUserFile, stackFrames, userFirstStack } from './stack.ts';

const sdk = join(import.meta.dirname, 'runtime.ts');

/** An error whose stack is `frames`, innermost first, as V8 writes them. */
function thrown(message: string, frames: string[]): Error {
  const err = new Error(message);
  err.stack = [`Error: ${message}`, ...frames.map((f) => `    at ${f}`)].join('\n');
  return err;
}

test("a user's function, an example beside the SDK, is user code; kfn's rooms, packages and Node are not", () => {
  assert.equal(isUserFile('/home/me/op/functions/web/index.ts'), true);
  assert.equal(isUserFile(join(import.meta.dirname, '..', 'myweb', 'index.ts')), true);
  assert.equal(isUserFile(sdk), false);
  assert.equal(isUserFile('/home/me/op/node_modules/kfn/lib/functions/sdk/runtime.js'), false);
  assert.equal(isUserFile('/app/functions/sdk/runtime.ts'), false, "a bundle's source-mapped SDK");
  assert.equal(isUserFile('node:internal/process/task_queues'), false);
});

test("a reconcile's stack starts with the user's frames; kfn's follow, Node's internals are counted, not shown", () => {
  const err = thrown('no port', [
    `checkDeclared (${sdk}:40:11)`,
    'web (file:///home/me/op/functions/web/index.ts:12:5)',
    `Invocation.reconcile (${sdk}:370:9)`,
    'process.processTicksAndRejections (node:internal/process/task_queues:105:5)',
    'async reconcile (/home/me/op/functions/web/index.ts:30:3)',
  ]);
  assert.equal(
    userFirstStack(err),
    [
      'Error: no port',
      '    at web (file:///home/me/op/functions/web/index.ts:12:5)',
      '    at async reconcile (/home/me/op/functions/web/index.ts:30:3)',
      `    at checkDeclared (${sdk}:40:11)`,
      `    at Invocation.reconcile (${sdk}:370:9)`,
      '    … 1 more in Node',
    ].join('\n'),
  );
});

test("kfn's wrapper names the step; the stack shown is the user's error's", () => {
  const cause = thrown('boom', ['reconcile (/home/me/op/functions/web/index.ts:7:11)']);
  const wrapper = new Error('reconcile for MyWeb default/x failed: boom', { cause });
  assert.equal(userFirstStack(wrapper), ['reconcile for MyWeb default/x failed: boom', 'caused by Error: boom', '    at reconcile (/home/me/op/functions/web/index.ts:7:11)'].join('\n'));
});

test('frames give their file, line and column', () => {
  const [f] = stackFrames(thrown('x', ['file:///tmp/fn/index.ts:3:7']).stack!);
  assert.deepEqual(f, { text: 'at file:///tmp/fn/index.ts:3:7', file: '/tmp/fn/index.ts', line: 3, column: 7, user: true });
});
