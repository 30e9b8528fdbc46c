// docs/getting-started.md's marked blocks, which test/e2e/package.serial.test.ts runs as a new
// user would: found, well formed, and naming the tarballs of this version — checked here without
// a cluster, so a doc edit that breaks them fails in seconds rather than in the end-to-end run.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { kfnVersion, repoRoot } from '../../cluster/paths.ts';
import { markedBlocks, userPath } from '../support/getting-started.ts';

const doc = readFileSync(join(repoRoot, 'docs', 'getting-started.md'), 'utf8');

test('getting-started marks the steps a new user runs, from an empty folder to a tested project', () => {
  const { run, write } = markedBlocks(doc);
  const script = run.map((b) => b.code).join('\n');
  assert.ok(run.length > 0, 'blocks to run');
  assert.match(script, /^git clone /m, 'it starts from nothing: the repository is cloned');
  assert.ok(script.indexOf('npm ci') >= 0 && script.indexOf('npm ci') < script.indexOf('npm pack'), 'npm ci before npm pack: packing compiles kfn with the Node npm ci installs');
  assert.match(script, /npm install && npm test/);
  const versions = [...script.matchAll(/\bkfn-([^\s"'/]+)\.tgz/g)].map((m) => m[1]);
  assert.ok(versions.length > 0);
  assert.deepEqual([...new Set(versions)], [kfnVersion], `the tarballs it names are this version's, ${kfnVersion}`);
  assert.deepEqual(write.map((b) => b.path), ['functions/greetings/defaults.test.ts']);
  assert.match(write[0]!.code, /testReconcile/);
});

test('a marker must stand above the kind of block it names, and a written block names its file', () => {
  assert.throws(() => markedBlocks('<!-- run by test/e2e/package.serial.test.ts, as written -->\n```ts\nx\n```\n'), /must stand right above a ```sh block/);
  assert.throws(() => markedBlocks('<!-- written into the project by test/e2e/package.serial.test.ts -->\n```ts\nconst x = 1;\n```\n'), /names its file/);
  assert.deepEqual(markedBlocks('a\n<!-- run by test/e2e/package.serial.test.ts, as written -->\n```sh\necho 1\necho 2\n```\n```sh\nnot marked\n```\n'), { run: [{ line: 4, code: 'echo 1\necho 2' }], write: [] });
});

test('a user\'s PATH has none of what npm put first for the script running the tests', () => {
  assert.equal(userPath('/usr/lib/node_modules/npm/node_modules/@npmcli/run-script/lib/node-gyp-bin:/work/kfn/node_modules/.bin:/node_modules/.bin:/usr/local/bin:/usr/bin'), '/usr/local/bin:/usr/bin');
});
