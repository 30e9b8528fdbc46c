// `kfn image build` and `kfn deploy`: container images of the bridge and of the functions,
// built on this machine (esbuild bundle + the Node base image, no registry, no Docker) and
// imported into the local cluster's node; a function run as a Deployment + Service under its
// own ServiceAccount, its Reconciler delivering to that Service.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { build } from 'esbuild';
import { connectionFromKubeconfig } from '../bridge/connection.ts';
import { applyObject, KubeApi } from '../bridge/kubeapi.ts';
import { ensureBinaries, type BinarySet } from '../cluster/build.ts';
import { clusterHealthy, clusterPaths, displayPath, repoRoot } from '../cluster/controlplane.ts';
import { buildImage, importImages, nodeRecipe, type BuiltImage, type ImageRecipe } from '../cluster/images.ts';
import { nodePaths } from '../cluster/node.ts';
import { functionManifests, functionServiceUrl, functionWorkload } from '../functions/sdk/manifests.ts';
import { applyFunction, functionDirs, loadFunction } from './functions.ts';
import { parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';

const say = (line: string) => console.error(line);
const version = (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
const buildDir = join(repoRoot, '.kfn', 'build');

/** Lets bundled ESM load the CommonJS packages it includes (pino, prom-client). */
const requireBanner = "import { createRequire as kfnCreateRequire } from 'node:module'; const require = kfnCreateRequire(import.meta.url);";

/** The bridge image: the `kfn` CLI bundle (npm run build) on the Node image; manifests/ runs it. */
export async function bridgeImage(binaries: BinarySet, log = say): Promise<BuiltImage> {
  log('Bundling the bridge (npm run build)');
  const out = spawnSync('npm', ['run', '--silent', 'build'], { cwd: repoRoot, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`npm run build failed:\n${out.stderr || out.stdout}`);
  const node = nodeRecipe();
  const recipe: ImageRecipe = { name: 'bridge', tag: version, base: node, files: [[join(repoRoot, 'dist'), '/app']], config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/kfn.mjs'] } };
  return buildImage(recipe, binaries, log);
}

/** A function's image: its module and the SDK bundled into one file by esbuild, on the Node image. */
export async function functionImage(dir: string, binaries: BinarySet, log = say): Promise<BuiltImage & { name: string }> {
  const reconciler = await loadFunction(dir);
  const work = join(buildDir, `fn-${reconciler.name}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const entry = join(work, 'entry.ts');
  writeFileSync(
    entry,
    `import reconciler from ${JSON.stringify(join(resolve(dir), 'index.ts'))};\nimport { runInContainer } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'server.ts'))};\nawait runInContainer(reconciler);\n`,
  );
  log(`Bundling function ${reconciler.name}`);
  await build({ entryPoints: [entry], bundle: true, platform: 'node', target: 'node24', format: 'esm', outfile: join(work, 'fn.mjs'), banner: { js: requireBanner }, logLevel: 'warning' });
  const node = nodeRecipe();
  const recipe: ImageRecipe = {
    name: `fn-${reconciler.name}`,
    tag: version,
    base: node,
    files: [[join(work, 'fn.mjs'), '/app/fn.mjs']],
    config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/fn.mjs'] },
  };
  return { ...buildImage(recipe, binaries, log), name: reconciler.name };
}

/** The local cluster's containerd socket, or an error saying how to get one. */
async function localNode(): Promise<string> {
  const paths = clusterPaths();
  if (!(await clusterHealthy(paths))) {
    throw new UsageError('kfn imports images into the local cluster\'s node, which is not running: start it with `npm run kfn -- cluster up`.', 1);
  }
  return nodePaths(paths.dir).containerdSocket;
}

function imported(images: BuiltImage[], socket: string): void {
  importImages(socket, images.map((i) => i.tarball));
  for (const i of images) say(`  ${i.ref} imported into the local node (${displayPath(i.tarball)})`);
}

const imageUsage = `Usage: kfn image build [bridge] [function dir …] [--all]

Builds container images on this machine — no registry, no Docker — and imports them into the
local cluster's node (containerd), where pods use them with imagePullPolicy IfNotPresent:
  bridge            kfn.local/bridge:${version} (what \`kubectl apply -k manifests/\` runs)
  functions/<name>  kfn.local/fn-<name>:${version} (what \`kfn deploy\` runs)
  --all             the bridge and every function under functions/
The node's own images (pause, CoreDNS, nginx, redis, busybox, node, …) are built by
\`kfn cluster up\`. Every image is cached by content in ~/.cache/kfn/images/.`;

export const imageCommand: Command = {
  name: 'image',
  summary: 'build the bridge and function images and import them into the local node',
  usage: imageUsage,
  async run(argv) {
    if (wantsHelp(argv) || argv[0] !== 'build') return (console.log(imageUsage), wantsHelp(argv) ? 0 : 2);
    const parsed = parseCommandArgs('image build', argv.slice(1), { all: { type: 'boolean' } }, true);
    const values = parsed.values;
    const positionals: string[] = parsed.positionals;
    const wantBridge = values.all || positionals.includes('bridge');
    const dirs = values.all ? functionDirs() : positionals.filter((p) => p !== 'bridge');
    if (!wantBridge && !dirs.length) throw new UsageError(`kfn image build: name what to build\n\n${imageUsage}`);
    const socket = await localNode();
    const binaries = await ensureBinaries({ log: say });
    const images: BuiltImage[] = [];
    if (wantBridge) images.push(await bridgeImage(binaries));
    for (const dir of dirs) images.push(await functionImage(dir, binaries));
    imported(images, socket);
    return 0;
  },
};

const deployUsage = `Usage: kfn deploy <function dir …> | --all [options]

Runs functions in the local cluster: builds each one's image and imports it into the node,
applies its CRD, least-privilege RBAC, ServiceAccount and auth Secret (as \`kfn manifests
--apply\`), a Deployment + Service running it, and its Reconciler with the Service as sink.
Waits until each function's Deployment is available. The bridge must run in the cluster to
deliver to it: \`kfn image build bridge && kubectl apply -k manifests/\`.

Options:
  --all            every function under functions/
  --namespace N    where the functions run (default kfn-system)
  --watch-namespace N   only objects in N are reconciled (repeatable; default: every namespace)
  --timeout S      seconds to wait for each function to be available (default 120)
  -h, --help       show this help`;

export const deployCommand: Command = {
  name: 'deploy',
  summary: 'run functions in the local cluster as Deployments, their Reconcilers pointing at them',
  usage: deployUsage,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(deployUsage), 0);
    const { values, positionals } = parseCommandArgs(
      'deploy',
      argv,
      { all: { type: 'boolean' }, namespace: { type: 'string' }, 'watch-namespace': { type: 'string', multiple: true }, timeout: { type: 'string' } },
      true,
    );
    const dirs = values.all ? functionDirs() : positionals;
    if (!dirs.length) throw new UsageError(`kfn deploy: name the functions to deploy, or --all\n\n${deployUsage}`);
    for (const dir of dirs) if (!existsSync(join(dir, 'index.ts'))) throw new UsageError(`kfn deploy: ${dir} is not a function folder (it has no index.ts)`);
    const timeoutSeconds = values.timeout === undefined ? 120 : Number(values.timeout);
    if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) throw new UsageError('--timeout must be a positive number of seconds');
    const namespace = values.namespace ?? 'kfn-system';
    await deployFunctions(dirs, { namespace, namespaces: values['watch-namespace'], timeoutSeconds });
    return 0;
  },
};

export interface DeployOptions {
  namespace: string;
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  timeoutSeconds?: number;
  log?: (line: string) => void;
}

/** Builds, imports and applies each function, then waits for its Deployment. */
export async function deployFunctions(dirs: string[], options: DeployOptions): Promise<void> {
  const log = options.log ?? say;
  const socket = await localNode();
  const binaries = await ensureBinaries({ log });
  const api = new KubeApi(connectionFromKubeconfig(clusterPaths().kubeconfig));
  const deployed: string[] = [];
  for (const dir of dirs) {
    const image = await functionImage(dir, binaries, log);
    importImages(socket, [image.tarball]);
    const reconciler = await loadFunction(dir);
    const objects = functionManifests(reconciler, {
      namespace: options.namespace,
      sinkUri: functionServiceUrl(reconciler, options.namespace),
      namespaces: options.namespaces,
      resyncPeriodSeconds: options.resyncPeriodSeconds,
    });
    await applyFunction(api, reconciler.name, objects, options.namespace);
    for (const obj of functionWorkload(reconciler, { namespace: options.namespace, image: image.ref, imageId: basename(image.tarball, '.tar') })) {
      await applyObject(api, obj as Parameters<typeof applyObject>[1], 'kfn-deploy');
    }
    deployed.push(reconciler.name);
  }
  const deadline = Date.now() + (options.timeoutSeconds ?? 120) * 1000;
  for (const name of deployed) {
    const path = `/apis/apps/v1/namespaces/${options.namespace}/deployments/kfn-fn-${name}`;
    for (;;) {
      const d = await api.request<{ metadata: { generation: number }; status?: { observedGeneration?: number; updatedReplicas?: number; availableReplicas?: number; unavailableReplicas?: number } }>('GET', path);
      const s = d.status ?? {};
      if (s.observedGeneration === d.metadata.generation && s.updatedReplicas === 1 && s.availableReplicas === 1 && !s.unavailableReplicas) break;
      if (Date.now() > deadline) {
        throw new Error(`function ${name} did not become available in ${options.timeoutSeconds ?? 120}s; see \`kubectl -n ${options.namespace} describe deployment kfn-fn-${name}\` and its pod's log`);
      }
      await sleep(500);
    }
    // Available pods are not yet a routed Service: wait until kube-proxy sends the Service's
    // address to them (this machine reaches ClusterIPs too), so the first delivery succeeds.
    const svc = await api.request<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${options.namespace}/services/kfn-fn-${name}`);
    while (!(await fetch(`http://${svc.spec.clusterIP}/healthz`, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false))) {
      if (Date.now() > deadline) throw new Error(`the Service kfn-fn-${name} (${svc.spec.clusterIP}) does not answer /healthz; see \`kubectl -n ${options.namespace} get endpointslices\` and .kfn/cluster/logs/kube-proxy.log`);
      await sleep(250);
    }
    log(`Function ${name} runs in the cluster: Deployment and Service ${options.namespace}/kfn-fn-${name}`);
  }
}
