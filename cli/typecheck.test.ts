// A function's types are checked before kfn builds, deploys or reloads it: Node and esbuild
// strip types, so without this step `replicas: String(size)` ships. Each case is a real project
// folder the real compiler checks: under the checkout's .kfn/, so that the project finds the
// typescript package kfn is developed with, as a user's project finds its own.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { workRoot } from '../cluster/paths.ts';
import { buildCommand } from './build.ts';
import { UsageError } from './command.ts';
import { checkFunctionTypes } from './typecheck.ts';

mkdirSync(workRoot, { recursive: true });
const root = mkdtempSync(join(workRoot, 'typecheck-test-'));
after(() => rmSync(root, { recursive: true, force: true }));

const tsconfig = JSON.stringify({ compilerOptions: { strict: true, noEmit: true, target: 'esnext', module: 'nodenext', types: [], allowImportingTsExtensions: true }, include: ['functions'] });

/** A project holding these files (its tsconfig.json unless given); the project's folder. */
function project(name: string, files: Record<string, string>, under = root): string {
  const dir = join(under, name);
  for (const [file, text] of Object.entries({ 'tsconfig.json': tsconfig, ...files })) {
    mkdirSync(join(dir, file, '..'), { recursive: true });
    writeFileSync(join(dir, file), text);
  }
  return dir;
}

// The module loads (Node strips the types) but does not type-check.
const broken = "const size = 3;\nconst spec: { replicas: number } = { replicas: String(size) };\nexport default spec;\n";

test('a function with a type error fails the check, said as file:line:column: message', async () => {
  const dir = project('broken', { 'functions/web/index.ts': broken });
  await assert.rejects(checkFunctionTypes('build', [join(dir, 'functions', 'web')]), (err) => {
    assert.ok(err instanceof UsageError, String(err));
    assert.equal(err.exitCode, 1);
    assert.match(err.message, /functions\/web\/index\.ts:2:38: Type 'string' is not assignable to type 'number'\. \(TS2322\)/);
    assert.match(err.message, /--no-typecheck/);
    return true;
  });
});

test('a type error in a module the function imports is found too; files beside it that it does not import are not checked', async () => {
  const dir = project('imports', {
    'functions/web/index.ts': "import { replicas } from './spec.ts';\nexport default { replicas };\n",
    'functions/web/spec.ts': 'export const replicas: number = String(3);\n',
    'functions/web/notes.ts': 'export const unrelated: number = "not checked";\n',
  });
  await assert.rejects(checkFunctionTypes('build', [join(dir, 'functions', 'web')]), (err: Error) => {
    assert.match(err.message, /functions\/web\/spec\.ts:1:14: Type 'string' is not assignable to type 'number'/);
    assert.doesNotMatch(err.message, /notes\.ts/);
    return true;
  });
});

test('a function that type-checks passes, and says how long the check took', async () => {
  const dir = project('fine', { 'functions/web/index.ts': 'const size = 3;\nexport default { replicas: size };\n' });
  const said: string[] = [];
  await checkFunctionTypes('build', [join(dir, 'functions', 'web')], { log: (line) => said.push(line) });
  assert.match(said.join('\n'), /^Types checked: \S*fine\/functions\/web \(\S*fine\/tsconfig\.json, [\d.]+ s\)$/);
});

test('a project without the typescript package is told to install it, or to pass --no-typecheck', async (t) => {
  const outside = mkdtempSync(join(tmpdir(), 'kfn-typecheck-'));
  t.after(() => rmSync(outside, { recursive: true, force: true }));
  const dir = project('bare', { 'functions/web/index.ts': broken }, outside);
  await assert.rejects(checkFunctionTypes('deploy', [join(dir, 'functions', 'web')]), (err: Error) => /kfn deploy: .*typescript.*npm install --save-dev typescript.*--no-typecheck/s.test(err.message));
});

test('kfn build checks the types before it builds; --no-typecheck skips the check', async () => {
  const dir = join(project('build', { 'functions/web/index.ts': broken }), 'functions', 'web');
  await assert.rejects(buildCommand.run([dir]), (err: Error) => /index\.ts:2:38: Type 'string' is not assignable/.test(err.message));
  // Skipped, the build goes on to load the function, which is no reconciler: that is the error now.
  await assert.rejects(buildCommand.run(['--no-typecheck', dir]), (err: Error) => /must export default defineReconciler/.test(err.message));
});
