// `kfn new`: a function folder that works at once — the kind, a reconcile that owns a
// ConfigMap, samples.yaml, a README and a cluster-free unit test — as `operator-sdk init` and
// `create api` give a Go project its first controller.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { compiled, repoRoot } from '../cluster/paths.ts';
import { parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { newFunctionFiles } from './function-template.ts';
import { kfnCommand } from './invocation.ts';

/** Command lines and what each gives, in two columns. */
const examples = (lines: string[][]) => lines.map(([command, gives]) => `  ${command!.padEnd(63)} → ${gives}`).join('\n');

const usage = `Usage: kfn new <name> --group G --kind K [--version V] [options]

Writes a function folder that works at once: index.ts (the kind and its reconcile, owning a
ConfigMap), samples.yaml, README.md and index.test.ts (a unit test without a cluster).

${examples([
  ['kfn new greeter --group demo.example.com --kind Greeting', 'functions/greeter/'],
  ...(compiled
    ? [['npm test', "its unit test, with every other function's"], ['npx kfn dev functions/greeter', 'runs it against your cluster, reloading on save']]
    : [['node --test functions/greeter/index.test.ts', 'its unit test'], [kfnCommand('demo --function greeter'), 'runs it on the local cluster, with its samples']]),
])}

Options:
  --group G      the kind's API group, a DNS name with a dot (e.g. demo.example.com)
  --kind K       the kind, in PascalCase (e.g. Greeting)
  --version V    the API version (default v1alpha1)
  --dir D        where the folder goes (default: functions/ of this repository, or ./functions
                 in another project)
  --sdk S        how index.ts imports the SDK (default: a relative path inside this
                 repository, the package name "kfn/sdk" elsewhere)
  -h, --help     show this help`;

const dnsLabel = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const dnsSubdomain = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$/;
const apiVersion = /^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$/;
const pascal = /^[A-Z][A-Za-z0-9]{0,62}$/;

export interface NewFunction {
  name: string;
  group: string;
  version: string;
  kind: string;
  /** The folder the function's folder goes into. */
  dir: string;
  /** The SDK's import specifier; default: relative to this repository's SDK inside it, else "kfn/sdk". */
  sdk?: string;
}

/** Checks the names, saying for each what is wrong and what would be right. */
export function checkNames(o: Pick<NewFunction, 'name' | 'group' | 'version' | 'kind'>): string[] {
  const problems: string[] = [];
  if (!dnsLabel.test(o.name)) problems.push(`name "${o.name}" must be a DNS label: lowercase letters, digits and '-', at most 63 (e.g. greeter)`);
  if (!dnsSubdomain.test(o.group)) problems.push(`--group "${o.group}" must be a DNS name with at least one dot, lowercase (e.g. demo.example.com)`);
  if (!apiVersion.test(o.version)) problems.push(`--version "${o.version}" must look like v1, v1beta1 or v1alpha1`);
  if (!pascal.test(o.kind)) problems.push(`--kind "${o.kind}" must be PascalCase letters and digits (e.g. Greeting)`);
  return problems;
}

/** True for this repository's folder and anything under it. */
const insideRepo = (path: string) => !compiled && (resolve(path) === repoRoot || resolve(path).startsWith(repoRoot + sep));

/** Writes the folder; refuses to touch an existing one. Returns its path. */
export function writeNewFunction(o: NewFunction): string {
  const problems = checkNames(o);
  if (problems.length) throw new UsageError(`kfn new: ${problems.join('; ')}`);
  const target = resolve(o.dir, o.name);
  if (existsSync(target)) throw new UsageError(`kfn new: ${target} already exists; choose another name or remove it first`, 1);
  const relativeSdk = relative(target, join(repoRoot, 'functions', 'sdk', 'index.ts')).split(sep).join('/');
  const sdk = o.sdk ?? (insideRepo(target) ? (relativeSdk.startsWith('.') ? relativeSdk : `./${relativeSdk}`) : 'kfn/sdk');
  mkdirSync(target, { recursive: true });
  for (const [file, text] of Object.entries(newFunctionFiles({ ...o, sdk }))) writeFileSync(join(target, file), text);
  return target;
}

const flags = { group: { type: 'string' }, kind: { type: 'string' }, version: { type: 'string' }, dir: { type: 'string' }, sdk: { type: 'string' } } as const;

export const newCommand: Command = {
  name: 'new',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('new', argv, flags, true);
    if (positionals.length !== 1 || !values.group || !values.kind) throw new UsageError(`kfn new: expected a name, --group and --kind\n\n${usage}`);
    const inRepo = insideRepo(process.cwd());
    const dir = values.dir ?? (inRepo ? join(repoRoot, 'functions') : join(process.cwd(), 'functions'));
    const target = writeNewFunction({ name: positionals[0]!, group: values.group, version: values.version ?? 'v1alpha1', kind: values.kind, dir, sdk: values.sdk });
    const shown = relative(process.cwd(), target) || '.';
    console.log(`Wrote ${shown}/: index.ts, index.test.ts, samples.yaml, README.md`);
    // Outside this repository `npm test` runs it, on the project's own Node (a bare `node` may be an older one).
    console.log(inRepo ? `Next: node --test ${shown}/index.test.ts   (its unit test)` : 'Next: npm test   (its unit test, with every other function\'s)');
    if (inRepo && !values.dir) console.log(`      ${kfnCommand(`demo --function ${positionals[0]}`)}   (on the local cluster, with its samples)`);
    return 0;
  },
};
