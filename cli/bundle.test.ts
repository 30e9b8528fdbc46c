// A function's bundle (its image's and its Lambda zip's): what every cold start parses is the
// function and the SDK, not @kubernetes/client-node, which only exec credential plugins need.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
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

test("a deployed function's stack names the user's file and line: the bundle's source map, read when it throws", async (t) => {
  // Built in a project of its own (the cwd), as `kfn deploy` builds one.
  const project = mkdtempSync(join(tmpdir(), 'kfn-bundle-project-'));
  const cwd = process.cwd();
  process.chdir(project);
  t.after(() => {
    process.chdir(cwd);
    rmSync(project, { recursive: true, force: true });
  });
  mkdirSync(join(project, 'functions', 'site'), { recursive: true });
  writeFileSync(join(project, 'functions', 'site', 'index.ts'), ['// line 1', 'export function reconcile(): never {', "  throw new Error('the page is missing');", '}', ''].join('\n'));
  const entry = join(project, 'entry.ts');
  writeFileSync(entry, `import { reconcile } from './functions/site/index.ts';\nimport { userFirstStack } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'stack.ts'))};\nexport function run(): string {\n  try {\n    reconcile();\n    return 'no error';\n  } catch (err) {\n    return userFirstStack(err);\n  }\n}\n`);
  const out = join(project, '.kfn', 'build', 'fn-site', 'app');
  const files = await bundleFunction(entry, out, 'node24', { sourceMaps: true });
  assert.ok(files.includes('entry.mjs.map'), `a map beside the bundle (${files.join(', ')})`);
  const map = JSON.parse(readFileSync(join(out, 'entry.mjs.map'), 'utf8')) as { sources: string[]; sourcesContent?: unknown };
  assert.ok(map.sources.includes('functions/site/index.ts'), `sources relative to the project: ${map.sources.join(', ')}`);
  assert.equal(map.sourcesContent, undefined, 'no sources in it');
  const { run } = (await import(pathToFileURL(join(out, 'entry.mjs')).href)) as { run: () => string };
  const stack = run();
  assert.match(stack.split('\n')[1]!, /at reconcile \(functions\/site\/index\.ts:3:\d+\)/, stack);
});
