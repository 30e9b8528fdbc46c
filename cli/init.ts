// `kfn init <dir>` (what `npm create kfn@latest <dir>` runs): a standalone operator project that
// depends on the kfn package — package.json, tsconfig.json, one function (as `kfn new` writes
// it: the kind, a reconcile owning a ConfigMap, samples, a unit test without a cluster) and a
// README with the project's own two commands.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { checkNames, writeNewFunction } from './new.ts';
import { projectFiles, projectNodeMajor } from './project-template.ts';

const usage = `Usage: kfn init <dir> [options]      (npm create kfn@latest <dir>)

Writes a new operator project in <dir> (which must be new or empty): package.json depending on
kfn and pinning Node.js ${projectNodeMajor} (the devDependency node, as kfn itself does), tsconfig.json, a
first function under functions/ with its samples and a unit test that runs without a cluster,
and a README. Then: cd <dir> && npm install && npm test.

Options:
  --function N   the first function's name (default: the kind's plural, e.g. greetings)
  --group G      its kind's API group (default: <dir name>.example.com)
  --kind K       its kind (default Greeting)
  --kfn SPEC     the kfn dependency in package.json (default ^<this kfn's version>; a path to
                 a packed kfn-*.tgz works too)
  -h, --help     show this help`;

export interface InitOptions {
  dir: string;
  functionName?: string;
  group?: string;
  kind?: string;
  /** The kfn dependency's spec (default ^version). */
  kfn?: string;
}

/** A package name from a folder name: lowercase, with what npm refuses turned into '-'. */
function packageName(dir: string): string {
  return basename(resolve(dir)).toLowerCase().replace(/[^a-z0-9-._~]/g, '-').replace(/^[-._]+/, '') || 'my-operator';
}

/** Writes the project; refuses a folder that has files. Returns the function's folder. */
export function writeProject(o: InitOptions): { dir: string; functionDir: string } {
  const dir = resolve(o.dir);
  if (existsSync(dir) && readdirSync(dir).length) throw new UsageError(`kfn init: ${dir} is not empty; choose a new folder`, 1);
  const name = packageName(dir);
  const kind = o.kind ?? 'Greeting';
  const group = o.group ?? `${name.replace(/[^a-z0-9-]/g, '-').replace(/^-+|-+$/g, '') || 'my-operator'}.example.com`;
  const functionName = o.functionName ?? `${kind.toLowerCase()}s`;
  const problems = checkNames({ name: functionName, group, version: 'v1alpha1', kind });
  if (problems.length) throw new UsageError(`kfn init: ${problems.join('; ')}`);
  mkdirSync(dir, { recursive: true });
  for (const [path, text] of Object.entries(projectFiles({ name, fn: `functions/${functionName}`, kfn: o.kfn }))) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  const functionDir = writeNewFunction({ name: functionName, group, version: 'v1alpha1', kind, dir: join(dir, 'functions'), sdk: 'kfn/sdk' });
  return { dir, functionDir };
}

const flags = { function: { type: 'string' }, group: { type: 'string' }, kind: { type: 'string' }, kfn: { type: 'string' } } as const;

export const initCommand: Command = {
  name: 'init',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('init', argv, flags, true);
    if (positionals.length !== 1) throw new UsageError(`kfn init: expected the project's folder\n\n${usage}`);
    const { dir, functionDir } = writeProject({ dir: positionals[0]!, functionName: values.function, group: values.group, kind: values.kind, kfn: values.kfn });
    const shown = relative(process.cwd(), dir) || '.';
    console.log(`Wrote ${shown}/: package.json, tsconfig.json, README.md, ${relative(dir, functionDir)}/, scripts/check-node.test.mjs`);
    console.log(`Next: cd ${shown} && npm install && npm test`);
    return 0;
  },
};
