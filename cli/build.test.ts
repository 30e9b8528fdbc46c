// `kfn build`: the target defaults to the only one there is, and the functions to every one, as
// kfn dev's and kfn manifests' do.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { buildCommand } from './build.ts';
import { functionDirs, loadFunction } from './functions.ts';
import { UsageError } from './command.ts';

test('kfn build without --target builds the Lambda package, the only target there is', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'kfn-build-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  assert.equal(await buildCommand.run([join(repoRoot, 'functions', 'myweb'), '--out', out]), 0);
  assert.ok(existsSync(join(out, 'myweb.zip')));
});

test('kfn build --target with another target says which there is', async () => {
  await assert.rejects(buildCommand.run(['--target', 'image', join(repoRoot, 'functions', 'myweb')]), (err) => err instanceof UsageError && /--target lambda/.test(err.message) && /kfn image build/.test(err.message));
});

test('kfn build with no function named builds every function, as kfn dev and kfn manifests take them', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'kfn-build-all-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  assert.equal(await buildCommand.run(['--out', out, '--no-typecheck']), 0);
  const names = await Promise.all(functionDirs().map(async (dir) => (await loadFunction(dir)).name));
  assert.ok(names.length > 1);
  assert.deepEqual(readdirSync(out).sort(), names.map((name) => `${name}.zip`).sort());
});
