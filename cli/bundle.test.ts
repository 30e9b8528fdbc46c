// A function's bundle (its image's and its Lambda zip's): what every cold start parses is the
// function and the SDK, not @kubernetes/client-node, which only exec credential plugins need.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { bundleFunction } from './bundle.ts';

test('a function bundle leaves @kubernetes/client-node to a chunk loaded on demand', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-bundle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const entry = join(dir, 'fn.ts');
  writeFileSync(entry, `import reconciler from ${JSON.stringify(join(repoRoot, 'functions', 'myweb', 'index.ts'))};\nimport { runInContainer } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'node', 'index.ts'))};\nawait runInContainer(reconciler);\n`);
  const files = await bundleFunction(entry, join(dir, 'out'));
  assert.ok(files.includes('fn.mjs'), `the entry is fn.mjs (${files.join(', ')})`);
  const entrySize = statSync(join(dir, 'out', 'fn.mjs')).size;
  assert.ok(entrySize < 3 * 2 ** 20, `fn.mjs is ${(entrySize / 2 ** 20).toFixed(1)} MiB: the client library is not in it`);
  const holder = files.find((f) => f !== 'fn.mjs' && readFileSync(join(dir, 'out', f), 'utf8').includes('var KubeConfig'));
  assert.ok(holder, 'a chunk beside it holds the client library');
  assert.ok(!readFileSync(join(dir, 'out', 'fn.mjs'), 'utf8').includes('var KubeConfig'));
});
