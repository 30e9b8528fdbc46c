// Both packages publish: `npm publish --dry-run` passes for kfn and for create-kfn, and what it
// would upload is what a project needs — every file the `exports` and `bin` fields name (for kfn,
// the lib/ tree its prepack compiles, about 6 s), the repository a provenance statement points at,
// and no test, test data or TypeScript source (Node runs no TypeScript under node_modules).
//
// The dry run asks the registry which versions exist and refuses to publish over one (so once a
// version is released, this fails until the next one is set), with a fresh HOME: no user's
// .npmrc, so no credentials, and npm says only that it would need them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { builtinModules } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../cluster/paths.ts';

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  bin?: Record<string, string>;
  exports?: Record<string, string | Record<string, string>>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  repository?: { type?: string; url?: string; directory?: string };
}

/** The files `exports` and `bin` name, as paths in the tarball. */
export function entryPoints(pkg: Manifest): string[] {
  const targets = Object.values(pkg.exports ?? {}).flatMap((target) => (typeof target === 'string' ? [target] : Object.values(target)));
  return [...new Set([...targets, ...Object.values(pkg.bin ?? {})].map((path) => path.replace(/^\.\//, '')))];
}

/** A file that has no place in a published package. */
export const unpublishable = (path: string) => /(^|\/)[^/]*\.test\.[cm]?[jt]s$/.test(path) || /(^|\/)(testdata|test)\//.test(path) || (/\.[cm]?ts$/.test(path) && !/\.d\.[cm]?ts$/.test(path));

/**
 * The packages the declarations of `entries` import, following their relative imports: what a
 * project's tsc must find installed to type-check against them.
 */
export function declaredImports(entries: string[], read: (path: string) => string = (path) => readFileSync(path, 'utf8')): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const [, , specifier] of read(file).matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)(['"])([^'"]+)\1/gm)) {
      if (specifier!.startsWith('.')) visit(resolve(dirname(file), specifier!.replace(/(?<!\.d)\.[jt]s$/, '.d.ts')));
      else packages.add(specifier!.startsWith('@') ? specifier!.split('/').slice(0, 2).join('/') : specifier!.split('/')[0]!);
    }
  };
  entries.forEach(visit);
  return packages;
}

function dryRun(t: { after: (fn: () => void) => void }, dir: string): { pkg: Manifest; files: string[]; stderr: string } {
  const home = mkdtempSync(join(tmpdir(), 'kfn-publish-home-'));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  // npm and the scripts it runs (kfn's prepack) on this Node, 24; none of the test runner's context.
  const { NODE_TEST_CONTEXT: _context, ...inherited } = process.env;
  const env = { ...inherited, HOME: home, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, npm_config_update_notifier: 'false', npm_config_fund: 'false' };
  const out = spawnSync('npm', ['publish', '--dry-run', '--json'], { cwd: dir, env, encoding: 'utf8', timeout: 300_000 });
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
  const published = /cannot publish over the previously published versions/.test(out.stderr);
  assert.equal(out.status, 0, published ? `${pkg.name}@${pkg.version} is on the registry already: give both packages the next version before a release (npm version <next> in the checkout and in packages/create-kfn, and create-kfn's kfn dependency)` : `npm publish --dry-run in ${dir} failed:\n${out.stdout}\n${out.stderr}`);
  // npm prints the JSON of the package it would publish (keyed by name since npm 11).
  const report = JSON.parse(out.stdout.slice(out.stdout.indexOf('{'))) as Record<string, { files: { path: string }[] }> & { files?: { path: string }[] };
  const files = (report.files ?? report[pkg.name]?.files ?? []).map((f) => f.path);
  return { pkg, files, stderr: out.stderr };
}

function assertPublishable(pkg: Manifest, files: string[], stderr: string, directory?: string) {
  assert.equal(pkg.private, undefined, `${pkg.name} is not private`);
  assert.doesNotMatch(stderr, /auto-corrected/, `npm found nothing to correct in ${pkg.name}'s package.json:\n${stderr}`);
  assert.match(pkg.repository?.url ?? '', /^git\+https:\/\/github\.com\/[\w.-]+\/[\w.-]+\.git$/, 'a repository that provenance can be checked against');
  assert.equal(pkg.repository?.directory, directory);
  assert.ok(files.includes('package.json') && files.includes('README.md'), `${pkg.name}: package.json and README.md in ${files.join(', ')}`);
  const missing = entryPoints(pkg).filter((entry) => !files.includes(entry));
  assert.deepEqual(missing, [], `${pkg.name}'s exports and bin name files it would not publish`);
  assert.deepEqual(files.filter(unpublishable), [], `${pkg.name} would publish tests or TypeScript sources`);
}

test('which files a package may not publish, and which its exports and bin name', () => {
  assert.deepEqual(['lib/cli/build.test.js', 'lib/functions/sdk/testdata/a.yaml', 'lib/cli/kfn.ts', 'test/e2e/x.js'].filter(unpublishable).length, 4);
  assert.deepEqual(['lib/functions/sdk/testing.js', 'lib/functions/sdk/testing.d.ts', 'lib/cli/dev-ui.html'].filter(unpublishable), []);
  const dts: Record<string, string> = {
    '/p/lib/index.d.ts': "import type { A } from './a.js';\nexport declare const b: import(\"@scope/b/sub\").B;\nexport * from 'c';",
    '/p/lib/a.d.ts': "import type { D } from 'd/deep/x.js';\nimport 'node:fs';\nimport type { E } from './e.ts';",
    '/p/lib/e.d.ts': "export type E = import('e').E;",
  };
  assert.deepEqual([...declaredImports(['/p/lib/index.d.ts'], (path) => dts[path]!)].sort(), ['@scope/b', 'c', 'd', 'e', 'node:fs']);
  assert.deepEqual(entryPoints({ name: 'x', version: '1.0.0', bin: { x: 'bin/x.mjs' }, exports: { './a': { types: './lib/a.d.ts', default: './lib/a.js' }, './package.json': './package.json' } }), ['lib/a.d.ts', 'lib/a.js', 'package.json', 'bin/x.mjs']);
});

test('kfn publishes: the SDK and the CLI compiled to lib/, bin/kfn.mjs, no tests', (t) => {
  const { pkg, files, stderr } = dryRun(t, repoRoot);
  assertPublishable(pkg, files, stderr);
  // The SDK's declarations import only what a project installs with kfn: its dependencies (not
  // @kubernetes/client-node, 65 MB, whose models came from kubernetes-types' declarations instead).
  const sdkTypes = entryPoints(pkg).filter((path) => path.endsWith('.d.ts')).map((path) => join(repoRoot, path));
  const imported = [...declaredImports(sdkTypes)].filter((name) => !builtinModules.includes(name.replace(/^node:/, '')));
  assert.ok(imported.includes('kubernetes-types'), `the SDK's models (${imported.join(', ')})`);
  assert.deepEqual(imported.filter((name) => !pkg.dependencies?.[name]), [], 'the SDK\'s declarations import packages a project would not install');
  assert.ok(!imported.includes('@kubernetes/client-node'), 'the SDK\'s declarations need no Kubernetes client library');
  // Nor does a project install one: @kubernetes/client-node (65 MB) is an optional peer, for a
  // kubeconfig with a credential plugin only (kube/client-node.ts says how to install it then).
  assert.equal(pkg.dependencies?.['@kubernetes/client-node'], undefined, 'a project does not install @kubernetes/client-node');
  assert.ok(pkg.peerDependencies?.['@kubernetes/client-node'] && pkg.peerDependenciesMeta?.['@kubernetes/client-node']?.optional, 'an optional peer dependency');
  // And no module imports it by a name esbuild would follow: a bundle built without it installed must build.
  const importsIt = files.filter((f) => f.endsWith('.js') && /(?:\bfrom\s*|\bimport\s*\(\s*)['"]@kubernetes\/client-node['"]/.test(readFileSync(join(repoRoot, f), 'utf8')));
  assert.deepEqual(importsIt, [], 'modules that import @kubernetes/client-node by its name');
  // What bin/kfn.mjs runs when installed: the compiled CLI.
  assert.ok(files.includes('lib/cli/kfn.js'), 'the compiled CLI');
  assert.ok(files.includes('lib/charts/kfn/Chart.yaml'), 'the Helm chart getting-started installs');
});

test('create-kfn publishes, and depends on the kfn of its own version', (t) => {
  const dir = join(repoRoot, 'packages', 'create-kfn');
  const { pkg, files, stderr } = dryRun(t, dir);
  assertPublishable(pkg, files, stderr, 'packages/create-kfn');
  const kfn = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as Manifest;
  assert.equal(pkg.version, kfn.version, 'create-kfn is versioned with kfn');
  assert.equal(pkg.dependencies?.kfn, kfn.version, 'and runs the kfn of the same version');
  assert.equal(kfn.repository?.url, pkg.repository?.url, 'one repository for both');
});
