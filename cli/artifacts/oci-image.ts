// Images the way ko and jib make them: a base image from any OCI registry plus the bundle as one
// more layer, pushed by digest. No container runs, no Docker engine and no Go tool: the base's
// layers are never unpacked (the target repository gets them by a cross-repository mount when
// both live in one registry, else blob by blob, streamed from the base's registry), the bundle's
// layer is a tar.gz made here, and the image is a new config (the base's, with the layer's
// diff_id, a history entry and the entrypoint) and a new manifest (the base's layers, then the
// bundle's).
//
// Reproducible: the same bundle on the same base is the same image digest, on any machine. Every
// entry of the layer is owned by root at the epoch, with 0755 or 0644; entries are sorted; the
// gzip stream is fflate's (pure JavaScript, so its bytes do not depend on the zlib build of the
// Node that runs it), without a time in its header; the config's times are the epoch, as ko and
// jib write them.
import { createWriteStream, existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { dirname, join, posix, relative, sep } from 'node:path';
import { gzipSync } from 'fflate';
import { pack } from 'tar-stream';
import { compiled } from '../../cluster/paths.ts';
import { UsageError } from '../command.ts';
import { dockerCredentials, RegistryClient, sha256, type RegistryCredentials } from './push.ts';

/** Where kfn's images are based when nothing says otherwise: the official Node 24 image, Debian slim. */
export const defaultBase = 'docker.io/library/node:24-slim';
/** The platform of a multi-arch base kfn takes unless --platform says another. */
export const defaultPlatform = 'linux/amd64';
/** The epoch, the time of every entry and of the config (ko's and jib's default). */
const epoch = '1970-01-01T00:00:00Z';

export const mediaTypes = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
  urls?: string[];
}

export interface ImageManifest {
  schemaVersion: 2;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

export interface ImageIndex {
  schemaVersion: 2;
  mediaType?: string;
  manifests: Descriptor[];
}

/** The image config (OCI image-spec config.md); fields kfn does not touch are carried over as they are. */
export interface ImageConfigFile {
  architecture?: string;
  os?: string;
  variant?: string;
  created?: string;
  config?: { Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; WorkingDir?: string; User?: string; Labels?: Record<string, string>; [field: string]: unknown };
  rootfs: { type: 'layers'; diff_ids: string[] };
  history?: { created?: string; created_by?: string; comment?: string; empty_layer?: boolean }[];
  [field: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// The bundle's layer

export interface LayerFile {
  /** Absolute path in the image. */
  path: string;
  content: Buffer;
  /** 0o755 for an executable; anything else is written 0o644. */
  mode?: number;
}

export interface Layer {
  /** The tar.gz, as pushed. */
  blob: Buffer;
  /** sha256 of `blob`: the manifest's layer digest. */
  digest: string;
  /** sha256 of the uncompressed tar: the config's diff_id. */
  diffId: string;
  size: number;
}

/** A layer of `files` and their parent directories: sorted, owned by root at the epoch, 0755/0644. */
export async function layerFromFiles(files: LayerFile[]): Promise<Layer> {
  const entries = new Map<string, { dir: true } | LayerFile>();
  for (const file of files) {
    if (!file.path.startsWith('/')) throw new Error(`a layer's file path must be absolute in the image, not ${file.path}`);
    const name = posix.normalize(file.path).slice(1);
    entries.set(name, file);
    for (let dir = posix.dirname(name); dir !== '.'; dir = posix.dirname(dir)) entries.set(`${dir}/`, { dir: true });
  }
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk) => chunks.push(chunk as Buffer));
  const ended = new Promise<void>((resolve, reject) => tar.on('end', resolve).on('error', reject));
  // Byte order of the names ('app/' before 'app/a', a parent before its children), as GNU tar's --sort=name.
  for (const name of [...entries.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
    const e = entries.get(name)!;
    const common = { name, mtime: new Date(0), uid: 0, gid: 0, uname: '', gname: '' };
    if ('dir' in e) tar.entry({ ...common, type: 'directory', mode: 0o755 });
    else tar.entry({ ...common, type: 'file', mode: (e.mode ?? 0o644) & 0o111 ? 0o755 : 0o644, size: e.content.length }, e.content);
  }
  tar.finalize();
  await ended;
  const uncompressed = Buffer.concat(chunks);
  const blob = Buffer.from(gzipSync(uncompressed, { level: 6, mtime: 0 }));
  return { blob, digest: sha256(blob), diffId: sha256(uncompressed), size: blob.length };
}

/** A layer holding the files under `dir` at `at` in the image (regular files and folders only: a bundle has nothing else). */
export async function layerFromDirectory(dir: string, at: string): Promise<Layer> {
  const files: LayerFile[] = [];
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    if (entry.isDirectory()) continue;
    if (!entry.isFile()) throw new Error(`${path} is neither a file nor a folder: a bundle's layer holds only those`);
    files.push({ path: posix.join(at, relative(dir, path).split(sep).join('/')), content: readFileSync(path), mode: lstatSync(path).mode });
  }
  return layerFromFiles(files);
}

// ---------------------------------------------------------------------------------------------
// Config and manifest

/** What kfn changes in the base's config. */
export interface ConfigChange {
  entrypoint: string[];
  /** Default: none (the base's Cmd would become the bundle's arguments). */
  cmd?: string[];
  /** Set (or replace) these variables; the base's others stay. */
  env?: Record<string, string>;
  workingDir?: string;
  user?: string;
}

/**
 * How the image runs `script`: the base's own entrypoint when it is a Node binary (distroless's
 * /nodejs/bin/node, kfn's /usr/local/bin/node), else `node` found on the image's PATH (the
 * official node images, whose entrypoint is a shell script).
 */
export function nodeEntrypoint(base: ImageConfigFile, script: string, flags: readonly string[] = []): string[] {
  const entrypoint = base.config?.Entrypoint ?? [];
  if (entrypoint.length === 1 && /(^|\/)(node|nodejs)$/.test(entrypoint[0]!)) return [entrypoint[0]!, ...flags, script];
  return ['node', ...flags, script];
}

/**
 * V8's flags a function's (or a shared host's) image runs Node with: a young generation of 1 MiB
 * and V8 tuned for size. Measured by bench:compare's CPU part (docs/performance.md, "What V8's
 * flags cost a function"): after converging 1,000 MyWebs the function kept 119 MiB resident
 * against 207 without them, for 5.06 against 4.39 ms of CPU per delivery. The bridge's further
 * --no-opt --no-maglev (interpreter and baseline compiler only) took 107 MiB for 5.63 ms: not
 * worth it for the process that does the reconcile's work. Not in NODE_OPTIONS, which refuses
 * --optimize-for-size.
 */
export const functionNodeFlags: readonly string[] = ['--max-semi-space-size=1', '--optimize-for-size'];

/**
 * The new image's config: the base's, with the layer's diff_id and a history entry appended and
 * `change` applied. `baseLayers`, the number of layers the base's manifest names, is checked
 * against its diff_ids (a base whose two disagree would make an image no runtime accepts).
 */
export function composeConfig(base: ImageConfigFile, layer: Pick<Layer, 'diffId'>, change: ConfigChange, createdBy: string, baseLayers?: number): ImageConfigFile {
  const diffIds = base.rootfs?.diff_ids ?? [];
  if (baseLayers !== undefined && diffIds.length !== baseLayers) throw new Error(`the base image's config names ${diffIds.length} layer(s) and its manifest names ${baseLayers}: it is not a valid image`);
  const config = structuredClone(base);
  const env = [...(config.config?.Env ?? [])];
  for (const [name, value] of Object.entries(change.env ?? {})) {
    const at = env.findIndex((e) => e.split('=')[0] === name);
    if (at >= 0) env[at] = `${name}=${value}`;
    else env.push(`${name}=${value}`);
  }
  config.config = { ...config.config, Entrypoint: change.entrypoint, Env: env };
  if (change.cmd?.length) config.config.Cmd = change.cmd;
  else delete config.config.Cmd;
  if (change.workingDir !== undefined) config.config.WorkingDir = change.workingDir;
  if (change.user !== undefined) config.config.User = change.user;
  config.created = epoch;
  config.rootfs = { type: 'layers', diff_ids: [...diffIds, layer.diffId] };
  config.history = [...(config.history ?? []), { created: epoch, created_by: createdBy, comment: 'kfn' }];
  return config;
}

/**
 * The new image's manifest: the base's layers (their descriptors as they are), then the bundle's,
 * and the new config, in the base's flavour (a Docker v2 base gives a Docker v2 manifest: some
 * registries refuse OCI media types inside one). The base's annotations are left out: they
 * describe the base.
 */
export function composeManifest(base: ImageManifest, baseMediaType: string, config: Buffer, layer: Pick<Layer, 'digest' | 'size'>): { bytes: Buffer; mediaType: string; digest: string } {
  const docker = baseMediaType === mediaTypes.dockerManifest;
  const mediaType = docker ? mediaTypes.dockerManifest : mediaTypes.ociManifest;
  const manifest: ImageManifest = {
    schemaVersion: 2,
    mediaType,
    config: { mediaType: docker ? mediaTypes.dockerConfig : mediaTypes.ociConfig, digest: sha256(config), size: config.length },
    layers: [...base.layers, { mediaType: docker ? mediaTypes.dockerLayerGzip : mediaTypes.ociLayerGzip, digest: layer.digest, size: layer.size }],
  };
  const bytes = Buffer.from(JSON.stringify(manifest));
  return { bytes, mediaType, digest: sha256(bytes) };
}

// ---------------------------------------------------------------------------------------------
// References and platforms

/**
 * An image reference as Docker and ko read it: `[registry/]repository[:tag][@digest]`; no
 * registry (no dot, colon or `localhost` in the first part) means Docker Hub, whose one-part
 * names are under library/; no tag means `latest`. `reference` is the digest when there is one.
 */
export function parseImageReference(ref: string): { registry: string; repository: string; reference: string } {
  const m = ref.match(/^(?:([a-zA-Z0-9.-]+(?::\d+)?)\/)?([a-z0-9]+(?:[._-]+[a-z0-9]+|__)*(?:\/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*)(?::([\w][\w.-]{0,127}))?(?:@(sha256:[0-9a-f]{64}))?$/);
  const first = m?.[1];
  // "team/app" is Docker Hub's team/app; "registry.example.com/app" and "localhost:5000/app" name a registry.
  const isRegistry = first !== undefined && (first.includes('.') || first.includes(':') || first === 'localhost');
  if (!m || (first !== undefined && !isRegistry && first !== first.toLowerCase())) throw new Error(`${ref} is not an image reference (expected [registry/]repository[:tag][@sha256:…], e.g. docker.io/library/node:24-slim)`);
  const registry = isRegistry ? first! : 'docker.io';
  let repository = isRegistry ? m[2]! : first ? `${first}/${m[2]}` : m[2]!;
  if (registry === 'docker.io' && !repository.includes('/')) repository = `library/${repository}`;
  return { registry, repository, reference: m[4] ?? m[3] ?? 'latest' };
}

/** `os/architecture[/variant]`, as --platform takes it (linux/amd64, linux/arm64, linux/arm/v7). */
export function parsePlatform(value: string): Platform {
  const [os, architecture, variant, ...rest] = value.split('/');
  if (!os || !architecture || rest.length) throw new Error(`--platform must be os/architecture[/variant] (e.g. linux/amd64, linux/arm64), not "${value}"`);
  return { os, architecture, ...(variant ? { variant } : {}) };
}

const platformName = (p: Platform) => [p.os, p.architecture, p.variant].filter(Boolean).join('/');

/** The index's manifest for `platform` (with a variant only when asked); an error lists the platforms there are. */
export function chooseManifest(index: ImageIndex, platform: Platform, ref: string): Descriptor {
  const images = index.manifests.filter((d) => d.platform && d.platform.os !== 'unknown');
  const found = images.find((d) => d.platform!.os === platform.os && d.platform!.architecture === platform.architecture && (!platform.variant || d.platform!.variant === platform.variant));
  if (!found) throw new Error(`${ref} has no image for ${platformName(platform)}; it has ${images.map((d) => platformName(d.platform!)).join(', ') || 'none with a platform'} (choose one with --platform)`);
  return found;
}

/** The base a command builds on, and what chose it (said in its messages). */
export interface BaseChoice {
  ref: string;
  from: string;
}

/**
 * The base: `--base`, else the `"kfn": {"base": …}` field of the project's package.json (the
 * nearest one from `cwd` up), else the default Node 24 image. In kfn's own checkout, with
 * neither, there is none (undefined): the repository's images are built on its own Node image
 * from Debian packages, so its demo and tests need nothing from outside.
 */
export function chooseBase(flag: string | undefined, options: { cwd?: string; checkout?: boolean } = {}): BaseChoice | undefined {
  const check = (ref: string, from: string) => {
    try {
      parseImageReference(ref);
    } catch (err) {
      throw new UsageError(`${from}: ${(err as Error).message}`);
    }
    return { ref, from };
  };
  if (flag !== undefined) return check(flag, '--base');
  for (let dir = options.cwd ?? process.cwd(); ; dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      let pkg: { kfn?: { base?: unknown } };
      try {
        pkg = JSON.parse(readFileSync(file, 'utf8')) as typeof pkg;
      } catch (err) {
        throw new UsageError(`cannot read ${file} for its "kfn" field: ${(err as Error).message}`, 1);
      }
      const base = pkg.kfn?.base;
      if (base !== undefined && typeof base !== 'string') throw new UsageError(`${file}: "kfn": {"base": …} must be an image reference (a string), e.g. "${defaultBase}"`);
      if (base) return check(base, `"kfn": {"base"} of ${file}`);
      break;
    }
    if (dirname(dir) === dir) break;
  }
  return (options.checkout ?? !compiled) ? undefined : { ref: defaultBase, from: 'the default' };
}

// ---------------------------------------------------------------------------------------------
// From the base's registry to the target's

export interface BaseImage {
  /** As given (--base, kfn.base or the default). */
  ref: string;
  registry: string;
  repository: string;
  /** The platform's manifest: its digest (what the base resolved to), media type and content. */
  digest: string;
  mediaType: string;
  manifest: ImageManifest;
  config: ImageConfigFile;
  client: RegistryClient;
}

/** The base's manifest for `platform` (an index resolved) and its config; errors name the reference, registry and HTTP status. */
export async function pullBase(ref: string, platform: Platform, credentials = dockerCredentials(parseImageReference(ref).registry)): Promise<BaseImage> {
  const { registry, repository, reference } = parseImageReference(ref);
  const client = new RegistryClient(registry, repository, credentials);
  const what = `the base image ${ref}`;
  let got = await client.manifest(reference, what).catch((err: Error) => {
    throw new Error(`${err.message}. Choose another base with --base or the "kfn": {"base": …} field of package.json`);
  });
  if (got.mediaType === mediaTypes.ociIndex || got.mediaType === mediaTypes.dockerList) {
    const chosen = chooseManifest(JSON.parse(got.bytes.toString()) as ImageIndex, platform, ref);
    got = await client.manifest(chosen.digest, `${what} (${platformName(platform)})`);
  }
  if (got.mediaType !== mediaTypes.ociManifest && got.mediaType !== mediaTypes.dockerManifest) throw new Error(`${what} at ${registry} is a ${got.mediaType || 'manifest of no media type'}, not an image manifest kfn can build on (OCI or Docker v2)`);
  const manifest = JSON.parse(got.bytes.toString()) as ImageManifest;
  const config = JSON.parse((await client.blob(manifest.config.digest, what)).toString()) as ImageConfigFile;
  // A single-platform base says its platform in its config.
  if (config.architecture && (config.os ?? 'linux') === platform.os && config.architecture !== platform.architecture) {
    throw new Error(`${what} is for ${platformName({ os: config.os ?? 'linux', architecture: config.architecture, variant: config.variant })}, not ${platformName(platform)}: choose a base for ${platformName(platform)}, or --platform`);
  }
  return { ref, registry, repository, digest: got.digest, mediaType: got.mediaType, manifest, config, client };
}

export interface ImageOnBase {
  /** The base, pulled (pullBase). */
  base: BaseImage;
  layer: Layer;
  /** The entrypoint and the rest; `entrypoint` may depend on the base (nodeEntrypoint). */
  change: (base: ImageConfigFile) => ConfigChange;
  /** The history entry's created_by. */
  createdBy: string;
}

export interface PushedOnBase {
  /** registry/repository@sha256:… — what a pod should run. */
  ref: string;
  digest: string;
  /** Bytes sent to the target registry: the bundle's layer, the config and base layers copied. */
  uploaded: number;
  /** Base layers the target got by a cross-repository mount, and copied from the base's registry. */
  mounted: number;
  copied: number;
  seconds: number;
}

/**
 * Pushes the image `image` describes as `target` (registry/repository:tag), with `credentials`
 * for the target (default: the Docker config's). Each base layer the target repository lacks is
 * mounted from the base's repository when both are in one registry, else streamed from the
 * base's registry; then the bundle's layer, the config, and the manifest by tag.
 */
export async function pushOnBase(image: ImageOnBase, target: { registry: string; repository: string; tag: string }, options: { credentials?: RegistryCredentials; log?: (line: string) => void } = {}): Promise<PushedOnBase> {
  const started = performance.now();
  const { base } = image;
  const config = Buffer.from(JSON.stringify(composeConfig(base.config, image.layer, image.change(base.config), image.createdBy, base.manifest.layers.length)));
  const manifest = composeManifest(base.manifest, base.mediaType, config, image.layer);
  const sameRegistry = base.registry === target.registry;
  const client = new RegistryClient(target.registry, target.repository, options.credentials ?? dockerCredentials(target.registry), sameRegistry ? { pullFrom: [base.repository] } : {});
  let uploaded = 0;
  let mounted = 0;
  let copied = 0;
  for (const layer of base.manifest.layers) {
    const how = await client.putBlob({ digest: layer.digest, size: layer.size, open: () => base.client.blobStream(layer.digest, `the base image ${base.ref}`) }, sameRegistry ? { mountFrom: base.repository } : {});
    if (how === 'mounted') mounted++;
    if (how === 'uploaded') (copied++, (uploaded += layer.size));
  }
  for (const blob of [{ digest: image.layer.digest, size: image.layer.size, bytes: image.layer.blob }, { digest: sha256(config), size: config.length, bytes: config }]) {
    if ((await client.putBlob({ digest: blob.digest, size: blob.size, open: () => blob.bytes })) === 'uploaded') uploaded += blob.size;
  }
  const digest = await client.putManifest(target.tag, manifest.bytes, manifest.mediaType);
  const seconds = (performance.now() - started) / 1000;
  const baseLayers = [mounted && `${mounted} mounted`, copied && `${copied} copied from ${base.registry}`].filter(Boolean).join(', ');
  options.log?.(`Pushed ${target.registry}/${target.repository}:${target.tag} (${digest.slice(0, 19)}…) on ${base.ref} (${base.digest.slice(0, 19)}…): ${(uploaded / 2 ** 20).toFixed(1)} MiB uploaded${baseLayers ? `, base layers ${baseLayers}` : ''}, in ${seconds.toFixed(1)} s`);
  return { ref: `${target.registry}/${target.repository}@${digest}`, digest, uploaded, mounted, copied, seconds };
}

/**
 * Writes the image `image` describes as an image tarball (the `docker save` layout containerd's
 * `ctr images import` reads, named `ref`), for a node that takes images from files rather than
 * from a registry: the base's layers are downloaded into it, streamed from the base's registry.
 * Answers the config's digest, the image ID containerd shows.
 */
export async function writeImageTarball(image: ImageOnBase, ref: string, path: string): Promise<{ configDigest: string }> {
  const { base } = image;
  const config = Buffer.from(JSON.stringify(composeConfig(base.config, image.layer, image.change(base.config), image.createdBy, base.manifest.layers.length)));
  const hex = (digest: string) => digest.replace(/^sha256:/, '');
  const layers = [...base.manifest.layers.map((l) => ({ digest: l.digest, size: l.size, bytes: undefined as Buffer | undefined })), { digest: image.layer.digest, size: image.layer.size, bytes: image.layer.blob }];
  const tar = pack();
  const written = pipeline(tar, createWriteStream(path));
  const entry = (name: string, bytes: Buffer) => new Promise<void>((resolve, reject) => tar.entry({ name, mode: 0o644, mtime: new Date(0) }, bytes, (err) => (err ? reject(err) : resolve())));
  await entry(`${hex(sha256(config))}.json`, config);
  for (const layer of layers) {
    const name = `${hex(layer.digest)}.tar.gz`;
    if (layer.bytes) await entry(name, layer.bytes);
    else {
      const sink = tar.entry({ name, mode: 0o644, mtime: new Date(0), size: layer.size });
      await pipeline(await base.client.blobStream(layer.digest, `the base image ${base.ref}`), sink);
    }
  }
  await entry('manifest.json', Buffer.from(JSON.stringify([{ Config: `${hex(sha256(config))}.json`, RepoTags: [ref], Layers: layers.map((l) => `${hex(l.digest)}.tar.gz`) }])));
  tar.finalize();
  await written;
  return { configDigest: sha256(config) };
}
