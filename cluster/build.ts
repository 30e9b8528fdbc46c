// Builds the local control plane's binaries from Go modules and caches them outside the repo.
//
// The cache directory is named by the pinned versions, the Go toolchain and a hash of every
// file that decides the build (the go.mod/go.sum and main.go files) and of the build steps
// (packages, tags, linker flags), so a change to any of them builds into a new directory and an
// unchanged tree reuses the old one. The Go environment set here (goEnv) is not hashed: a change
// to it that changes what the binaries do must change a step too. A build goes
// into a temporary directory that is renamed into place only when every binary is there, so
// an interrupted build never leaves a half-filled cache entry behind.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { homedir, setPriority } from 'node:os';
import { join, relative } from 'node:path';

const repoDir = join(import.meta.dirname, '..');
import { logTail } from './processes.ts';
import { clusterModuleDir, compareVersions, corednsModuleDir, imageModuleDir, kwokModuleDir, pinnedVersions, type PinnedVersions } from './versions.ts';

/** How long the local cluster's first build takes (8 min 38 s measured on a new 2-core machine), as every message says it. */
export const firstBuild = 'about 10 minutes on 2 cores';

export const binaryNames = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kubectl',
  'kubelet',
  'kube-proxy',
  'kwok',
  'coredns',
  'kfn-image',
  'pause',
] as const;
const moduleDirs = [clusterModuleDir, kwokModuleDir, corednsModuleDir, imageModuleDir];
export type BinaryName = (typeof binaryNames)[number];

/** Free space a cold build needs: module cache (~1.1 GiB), build cache (~5 GiB), binaries (~0.6 GiB). */
const coldBuildBytes = 8 * 1024 ** 3;

export interface BuildOptions {
  log?: (line: string) => void;
  /** Seconds between "still building" lines during one long `go build`. */
  heartbeatSeconds?: number;
  /**
   * Build with what the machine leaves over: Go at the lowest CPU priority (nice 19) and, where
   * ionice exists, the idle I/O class — for a build that runs beside tests, which keep the machine.
   */
  lowPriority?: boolean;
}

export interface BinarySet {
  dir: string;
  versions: PinnedVersions;
  path(name: BinaryName): string;
}

export function cacheRoot(): string {
  if (process.env.KFN_CACHE_DIR) return join(process.env.KFN_CACHE_DIR, 'cluster');
  const xdg = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(xdg, 'kfn', 'cluster');
}

/** Finds the Go toolchain: $GO, then `go` on PATH, then the standard install location. */
export function findGo(): string {
  const candidates = [process.env.GO, 'go', '/usr/local/go/bin/go'].filter((c): c is string => !!c);
  for (const candidate of candidates) {
    const probe = spawnSync(candidate, ['env', 'GOVERSION'], { encoding: 'utf8', env: goEnv() });
    if (probe.status === 0) return candidate;
  }
  throw new Error(
    'Go toolchain not found. kfn builds its local Kubernetes control plane from source and needs Go ' +
      `${pinnedVersions().minimumGo} or newer: install Go, then put \`go\` on PATH or set GO=/path/to/bin/go.`,
  );
}

function goEnv(): NodeJS.ProcessEnv {
  // GOTOOLCHAIN=local: fail at once if the toolchain is too old instead of fetching another.
  // CGO off and -trimpath: static, reproducible binaries, as upstream releases are built.
  // -dwarf=false: every program links with -w (no debug information), yet the compiler writes
  // DWARF for every package it compiles unless told not to; leaving it out takes about a sixth off
  // a cold build's CPU (Go's own std and cmd: 156 → 132 CPU s on 2 cores).
  return { ...process.env, GOTOOLCHAIN: 'local', CGO_ENABLED: '0', GOFLAGS: '-trimpath -mod=readonly -gcflags=all=-dwarf=false', GOWORK: 'off' };
}

function goVersion(go: string): string {
  return spawnSync(go, ['env', 'GOVERSION'], { encoding: 'utf8', env: goEnv() }).stdout.trim();
}

/** The files whose content decides what gets built; their hash (with the steps') names the cache entry. */
function buildInputs(): string[] {
  return [
    ...moduleDirs.flatMap((dir) => [join(dir, 'go.mod'), join(dir, 'go.sum')]),
    join(corednsModuleDir, 'main.go'),
    join(imageModuleDir, 'main.go'),
    join(imageModuleDir, 'pause', 'main.go'),
  ];
}

function binarySet(dir: string, versions: PinnedVersions): BinarySet {
  return { dir, versions, path: (name) => join(dir, name) };
}

/** Returns the cached binaries if they are complete, without building or touching Go. */
export function cachedBinaries(): BinarySet | undefined {
  const versions = pinnedVersions();
  const dir = cachedBuild(clusterBuildSpec(versions));
  return dir ? binarySet(dir, versions) : undefined;
}

function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

function formatBytes(bytes: number): string {
  return bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`;
}

function checkDisk(paths: string[]): void {
  for (const path of paths) {
    let probe = path;
    while (!existsSync(probe)) probe = join(probe, '..');
    const stats = statfsSync(probe);
    const free = stats.bavail * stats.bsize;
    if (free < coldBuildBytes) {
      throw new Error(
        `Not enough disk space to build the control plane: ${formatBytes(free)} free at ${probe}, ` +
          `about ${formatBytes(coldBuildBytes)} needed (Go module cache, Go build cache and binaries). ` +
          'Free some space, or point KFN_CACHE_DIR, GOMODCACHE and GOCACHE at a larger disk.',
      );
    }
  }
}

/** The -X flags that make `--version` report the real release, as Kubernetes' own build does. */
function versionLdflags(kubernetes: string): string {
  const [, major = '1', minor = '0'] = kubernetes.match(/^v(\d+)\.(\d+)/) ?? [];
  const flags: string[] = [];
  for (const pkg of ['k8s.io/component-base/version', 'k8s.io/client-go/pkg/version']) {
    flags.push(
      `-X ${pkg}.gitVersion=${kubernetes}`,
      `-X ${pkg}.gitMajor=${major}`,
      `-X ${pkg}.gitMinor=${minor}`,
      `-X ${pkg}.gitTreeState=clean`,
      `-X ${pkg}.buildDate=1970-01-01T00:00:00Z`,
    );
  }
  return flags.join(' ');
}

interface BuildStep {
  name: BinaryName;
  pkg: string;
  moduleDir: string;
  ldflags: string;
}

function buildSteps(versions: PinnedVersions): BuildStep[] {
  const stamped = `-s -w ${versionLdflags(versions.kubernetes)}`;
  const k8s = (name: BinaryName): BuildStep => ({ name, pkg: `k8s.io/kubernetes/cmd/${name}`, moduleDir: clusterModuleDir, ldflags: stamped });
  return [
    { name: 'etcd', pkg: 'go.etcd.io/etcd/server/v3', moduleDir: clusterModuleDir, ldflags: '-s -w' },
    k8s('kube-apiserver'),
    k8s('kube-controller-manager'),
    k8s('kube-scheduler'),
    k8s('kubectl'),
    k8s('kubelet'),
    k8s('kube-proxy'),
    { name: 'kwok', pkg: 'sigs.k8s.io/kwok/cmd/kwok', moduleDir: kwokModuleDir, ldflags: '-s -w' },
    { name: 'coredns', pkg: '.', moduleDir: corednsModuleDir, ldflags: '-s -w' },
    { name: 'kfn-image', pkg: '.', moduleDir: imageModuleDir, ldflags: '-s -w' },
    { name: 'pause', pkg: './pause', moduleDir: imageModuleDir, ldflags: '-s -w' },
  ];
}

function runGo(go: string, args: string[], cwd: string, logFile: string, onHeartbeat: () => void, heartbeatMs: number, lowPriority = false): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(logFile, { flags: 'a' });
    out.write(`$ go ${args.join(' ')}\n`);
    const child = spawn(go, args, { cwd, env: goEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    // Set before go starts its compilers and linkers (it loads packages first), which inherit both.
    if (lowPriority && child.pid) lowerPriority(child.pid);
    child.stdout.pipe(out, { end: false });
    child.stderr.pipe(out, { end: false });
    const timer = setInterval(onHeartbeat, heartbeatMs);
    child.on('error', (err) => {
      clearInterval(timer);
      out.end();
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearInterval(timer);
      out.end(() => (code === 0 ? resolve() : reject(new Error(`go ${args[0]} exited with ${signal ?? code}`))));
    });
  });
}

type Step = BuildSpec['steps'][number];

/**
 * The steps in runs that one `go build` can make together: neighbours from the same module with
 * the same tags and linker flags, each a program named as `go build -o <dir>/` names it (the last
 * element of its package path).
 */
export function buildGroups(steps: Step[]): Step[][] {
  const groups: Step[][] = [];
  const joinable = (step: Step) => step.pkg.split('/').at(-1) === step.name;
  for (const step of steps) {
    const last = groups.at(-1)?.[0];
    if (last && joinable(last) && joinable(step) && last.moduleDir === step.moduleDir && last.ldflags === step.ldflags && (last.tags ?? '') === (step.tags ?? '')) groups.at(-1)!.push(step);
    else groups.push([step]);
  }
  return groups;
}

/** Lowest CPU priority, and the idle I/O class where ionice exists (best effort: the build runs either way). */
function lowerPriority(pid: number): void {
  try {
    setPriority(pid, 19);
  } catch {
    /* gone already, or not allowed: it runs at the priority it has */
  }
  spawnSync('ionice', ['-c', '3', '-p', String(pid)], { stdio: 'ignore' });
}

/** One cache entry of binaries built from Go modules: what to build and how to describe it. */
export interface BuildSpec {
  /** Names the cache entry, e.g. `k8s-v1.35.4-etcd-v3.6.5`. */
  label: string;
  /** What the log calls it: "the local cluster". */
  title: string;
  /** The first log line's detail: versions, what a cold build costs. */
  intro: string[];
  moduleDirs: string[];
  /** Every file whose content decides the build (hashed into the entry's name). */
  inputs: string[];
  /** `tags`: Go build tags (comma-separated), e.g. to leave out a program's optional parts. */
  steps: { name: string; pkg: string; moduleDir: string; ldflags: string; tags?: string }[];
  /** Adds files beside the binaries once they are built (e.g. manifests from the modules). */
  finish?: (dir: string, go: string) => void;
}

/** The entry for `spec` under the cache root, by its inputs and the Go toolchain. */
export function buildDirOf(spec: BuildSpec, goVer: string): string {
  const hash = createHash('sha256');
  for (const file of spec.inputs) hash.update(readFileSync(file));
  // The steps too (packages, flags, module folders relative to the repo): a new way of building is a new entry.
  hash.update(JSON.stringify(spec.steps.map((s) => ({ ...s, moduleDir: relative(repoDir, s.moduleDir) }))));
  return join(cacheRoot(), `${spec.label}-${goVer}-${hash.digest('hex').slice(0, 12)}`);
}

const specComplete = (spec: BuildSpec, dir: string) => existsSync(join(dir, 'manifest.json')) && spec.steps.every((s) => existsSync(join(dir, s.name)));

/** The complete cache entry of `spec`, if there is one, without building. */
export function cachedBuild(spec: BuildSpec): string | undefined {
  let go: string;
  try {
    go = findGo();
  } catch {
    return undefined;
  }
  const dir = buildDirOf(spec, goVersion(go));
  return specComplete(spec, dir) ? dir : undefined;
}

/**
 * Returns the directory holding `spec`'s binaries, building them first when the cache has no
 * complete entry. Progress goes to `log`, one line per step and a heartbeat during long steps.
 */
export async function ensureBuild(spec: BuildSpec, options: BuildOptions = {}): Promise<string> {
  const log = options.log ?? ((line: string) => console.error(line));
  const go = findGo();
  const goVer = goVersion(go);
  const minimumGo = pinnedVersions().minimumGo;
  if (compareVersions(goVer, minimumGo) < 0) throw new Error(`${goVer} is too old to build ${spec.title}: it needs Go ${minimumGo} or newer.`);
  const root = cacheRoot();
  const dir = buildDirOf(spec, goVer);
  if (specComplete(spec, dir)) return dir;

  mkdirSync(root, { recursive: true });
  const goEnvPaths = spawnSync(go, ['env', 'GOMODCACHE', 'GOCACHE'], { encoding: 'utf8', env: goEnv() }).stdout.trim().split('\n');
  checkDisk([root, ...goEnvPaths]);

  const tmp = `${dir}.building-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const logFile = join(tmp, 'build.log');
  log(`Building ${spec.title} (${spec.intro[0]}, ${goVer}).`);
  for (const line of spec.intro.slice(1)) log(line);

  const started = Date.now();
  const heartbeatMs = (options.heartbeatSeconds ?? 60) * 1000;
  const timings: Record<string, number> = {};
  try {
    log(`[0/${spec.steps.length}] downloading Go modules`);
    for (const moduleDir of spec.moduleDirs) {
      await runGo(go, ['mod', 'download'], moduleDir, logFile, () => log(`      still downloading modules (${formatDuration(Date.now() - started)} elapsed)`), heartbeatMs, options.lowPriority);
    }
    let done = 0;
    for (const group of buildGroups(spec.steps)) {
      const stepStart = Date.now();
      const names = group.map((step) => step.name).join(', ');
      const first = group[0]!;
      const range = group.length > 1 ? `${done + 1}-${done + group.length}` : `${done + 1}`;
      log(`[${range}/${spec.steps.length}] building ${names}`);
      // Several programs in one `go build`: their packages compile once, and one links while the next compiles.
      const output = group.length > 1 ? `${tmp}/` : join(tmp, first.name);
      await runGo(
        go,
        ['build', ...(first.tags ? ['-tags', first.tags] : []), '-ldflags', first.ldflags, '-o', output, ...group.map((step) => step.pkg)],
        first.moduleDir,
        logFile,
        () => log(`      still building ${names} (${formatDuration(Date.now() - stepStart)}; ${formatDuration(Date.now() - started)} in all)`),
        heartbeatMs,
        options.lowPriority,
      );
      for (const step of group) timings[step.name] = Math.round((Date.now() - stepStart) / 1000);
      done += group.length;
      log(`      ${names} built in ${formatDuration(Date.now() - stepStart)} (${group.map((step) => formatBytes(statSync(join(tmp, step.name)).size)).join(', ')})`);
    }
    spec.finish?.(tmp, go);
  } catch (err) {
    const kept = `${dir}.failed.log`;
    try {
      renameSync(logFile, kept);
    } catch {
      /* the log may not exist if go never started */
    }
    rmSync(tmp, { recursive: true, force: true });
    throw new Error(`Building ${spec.title} failed: ${(err as Error).message}.\nLast lines of the Go output (full log: ${kept}):\n${logTail(kept, 30)}`);
  }
  const sizes = Object.fromEntries(spec.steps.map((s) => [s.name, statSync(join(tmp, s.name)).size]));
  writeFileSync(join(tmp, 'manifest.json'), `${JSON.stringify({ label: spec.label, go: goVer, builtAt: new Date().toISOString(), buildSeconds: timings, sizes }, null, 2)}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  log(`${spec.title[0]!.toUpperCase()}${spec.title.slice(1)} built in ${formatDuration(Date.now() - started)} into ${dir}`);
  return dir;
}

/** Runs `go` with the build environment in `cwd` and returns its standard output. */
export function goOutput(go: string, args: string[], cwd: string): string {
  const out = spawnSync(go, args, { cwd, encoding: 'utf8', env: goEnv() });
  if (out.status !== 0) throw new Error(`go ${args.join(' ')} failed in ${cwd}: ${(out.stderr || out.stdout).trim()}`);
  return out.stdout;
}

export function clusterBuildSpec(versions: PinnedVersions): BuildSpec {
  return {
    label: `k8s-${versions.kubernetes}-etcd-${versions.etcd}`,
    title: 'the local cluster',
    intro: [
      `Kubernetes ${versions.kubernetes}, etcd ${versions.etcd}, kwok ${versions.kwok}, CoreDNS ${versions.coredns}`,
      `A first build downloads about 1.1 GiB of Go modules and takes ${firstBuild}; later runs reuse ${cacheRoot()}.`,
    ],
    moduleDirs,
    inputs: buildInputs(),
    steps: buildSteps(versions),
  };
}

/** Returns the control-plane binaries, building them first when the cache has none. */
export async function ensureBinaries(options: BuildOptions = {}): Promise<BinarySet> {
  const versions = pinnedVersions();
  return binarySet(await ensureBuild(clusterBuildSpec(versions), options), versions);
}
