// The files of a project `kfn init` writes (what `npm create kfn` gives), as a table: its
// package.json pinning the Node and the compiler kfn itself uses, tsconfig.json, .gitignore, the
// Node check `npm test` runs first, and the README with the project's own commands. Its first
// function is `kfn new`'s (cli/function-template.ts).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compiled, kfnVersion, repoRoot } from '../cluster/paths.ts';
import { defaultBase } from './artifacts/oci-image.ts';

/**
 * The Node a project runs on: the one kfn itself is built and tested on, whose TypeScript
 * support (type stripping, and `node --test` finding `*.test.ts`) the functions and their
 * tests need. The project pins it as kfn does, with the `node` package as a devDependency, so
 * `npm test` and `npx kfn` run on it whatever Node the machine has (many still have 20).
 */
export const projectNodeMajor = 24;
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
 * The registry in the project's `npm run deploy` until its user writes theirs: kfn deploy must
 * push the function's image where the cluster pulls from, and only the user knows where that is.
 * A plain word, which every shell passes as it is (a `<placeholder>` would be a redirection);
 * kfn deploy, given it, says what to write instead and where (cli/deploy.ts).
 */
export const registryPlaceholder = 'YOUR_REGISTRY';

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

/** What the project's files say: its package name, its first function's folder (`functions/<name>`), its kfn dependency. */
export interface ProjectTemplate {
  name: string;
  fn: string;
  /** The kfn dependency's spec (default ^version). */
  kfn?: string;
}

function packageJson({ name, fn, kfn }: ProjectTemplate): Record<string, unknown> {
  return {
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
      // The registry is the user's to write; `npm run deploy -- --registry R` overrides it.
      deploy: `kfn deploy ${fn} --registry ${registryPlaceholder}`,
    },
    dependencies: { kfn: kfn ?? `^${kfnVersion}` },
    // kfn's own settings: the image the function's bundle goes on (kfn image, kfn deploy --registry).
    kfn: { base: defaultBase },
    devDependencies: { '@types/node': `^${projectNodeMajor}.0.0`, node: projectNodePin, typescript: projectTypescriptPin },
    // node fetches its binary in an install script; esbuild (kfn bundles functions with it)
    // checks its platform binary after install.
    allowScripts: { node: true, esbuild: true },
  };
}

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

const readme = ({ name, fn }: ProjectTemplate) => `# ${name}

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
| the same, once your registry replaces \`${registryPlaceholder}\` in package.json's \`deploy\` script | \`npm run deploy\` |
| type-check | \`npm run typecheck\` |
`;

/** The project's files (but its first function's), by path. */
export function projectFiles(o: ProjectTemplate): Record<string, string> {
  return {
    'package.json': `${JSON.stringify(packageJson(o), null, 2)}\n`,
    'tsconfig.json': `${JSON.stringify(tsconfig, null, 2)}\n`,
    '.gitignore': 'node_modules/\n.kfn/\n',
    'scripts/check-node.test.mjs': checkNodeScript,
    'README.md': readme(o),
  };
}
