// kfn outside this repository: `npm pack` makes the kfn and create-kfn packages; in a folder of
// its own, `npm create kfn` (the create-kfn package, run by npm exec as `npm create` runs it)
// writes a project that depends on the packed kfn, and that project installs, passes its unit
// test, type-checks against the package's declarations, and runs the installed CLI (compiled
// JavaScript: Node runs no TypeScript under node_modules).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { kfnVersion, repoRoot } from '../../cluster/paths.ts';

test('a project from the packed packages: npm create kfn, npm install, npm test, the installed kfn CLI', (t) => {
  const work = mkdtempSync(join(tmpdir(), 'kfn-package-'));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  // npm and the scripts it runs use this Node (24), not an older one first on the PATH.
  // (and without NODE_TEST_CONTEXT, which would make the project's `node --test` report to this run)
  const { NODE_TEST_CONTEXT: _context, ...inherited } = process.env;
  const env = { ...inherited, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };
  const run = (cmd: string, args: string[], cwd: string) => {
    const started = Date.now();
    const out = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout: 240_000 });
    assert.equal(out.status, 0, `${cmd} ${args.join(' ')} in ${cwd} failed:\n${out.stdout}\n${out.stderr}`);
    t.diagnostic(`${cmd} ${args.slice(0, 2).join(' ')}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return out.stdout;
  };
  const packs = join(work, 'packs');
  mkdirSync(packs);
  run('npm', ['pack', '--pack-destination', packs], repoRoot);
  run('npm', ['pack', './packages/create-kfn', '--pack-destination', packs], repoRoot);
  const kfnTarball = join(packs, `kfn-${kfnVersion}.tgz`);
  const createTarball = join(packs, `create-kfn-${kfnVersion}.tgz`);
  t.diagnostic(`kfn-${kfnVersion}.tgz: ${(statSync(kfnTarball).size / 1024).toFixed(0)} KiB`);
  const created = run('npm', ['exec', '--yes', `--package=${createTarball}`, `--package=${kfnTarball}`, '--', 'create-kfn', 'my-operator', '--kfn', kfnTarball], work);
  assert.match(created, /Wrote my-operator\/: package\.json, tsconfig\.json, README\.md, functions\/greetings\//);
  const project = join(work, 'my-operator');
  const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  assert.equal(pkg.dependencies.kfn, kfnTarball);
  assert.match(readFileSync(join(project, 'functions', 'greetings', 'index.ts'), 'utf8'), /from 'kfn\/sdk'/);
  assert.match(readFileSync(join(project, 'README.md'), 'utf8'), /npm install && npm test/);

  run('npm', ['install'], project);
  const installed = join(project, 'node_modules', 'kfn');
  assert.ok(existsSync(join(installed, 'lib', 'functions', 'sdk', 'index.js')), 'the SDK is installed as JavaScript');
  assert.ok(!existsSync(join(installed, 'cli')), 'with no TypeScript sources');
  const tested = run('npm', ['test'], project);
  assert.match(tested, /pass 1/);
  run('npm', ['run', 'typecheck'], project);
  const version = run(join(project, 'node_modules', '.bin', 'kfn'), ['--version'], project);
  assert.equal(version.trim(), `kfn ${kfnVersion} (event contract v1; bridge image kfn.local/bridge:${kfnVersion})`);
  const manifests = run(join(project, 'node_modules', '.bin', 'kfn'), ['manifests', 'functions/greetings'], project);
  assert.match(manifests, /name: greetings\.my-operator\.example\.com/);
  // A second function, as the README says: the installed CLI writes it beside the first.
  run(join(project, 'node_modules', '.bin', 'kfn'), ['new', 'notes', '--group', 'my-operator.example.com', '--kind', 'Note'], project);
  run(process.execPath, ['--test', 'functions/notes/index.test.ts'], project);
});
