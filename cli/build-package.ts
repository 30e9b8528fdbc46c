// `npm run build:lib` (and `npm pack`, before it packs): kfn as a package a project installs.
// Node runs no TypeScript under node_modules, so the package carries `lib/`: this tree compiled
// to JavaScript with type declarations (tsconfig.lib.json), and beside the code the files kfn
// reads when it runs (manifests and the Helm chart, the cluster's Go modules and configuration,
// the examples' samples, the dev UI). Code that runs from lib/ finds them where a checkout has them.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { repoRoot } from '../cluster/paths.ts';

const lib = join(repoRoot, 'lib');
/** The folders of the tree; their files other than TypeScript go along as they are. */
const trees = ['core', 'kube', 'bridge', 'functions', 'cluster', 'cli', 'manifests', 'charts'];
const skipped = new Set(['node_modules', 'testdata', '.kfn']);

function assets(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return skipped.has(entry.name) ? [] : assets(path);
    return entry.name.endsWith('.ts') ? [] : [path];
  });
}

export function buildPackage(log: (line: string) => void = console.error): void {
  const started = Date.now();
  rmSync(lib, { recursive: true, force: true });
  log('Compiling TypeScript to lib/ (tsconfig.lib.json)');
  const tsc = spawnSync(join(repoRoot, 'node_modules', '.bin', 'tsc'), ['-p', join(repoRoot, 'tsconfig.lib.json')], { cwd: repoRoot, encoding: 'utf8' });
  if (tsc.status !== 0) throw new Error(`tsc failed:\n${tsc.stdout}${tsc.stderr}`);
  const files = trees.flatMap((tree) => assets(join(repoRoot, tree)));
  for (const file of files) {
    const target = join(lib, relative(repoRoot, file));
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(file, target);
  }
  // The compiled tree's own package.json: ES modules, and the version kfn reports.
  const { version } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string };
  writeFileSync(join(lib, 'package.json'), `${JSON.stringify({ type: 'module', version }, null, 2)}\n`);
  log(`lib/ ready: ${files.length} files beside the code, in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

if (import.meta.main) {
  try {
    buildPackage();
  } catch (err) {
    console.error(`build:lib: ${(err as Error).message}`);
    process.exit(1);
  }
}
