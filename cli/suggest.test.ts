// "Did you mean": a mistyped command or flag is answered with the one it most likely meant.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { parseCommandArgs, UsageError } from './command.ts';
import { closest, editDistance } from './suggest.ts';

test('edit distance counts insertions, deletions, substitutions and swaps of neighbours as one each', () => {
  assert.equal(editDistance('deploy', 'deploy'), 0);
  assert.equal(editDistance('deplyo', 'deploy'), 1); // a swap, not two substitutions
  assert.equal(editDistance('regsitry', 'registry'), 1);
  assert.equal(editDistance('dep', 'deploy'), 3);
  assert.equal(editDistance('', 'abc'), 3);
  assert.equal(editDistance('kitten', 'sitting'), 3);
});

test('the closest candidate within two edits, or the one the input begins', () => {
  const commands = ['demo', 'cluster', 'bridge', 'serve', 'deploy', 'undeploy', 'build', 'dev', 'diff', 'manifests'];
  assert.equal(closest('deplyo', commands), 'deploy');
  assert.equal(closest('biuld', commands), 'build');
  assert.equal(closest('mani', commands), 'manifests'); // a prefix of one command
  assert.equal(closest('DEV', commands), 'dev');
  assert.equal(closest('d', commands), undefined); // begins four: no guess
  assert.equal(closest('x', commands), undefined); // two edits from anything short is no likeness
  assert.equal(closest('kubernetes', commands), undefined);
});

test('an unknown flag is named, with the accepted one it most likely meant', () => {
  const options = { registry: { type: 'string' }, all: { type: 'boolean' }, namespace: { type: 'string', short: 'n' } } as const;
  const refused = (argv: string[]) => {
    try {
      parseCommandArgs('deploy', argv, options, true);
    } catch (err) {
      assert.ok(err instanceof UsageError);
      return err.message;
    }
    assert.fail(`${argv.join(' ')} was accepted`);
  };
  assert.match(refused(['--regsitry', 'x', 'functions/myweb']), /^kfn deploy: unknown flag --regsitry — did you mean --registry\?\nRun `kfn deploy --help` for usage\.$/);
  assert.match(refused(['--regsitry=x']), /unknown flag --regsitry — did you mean --registry\?/);
  assert.match(refused(['--colour']), /^kfn deploy: unknown flag --colour\nRun `kfn deploy --help` for usage\.$/);
  assert.match(refused(['-x']), /^kfn deploy: unknown flag -x\n/);
  // Other parse errors keep parseArgs' own words.
  assert.match(refused(['--registry']), /kfn deploy: .*--registry/);
});

test('kfn with an unknown command suggests the one it most likely meant', () => {
  const run = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { encoding: 'utf8' });
  const typo = run('deplyo');
  assert.equal(typo.status, 2);
  assert.equal(typo.stderr.split('\n')[0], 'kfn: unknown command "deplyo" — did you mean "deploy"?');
  const unknown = run('frobnicate');
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /^kfn: unknown command "frobnicate"\n[\s\S]*Commands:/);
});

test('a command with commands of its own suggests the one it most likely meant: kfn image, kfn cluster', () => {
  const run = (...args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { encoding: 'utf8' });
  const image = run('image', 'buidl');
  assert.equal(image.status, 2);
  assert.equal(image.stderr.split('\n')[0], 'kfn image: unknown command "buidl" — did you mean "build"?');
  const cluster = run('cluster', 'dwon');
  assert.equal(cluster.status, 2);
  assert.equal(cluster.stderr.split('\n')[0], 'kfn cluster: unknown command "dwon" — did you mean "down"?');
});
