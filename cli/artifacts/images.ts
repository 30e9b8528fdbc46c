// Container images of the bridge and of the functions, built on this machine (esbuild bundle +
// a base image, no registry, no Docker): on kfn's own Node image with the local cluster's tools,
// or on any base image (as ko and jib build them); then imported into the local cluster's node
// or pushed to a registry (`kfn image`, `kfn deploy`).
import { basename, join } from 'node:path';
import { applyObject, type KubeApi } from '../../kube/api.ts';
import { ensureBinaries, type BinarySet } from '../../cluster/build.ts';
import { clusterHealthy } from '../../cluster/controlplane.ts';
import { clusterPaths, displayPath, kfnVersion } from '../../cluster/paths.ts';
import { buildImage, importImages, nodeRecipe, nonRootUid, type BuiltImage, type ImageRecipe } from '../../cluster/images.ts';
import { nodePaths } from '../../cluster/node.ts';
import { localRegistry } from '../../cluster/registry.ts';
import { dockerCredentials, parseReference, pushImage, type RegistryCredentials } from './push.ts';
import { chooseBase, defaultPlatform, functionNodeFlags, layerFromDirectory, nodeEntrypoint, parsePlatform, pullBase, pushOnBase, writeImageTarball, type BaseChoice, type BaseImage, type ImageOnBase } from './oci-image.ts';
import { bridgeBundle, buildDir, functionBundle, hostBundle } from './bundle.ts';
import { UsageError } from '../command.ts';
import { kfnCommand } from '../invocation.ts';
import { managedByKfn, managedByLabel } from '../../core/names.ts';

const say = (line: string) => console.error(line);
const version = kfnVersion;

/** The bridge image on kfn's own Node image, built here with the local cluster's tools; manifests/ runs it. */
export async function bridgeImage(binaries: BinarySet, log = say): Promise<BuiltImage> {
  const bundle = await bridgeBundle(log);
  const node = nodeRecipe();
  const recipe: ImageRecipe = { name: 'bridge', tag: version, base: node, files: [[bundle, '/app']], config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/kfn.mjs'] } };
  return buildImage(recipe, binaries, log);
}

/** A function's image on kfn's own Node image, built here with the local cluster's tools. */
export async function functionImage(dir: string, binaries: BinarySet, log = say): Promise<BuiltImage & { name: string }> {
  const { name, app } = await functionBundle(dir, log);
  return { ...processImage(`fn-${name}`, app, binaries, log), name };
}

/** The image `name` of a function's or a shared host's bundle (`app`, its main fn.mjs) on kfn's own Node image. */
function processImage(name: string, app: string, binaries: BinarySet, log: (line: string) => void): BuiltImage {
  const node = nodeRecipe();
  const recipe: ImageRecipe = {
    name,
    tag: version,
    base: node,
    files: [[app, '/app']],
    config: { ...node.config, Entrypoint: ['/usr/local/bin/node', ...functionNodeFlags, '/app/fn.mjs'] },
  };
  return buildImage(recipe, binaries, log);
}

/** Images built on a base: from what, for which platform. */
export interface OnBase {
  base: BaseChoice;
  platform: string;
  /** The base, pulled once for all the images of a command. */
  pulled?: Promise<BaseImage>;
}

/** `--base` and `--platform` (and the project's kfn.base): images on a base, or (in kfn's checkout, none given) on kfn's own Node image. */
export function onBase(values: { base?: string; platform?: string }): OnBase | undefined {
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
    change: (config) => ({ entrypoint: nodeEntrypoint(config, `/app/${main}`, functionNodeFlags), env: { NODE_ENV: 'production' }, workingDir: '/app', user: String(nonRootUid) }),
  };
}

/** Pushes a bundle's image on the base to `<prefix>/<name>:<version>`; answers the reference by digest. */
export async function pushBundle(on: OnBase, registry: RegistryTarget, name: string, app: string, main: string, log = say): Promise<{ ref: string; tagged: string; digest: string }> {
  const tagged = `${registry.prefix}/${name}:${version}`;
  const pushed = await pushOnBase(await imageOnBase(on, name, app, main), parseReference(tagged), { credentials: registry.credentials, log });
  return { ref: pushed.ref, tagged, digest: pushed.digest };
}

/** A bundle's image on the base as an image tarball named kfn.local/<name>:<version>, for the local node (its base layers downloaded). */
export async function bundleTarball(on: OnBase, name: string, app: string, main: string, log = say): Promise<BuiltImage & { id: string }> {
  const started = performance.now();
  const ref = `kfn.local/${name}:${version}`;
  const tarball = join(buildDir, `${name}-${version}-on-base.tar`);
  const { configDigest } = await writeImageTarball(await imageOnBase(on, name, app, main), ref, tarball);
  const seconds = (performance.now() - started) / 1000;
  log(`  built ${ref} on ${on.base.ref} in ${seconds.toFixed(1)} s`);
  return { ref, tarball, seconds, id: configDigest.slice(7, 23) };
}

/**
 * What `kfn image` makes: the bridge's and the functions' bundles, as [image name, bundle folder,
 * main module]; with `host`, the functions as one shared host's bundle.
 */
export async function bundles(wantBridge: boolean, dirs: string[], host?: string): Promise<[string, string, string][]> {
  const out: [string, string, string][] = [];
  if (wantBridge) out.push(['bridge', await bridgeBundle(), 'kfn.mjs']);
  if (host) return [...out, [`host-${host}`, await hostBundle(host, dirs), 'fn.mjs']];
  for (const dir of dirs) {
    const { name, app } = await functionBundle(dir);
    out.push([`fn-${name}`, app, 'fn.mjs']);
  }
  return out;
}

/** The bridge's (`wantBridge`) and the functions' images (with `host`, one shared host's) on kfn's own Node image, its tools built (or found) first. */
export async function nodeImages(wantBridge: boolean, dirs: string[], host?: string): Promise<BuiltImage[]> {
  const binaries = await ensureBinaries({ log: say });
  const images: BuiltImage[] = [];
  if (wantBridge) images.push(await bridgeImage(binaries));
  if (host) return [...images, processImage(`host-${host}`, await hostBundle(host, dirs), binaries, say)];
  for (const dir of dirs) images.push(await functionImage(dir, binaries));
  return images;
}

/** The local cluster's containerd socket, or an error saying how to get one. */
export async function localNode(): Promise<string> {
  const paths = clusterPaths();
  if (!(await clusterHealthy(paths))) {
    throw new UsageError(`kfn imports images into the local cluster's node, which is not running: start it with \`${kfnCommand('cluster up')}\`, or push the images to a registry your cluster pulls from (--registry).`, 1);
  }
  return nodePaths(paths.dir).containerdSocket;
}

/** Imports built images into the local node (its containerd `socket`), saying each one. */
export function imported(images: BuiltImage[], socket: string): void {
  importImages(socket, images.map((i) => i.tarball));
  for (const i of images) say(`  ${i.ref} imported into the local node (${displayPath(i.tarball)})`);
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
    if (!running) throw new UsageError(`--registry local: the local registry does not run; start it with \`${kfnCommand('cluster registry')}\``, 1);
    return { prefix: running.host, ...(running.auth ? { credentials: running.auth } : {}) };
  }
  if (!/^[a-z0-9.-]+(:\d+)?(\/[a-z0-9._\/-]+)?$/.test(value)) throw new UsageError(`--registry must be local or host[:port][/path] (e.g. registry.example.com/team), not "${value}"`);
  const credentials = dockerCredentials(registryOf(value));
  return { prefix: value.replace(/\/$/, ''), ...(credentials ? { credentials } : {}) };
}

/** The registry (host[:port]) of an image prefix or reference. */
const registryOf = (prefix: string) => prefix.replace(/\/.*$/, '');

/** Where a built image goes in the registry target: `<prefix>/<name>:<tag>` for kfn.local/<name>:<tag>. */
const targetRef = (target: RegistryTarget, image: BuiltImage) => `${target.prefix}/${image.ref.slice(image.ref.indexOf('/') + 1)}`;

/** Pushes a built image to the registry target as <prefix>/<name>:<tag>; answers the reference by digest. */
export async function pushTo(target: RegistryTarget, image: BuiltImage, log: (line: string) => void): Promise<string> {
  const pushed = await pushImage(image.tarball, targetRef(target, image), { credentials: target.credentials, log });
  return pushed.ref;
}

/** The dockerconfigjson Secret the kubelet pulls a function's image with, when the registry asks for credentials. */
const pullSecretName = 'kfn-registry';
export async function ensurePullSecret(api: KubeApi, namespace: string, target: RegistryTarget): Promise<string[]> {
  if (!target.credentials) return [];
  const host = registryOf(target.prefix);
  const auth = Buffer.from(`${target.credentials.username}:${target.credentials.password}`).toString('base64');
  const config = JSON.stringify({ auths: { [host]: { auth } } });
  await applyObject(api, { apiVersion: 'v1', kind: 'Secret', metadata: { name: pullSecretName, namespace, labels: { [managedByLabel]: managedByKfn } }, type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': Buffer.from(config).toString('base64') } } as Parameters<typeof applyObject>[1], 'kfn-deploy');
  return [pullSecretName];
}

/** What `kfn image` and `kfn deploy` say before they build on a base: which, from where, for which platform. */
export const buildingOn = (on: OnBase) => `Building on ${on.base.ref} (${on.base.from}, ${on.platform})`;

/** How and where a deployed process's image is built and placed (placeFunctionImage, placeHostImage). */
export interface ImagePlacement {
  on?: OnBase;
  binaries?: BinarySet;
  registry?: RegistryTarget;
  socket?: string;
  knative: boolean;
  log: (line: string) => void;
}

/**
 * A function's image, built (on the base, else on kfn's own Node image with `binaries`) and
 * placed where its workload runs it from: pushed to the registry, or imported into the local
 * node (`socket`). Knative is given the tag: its controller resolves it to a digest from the
 * registry, as in production (the revision then runs that digest). A Deployment is given the digest.
 */
export async function placeFunctionImage(dir: string, how: ImagePlacement): Promise<{ imageRef: string; imageId: string }> {
  const { name, app } = await functionBundle(dir, how.log);
  return placeImage(`fn-${name}`, app, how);
}

/** A shared host's image (`host-<host>`: every function of `dirs` in one bundle), built and placed as a function's. */
export async function placeHostImage(host: string, dirs: string[], how: ImagePlacement): Promise<{ imageRef: string; imageId: string }> {
  return placeImage(`host-${host}`, await hostBundle(host, dirs, how.log), how);
}

/** The image `name` of the bundle in `app`: on the base, or on kfn's own Node image. */
async function placeImage(name: string, app: string, how: ImagePlacement): Promise<{ imageRef: string; imageId: string }> {
  const { on, registry, socket, knative, log } = how;
  return on ? placeOnBase(on, name, app, registry, socket, knative, log) : placeBuilt(processImage(name, app, how.binaries!, log), registry, socket, knative, log);
}

/** A bundle's image on the base: pushed to the registry, or (no registry) imported into the local node. */
async function placeOnBase(on: OnBase, name: string, app: string, registry: RegistryTarget | undefined, socket: string | undefined, knative: boolean, log: (line: string) => void): Promise<{ imageRef: string; imageId: string }> {
  if (registry) {
    const pushed = await pushBundle(on, registry, name, app, 'fn.mjs', log);
    return { imageRef: knative ? pushed.tagged : pushed.ref, imageId: pushed.digest.slice(7, 23) };
  }
  const image = await bundleTarball(on, name, app, 'fn.mjs', log);
  importImages(socket!, [image.tarball]);
  return { imageRef: image.ref, imageId: image.id };
}

/** An image built on kfn's own Node image: pushed to the registry, or imported into the local node. */
async function placeBuilt(image: BuiltImage, registry: RegistryTarget | undefined, socket: string | undefined, knative: boolean, log: (line: string) => void): Promise<{ imageRef: string; imageId: string }> {
  const imageId = basename(image.tarball, '.tar');
  if (!registry) {
    importImages(socket!, [image.tarball]);
    return { imageRef: image.ref, imageId };
  }
  const pushed = await pushTo(registry, image, log);
  return { imageRef: knative ? targetRef(registry, image) : pushed, imageId };
}
