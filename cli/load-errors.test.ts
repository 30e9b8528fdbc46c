// A function that does not load is reported with its file, line and column, the source line and
// a caret, for each way Node 24 refuses a module: each case is a real folder Node really loads.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { describeBuildError, describeLoadError } from './load-errors.ts';
import { loadFunction } from './functions.ts';

const root = mkdtempSync(join(tmpdir(), 'kfn-load-errors-'));
after(() => rmSync(root, { recursive: true, force: true }));
const sdk = pathToFileURL(join(import.meta.dirname, '..', 'functions', 'sdk', 'index.ts')).href;

/** A function folder holding these files; its index.ts's path. */
function folder(name: string, files: Record<string, string>): string {
  const dir = join(root, name);
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(join(dir, file, '..'), { recursive: true });
    writeFileSync(join(dir, file), text);
  }
  return join(dir, 'index.ts');
}

/** What kfn says when Node fails to import this folder's index.ts. */
async function said(name: string, files: Record<string, string>): Promise<string> {
  const entry = folder(name, files);
  const err = await import(pathToFileURL(entry).href).then(() => assert.fail(`${name} loaded`), (e: unknown) => e);
  return describeLoadError(err, entry);
}

test('a syntax error: file, line and column, the line and a caret', async () => {
  const text = await said('syntax', { 'index.ts': 'const a = 1;\nexport default {\n  reconcile() { return a +; },\n};\n' });
  assert.equal(text, [`${root}/syntax/index.ts:3:27: Expression expected (a TypeScript syntax error)`, '    3 |   reconcile() { return a +; },', '      |                           ^'].join('\n'));
});

test('a syntax error in a module the function imports names that module', async () => {
  const text = await said('nested', { 'index.ts': "import f from './helper.ts';\nexport default f;\n", 'helper.ts': 'export default function f(x: number) {\n  return x +;\n}\n' });
  assert.match(text, new RegExp(`^${root}/nested/helper\\.ts:2:13: Expression expected`));
  assert.match(text, /\n {4}2 \| {3}return x \+;\n {6}\| {13}\^$/);
});

test('a JavaScript syntax error Node reports without a place is found all the same', async () => {
  const text = await said('redeclared', { 'index.ts': 'export default {};\nlet a = 1;\nlet a = 2;\n' });
  assert.equal(text, [`${root}/redeclared/index.ts:3:5: Identifier 'a' has already been declared`, '    3 | let a = 2;', '      |     ^'].join('\n'));
});

test("syntax type stripping refuses: an enum, a parameter property, a namespace, with what to write instead", async () => {
  const enumText = await said('enum', { 'index.ts': "// colours\nenum Color { Red, Green }\nexport default Color;\n" });
  assert.equal(
    enumText,
    [
      `${root}/enum/index.ts:2:1: TypeScript enum is not supported in strip-only mode`,
      '    2 | enum Color { Red, Green }',
      '      | ^^^^^^^^^^^^^^^^^^^^^^^^^',
      'Node runs TypeScript by removing its types, so only syntax that erases works: use a union of string literals, or an object `as const`, instead of an enum.',
    ].join('\n'),
  );
  const property = await said('property', { 'index.ts': 'class A {\n  constructor(private readonly x: number) {}\n}\nexport default A;\n' });
  assert.match(property, /property\/index\.ts:2:32: TypeScript parameter property is not supported in strip-only mode\n {4}2 \| .*\n {6}\| {32}\^{9}\n.*a field declared in the class and assigned in the constructor, instead of a parameter property/);
  const namespace = await said('namespace', { 'index.ts': 'namespace N { export const a = 1; }\nexport default N;\n' });
  assert.match(namespace, /namespace\/index\.ts:1:1: TypeScript namespace declaration is not supported in strip-only mode\n[^]*a module of its own, or a plain object/);
});

test('an import without its .ts extension: the import, and the name to write', async () => {
  const text = await said('noext', { 'index.ts': "// the helper\nimport helper from './helper';\nexport default helper;\n", 'helper.ts': 'export default 1;\n' });
  assert.equal(
    text,
    [
      `${root}/noext/index.ts:2:21: Cannot find module './helper'`,
      "    2 | import helper from './helper';",
      '      |                     ^^^^^^^^',
      "Write './helper.ts': Node resolves an import as it is written, with no extension added.",
    ].join('\n'),
  );
  const js = await said('jsext', { 'index.ts': "import helper from './helper.js';\nexport default helper;\n", 'helper.ts': 'export default 1;\n' });
  assert.match(js, /jsext\/index\.ts:1:21: Cannot find module '\.\/helper\.js'\n[^]*Write '\.\/helper\.ts': Node runs the \.ts file as it is and does not map \.js to \.ts\.$/);
  const dir = await said('dirimport', { 'index.ts': "import lib from './lib';\nexport default lib;\n", 'lib/index.ts': 'export default 1;\n' });
  assert.match(dir, /dirimport\/index\.ts:1:18: Cannot import the folder '\.\/lib'\n[^]*Write '\.\/lib\/index\.ts': Node does not look for an index file in a folder\.$/);
});

test('a missing module or package: the import that names it', async () => {
  const file = await said('missing', { 'index.ts': "import helper from './nothere.ts';\nexport default helper;\n" });
  assert.match(file, /missing\/index\.ts:1:21: Cannot find module '\.\/nothere\.ts'\n {4}1 \| .*\n {6}\| {21}\^{12}\nThere is no such file: .*missing\/nothere\.ts\.$/);
  const pkg = await said('package', { 'index.ts': "import { leftPad } from 'left-pad-not-installed/sub';\nexport default leftPad;\n" });
  assert.match(pkg, /package\/index\.ts:1:26: Cannot find package 'left-pad-not-installed'\n[^]*Install it \(npm install left-pad-not-installed\), or check its name: Node looked in node_modules in .*package and every folder above\.$/);
});

test('an error thrown while the module runs points at its line in the user\'s code', async () => {
  const text = await said('throws', { 'index.ts': "const port = Number('x');\nif (Number.isNaN(port)) throw new Error('PORT is not a number');\nexport default port;\n" });
  assert.equal(text, [`${root}/throws/index.ts:2:31: PORT is not a number`, "    2 | if (Number.isNaN(port)) throw new Error('PORT is not a number');", '      |                               ^'].join('\n'));
});

test('a kind the apiserver would refuse is refused where it is defined', async () => {
  const text = await said('badkind', {
    'index.ts': `import { defineKind, t } from '${sdk}';\nexport const Thing = defineKind({\n  group: 'demo.example.com', version: 'v1', kind: 'Thing',\n  spec: t.Object({ replicas: t.Integer({ minimum: 1, default: 0 }) }),\n  status: t.Object({}),\n});\n`,
  });
  assert.match(text, new RegExp(`^${root}/badkind/index\\.ts:2:22: the apiserver would refuse the CRD of Thing \\(demo\\.example\\.com\\):\n  spec\\.properties\\.replicas\\.default: 0 is below minimum 1\n {4}2 \\| export const Thing = defineKind\\(\\{\n {6}\\| {22}\\^$`));
});

test('a rule that is not CEL is refused when the function loads, with its file and its place in the schema', async () => {
  const entry = folder('badrule', {
    'index.ts': `import { defineKind, defineReconciler, t } from '${sdk}';\nexport const Thing = defineKind({\n  group: 'demo.example.com', version: 'v1', kind: 'Thing',\n  spec: t.Object({ n: t.Integer({ 'x-kubernetes-validations': [{ rule: 'self >= 0', messageExpression: "'got ' +" }] }) }),\n  status: t.Object({}),\n  rules: [{ rule: 'self.n >' }],\n});\nexport default defineReconciler({ name: 'thing', for: Thing, reconcile: () => ({}) });\n`,
  });
  await assert.rejects(loadFunction(join(entry, '..')), (err: Error) => {
    assert.match(err.message, new RegExp(`^kfn: ${root}/badrule/index\\.ts: the rules of Thing are not what the apiserver takes:\n  spec\\.x-kubernetes-validations\\[0\\]\\.rule: \`self\\.n >\` is not CEL: .+\n  spec\\.properties\\.n\\.x-kubernetes-validations\\[0\\]\\.messageExpression: \`'got ' \\+\` is not CEL`));
    return true;
  });
});

test('declared defaults that are not CEL are refused when the function loads, with its file and the place of each', async () => {
  const entry = folder('baddefaults', {
    'index.ts': `import { defineKind, defineReconciler, t } from '${sdk}';\nexport const Thing = defineKind({\n  group: 'demo.example.com', version: 'v1', kind: 'Thing',\n  spec: t.Object({ n: t.Integer() }),\n  status: t.Object({}),\n});\nexport default defineReconciler({ name: 'thing', for: Thing, reconcile: () => ({}), defaults: [{ set: { '/spec/n': '1 +' }, when: 'object.spec.n >' }] });\n`,
  });
  await assert.rejects(loadFunction(join(entry, '..')), (err: Error) => {
    assert.match(err.message, new RegExp(`^kfn: ${root}/baddefaults/index\\.ts: thing's declared defaults are not CEL:\n  defaults\\[0\\]\\.when: \`object\\.spec\\.n >\` is not CEL: .+\n  defaults\\[0\\]\\.set\\["/spec/n"\\]: \`1 \\+\` is not CEL`));
    return true;
  });
});

test('kfn serve and kfn manifests say where, by default, and exit non-zero', () => {
  folder('cli-syntax', { 'index.ts': 'export default {\n  reconcile() { return 1 +; },\n};\n' });
  const kfn = join(import.meta.dirname, 'kfn.ts');
  for (const command of ['serve', 'manifests']) {
    const run = spawnSync(process.execPath, [kfn, command, join(root, 'cli-syntax')], { encoding: 'utf8', env: { ...process.env, KFN_DEBUG: '' } });
    assert.equal(run.status, 1, run.stderr);
    assert.equal(run.stderr, [`kfn: ${root}/cli-syntax does not load`, `${root}/cli-syntax/index.ts:2:27: Expression expected (a TypeScript syntax error)`, '    2 |   reconcile() { return 1 +; },', '      |                           ^', ''].join('\n'));
  }
  folder('cli-kind', {
    'index.ts': `import { defineKind, defineReconciler, t } from '${sdk}';\nconst Thing = defineKind({ group: 'Broken_Example', version: 'v1', kind: 'broken-thing', spec: t.Object({}), status: t.Object({}) });\nexport default defineReconciler({ name: 'thing', for: Thing, reconcile: () => ({}) });\n`,
  });
  const run = spawnSync(process.execPath, [kfn, 'manifests', join(root, 'cli-kind')], { encoding: 'utf8' });
  assert.equal(run.status, 1, run.stderr);
  assert.equal(run.stdout, '', 'no manifests written');
  assert.match(run.stderr, /cli-kind\/index\.ts:2:15: the apiserver would refuse the CRD of broken-thing \(Broken_Example\):\n {2}kind "broken-thing": must be UpperCamelCase[^\n]*\n {2}group "Broken_Example": must be a DNS subdomain/);
});

test("kfn dev's builds say where the same way: esbuild's errors, and a bundle's throw through its source map", async () => {
  const entry = folder('dev-syntax', { 'index.ts': 'export default {\n  reconcile() { return 1 +; },\n};\n' });
  const err = await build({ entryPoints: [entry], bundle: true, write: false, logLevel: 'silent' }).then(() => assert.fail('built'), (e: unknown) => e);
  assert.equal(describeBuildError(err), [`${root}/dev-syntax/index.ts:2:27: Unexpected ";"`, '    2 |   reconcile() { return 1 +; },', '      |                           ^'].join('\n'));
  const thrower = folder('dev-throws', { 'index.ts': "import { check } from './check.ts';\ncheck();\nexport default 1;\n", 'check.ts': "export function check(): void {\n  throw new Error('not ready');\n}\n" });
  // In a folder of its own, away from the sources and the working directory, as kfn dev's bundles are.
  const bundle = join(root, 'bundles', 'deeper', 'dev-throws.bundle.mjs');
  mkdirSync(dirname(bundle), { recursive: true });
  const out = await build({ entryPoints: [thrower], bundle: true, write: false, outfile: bundle, format: 'esm', platform: 'node', sourcemap: 'inline', logLevel: 'silent' });
  writeFileSync(bundle, out.outputFiles[0]!.text);
  process.setSourceMapsEnabled(true);
  const thrown = await import(pathToFileURL(bundle).href).then(() => assert.fail('loaded'), (e: unknown) => e);
  assert.match(await describeLoadError(thrown, thrower), new RegExp(`^${root}/dev-throws/check\\.ts:2:9: not ready\n {4}2 \\| {3}throw new Error`));
});
