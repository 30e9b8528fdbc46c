// `kfn image build` and `kfn deploy`: container images of the bridge and of the functions,
// built on this machine (esbuild bundle + the Node base image, no registry, no Docker) and
// imported into the local cluster's node; a function run as a Deployment + Service under its
// own ServiceAccount, its Reconciler delivering to that Service.
import { copyFileSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';
import { build } from 'esbuild';
import { connectionFromKubeconfig } from '../kube/connection.ts';
import { ApiError, applyObject, KubeApi } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import { ensureBinaries, type BinarySet } from '../cluster/build.ts';
import { clusterHealthy } from '../cluster/controlplane.ts';
import { clusterPaths, codePath, displayPath, kfnVersion, workRoot } from '../cluster/paths.ts';
import { buildImage, importImages, nodeRecipe, nonRootUid, type BuiltImage, type ImageRecipe } from '../cluster/images.ts';
import { nodePaths } from '../cluster/node.ts';
import { functionKnativeService, functionManifests, functionServiceUrl, functionWorkload, webhookTlsSecretName } from '../functions/sdk/manifests.ts';
import { hasWebhooks, webhookConfigurations } from '../functions/sdk/webhooks.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { webhookDnsNames, webhookTls } from './webhook-tls.ts';
import { dockerCredentials, parseReference, pushImage, type RegistryCredentials } from './push.ts';
import { chooseBase, defaultBase, defaultPlatform, layerFromDirectory, nodeEntrypoint, parsePlatform, pullBase, pushOnBase, writeImageTarball, type BaseChoice, type BaseImage, type ImageOnBase } from './oci-image.ts';
import { localRegistry } from '../cluster/registry.ts';
import { knativeStatus } from '../cluster/knative.ts';
import { removeOtherTarget } from './targets.ts';
import { applyFunction, discoveredScopes, functionDirs, functionEntry, loadFunction } from './functions.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster, kfnInvocation } from './cluster-choice.ts';
import { systemClock, waitFor, WaitAbandoned } from '../core/clock.ts';
import { whyNotReady, type ReadCondition } from '../core/conditions.ts';
import { contractAnnotation, functionLabel, functionLabels, managedByKfn, managedByLabel, reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { contractVersion, contractVersions } from '../core/event.ts';

const say = (line: string) => console.error(line);
const version = kfnVersion;
const buildDir = join(workRoot, 'build');

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

/** The bridge's bundle: the `kfn` CLI (as `npm run build` bundles it; from the checkout's sources or the package's compiled tree). */
async function bridgeBundle(log = say): Promise<string> {
  log('Bundling the bridge');
  const bundle = join(buildDir, 'bridge');
  await bundleFunction(codePath('cli', 'kfn.ts'), bundle);
  return bundle;
}

/** The bridge image on kfn's own Node image, built here with the local cluster's tools; manifests/ runs it. */
export async function bridgeImage(binaries: BinarySet, log = say): Promise<BuiltImage> {
  const bundle = await bridgeBundle(log);
  const node = nodeRecipe();
  const recipe: ImageRecipe = { name: 'bridge', tag: version, base: node, files: [[bundle, '/app']], config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/kfn.mjs'] } };
  return buildImage(recipe, binaries, log);
}

/** A function's bundle: its module and the SDK, by esbuild, in `app/` (fn.mjs and the chunks it loads on demand). */
async function functionBundle(dir: string, log = say): Promise<{ name: string; app: string }> {
  const reconciler = await loadFunction(dir);
  const work = join(buildDir, `fn-${reconciler.name}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const entry = join(work, 'fn.ts');
  writeFileSync(
    entry,
    `import reconciler from ${JSON.stringify(functionEntry(dir) ?? join(resolve(dir), 'index.ts'))};\nimport { runInContainer } from ${JSON.stringify(codePath('functions', 'sdk', 'node', 'index.ts'))};\nawait runInContainer(reconciler);\n`,
  );
  log(`Bundling function ${reconciler.name}`);
  await bundleFunction(entry, join(work, 'app'));
  return { name: reconciler.name, app: join(work, 'app') };
}

/** A function's image on kfn's own Node image, built here with the local cluster's tools. */
export async function functionImage(dir: string, binaries: BinarySet, log = say): Promise<BuiltImage & { name: string }> {
  const { name, app } = await functionBundle(dir, log);
  const node = nodeRecipe();
  const recipe: ImageRecipe = {
    name: `fn-${name}`,
    tag: version,
    base: node,
    files: [[app, '/app']],
    config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/fn.mjs'] },
  };
  return { ...buildImage(recipe, binaries, log), name };
}

/** Images built on a base: from what, for which platform. */
interface OnBase {
  base: BaseChoice;
  platform: string;
  /** The base, pulled once for all the images of a command. */
  pulled?: Promise<BaseImage>;
}

/** `--base` and `--platform` (and the project's kfn.base): images on a base, or (in kfn's checkout, none given) on kfn's own Node image. */
function onBase(values: { base?: string; platform?: string }): OnBase | undefined {
  const base = chooseBase(values.base);
  if (values.platform !== undefined) {
    try {
      parsePlatform(values.platform);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    if (!base) throw new UsageError('--platform chooses the platform of a base image: give --base too');
  }
  return base && { base, platform: values.platform ?? defaultPlatform };
}

/**
 * The image of a bundle as ko and jib make one: the base's layers, the bundle in /app as one
 * more layer, Node running `/app/<main>`, as uid 65532 (numeric, so the kubelet can check
 * runAsNonRoot).
 */
async function imageOnBase(on: OnBase, name: string, app: string, main: string): Promise<ImageOnBase> {
  on.pulled ??= pullBase(on.base.ref, parsePlatform(on.platform));
  return {
    base: await on.pulled,
    layer: await layerFromDirectory(app, '/app'),
    createdBy: `kfn ${version}: the bundle of ${name} in /app`,
    change: (config) => ({ entrypoint: nodeEntrypoint(config, `/app/${main}`), env: { NODE_ENV: 'production' }, workingDir: '/app', user: String(nonRootUid) }),
  };
}

/** Pushes a bundle's image on the base to `<prefix>/<name>:<version>`; answers the reference by digest. */
async function pushBundle(on: OnBase, registry: RegistryTarget, name: string, app: string, main: string, log = say): Promise<{ ref: string; tagged: string; digest: string }> {
  const tagged = `${registry.prefix}/${name}:${version}`;
  const pushed = await pushOnBase(await imageOnBase(on, name, app, main), parseReference(tagged), { credentials: registry.credentials, log });
  return { ref: pushed.ref, tagged, digest: pushed.digest };
}

/** A bundle's image on the base as an image tarball named kfn.local/<name>:<version>, for the local node (its base layers downloaded). */
async function bundleTarball(on: OnBase, name: string, app: string, main: string, log = say): Promise<BuiltImage & { id: string }> {
  const started = performance.now();
  const ref = `kfn.local/${name}:${version}`;
  const tarball = join(buildDir, `${name}-${version}-on-base.tar`);
  const { configDigest } = await writeImageTarball(await imageOnBase(on, name, app, main), ref, tarball);
  const seconds = (performance.now() - started) / 1000;
  log(`  built ${ref} on ${on.base.ref} in ${seconds.toFixed(1)} s`);
  return { ref, tarball, seconds, id: configDigest.slice(7, 23) };
}

/** What `kfn image` makes: the bridge's and the functions' bundles, as [image name, bundle folder, main module]. */
async function bundles(wantBridge: boolean, dirs: string[]): Promise<[string, string, string][]> {
  const out: [string, string, string][] = [];
  if (wantBridge) out.push(['bridge', await bridgeBundle(), 'kfn.mjs']);
  for (const dir of dirs) {
    const { name, app } = await functionBundle(dir);
    out.push([`fn-${name}`, app, 'fn.mjs']);
  }
  return out;
}

/** The local cluster's containerd socket, or an error saying how to get one. */
async function localNode(): Promise<string> {
  const paths = clusterPaths();
  if (!(await clusterHealthy(paths))) {
    throw new UsageError(`kfn imports images into the local cluster's node, which is not running: start it with \`${kfnInvocation} cluster up\`, or push the images to a registry your cluster pulls from (--registry).`, 1);
  }
  return nodePaths(paths.dir).containerdSocket;
}

function imported(images: BuiltImage[], socket: string): void {
  importImages(socket, images.map((i) => i.tarball));
  for (const i of images) say(`  ${i.ref} imported into the local node (${displayPath(i.tarball)})`);
}

const imageUsage = `Usage: kfn image build [bridge] [function dir …] [--all] [--base REF] [--platform P] [--out DIR]
       kfn image push [bridge] [function dir …] [--all] --registry R [--base REF] [--platform P]

Makes the container images of the bridge and of functions — no Docker, no Go:
  bridge            <name> bridge: the kfn CLI bundled, run as \`node /app/kfn.mjs bridge\`
                    (what the Helm chart charts/kfn and \`kubectl apply -k manifests/\` run)
  functions/<name>  <name> fn-<name>: the function and the SDK bundled, run as node /app/fn.mjs
  --all             the bridge and every function under functions/

Each image is a base image plus the bundle as one layer in /app (as ko and jib build them),
running as uid ${nonRootUid}:
  --base REF        the base, from any registry (default: the "kfn": {"base": …} field of the
                    project's package.json, else ${defaultBase}); it must have Node 24 (its
                    entrypoint if that is a node binary, else node on its PATH)
  --platform P      the platform taken from a multi-arch base (default ${defaultPlatform})

\`kfn image push\` pushes them to R (\`local\`: the local cluster's registry, \`kfn cluster
registry\`; or host[:port][/path]) as R/bridge:${version} and R/fn-<name>:${version}, the
base's layers mounted or copied from its registry, and prints each one's reference by digest:
what a manifest or the Helm chart (image.repository, image.digest) should run. Credentials
for both registries come from the Docker config (~/.docker/config.json).

\`kfn image build\` imports them into kfn's local cluster's node as kfn.local/bridge:${version}
and kfn.local/fn-<name>:${version}, where pods use them with imagePullPolicy IfNotPresent:
  --out DIR         also copy the image tarballs (docker-archive) into DIR; without a running
                    local cluster, only this
In kfn's own checkout, with no --base and no kfn.base, images are built on kfn's own Node image
(from Debian packages, with the local cluster's tools, cached in ~/.cache/kfn/images/).`;

const imagePushFlags = { all: { type: 'boolean' }, registry: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' } } as const;
const imageBuildFlags = { all: { type: 'boolean' }, out: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' } } as const;

async function pushCommand(argv: string[]): Promise<number> {
  const parsed = parseCommandArgs('image push', argv, imagePushFlags, true);
  const values = parsed.values;
  const positionals: string[] = parsed.positionals;
  if (!values.registry) throw new UsageError(`kfn image push: --registry is required\n\n${imageUsage}`);
  const target = registryTarget(values.registry);
  const wantBridge = values.all || positionals.includes('bridge');
  const dirs = values.all ? functionDirs() : positionals.filter((p) => p !== 'bridge');
  if (!wantBridge && !dirs.length) throw new UsageError(`kfn image push: name what to push\n\n${imageUsage}`);
  const on = onBase(values);
  if (on) {
    say(`Building on ${on.base.ref} (${on.base.from}, ${on.platform})`);
    for (const [name, app, main] of await bundles(wantBridge, dirs)) console.log((await pushBundle(on, target, name, app, main)).ref);
    return 0;
  }
  const binaries = await ensureBinaries({ log: say });
  const images: BuiltImage[] = [];
  if (wantBridge) images.push(await bridgeImage(binaries));
  for (const dir of dirs) images.push(await functionImage(dir, binaries));
  for (const image of images) console.log(await pushTo(target, image, say));
  return 0;
}

export const imageCommand: Command = {
  name: 'image',
  summary: 'build the bridge and function images; import them into the local node or push them to a registry',
  usage: imageUsage,
  options: {},
  subcommands: { build: { usage: imageUsage, options: imageBuildFlags }, push: { usage: imageUsage, options: imagePushFlags } },
  async run(argv) {
    if (argv[0] === 'push') return pushCommand(argv.slice(1));
    if (wantsHelp(argv) || argv[0] !== 'build') return (console.log(imageUsage), wantsHelp(argv) ? 0 : 2);
    const parsed = parseCommandArgs('image build', argv.slice(1), imageBuildFlags, true);
    const values = parsed.values;
    const positionals: string[] = parsed.positionals;
    const wantBridge = values.all || positionals.includes('bridge');
    const dirs = values.all ? functionDirs() : positionals.filter((p) => p !== 'bridge');
    if (!wantBridge && !dirs.length) throw new UsageError(`kfn image build: name what to build\n\n${imageUsage}`);
    const socket = values.out && !(await clusterHealthy(clusterPaths())) ? undefined : await localNode();
    const on = onBase(values);
    const images: BuiltImage[] = [];
    if (on) {
      say(`Building on ${on.base.ref} (${on.base.from}, ${on.platform})`);
      for (const [name, app, main] of await bundles(wantBridge, dirs)) images.push(await bundleTarball(on, name, app, main));
    } else {
      const binaries = await ensureBinaries({ log: say });
      if (wantBridge) images.push(await bridgeImage(binaries));
      for (const dir of dirs) images.push(await functionImage(dir, binaries));
    }
    if (socket) imported(images, socket);
    if (values.out) {
      mkdirSync(values.out, { recursive: true });
      for (const i of images) {
        const name = `${i.ref.split('/').at(-1)!.replace(':', '-')}.tar`;
        copyFileSync(i.tarball, join(values.out, name));
        say(`  ${i.ref} → ${join(values.out, name)}`);
      }
    }
    return 0;
  },
};

const deployUsage = `Usage: kfn deploy <function dir …> | --all [options]

Runs functions in the local cluster: builds each one's image and imports it into the node,
applies its CRD, least-privilege RBAC, ServiceAccount and auth Secret (as \`kfn manifests
--apply\`), the workload running it, and its Reconciler delivering to it:
  --target deployment (default)  a Deployment + Service; the Reconciler's sink.uri is the Service
  --target knative               a Knative Service that scales to zero (needs \`kfn knative
                                 install\`); the Reconciler's sink.ref names it
Waits until each function is available. The bridge must run in the cluster to deliver to it:
\`kfn image build bridge && kubectl apply -k manifests/\`.

Options:
  --target T       deployment or knative (default deployment)
  --all            every function under functions/
  -n, --namespace N  where the functions run (default kfn-system)
  --watch-namespace N   only objects in N are reconciled (repeatable; default: every namespace)
  --timeout S      seconds to wait for each function to be available (default 120)
  --record         write an invocation record to the function's log on every reconcile, for
                   \`kfn replay cluster:<function>\` (off by default: a record holds what the
                   function read, and so any secret a spec carries)
  --registry R     push the images to R and run them from it by digest, pulled by the node as
                   on any cluster, instead of importing them into the node: \`local\` (the local
                   cluster's registry, \`kfn cluster registry\`) or host[:port][/path], with
                   the credentials of the Docker config (~/.docker/config.json); a registry
                   that asks for them gets a pull Secret kfn-registry in the namespace
  --base REF       the image the function's bundle goes on, from any registry (default: the
                   "kfn": {"base": …} field of the project's package.json, else
                   ${defaultBase}; see \`kfn image --help\`)
  --platform P     the platform taken from a multi-arch base (default ${defaultPlatform})
${clusterFlagsUsage(16)}
  -h, --help       show this help`;

const deployFlags = { all: { type: 'boolean' }, namespace: { type: 'string', short: 'n' }, 'watch-namespace': { type: 'string', multiple: true }, timeout: { type: 'string' }, target: { type: 'string' }, record: { type: 'boolean' }, registry: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' }, ...clusterFlags } as const;

export const deployCommand: Command = {
  name: 'deploy',
  summary: 'run functions in the local cluster as Deployments, their Reconcilers pointing at them',
  usage: deployUsage,
  options: deployFlags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(deployUsage), 0);
    const { values, positionals } = parseCommandArgs(
      'deploy',
      argv,
      deployFlags,
      true,
    );
    const dirs = values.all ? functionDirs() : positionals;
    if (!dirs.length) throw new UsageError(`kfn deploy: name the functions to deploy, or --all\n\n${deployUsage}`);
    for (const dir of dirs) if (!functionEntry(dir)) throw new UsageError(`kfn deploy: ${dir} is not a function folder (it has no index.ts)`);
    const timeoutSeconds = values.timeout === undefined ? 120 : Number(values.timeout);
    if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) throw new UsageError('--timeout must be a positive number of seconds');
    const namespace = values.namespace ?? 'kfn-system';
    const target = values.target ?? 'deployment';
    if (target !== 'deployment' && target !== 'knative') throw new UsageError(`--target must be deployment or knative, not "${target}"`);
    const registry = values.registry === undefined ? undefined : registryTarget(values.registry);
    const cluster = await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context });
    if (!registry && !cluster.local) {
      throw new UsageError(`kfn deploy: without --registry the images are imported into kfn's local cluster's node, and ${cluster.where} (server ${cluster.server}) is another cluster: push them to a registry it pulls from with --registry R`, 1);
    }
    const on = onBase(values);
    await deployFunctions(dirs, { api: cluster.api, namespace, namespaces: values['watch-namespace'], timeoutSeconds, target, record: values.record, registry, ...(on ? { base: on.base, platform: on.platform } : {}) });
    return 0;
  },
};

export interface DeployOptions {
  /** The cluster to deploy to (default: kfn's local cluster). */
  api?: KubeApi;
  namespace: string;
  /** A Deployment + Service (default), or a Knative Service. */
  target?: 'deployment' | 'knative';
  /** Knative only: pods kept when idle (default 0, scale to zero). */
  minScale?: number;
  /** Knative only: seconds an idle last pod is kept before scaling to zero. */
  retentionSeconds?: number;
  /** Knative only: the autoscaler's window in seconds (idle this long → zero). */
  windowSeconds?: number;
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  timeoutSeconds?: number;
  /** KFN_RECORD=stdout in the function's container (off by default). */
  record?: boolean;
  /** Push the images to this registry and run them from it by digest, instead of importing them into the node. */
  registry?: RegistryTarget;
  /** Build the images on this base image (with the bundle as one more layer) rather than on kfn's own Node image. */
  base?: BaseChoice;
  /** The platform taken from a multi-arch base (default linux/amd64). */
  platform?: string;
  log?: (line: string) => void;
}

/** Where images go: `prefix` (registry host[/path]), and the credentials to push and pull with. */
export interface RegistryTarget {
  prefix: string;
  credentials?: RegistryCredentials;
}

/** `--registry`: `local` (the local cluster's registry, `kfn cluster registry`) or host[:port][/path]. */
export function registryTarget(value: string): RegistryTarget {
  if (value === 'local') {
    const running = localRegistry();
    if (!running) throw new UsageError('--registry local: the local registry does not run; start it with `npm run kfn -- cluster registry`', 1);
    return { prefix: running.host, ...(running.auth ? { credentials: running.auth } : {}) };
  }
  if (!/^[a-z0-9.-]+(:\d+)?(\/[a-z0-9._\/-]+)?$/.test(value)) throw new UsageError(`--registry must be local or host[:port][/path] (e.g. registry.example.com/team), not "${value}"`);
  const credentials = dockerCredentials(registryOf(value));
  return { prefix: value.replace(/\/$/, ''), ...(credentials ? { credentials } : {}) };
}

/** The registry (host[:port]) of an image prefix or reference. */
const registryOf = (prefix: string) => prefix.replace(/\/.*$/, '');

/** Pushes a built image to the registry target as <prefix>/<name>:<tag>; answers the reference by digest. */
/** Where a built image goes in the registry target: `<prefix>/<name>:<tag>` for kfn.local/<name>:<tag>. */
const targetRef = (target: RegistryTarget, image: BuiltImage) => `${target.prefix}/${image.ref.slice(image.ref.indexOf('/') + 1)}`;

async function pushTo(target: RegistryTarget, image: BuiltImage, log: (line: string) => void): Promise<string> {
  const pushed = await pushImage(image.tarball, targetRef(target, image), { credentials: target.credentials, log });
  return pushed.ref;
}

/** The dockerconfigjson Secret the kubelet pulls a function's image with, when the registry asks for credentials. */
const pullSecretName = 'kfn-registry';
async function ensurePullSecret(api: KubeApi, namespace: string, target: RegistryTarget): Promise<string[]> {
  if (!target.credentials) return [];
  const host = registryOf(target.prefix);
  const auth = Buffer.from(`${target.credentials.username}:${target.credentials.password}`).toString('base64');
  const config = JSON.stringify({ auths: { [host]: { auth } } });
  await applyObject(api, { apiVersion: 'v1', kind: 'Secret', metadata: { name: pullSecretName, namespace, labels: { [managedByLabel]: managedByKfn } }, type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': Buffer.from(config).toString('base64') } } as Parameters<typeof applyObject>[1], 'kfn-deploy');
  return [pullSecretName];
}

/** Creates or renews a deployed function's webhook certificate Secret; returns the CA bundle to register. */
async function ensureWebhookTls(api: KubeApi, reconciler: Reconciler, namespace: string, log: (line: string) => void): Promise<string> {
  const secretName = webhookTlsSecretName(reconciler);
  const service = `kfn-fn-${reconciler.name}`;
  const existing = await api.request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${namespace}/secrets/${secretName}`).catch((err) => {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  });
  const tls = webhookTls(existing?.data, service, webhookDnsNames(service, namespace));
  if (tls.renewed) {
    log(`${existing ? 'Renewing' : 'Creating'} the webhook certificate of ${reconciler.name} (Secret ${namespace}/${secretName}): ${tls.why}`);
    await applyObject(api, { apiVersion: 'v1', kind: 'Secret', metadata: { name: secretName, namespace, labels: functionLabels(reconciler.name) }, type: 'kubernetes.io/tls', data: tls.data } as Parameters<typeof applyObject>[1], 'kfn-deploy');
  }
  return tls.caBundle;
}

/** Builds, imports and applies each function, then waits until it is available. */
/**
 * The bridges in the cluster (Deployments labelled app.kubernetes.io/name=kfn-bridge) must speak
 * the event contract of this kfn's SDK, which the functions are built with: a mismatch is refused
 * here, at deploy time, rather than found at the first delivery (a 400 from the function).
 */
export async function checkBridgeContract(api: KubeApi, log: (line: string) => void): Promise<void> {
  const bridges = await api
    .request<{ items: { metadata: { name: string; namespace: string; annotations?: Record<string, string> } }[] }>('GET', '/apis/apps/v1/deployments', { query: { labelSelector: 'app.kubernetes.io/name=kfn-bridge' } })
    .then((l) => l.items, () => undefined);
  if (!bridges) return; // not allowed to look: the first delivery will tell
  if (!bridges.length) {
    log(`No kfn bridge runs in the cluster yet: the functions get no events until one does (kfn image build bridge && kubectl apply -k manifests/, or the Helm chart charts/kfn)`);
    return;
  }
  const spoken = (contractVersions as readonly number[]).map(String);
  const other = bridges.filter((b) => !spoken.includes(b.metadata.annotations?.[contractAnnotation] ?? String(contractVersion)));
  if (other.length) {
    const b = other[0]!;
    throw new UsageError(`the bridge ${b.metadata.namespace}/${b.metadata.name} speaks event contract v${b.metadata.annotations![contractAnnotation]}, and these functions (kfn ${kfnVersion}) speak v${contractVersions.join(' and v')}: upgrade the bridge to kfn ${kfnVersion} (helm upgrade with its image, or kubectl apply -k manifests/ of this kfn), or deploy with the kfn that matches it`, 1);
  }
  // An older bridge sends contract 1 to these functions too: they work, reading what they need themselves.
  const older = bridges.find((b) => Number(b.metadata.annotations?.[contractAnnotation] ?? contractVersion) < contractVersion);
  if (older) log(`The bridge ${older.metadata.namespace}/${older.metadata.name} speaks event contract v${older.metadata.annotations![contractAnnotation]}: its events carry no observed state, so these functions read the apiserver for it (slower). Upgrade the bridge to kfn ${kfnVersion} for contract v${contractVersion}.`);
}

export async function deployFunctions(dirs: string[], options: DeployOptions): Promise<void> {
  const log = options.log ?? say;
  const knative = options.target === 'knative';
  const socket = options.registry ? undefined : await localNode();
  const api = options.api ?? new KubeApi(connectionFromKubeconfig(clusterPaths().kubeconfig));
  await checkBridgeContract(api, log);
  if (knative && !(await knativeStatus(api))?.every((s) => s.ready)) {
    throw new UsageError('kfn deploy --target knative: Knative is not installed or not ready on the local cluster; run `npm run kfn -- knative install` (see `kfn knative status`).', 1);
  }
  // Before anything goes into it: the pull and webhook Secrets come before the function's own objects.
  await namespaceReady(api, options.namespace, { fieldManager: 'kfn-deploy', say: log });
  const pullSecrets = options.registry ? await ensurePullSecret(api, options.namespace, options.registry) : [];
  const on: OnBase | undefined = options.base && { base: options.base, platform: options.platform ?? defaultPlatform };
  if (on) log(`Building on ${on.base.ref} (${on.base.from}, ${on.platform})`);
  const binaries = on ? undefined : await ensureBinaries({ log });
  const deployed: string[] = [];
  const webhooks = new Map<string, { reconciler: Reconciler; caBundle: string }>();
  for (const dir of dirs) {
    // From the registry by digest (the kubelet pulls it, as on every cluster), or imported into the node.
    // Knative is given the tag: its controller resolves it to a digest from the registry, as in
    // production (the revision then runs that digest). A Deployment is given the digest.
    const { imageRef, imageId } = on ? await placeOnBase(on, dir, options.registry, socket, knative, log) : await placeBuilt(await functionImage(dir, binaries!, log), options.registry, socket, knative, log);
    const reconciler = await loadFunction(dir);
    const versions: { version: string }[] = reconciler.for.options.previousVersions ?? [];
    if (versions.length && knative) throw new UsageError(`kfn deploy: ${reconciler.for.kind} has previous versions (${versions.map((v) => v.version).join(', ')}), which need the function's conversion webhook; Knative gives no TLS listener of the function's own — deploy it with --target deployment`, 1);
    if (hasWebhooks(reconciler) && knative) log(`${reconciler.name} has admission webhooks, which are served by a Deployment only (Knative gives no TLS listener of the function's own): deploy it with --target deployment to use them`);
    const caBundle = hasWebhooks(reconciler) && !knative ? await ensureWebhookTls(api, reconciler, options.namespace, log) : undefined;
    if (caBundle) webhooks.set(reconciler.name, { reconciler, caBundle });
    const objects = functionManifests(reconciler, {
      namespace: options.namespace,
      sinkUri: knative ? undefined : functionServiceUrl(reconciler, options.namespace),
      namespaces: options.namespaces,
      resyncPeriodSeconds: options.resyncPeriodSeconds,
      scopeOf: await discoveredScopes(api, reconciler),
      // The CRD names its conversion webhook: the function's Service, over TLS.
      ...(versions.length && caBundle ? { conversion: { client: { service: { namespace: options.namespace, name: `kfn-fn-${reconciler.name}` } }, caBundle } } : {}),
    });
    await applyFunction(api, reconciler.name, objects, options.namespace);
    await removeOtherTarget(api, options.namespace, reconciler.name, knative ? 'knative' : 'deployment', log);
    const workload = { namespace: options.namespace, image: imageRef, imageId, record: options.record, imagePullSecrets: pullSecrets };
    const apply = knative ? [functionKnativeService(reconciler, { ...workload, minScale: options.minScale, retentionSeconds: options.retentionSeconds, windowSeconds: options.windowSeconds })] : functionWorkload(reconciler, workload);
    for (const obj of apply) await applyObject(api, obj as Parameters<typeof applyObject>[1], 'kfn-deploy');
    deployed.push(reconciler.name);
  }
  const deadline = systemClock.now() + (options.timeoutSeconds ?? 120) * 1000;
  for (const name of deployed) {
    if (knative) await waitKnativeService(api, options.namespace, `kfn-fn-${name}`, deadline);
    else await waitDeployment(api, options.namespace, name, deadline);
    log(`Function ${name} runs in the cluster: ${knative ? 'Knative Service' : 'Deployment and Service'} ${options.namespace}/kfn-fn-${name}`);
    // Registered once the function answers: with failurePolicy Fail, a webhook nobody serves
    // would refuse every write of the kind.
    const hooks = webhooks.get(name);
    // (A kind with previous versions alone has its conversion webhook in its CRD: no configurations.)
    const owner = hooks ? await api.request<{ metadata: { uid: string } }>('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`) : undefined;
    const configs = hooks
      ? webhookConfigurations(hooks.reconciler, {
          client: { service: { namespace: options.namespace, name: `kfn-fn-${name}` } },
          caBundle: hooks.caBundle,
          namespaces: options.namespaces,
          owner: { apiVersion: reconcilerApiVersion, kind: reconcilerKind, name, uid: owner!.metadata.uid },
        })
      : [];
    for (const config of configs) await applyObject(api, config as Parameters<typeof applyObject>[1], 'kfn-deploy');
    if (configs.length) log(`Admission webhooks of ${name} registered: ${configs.map((c) => (c.webhooks as { name: string }[])[0]!.name).join(', ')}`);
  }
}

/** A function's image on the base: pushed to the registry, or (no registry) imported into the local node. */
async function placeOnBase(on: OnBase, dir: string, registry: RegistryTarget | undefined, socket: string | undefined, knative: boolean, log: (line: string) => void): Promise<{ imageRef: string; imageId: string }> {
  const { name, app } = await functionBundle(dir, log);
  if (registry) {
    const pushed = await pushBundle(on, registry, `fn-${name}`, app, 'fn.mjs', log);
    return { imageRef: knative ? pushed.tagged : pushed.ref, imageId: pushed.digest.slice(7, 23) };
  }
  const image = await bundleTarball(on, `fn-${name}`, app, 'fn.mjs', log);
  importImages(socket!, [image.tarball]);
  return { imageRef: image.ref, imageId: image.id };
}

/** A function's image built on kfn's own Node image: pushed to the registry, or imported into the local node. */
async function placeBuilt(image: BuiltImage, registry: RegistryTarget | undefined, socket: string | undefined, knative: boolean, log: (line: string) => void): Promise<{ imageRef: string; imageId: string }> {
  const imageId = basename(image.tarball, '.tar');
  if (!registry) {
    importImages(socket!, [image.tarball]);
    return { imageRef: image.ref, imageId };
  }
  const pushed = await pushTo(registry, image, log);
  return { imageRef: knative ? targetRef(registry, image) : pushed, imageId };
}

async function waitDeployment(api: KubeApi, namespace: string, name: string, deadline: number): Promise<void> {
  const path = `/apis/apps/v1/namespaces/${namespace}/deployments/kfn-fn-${name}`;
  type Deployment = { metadata: { generation: number }; status?: { observedGeneration?: number; updatedReplicas?: number; availableReplicas?: number; unavailableReplicas?: number } };
  await waitFor(
    `function ${name} to become available`,
    async () => {
      const d = await api.request<Deployment>('GET', path);
      const s = d.status ?? {};
      return s.observedGeneration === d.metadata.generation && s.updatedReplicas === 1 && s.availableReplicas === 1 && !s.unavailableReplicas;
    },
    { deadline, intervalMs: 500, context: () => `See \`kubectl -n ${namespace} describe deployment kfn-fn-${name}\` and its pod's log.` },
  );
  // Available pods are not yet a routed Service: wait until kube-proxy sends the Service's
  // address to them (this machine reaches ClusterIPs too), so the first delivery succeeds.
  const svc = await api.request<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${namespace}/services/kfn-fn-${name}`);
  await waitFor(`the Service kfn-fn-${name} (${svc.spec.clusterIP}) to answer /healthz`, () => answers(`http://${svc.spec.clusterIP}/healthz`), { deadline, intervalMs: 250 }).catch(async (err: Error) => {
    // Whether the pod answers on its own tells kube-proxy's part from the pod's.
    throw new Error(`${err.message}\n${await podAnswers(api, namespace, name)}; see \`kubectl -n ${namespace} get endpointslices\` and .kfn/cluster/logs/kube-proxy.log`);
  });
}

/** Each look on a connection of its own: a connection attempt made before kube-proxy had the rules must not be the one every later look waits behind. */
async function answers(url: string): Promise<boolean> {
  const dispatcher = new Agent({ connect: { timeout: 1000 }, keepAliveTimeout: 1 });
  try {
    return await undiciFetch(url, { signal: AbortSignal.timeout(1500), dispatcher }).then((r) => r.ok, () => false);
  } finally {
    void dispatcher.destroy().catch(() => undefined);
  }
}

async function podAnswers(api: KubeApi, namespace: string, name: string): Promise<string> {
  const pods = await api.request<{ items: { status?: { podIP?: string } }[] }>('GET', `/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: `${functionLabel}=${name}` } }).catch(() => ({ items: [] }));
  const podIP = pods.items[0]?.status?.podIP;
  if (!podIP) return 'no pod found';
  return (await answers(`http://${podIP}:8080/healthz`)) ? `its pod ${podIP} answers directly, so the Service is not routed yet` : `its pod ${podIP} does not answer either`;
}

interface KnativeServiceObject {
  metadata: { generation: number };
  status?: { observedGeneration?: number; url?: string; conditions?: ReadCondition[] };
}

/** Waits until the Knative Service is Ready for its latest generation; a failed revision fails at once with Knative's reason. */
export async function waitKnativeService(api: KubeApi, namespace: string, name: string, deadline: number): Promise<KnativeServiceObject> {
  let ready: ReadCondition | undefined;
  return waitFor(
    `Knative Service ${namespace}/${name} to be Ready`,
    async () => {
      const ksvc = await api.request<KnativeServiceObject>('GET', `/apis/serving.knative.dev/v1/namespaces/${namespace}/services/${name}`);
      ready = ksvc.status?.conditions?.find((c) => c.type === 'Ready');
      const current = ksvc.status?.observedGeneration === ksvc.metadata.generation;
      if (current && ready?.status === 'True') return ksvc;
      // Knative says False only once a revision has failed (Unknown while it deploys).
      const why = current ? whyNotReady(ksvc.status?.conditions) : undefined;
      if (why) throw new WaitAbandoned(`Knative Service ${namespace}/${name} is not Ready: ${why}; see \`kubectl -n ${namespace} get ksvc,revisions,pods\` and the revision pod's log`);
      return undefined;
    },
    { deadline, intervalMs: 500, context: () => `Ready=${ready?.status ?? 'unknown'}${ready?.reason ? `, ${ready.reason}: ${ready.message ?? ''}` : ''}` },
  );
}
