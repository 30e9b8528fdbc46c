// `kfn init` / `npm create kfn`: the project it writes declares the Node it runs on and gets it
// (kfn's own pinned Node, as a devDependency), stops an older Node at `npm test` with one line,
// runs every function's tests with a bare `node --test` (those `kfn new` adds later too), and
// its unit test holds samples.yaml to the kind's schema. No cluster and no registry: the
// project's `kfn` is this checkout's SDK; the packed, installed project is
// test/e2e/package.serial.test.ts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../cluster/paths.ts';
import { UsageError } from './command.ts';
import { deployCommand } from './deploy.ts';
import { writeProject } from './init.ts';
import { writeNewFunction } from './new.ts';

const node24 = join(repoRoot, 'node_modules', '.bin', 'node');
const kfnPackage = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
// Without NODE_TEST_CONTEXT, which would make a project's `node --test` report to this run.
const { NODE_TEST_CONTEXT: _context, ...env } = process.env;

function tempDir(t: TestContext, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The first `node` on the PATH that is not this checkout's pinned one: the machine's own Node, if it has one. */
function systemNode(): { path: string; major: number } | undefined {
  const dirs = (process.env.PATH ?? '').split(delimiter).filter((d) => d && !d.startsWith(join(repoRoot, 'node_modules')));
  const found = spawnSync('sh', ['-c', 'command -v node'], { env: { ...env, PATH: dirs.join(delimiter) }, encoding: 'utf8' }).stdout.trim();
  if (!found) return undefined;
  const version = spawnSync(found, ['--version'], { encoding: 'utf8' }).stdout.trim();
  return { path: found, major: Number(version.replace(/^v/, '').split('.')[0]) };
}

/**
 * A project as `kfn init` writes it, whose `kfn` dependency is this checkout's SDK: a stand-in
 * package linked into node_modules (its real path is outside node_modules, where Node strips
 * types), exporting `kfn/sdk` and `kfn/sdk/testing` as the package does.
 */
function projectWithSdk(t: TestContext): { dir: string; functionDir: string } {
  const base = tempDir(t, 'kfn-init-');
  const stand = join(base, 'kfn');
  mkdirSync(stand);
  writeFileSync(join(stand, 'package.json'), JSON.stringify({ name: 'kfn', type: 'module', exports: { './sdk': './sdk.ts', './sdk/testing': './testing.ts' } }));
  writeFileSync(join(stand, 'sdk.ts'), `export * from '${pathToFileURL(join(repoRoot, 'functions', 'sdk', 'index.ts')).href}';\n`);
  writeFileSync(join(stand, 'testing.ts'), `export * from '${pathToFileURL(join(repoRoot, 'functions', 'sdk', 'testing.ts')).href}';\n`);
  const project = writeProject({ dir: join(base, 'my-operator') });
  mkdirSync(join(project.dir, 'node_modules'));
  symlinkSync(stand, join(project.dir, 'node_modules', 'kfn'));
  return project;
}

const runTests = (dir: string) => spawnSync(node24, ['--test'], { cwd: dir, env, encoding: 'utf8' });

test('package.json: engines Node 24, kfn\'s own pinned Node and TypeScript as devDependencies (its install script allowed), a Node check, then the types, before `node --test`', (t) => {
  const { dir } = writeProject({ dir: join(tempDir(t, 'kfn-init-'), 'my-operator') });
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { engines: Record<string, string>; scripts: Record<string, string>; devDependencies: Record<string, string>; allowScripts: Record<string, boolean> };
  assert.deepEqual(pkg.engines, { node: '>=24' });
  assert.equal(pkg.devDependencies.node, kfnPackage.devDependencies.node, 'the Node kfn itself is tested on');
  assert.equal(pkg.allowScripts.node, true, 'the node package fetches its binary in an install script');
  // The Node check first, in the test script itself: npm skips a pretest under --ignore-scripts,
  // which is also how the project's Node goes missing. Then the types: Node runs the tests with
  // their types removed, so a type error would pass.
  assert.equal(pkg.scripts.test, 'node scripts/check-node.test.mjs && tsc -p tsconfig.json && node --test');
  assert.equal(pkg.scripts.pretest, undefined);
  assert.equal(pkg.devDependencies.typescript, kfnPackage.devDependencies.typescript, 'the compiler kfn itself is checked with (kfn build, deploy and dev run it too)');
  assert.match(readFileSync(join(dir, 'README.md'), 'utf8'), /Node\.js 24/);
});

test('npm run deploy: a registry for the user to fill in, said so by kfn deploy (what to write, where) until it is, before any build or cluster', async (t) => {
  const { dir } = writeProject({ dir: join(tempDir(t, 'kfn-init-'), 'my-operator') });
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  // A word the shell passes as it is (a <placeholder> would be a redirection).
  assert.equal(pkg.scripts.deploy, 'kfn deploy functions/greetings --registry YOUR_REGISTRY');
  const argv = pkg.scripts.deploy.split(' ').slice(2).map((arg) => (arg.startsWith('functions/') ? join(dir, arg) : arg));
  await assert.rejects(deployCommand.run(argv), (err: Error) => {
    assert.ok(err instanceof UsageError, err.stack);
    assert.match(err.message, /^kfn deploy: --registry YOUR_REGISTRY is a placeholder: .*package\.json's "deploy" script/);
    assert.match(err.message, /host\[:port\]\[\/path\]/, 'what to write');
    assert.match(err.message, /npm run deploy -- --registry R/, 'or one for this run');
    return true;
  });
  // `npm run deploy -- --registry R` puts R after the placeholder: the last one counts.
  await assert.rejects(deployCommand.run([...argv, '--registry', 'Not/A_Registry']), /^Error: --registry must be local or host\[:port\]\[\/path\] .*not "Not\/A_Registry"/);
  assert.match(readFileSync(join(dir, 'README.md'), 'utf8'), /YOUR_REGISTRY/, 'the README says to fill it in');
});

test('the Node check: Node 24 goes on silently; an older Node stops `npm test` with one line saying which Node ran and what to do', (t) => {
  const { dir } = writeProject({ dir: join(tempDir(t, 'kfn-init-'), 'my-operator') });
  const check = join(dir, 'scripts', 'check-node.test.mjs');
  const ok = spawnSync(node24, [check], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
  assert.equal(ok.stdout + ok.stderr, '');
  // The machine's own Node when it is older (as on many machines), else an older one simulated.
  const older = systemNode();
  const run = older && older.major < 24
    ? spawnSync(older.path, [check], { encoding: 'utf8' })
    : spawnSync(node24, ['--import', `data:text/javascript,Object.defineProperty(process.versions, 'node', { value: '20.20.2' })`, check], { encoding: 'utf8' });
  t.diagnostic(older && older.major < 24 ? `ran by ${older.path} (Node ${older.major})` : 'Node 20 simulated');
  assert.equal(run.status, 1);
  const lines = run.stderr.trim().split('\n');
  assert.equal(lines.length, 1, run.stderr);
  assert.match(lines[0]!, /^This project needs Node\.js 24 or later .* this is Node\.js 20\.\d+\.\d+\. .*npm install/);
  assert.doesNotMatch(run.stderr, /ERR_UNKNOWN_FILE_EXTENSION/);
});

test('a bare `node --test` on an older Node, which finds no *.test.ts, fails with the Node check\'s line instead of passing with no tests', (t) => {
  const { dir } = writeProject({ dir: join(tempDir(t, 'kfn-init-'), 'my-operator') });
  const older = systemNode();
  let run;
  if (older && older.major < 24) {
    run = spawnSync(older.path, ['--test'], { cwd: dir, env, encoding: 'utf8' });
  } else {
    // Node 24 finds the *.test.ts too, which would fail here for want of kfn in node_modules.
    rmSync(join(dir, 'functions'), { recursive: true });
    run = spawnSync(node24, ['--import', `data:text/javascript,Object.defineProperty(process.versions, 'node', { value: '20.20.2' })`, '--test'], { cwd: dir, env, encoding: 'utf8' });
  }
  t.diagnostic(older && older.major < 24 ? `ran by ${older.path} (Node ${older.major})` : 'Node 20 simulated');
  assert.equal(run.status, 1, run.stdout + run.stderr);
  assert.match(run.stdout + run.stderr, /This project needs Node\.js 24 or later .* this is Node\.js 20\.\d+\.\d+\. .*npm install/);
});

test('`node --test` runs the first function\'s tests and those of a function `kfn new` adds; a sample that breaks the schema fails, naming the field', (t) => {
  const { dir, functionDir } = projectWithSdk(t);
  const first = runTests(dir);
  assert.equal(first.status, 0, first.stdout + first.stderr);
  assert.match(first.stdout, /^ℹ pass 3$/m, 'the Node check, the reconcile test and the samples test');
  writeNewFunction({ name: 'notes', group: 'my-operator.example.com', version: 'v1alpha1', kind: 'Note', dir: join(dir, 'functions') });
  const both = runTests(dir);
  assert.equal(both.status, 0, both.stdout + both.stderr);
  assert.match(both.stdout, /^ℹ pass 5$/m, 'the Node check and both functions\' tests, found by Node\'s default pattern');
  writeFileSync(join(functionDir, 'samples.yaml'), readFileSync(join(functionDir, 'samples.yaml'), 'utf8').replace(/message: .*/, 'message: ""\n  colour: red'));
  const broken = runTests(dir);
  assert.equal(broken.status, 1, broken.stdout);
  assert.match(broken.stdout, /Greeting first spec\.message: /);
  assert.match(broken.stdout, /Greeting first spec\.colour: not a field of Greeting's spec/);
});

test('npm create kfn: on Node 20 to 23 it writes the project (which brings its own Node 24) and says so; an older Node gets one line', (t) => {
  // create-kfn as npm installs it: beside a kfn whose CLI here only records how it was run.
  const base = tempDir(t, 'kfn-create-');
  const create = join(base, 'node_modules', 'create-kfn');
  const kfn = join(base, 'node_modules', 'kfn');
  cpSync(join(repoRoot, 'packages', 'create-kfn'), create, { recursive: true });
  mkdirSync(join(kfn, 'lib', 'cli'), { recursive: true });
  writeFileSync(join(kfn, 'package.json'), JSON.stringify({ name: 'kfn', version: '0.0.0', type: 'module' }));
  writeFileSync(join(kfn, 'lib', 'cli', 'kfn.js'), `console.log('kfn', process.versions.node, process.argv.slice(2).join(' '));\n`);
  chmodSync(join(create, 'index.mjs'), 0o755);
  const simulate = (version: string) => ['--import', `data:text/javascript,Object.defineProperty(process.versions, 'node', { value: '${version}' })`];
  const on20 = spawnSync(node24, [...simulate('20.20.2'), join(create, 'index.mjs'), 'my-operator', '--kind', 'Note'], { cwd: base, encoding: 'utf8' });
  assert.equal(on20.status, 0, on20.stderr);
  assert.match(on20.stdout, /^kfn \S+ init my-operator --kind Note$/m, 'kfn\'s compiled CLI runs init on this Node: it only writes files');
  assert.match(on20.stderr, /Node\.js 20\.20\.2 here: the project brings its own Node\.js 24/);
  const on24 = spawnSync(node24, [join(create, 'index.mjs'), 'my-operator'], { cwd: base, encoding: 'utf8' });
  assert.equal(on24.status, 0, on24.stderr);
  assert.equal(on24.stderr, '');
  const on18 = spawnSync(node24, [...simulate('18.20.0'), join(create, 'index.mjs'), 'my-operator'], { cwd: base, encoding: 'utf8' });
  assert.equal(on18.status, 1);
  assert.equal(on18.stdout, '', 'nothing written');
  assert.match(on18.stderr.trim(), /^npm create kfn needs Node\.js 20\.11 or later to write a project; this is Node\.js 18\.20\.0\. Install Node\.js 24 and run it again\.$/);
});
