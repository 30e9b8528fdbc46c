// kfn dev's builds of a function: its folder bundled by esbuild (its own modules and the SDK;
// packages stay imports), its types checked meanwhile when asked, and the bundle loaded under a
// name of its own, so that each save runs the code as it is now.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { workRoot } from '../cluster/paths.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { checkExpressions, defaultReconciler, requireFunctionEntry } from './functions.ts';
import { describeBuildError, describeLoadError } from './load-errors.ts';
import { typeProblems } from './typecheck.ts';

/** Where the bundles are written while they load (emptied as the dev server starts). */
export const bundleDir = join(workRoot, 'dev', 'bundles');
let bundleAttempts = 0;

/**
 * Bundles a function folder (its own modules and the SDK; packages stay imports) and loads it.
 * With `typecheck`, its types are checked while it is bundled, and code with a type error is
 * refused as code that does not build is: esbuild removes types without reading them.
 */
export async function loadBundle(dir: string, name: string, version: number, typecheck: boolean): Promise<{ reconciler: Reconciler; inputs: Set<string> }> {
  const entry = requireFunctionEntry(dir);
  // A name of its own for each attempt: Node keeps every module it imported by its URL, so a
  // second attempt at a version under the same name would get the first (the one refused).
  const file = join(bundleDir, `${name}.${version}.${++bundleAttempts}.mjs`);
  // An inline source map: stacks (and load errors) point at the function's files, not the bundle.
  // Built for the file it is written to, so the map's paths (relative to it) lead back to them.
  const [out, typeErrors] = await Promise.all([
    build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'esm', target: 'node24', packages: 'external', write: false, outfile: file, metafile: true, logLevel: 'silent', sourcemap: 'inline' }),
    typecheck ? typeProblems('dev', [dir]) : undefined,
  ]);
  if (typeErrors) throw new Error(`${typeErrors}\n(kfn dev --no-typecheck loads code without checking its types)`);
  mkdirSync(bundleDir, { recursive: true });
  writeFileSync(file, out.outputFiles[0]!.text);
  let mod: { default?: Reconciler };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: Reconciler };
  } catch (err) {
    throw new Error(await describeLoadError(err, entry));
  } finally {
    rmSync(file, { force: true });
  }
  const reconciler = defaultReconciler(mod, entry);
  checkExpressions(reconciler, entry);
  return { reconciler, inputs: new Set(Object.keys(out.metafile.inputs).map((i) => resolve(process.cwd(), i))) };
}

/** Why a function does not build or load, said where (cli/load-errors.ts), as kfn serve says it. */
export const buildError = (err: unknown): string => describeBuildError(err);
