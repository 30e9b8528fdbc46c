// The local cluster's OCI registry: CNCF Distribution's `registry` (the one most clusters'
// registries descend from), built from its Go module (registry/go.mod) like the rest of the
// cluster, run as one of its processes. It listens on the node's address on the pod network
// (the bridge's gateway), so the host, containerd and pods (Knative's tag resolution) all
// reach it at one name, `<gateway>:<port>`; containerd pulls from it over plain HTTP, for that
// address only (a hosts.toml in its config_path). Its storage is under the cluster's state
// directory; with `auth`, it asks for a user and password (htpasswd, bcrypt), as a real
// registry does.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { stringify } from 'yaml';
import { waitFor } from '../core/clock.ts';
import { ensureBuild, type BuildOptions, type BuildSpec } from './build.ts';
import { gatewayOf, nodePaths } from './node.ts';
import { plainHttpRegistryHosts } from './node-config.ts';
import { clusterPaths, type ClusterPaths } from './paths.ts';
import { isRunning, startProcess, stopProcess } from './processes.ts';
import { requireState, withLock, writeState, type ClusterState } from './state.ts';
import { requiredVersion } from './versions.ts';

export const registryModuleDir = join(import.meta.dirname, 'registry');
/** The registry's port on the node's address (the registry's own default is 5000). */
export const defaultRegistryPort = 15000;

function registrySpec(): BuildSpec {
  const goMod = join(registryModuleDir, 'go.mod');
  const version = requiredVersion(readFileSync(goMod, 'utf8'), 'github.com/distribution/distribution/v3', 'cluster/registry/go.mod');
  return {
    label: `registry-${version}`,
    title: 'the local registry',
    intro: [`CNCF Distribution ${version}`, 'A first build downloads about 0.1 GiB of Go modules and takes about a minute on 2 cores.'],
    moduleDirs: [registryModuleDir],
    inputs: [goMod, join(registryModuleDir, 'go.sum'), join(registryModuleDir, 'server', 'main.go'), join(registryModuleDir, 'htpasswd', 'main.go')],
    steps: [
      // Upstream's command with only the storage and auth the local cluster uses (server/main.go).
      { name: 'registry', pkg: 'kfn.invalid/cluster/registry/server', moduleDir: registryModuleDir, ldflags: `-s -w -X github.com/distribution/distribution/v3/version.version=${version}` },
      { name: 'kfn-htpasswd', pkg: 'kfn.invalid/cluster/registry/htpasswd', moduleDir: registryModuleDir, ldflags: '-s -w' },
    ],
  };
}

export async function ensureRegistryBinaries(options: BuildOptions = {}): Promise<{ registry: string; htpasswd: string }> {
  const dir = await ensureBuild(registrySpec(), options);
  return { registry: join(dir, 'registry'), htpasswd: join(dir, 'kfn-htpasswd') };
}

/** Where the registry answers: the node's address on the pod network, and its port. */
export function registryHost(state: Pick<ClusterState, 'network'>, port = defaultRegistryPort): string {
  return `${gatewayOf(state.network.podSubnet)}:${port}`;
}

export interface RegistryAuth {
  username: string;
  password: string;
}

export interface LocalRegistry {
  /** host:port, the registry part of image references (`<host>/fn-myweb:0.1.0`). */
  host: string;
  /** Present when the registry asks for a user and password. */
  auth?: RegistryAuth;
  /** False when it was already running with these settings. */
  started: boolean;
}

const settingsFile = (paths: ClusterPaths) => join(paths.dir, 'registry', 'settings.json');

/** The running registry's address and credentials, if one runs. */
export function localRegistry(paths: ClusterPaths = clusterPaths()): Omit<LocalRegistry, 'started'> | undefined {
  const state = requireState(paths);
  const proc = state.processes.find((p) => p.name === 'registry');
  if (!proc || !isRunning(proc)) return undefined;
  try {
    return JSON.parse(readFileSync(settingsFile(paths), 'utf8')) as Omit<LocalRegistry, 'started'>;
  } catch {
    return undefined;
  }
}

/**
 * Starts the registry on the running local cluster (building it first if the cache has none),
 * or keeps the one running when its settings are the same; resolves once it answers /v2/.
 * `auth: true` makes a user and password (kept in its settings, mode 0600).
 */
export async function startRegistry(options: { paths?: ClusterPaths; auth?: boolean; port?: number; log?: (line: string) => void } = {}): Promise<LocalRegistry> {
  const paths = options.paths ?? clusterPaths();
  const log = options.log ?? ((line: string) => console.error(line));
  const binaries = await ensureRegistryBinaries({ log });
  return withLock(paths, log, async () => {
    const state = requireState(paths);
    const host = registryHost(state, options.port);
    const running = localRegistry(paths);
    if (running && running.host === host && Boolean(running.auth) === Boolean(options.auth)) return { ...running, started: false };
    const old = state.processes.findIndex((p) => p.name === 'registry');
    if (old >= 0) {
      await stopProcess(state.processes[old]!, 3000);
      state.processes.splice(old, 1);
    }
    const dir = join(paths.dir, 'registry');
    mkdirSync(join(dir, 'data'), { recursive: true });
    let auth: RegistryAuth | undefined;
    if (options.auth) {
      auth = { username: 'kfn', password: randomBytes(18).toString('base64url') };
      const line = spawnSync(binaries.htpasswd, [auth.username], { input: `${auth.password}\n`, encoding: 'utf8' });
      if (line.status !== 0) throw new Error(`kfn-htpasswd failed: ${line.stderr}`);
      writeFileSync(join(dir, 'htpasswd'), line.stdout, { mode: 0o600 });
    }
    const config = {
      version: 0.1,
      log: { level: 'info', formatter: 'text', accesslog: { disabled: true } },
      storage: { filesystem: { rootdirectory: join(dir, 'data') }, delete: { enabled: true } },
      http: { addr: host, secret: randomBytes(16).toString('hex') },
      ...(auth ? { auth: { htpasswd: { realm: 'kfn-local-registry', path: join(dir, 'htpasswd') } } } : {}),
    };
    writeFileSync(join(dir, 'config.yml'), stringify(config), { mode: 0o600 });
    // containerd pulls from it over plain HTTP: for this address only.
    const hostsDir = join(nodePaths(paths.dir).registryHostsDir, host);
    mkdirSync(hostsDir, { recursive: true });
    writeFileSync(join(hostsDir, 'hosts.toml'), plainHttpRegistryHosts(host));
    log(`Starting the local registry at ${host}${auth ? ' (with a user and password)' : ''}`);
    const record = startProcess('registry', binaries.registry, ['serve', join(dir, 'config.yml')], join(paths.logs, 'registry.log'));
    state.processes.push(record);
    writeState(paths, state);
    await waitFor(`the registry to answer at http://${host}/v2/`, async () => {
      if (!isRunning(record)) throw new Error(`the registry exited; see ${join(paths.logs, 'registry.log')}`);
      const res = await fetch(`http://${host}/v2/`, { signal: AbortSignal.timeout(1000) });
      return res.status === 200 || res.status === 401 ? true : undefined;
    }, { timeoutMs: 30_000 });
    writeFileSync(settingsFile(paths), `${JSON.stringify({ host, ...(auth ? { auth } : {}) }, null, 2)}\n`, { mode: 0o600 });
    return { host, ...(auth ? { auth } : {}), started: true };
  });
}
