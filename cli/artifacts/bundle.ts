// Bundles by esbuild: of a function (with the adapter that runs it: a container's Node server,
// a Lambda handler), of several functions as one shared host, and of the bridge (the `kfn`
// CLI). Images (cli/artifacts/images.ts) and Lambda packages (cli/build.ts) are made of these.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, isAbsolute, join, relative, resolve } from 'node:path';
import { build } from 'esbuild';
import { codePath, workRoot } from '../../cluster/paths.ts';
import { functionEntry, loadFunction } from '../functions.ts';

const say = (line: string) => console.error(line);

/** Where kfn builds bundles, images and packages. */
export const buildDir = join(workRoot, 'build');

/** Lets bundled ESM load the CommonJS packages it includes (pino, prom-client). */
export const requireBanner = "import { createRequire as kfnCreateRequire } from 'node:module'; const require = kfnCreateRequire(import.meta.url);";

/**
 * Bundles a function's entry module into `outdir` as ES modules: `<entry name>.mjs`, and the
 * chunks it loads only on demand (the CEL library, the YAML parser). Split so that a cold start
 * parses only what it runs: one file (when bundles still held @kubernetes/client-node, 17 MB)
 * made a function take about twice as long to answer its first request. Returns the files.
 *
 * Without whitespace and comments: Node keeps the source of every chunk it loaded for as long
 * as the process runs, at two bytes a character when the chunk holds one outside ASCII (an em
 * dash in a comment is enough). About 1 MB less of a function's memory, 2.7 MB of a bridge's.
 * Names stay, and a function's source maps still name the user's lines.
 */
export async function bundleFunction(entry: string, outdir: string, target = 'node24', options: { sourceMaps?: boolean } = {}): Promise<string[]> {
  rmSync(outdir, { recursive: true, force: true });
  await build({
    entryPoints: [entry],
    bundle: true,
    splitting: true,
    platform: 'node',
    target,
    format: 'esm',
    outdir,
    outExtension: { '.js': '.mjs' },
    chunkNames: 'chunk-[hash]',
    banner: { js: requireBanner },
    logLevel: 'warning',
    legalComments: 'none',
    minifyWhitespace: true,
    // Without the sources: the maps only say where each line came from (the SDK reads them when a reconcile throws).
    ...(options.sourceMaps ? { sourcemap: 'linked' as const, sourcesContent: false } : {}),
  });
  if (options.sourceMaps) for (const file of readdirSync(outdir)) if (file.endsWith('.map')) projectRelativeSources(join(outdir, file));
  return readdirSync(outdir);
}

/**
 * Rewrites a source map's sources from relative to the bundle (`../../../functions/site/index.ts`,
 * meaningless once the bundle is in an image) to relative to the project the bundle was built
 * in (`functions/site/index.ts`, `node_modules/kfn/lib/functions/sdk/runtime.js`): what a stack
 * of a deployed function then shows.
 */
function projectRelativeSources(mapFile: string, project = process.cwd()): void {
  const map = JSON.parse(readFileSync(mapFile, 'utf8')) as { sources: string[]; sourceRoot?: string };
  const dir = resolve(mapFile, '..');
  map.sources = map.sources.map((s) => {
    const absolute = resolve(dir, map.sourceRoot ?? '', s);
    const inProject = relative(project, absolute);
    return inProject.startsWith('..') || isAbsolute(inProject) ? absolute : inProject;
  });
  delete map.sourceRoot;
  writeFileSync(mapFile, JSON.stringify(map));
}

/**
 * Bundles the function folder `dir` as an adapter runs it: in `work` (emptied first), an entry
 * module `entry.file` that imports the function's default export as `reconciler`, then runs
 * `entry.adapter` (code that imports the adapter and hands it `reconciler`), bundled into
 * `work/<out>`. Returns that folder and its files.
 */
export async function bundleFunctionFolder(dir: string, work: string, entry: { file: string; adapter: string }, out: string, target?: string): Promise<{ outdir: string; files: string[] }> {
  return bundleEntryModule(work, entry.file, `import reconciler from ${JSON.stringify(entryOf(dir))};\n${entry.adapter}`, out, target);
}

const entryOf = (dir: string) => functionEntry(dir) ?? join(resolve(dir), 'index.ts');

/** Writes `source` as `work/<file>` (`work` emptied first) and bundles it, with source maps, into `work/<out>`. */
async function bundleEntryModule(work: string, file: string, source: string, out: string, target?: string): Promise<{ outdir: string; files: string[] }> {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  writeFileSync(join(work, file), source);
  const outdir = join(work, out);
  // With source maps: a reconcile that throws in a deployed function is logged at the user's lines.
  return { outdir, files: await bundleFunction(join(work, file), outdir, target, { sourceMaps: true }) };
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

/**
 * A shared host's bundle for its container: every function folder of `dirs` and the SDK, in
 * `work`/app/ (fn.mjs, as a function's, so both images are made alike), running them in one
 * process (runHostInContainer).
 */
export async function hostBundle(host: string, dirs: string[], log = say, work = join(buildDir, `host-${host}`)): Promise<string> {
  log(`Bundling host ${host}: ${dirs.map((d) => basename(resolve(d))).join(', ')}`);
  const imports = dirs.map((dir, i) => `import reconciler${i} from ${JSON.stringify(entryOf(dir))};`);
  const run = `import { runHostInContainer } from ${JSON.stringify(codePath('functions', 'sdk', 'node', 'index.ts'))};\nawait runHostInContainer(${JSON.stringify(host)}, [${dirs.map((_, i) => `reconciler${i}`).join(', ')}]);\n`;
  const { outdir } = await bundleEntryModule(work, 'fn.ts', `${imports.join('\n')}\n${run}`, 'app');
  return outdir;
}
