// `kfn new`: the folder it writes works at once — its unit test passes and it type-checks —
// inside this repository (in a project that depends on the packed kfn: test/e2e/package.test.ts);
// bad names are refused with what would be right, and an existing folder is never overwritten.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { checkNames, writeNewFunction } from './new.ts';

const node = join(repoRoot, 'node_modules', '.bin', 'node');
const tsc = join(repoRoot, 'node_modules', '.bin', 'tsc');
const run = (cmd: string, args: string[], cwd: string) => spawnSync(cmd, args, { cwd, encoding: 'utf8' });

test('inside the repository: a function whose unit test passes and that type-checks, importing the SDK by path', (t) => {
  const base = join(repoRoot, '.kfn', `new-test-${process.pid}`);
  mkdirSync(base, { recursive: true });
  t.after(() => rmSync(base, { recursive: true, force: true }));
  const dir = writeNewFunction({ name: 'greeter', group: 'demo.example.com', version: 'v1alpha1', kind: 'Greeting', dir: base });
  const index = readFileSync(join(dir, 'index.ts'), 'utf8');
  assert.match(index, /from '\.\.\/\.\.\/\.\.\/functions\/sdk\/index\.ts'/);
  assert.match(readFileSync(join(dir, 'samples.yaml'), 'utf8'), /apiVersion: demo\.example\.com\/v1alpha1\nkind: Greeting/);
  const unit = run(node, ['--test', join(dir, 'index.test.ts')], repoRoot);
  assert.equal(unit.status, 0, unit.stdout + unit.stderr);
  writeFileSync(join(base, 'tsconfig.json'), JSON.stringify({ extends: '../../tsconfig.json', include: ['greeter/*.ts'], exclude: [] }));
  const types = run(tsc, ['--noEmit', '-p', join(base, 'tsconfig.json')], repoRoot);
  assert.equal(types.status, 0, types.stdout);
  // kfn serve and kfn manifests take it as they take the examples.
  const manifests = run(node, [join(repoRoot, 'cli', 'kfn.ts'), 'manifests', dir], repoRoot);
  assert.equal(manifests.status, 0, manifests.stderr);
  assert.match(manifests.stdout, /name: greetings\.demo\.example\.com/);
});

test('bad names are refused, each saying what would do; an existing folder is left alone', () => {
  assert.deepEqual(checkNames({ name: 'Greeter', group: 'example', version: '1', kind: 'greeting' }).map((p) => p.split(' ')[0]), ['name', '--group', '--version', '--kind']);
  assert.match(checkNames({ name: 'x', group: 'example', version: 'v1', kind: 'X' })[0]!, /must be a DNS name with at least one dot.*e\.g\. demo\.example\.com/);
  const base = mkdtempSync(join(tmpdir(), 'kfn-new-'));
  try {
    writeNewFunction({ name: 'taken', group: 'a.b', version: 'v1', kind: 'Taken', dir: base });
    writeFileSync(join(base, 'taken', 'index.ts'), '// mine');
    assert.throws(() => writeNewFunction({ name: 'taken', group: 'a.b', version: 'v1', kind: 'Taken', dir: base }), /already exists; choose another name or remove it first/);
    assert.equal(readFileSync(join(base, 'taken', 'index.ts'), 'utf8'), '// mine');
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
