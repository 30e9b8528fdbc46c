// `kfn build`: a function as a deployable artifact. `--target lambda` → a Lambda deployment
// package (zip): one esbuild bundle, index.mjs, exporting `handler` (Function URL payload 2.0,
// API Gateway v1/v2 and ALB events, through Hono's adapter), the only target so far; container
// images are `kfn image build`'s.
import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { codePath } from '../cluster/paths.ts';
import { functionDirs, loadFunction } from './functions.ts';
import { parseCommandArgs, UsageError, wantsHelp, type Command, type Options } from './command.ts';
import { kfnCommand } from './invocation.ts';
import { buildDir, bundleFunctionFolder } from './artifacts/bundle.ts';
import { zip } from './artifacts/zip.ts';
import { checkFunctionTypes, typecheckFlag, typecheckUsage } from './typecheck.ts';

const say = (line: string) => console.error(line);

export interface LambdaPackage {
  name: string;
  zip: string;
  bytes: number;
}

/** Bundles a function into a Lambda deployment package (`<out>/<name>.zip`, handler index.handler). */
export async function buildLambdaPackage(dir: string, out = join(buildDir, 'lambda')): Promise<LambdaPackage> {
  const reconciler = await loadFunction(dir);
  const work = join(out, reconciler.name);
  const adapter = `import { lambdaHandler } from ${JSON.stringify(codePath('functions', 'sdk', 'lambda', 'index.ts'))};\nexport const handler = lambdaHandler(reconciler);\n`;
  // Lambda's Node 22/24 runtimes load index.mjs as ESM; the chunks beside it are loaded on demand.
  const bundle = await bundleFunctionFolder(dir, work, { file: 'index.ts', adapter }, 'bundle', 'node22');
  const file = join(out, `${reconciler.name}.zip`);
  writeFileSync(file, zip(bundle.files.map((name) => ({ name, data: readFileSync(join(bundle.outdir, name)) }))));
  rmSync(work, { recursive: true, force: true });
  return { name: reconciler.name, zip: file, bytes: statSync(file).size };
}

const usage = `Usage: kfn build [--target lambda] [function dir …] [options]

Builds each function (default: every folder under functions/) into a Lambda deployment package:
<out>/<name>.zip holding index.mjs, one bundle of the function and the SDK, handler
\`index.handler\` (runtime nodejs22.x or newer). It answers Function URLs (payload 2.0), API
Gateway and ALB events. The function reaches Kubernetes with the kubeconfig in its
KFN_KUBECONFIG variable and checks the bridge's signature with KFN_AUTH_SECRET; see
docs/deploy.md for giving it both with least privilege. First it checks each function's types
with the project's tsconfig.json: esbuild removes types without reading them, so a type error
would otherwise be built.

Options:
  --target lambda   what to build (default lambda, the only target of this command; container
                    images: \`kfn image build\`)
  --all             every function under functions/ (what naming none does)
  --out DIR         where the zips go (default .kfn/build/lambda)
${typecheckUsage(17)}
  -h, --help        show this help`;

const options = { target: { type: 'string' }, all: { type: 'boolean' }, out: { type: 'string' }, ...typecheckFlag } satisfies Options;

export const buildCommand: Command = {
  name: 'build',
  usage,
  options,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('build', argv, options, true);
    // One target so far: naming it is optional; naming another is a mistake worth explaining.
    if ((values.target ?? 'lambda') !== 'lambda') throw new UsageError(`kfn build: the only target is --target lambda, not "${values.target}" (container images: kfn image build)\n\n${usage}`);
    // Every function unless some are named, as kfn dev and kfn manifests take them.
    const dirs = values.all || !positionals.length ? functionDirs() : positionals;
    if (!dirs.length) throw new UsageError(`kfn build: no functions to build: functions/ has no folder whose index.ts exports default defineReconciler({...}). Name a function folder, or write one: ${kfnCommand('new <name>')}`);
    if (!values['no-typecheck']) await checkFunctionTypes('build', dirs, { log: say });
    for (const dir of dirs) {
      const pkg = await buildLambdaPackage(dir, values.out ? resolve(values.out) : undefined);
      say(`${pkg.name}: ${pkg.zip} (${(pkg.bytes / 1024).toFixed(0)} KiB, handler index.handler)`);
    }
    return 0;
  },
};
