// What kfn tells its user to run must be runnable where they are: `npx kfn …` and the files under
// node_modules/kfn/ in a project, `npm run kfn -- …` and the repository's files in kfn's
// checkout. cli/invocation.ts spells both; every message goes through it.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { transformSync } from 'esbuild';
import { repoRoot } from '../cluster/paths.ts';
import { kfnChart, kfnCommand, kfnCommandForOutput, kfnFile, localBridgeInstall, reconcilerCrdInstall, type KfnInstall } from './invocation.ts';

const checkout: KfnInstall = { compiled: false, root: '/src/kfn', cwd: '/src/kfn' };
const project: KfnInstall = { compiled: true, root: '/home/me/op/node_modules/kfn/lib', cwd: '/home/me/op' };

test('in kfn\'s checkout: npm run kfn -- …, and the repository\'s files', () => {
  assert.equal(kfnCommand('cluster up', checkout), 'npm run kfn -- cluster up');
  assert.equal(kfnCommandForOutput('cluster env', checkout), 'npm run --silent kfn -- cluster env');
  assert.equal(reconcilerCrdInstall(checkout), 'kubectl apply -f manifests/crds/');
  assert.equal(localBridgeInstall(checkout), 'npm run kfn -- image build bridge && kubectl apply -k manifests/');
  assert.equal(kfnChart(checkout), 'charts/kfn');
});

test('in a project: npx kfn …, and the files of the installed package', () => {
  assert.equal(kfnCommand('cluster up', project), 'npx kfn cluster up');
  assert.equal(kfnCommandForOutput('cluster env', project), 'npx kfn cluster env');
  assert.equal(reconcilerCrdInstall(project), 'kubectl apply -f node_modules/kfn/lib/manifests/crds/');
  assert.equal(localBridgeInstall(project), 'npx kfn image build bridge && kubectl apply -k node_modules/kfn/lib/manifests/');
  assert.equal(kfnChart(project), 'node_modules/kfn/lib/charts/kfn');
});

test('from a folder the files are not under, their whole path', () => {
  assert.equal(kfnFile('manifests/crds/', { ...project, cwd: '/home/me/op/functions' }), '/home/me/op/node_modules/kfn/lib/manifests/crds/');
});

/**
 * Spellings true only in kfn's checkout, as a message would carry them: npm scripts of kfn's own
 * package.json, and the repository's manifests and chart given to kubectl or helm.
 */
const checkoutOnly = [/npm run (?:--silent )?kfn\b/, /\bnpm start\b/, /kubectl apply -[fk] (?:manifests|charts)\//, /(?<![\w./-])charts\/kfn\b/, /(?<![\w./-])manifests\/crds\b/];

/**
 * Files that run only in kfn's checkout (`npm run generate`, `npm run build:lib`), where the
 * repository's paths are the user's; and this helper, which spells both.
 */
const checkoutTools = new Set(['cli/generate.ts', 'cli/build-package.ts', 'cli/invocation.ts']);


function sources(dir: string): string[] {
  return readdirSync(join(repoRoot, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => relative(repoRoot, join(e.parentPath, e.name)))
    .filter((file) => !file.split('/').includes('testdata'));
}

test('no message spells a command or file that exists only in kfn\'s checkout, except through cli/invocation.ts', () => {
  const found = new Map<string, string[]>();
  for (const file of ['core', 'kube', 'bridge', 'cluster', 'cli', 'functions/sdk'].flatMap(sources)) {
    if (checkoutTools.has(file)) continue;
    // The code without its comments: a comment may speak of the repository; a message may not.
    const code = transformSync(readFileSync(join(repoRoot, file), 'utf8'), { loader: 'ts' }).code;
    const hits = code.split('\n').filter((line) => checkoutOnly.some((pattern) => pattern.test(line))).map((line) => line.trim().slice(0, 160));
    if (hits.length) found.set(file, hits);
  }
  assert.deepEqual([...found].map(([file, hits]) => `${file}: ${hits.join(' | ')}`), [], 'these messages name kfn\'s checkout to every user: spell the command with kfnCommand and the file with kfnFile (cli/invocation.ts), or pass the words in from the CLI (the bridge cannot import cli/)');
});
