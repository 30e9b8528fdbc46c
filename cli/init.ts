// `kfn init <dir>` (what `npm create kfn@latest <dir>` runs): a standalone operator project that
// depends on the kfn package — package.json, tsconfig.json, one function (as `kfn new` writes
// it: the kind, a reconcile owning a ConfigMap, samples, a unit test without a cluster) and a
// README with the project's own two commands.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { compiled, kfnVersion, repoRoot } from '../cluster/paths.ts';
import { parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { checkNames, writeNewFunction } from './new.ts';
import { defaultBase } from './oci-image.ts';

/**
 * The Node a project runs on: the one kfn itself is built and tested on, whose TypeScript
 * support (type stripping, and `node --test` finding `*.test.ts`) the functions and their
 * tests need. The project pins it as kfn does, with the `node` package as a devDependency, so
 * `npm test` and `npx kfn` run on it whatever Node the machine has (many still have 20).
 */
const projectNodeMajor = 24;
/** kfn's own devDependencies, from kfn's package.json (in a package, the one beside lib/). */
const kfnDevDependencies = (JSON.parse(readFileSync(join(repoRoot, compiled ? '..' : '.', 'package.json'), 'utf8')) as { devDependencies?: Record<string, string> }).devDependencies ?? {};
/** kfn's own pin of the project's Node. */
const projectNodePin = kfnDevDependencies.node ?? `^${projectNodeMajor}.0.0`;
/**
 * The compiler a project checks its types with (`npm test`, and kfn build, deploy and dev
 * before they ship a function): the one kfn itself is checked with. TypeScript 7 is native,
 * about four times as fast on a function as 5.9 (0.5 s against 2 s on the MyWeb example),
 * which kfn dev pays at every save.
 */
const projectTypescriptPin = kfnDevDependencies.typescript ?? '^5.9.0';

/**
 * scripts/check-node.test.mjs: plain JavaScript, so any Node runs it. An older Node would
 * otherwise fail every test file with ERR_UNKNOWN_FILE_EXTENSION ".ts", or (20, which looks for
 * no *.test.ts) find no test file and pass. `npm test` runs it first, in its own script rather
 * than a pretest, which npm skips under --ignore-scripts (also how the project's Node goes
 * missing); its name is one every Node's `node --test` finds, so a bare `node --test` runs it too.
 */
const checkNodeScript = `// The first step of \`npm test\`, and found by a bare \`node --test\` on any Node: this project's
// functions and tests are TypeScript, which Node.js runs as it is from version ${projectNodeMajor}. An older
// Node finds no *.test.ts and would pass with no tests; this stops it with one line instead.
// npm install gives the project its own Node.js ${projectNodeMajor} (the devDependency "node"), which npm's
// scripts run; an older Node here means it is missing, or the tests were started another way.
const major = Number(process.versions.node.split('.')[0]);
if (major < ${projectNodeMajor}) {
  console.error(\`This project needs Node.js ${projectNodeMajor} or later (its functions are TypeScript, which Node.js runs as it is from ${projectNodeMajor}), and this is Node.js \${process.versions.node}. Run npm install (with install scripts allowed: it fetches the project's own Node.js ${projectNodeMajor}), or put Node.js ${projectNodeMajor} first on your PATH.\`);
  process.exit(1);
}
`;

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
  const fn = `functions/${functionName}`;
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    type: 'module',
    engines: { node: `>=${projectNodeMajor}` },
    scripts: {
      // The Node check, then the types (Node runs the tests with their types removed, so a type
      // error would pass), then Node's default pattern: every *.test.ts, those of functions
      // `kfn new` adds later too.
      test: 'node scripts/check-node.test.mjs && tsc -p tsconfig.json && node --test',
      typecheck: 'tsc -p tsconfig.json',
      dev: `kfn dev ${fn}`,
      deploy: `kfn deploy ${fn}`,
    },
    dependencies: { kfn: o.kfn ?? `^${kfnVersion}` },
    // kfn's own settings: the image the function's bundle goes on (kfn image, kfn deploy --registry).
    kfn: { base: defaultBase },
    devDependencies: { '@types/node': `^${projectNodeMajor}.0.0`, node: projectNodePin, typescript: projectTypescriptPin },
    // node fetches its binary in an install script; esbuild (kfn bundles functions with it)
    // checks its platform binary after install.
    allowScripts: { node: true, esbuild: true },
  };
  const tsconfig = {
    compilerOptions: {
      target: 'esnext',
      module: 'nodenext',
      moduleResolution: 'nodenext',
      types: ['node'],
      strict: true,
      noEmit: true,
      allowImportingTsExtensions: true,
      erasableSyntaxOnly: true,
      verbatimModuleSyntax: true,
      skipLibCheck: true,
    },
    include: ['functions'],
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  writeFileSync(join(dir, 'tsconfig.json'), `${JSON.stringify(tsconfig, null, 2)}\n`);
  writeFileSync(join(dir, '.gitignore'), 'node_modules/\n.kfn/\n');
  mkdirSync(join(dir, 'scripts'));
  writeFileSync(join(dir, 'scripts', 'check-node.test.mjs'), checkNodeScript);
  writeFileSync(
    join(dir, 'README.md'),
    `# ${name}

Kubernetes operators as reconcile functions, with [kfn](https://www.npmjs.com/package/kfn).
Each folder under \`functions/\` is one: a kind, and what to make of each object of it.

\`\`\`sh
npm install && npm test          # install, then the functions' types and unit tests (no cluster)
npx kfn dev ${fn}       # run it against a cluster, reloading on save; a live UI of deliveries
\`\`\`

It runs on Node.js ${projectNodeMajor}, which runs the functions' TypeScript as it is: \`npm install\` gives the
project its own (the devDependency \`node\`, about 190 MB, as kfn itself has), so \`npm test\` and
\`npx kfn\` run on it whatever Node the machine has. npm may warn \`EBADENGINE\` while installing with
an older Node; \`npm test\` says in one line if the project's Node is missing.

\`kfn dev\` uses your cluster as kubectl does (\`--kubeconfig\`, else \`$KUBECONFIG\`, else
\`~/.kube/config\`; \`--context\` picks another context) and says which in its first line. With no
cluster of your own, \`npx kfn cluster up\` starts kfn's local one (built on first use, with
progress; it needs root and Linux). Then apply the samples: \`kubectl apply -f ${fn}/samples.yaml\`.

| | |
| --- | --- |
| a new function | \`npx kfn new <name> --group <group> --kind <Kind>\` |
| its CRD, RBAC and Reconciler, as YAML | \`npx kfn manifests ${fn}\` |
| deploy it to your cluster as a pod, its image pushed to your registry | \`npx kfn deploy ${fn} --registry <registry>\` |
| type-check | \`npm run typecheck\` |
`,
  );
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
