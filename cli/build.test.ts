// `kfn build`: the target defaults to the only one there is.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { buildCommand } from './build.ts';
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
