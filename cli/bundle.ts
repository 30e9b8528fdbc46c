// Bundles by esbuild: of a function (with the adapter that runs it: a container's Node server,
// a Lambda handler) and of the bridge (the `kfn` CLI). Images (cli/images.ts) and Lambda
// packages (cli/build.ts) are made of these.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { codePath, workRoot } from '../cluster/paths.ts';
import { functionEntry, loadFunction } from './functions.ts';

const say = (line: string) => console.error(line);

/** Where kfn builds bundles, images and packages. */
export const buildDir = join(workRoot, 'build');

/** Lets bundled ESM load the CommonJS packages it includes (pino, prom-client). */
export const requireBanner = "import { createRequire as kfnCreateRequire } from 'node:module'; const require = kfnCreateRequire(import.meta.url);";

/**
 * Bundles a function's entry module into `outdir` as ES modules: `<entry name>.mjs`, and the
 * chunks it loads only on demand. Split because @kubernetes/client-node (17 MB, imported only for
 * kubeconfigs with exec credential plugins) would otherwise be parsed at every cold start: one
 * file made a function take about twice as long to answer its first request. Returns the files.
 */
export async function bundleFunction(entry: string, outdir: string, target = 'node24'): Promise<string[]> {
  rmSync(outdir, { recursive: true, force: true });
  await build({ entryPoints: [entry], bundle: true, splitting: true, platform: 'node', target, format: 'esm', outdir, outExtension: { '.js': '.mjs' }, chunkNames: 'chunk-[hash]', banner: { js: requireBanner }, logLevel: 'warning', legalComments: 'none' });
  return readdirSync(outdir);
}

/**
 * Bundles the function folder `dir` as an adapter runs it: in `work` (emptied first), an entry
 * module `entry.file` that imports the function's default export as `reconciler`, then runs
 * `entry.adapter` (code that imports the adapter and hands it `reconciler`), bundled into
 * `work/<out>`. Returns that folder and its files.
 */
export async function bundleFunctionFolder(dir: string, work: string, entry: { file: string; adapter: string }, out: string, target?: string): Promise<{ outdir: string; files: string[] }> {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const file = join(work, entry.file);
  writeFileSync(file, `import reconciler from ${JSON.stringify(functionEntry(dir) ?? join(resolve(dir), 'index.ts'))};\n${entry.adapter}`);
  const outdir = join(work, out);
  return { outdir, files: await bundleFunction(file, outdir, target) };
}

/** The bridge's bundle: the `kfn` CLI (as `npm run build` bundles it; from the checkout's sources or the package's compiled tree). */
export async function bridgeBundle(log = say): Promise<string> {
  log('Bundling the bridge');
  const bundle = join(buildDir, 'bridge');
  await bundleFunction(codePath('cli', 'kfn.ts'), bundle);
  return bundle;
}

/** A function's bundle for its container: its module and the SDK, by esbuild, in `app/` (fn.mjs and the chunks it loads on demand). */
export async function functionBundle(dir: string, log = say): Promise<{ name: string; app: string }> {
  const reconciler = await loadFunction(dir);
  log(`Bundling function ${reconciler.name}`);
  const adapter = `import { runInContainer } from ${JSON.stringify(codePath('functions', 'sdk', 'node', 'index.ts'))};\nawait runInContainer(reconciler);\n`;
  const { outdir } = await bundleFunctionFolder(dir, join(buildDir, `fn-${reconciler.name}`), { file: 'fn.ts', adapter }, 'app');
  return { name: reconciler.name, app: outdir };
}
