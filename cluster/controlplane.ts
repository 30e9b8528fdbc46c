// The local cluster: real etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
// 127.0.0.1, and a real node (containerd, kubelet, kube-proxy, CoreDNS; see node.ts) on which
// pods really run; optionally kwok with fake nodes for scale. All processes recorded by PID.
//
// State lives in one directory (default `.kfn/cluster/` at the repository root):
//   state.json   what runs: ports, binaries, one record per process (PID, command, args, log)
//   kubeconfig   the admin kubeconfig (token user in system:masters)
//   pki/ tokens.csv kubeconfigs/ etcd/   what the components read
//   logs/        one log per component
//   node/        the real node's containerd, kubelet and CNI state; host.json what to restore
// `clusterUp` is idempotent: a healthy running cluster is reused as it is.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { createServer } from 'node:net';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { ensureBinaries, type BinaryName, type BinarySet } from './build.ts';
import { collectionPath, dnsManifests } from './dns.ts';
import { baseRecipes, buildImage, importImages, imageRef } from './images.ts';
import {
  checkNetworkFree,
  checkNodePrerequisites,
  containerdConfig,
  cniConfig,
  defaultNetwork,
  defaultNodePorts,
  gatewayOf,
  kubeletConfig,
  kubeProxyConfig,
  nodePaths,
  readHostSnapshot,
  setUpHostNetwork,
  takeHostSnapshot,
  tearDownNode,
  type NodeNetwork,
  type NodePorts,
} from './node.ts';
import { generateClusterPki } from './pki.ts';
import { isRunning, logTail, residentBytes, startProcess, stopProcess, type ProcessRecord } from './processes.ts';

export const repoRoot = join(import.meta.dirname, '..');

export interface ClusterPorts {
  apiserver: number;
  etcd: number;
  etcdPeer: number;
  controllerManager: number;
  scheduler: number;
}

export const defaultPorts: ClusterPorts = {
  apiserver: 16443,
  etcd: 12379,
  etcdPeer: 12380,
  controllerManager: 10257,
  scheduler: 10259,
};

/** The real node: its kubelet registers it under this name. */
export const nodeName = 'kfn-node-0';
/** Fake nodes (kwok) carry this taint: only pods that tolerate it land there. */
export const fakeNodeTaint = { key: 'kfn.dev/fake-node', value: 'true', effect: 'NoSchedule' } as const;
export const fakeNodeName = (i: number) => `kfn-fake-${i}`;

export interface ClusterState {
  version: 1;
  kubernetes: string;
  binDir: string;
  ports: ClusterPorts;
  network: NodeNetwork;
  nodePorts: NodePorts;
  fakeNodes: number;
  server: string;
  startedAt: string;
  processes: ProcessRecord[];
}

export interface ClusterPaths {
  dir: string;
  state: string;
  kubeconfig: string;
  logs: string;
  pki: string;
  lock: string;
}

export function clusterPaths(dir = process.env.KFN_CLUSTER_DIR || join(repoRoot, '.kfn', 'cluster')): ClusterPaths {
  return {
    dir,
    state: join(dir, 'state.json'),
    kubeconfig: join(dir, 'kubeconfig'),
    logs: join(dir, 'logs'),
    pki: join(dir, 'pki'),
    // Beside the state directory, not in it: `down` removes the directory while holding the lock.
    lock: `${dir}.lock`,
  };
}

export function readState(paths: ClusterPaths): ClusterState | undefined {
  try {
    return JSON.parse(readFileSync(paths.state, 'utf8')) as ClusterState;
  } catch {
    return undefined;
  }
}

function writeState(paths: ClusterPaths, state: ClusterState): void {
  writeFileSync(paths.state, `${JSON.stringify(state, null, 2)}\n`);
}

/** A path as the user should read it: relative to the current directory when that is shorter. */
export function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') && rel.length < path.length ? rel : path;
}

// ---------------------------------------------------------------------------------------------
// Locking: parallel test processes may all call clusterUp; one starts the cluster, the others
// wait for it and then find it running.

async function withLock<T>(paths: ClusterPaths, log: (line: string) => void, fn: () => Promise<T>): Promise<T> {
  mkdirSync(join(paths.lock, '..'), { recursive: true });
  let waitingSaid = false;
  for (;;) {
    try {
      mkdirSync(paths.lock);
      writeFileSync(join(paths.lock, 'pid'), String(process.pid));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSafe(join(paths.lock, 'pid')));
      if (owner && !pidAlive(owner)) {
        rmSync(paths.lock, { recursive: true, force: true });
        continue;
      }
      if (!waitingSaid) log(`Waiting for another kfn process (pid ${owner || '?'}) that is starting or stopping the cluster…`);
      waitingSaid = true;
      await sleep(250);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(join(paths.lock, 'pid'), { force: true });
    rmdirSync(paths.lock);
  }
}

function readFileSafe(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Probes

interface HttpResult {
  status: number;
  body: string;
}

/** A GET or POST to the apiserver with the admin token, trusting only the cluster's CA. */
function apiserverRequest(server: string, ca: string, token: string, path: string, method = 'GET', body?: unknown): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      new URL(path, server),
      {
        method,
        ca,
        headers: { Authorization: `Bearer ${token}`, ...(payload ? { 'Content-Type': 'application/json' } : {}) },
        timeout: 5000,
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (data += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: data }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timeout calling ${path}`)));
    req.on('error', reject);
    req.end(payload);
  });
}

async function etcdRequest(port: number, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  if (!res.ok) throw new Error(`etcd ${path} answered ${res.status}: ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

const portFlags: Record<keyof ClusterPorts, string> = {
  apiserver: '--apiserver-port',
  etcd: '--etcd-port',
  etcdPeer: '--etcd-peer-port',
  controllerManager: '--controller-manager-port',
  scheduler: '--scheduler-port',
};

const nodePortFlags: Record<keyof NodePorts, string> = {
  kubelet: '--kubelet-port',
  kubeletHealthz: '--kubelet-healthz-port',
  kubeProxyMetrics: '--kube-proxy-metrics-port',
  kubeProxyHealthz: '--kube-proxy-healthz-port',
};

/**
 * True when the port is free or becomes free within a few seconds: a component of a cluster
 * that was just killed (a crash, then `up`) holds its sockets a moment after /proc stops
 * showing its command line.
 */
async function portFreeSoon(port: number, waitMs = 5000): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    if (await portFree(port)) return true;
    if (Date.now() > deadline) return false;
    await sleep(250);
  }
}

async function checkPorts(ports: ClusterPorts, nodePorts: NodePorts): Promise<void> {
  const seen = new Map<number, string>();
  const flags: Record<string, string> = { ...portFlags, ...nodePortFlags };
  for (const [key, port] of Object.entries({ ...ports, ...nodePorts })) {
    if (seen.has(port)) throw new Error(`Port ${port} is given for both ${seen.get(port)} and ${key}; each component needs its own port.`);
    seen.set(port, key);
    if (!(await portFreeSoon(port))) {
      throw new Error(
        `Port ${port} on 127.0.0.1 (for ${key}) is already in use by another program. ` +
          `Stop that program, or choose another port with \`kfn cluster up ${flags[key]} <port>\`.`,
      );
    }
  }
}

/**
 * Polls `check` until it returns a value, failing early if one of `watched` processes exits.
 * The error says what was awaited and shows the last log lines of whatever went wrong.
 */
async function waitUntil<T>(what: string, timeoutMs: number, watched: ProcessRecord[], check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  for (;;) {
    for (const proc of watched) {
      if (!isRunning(proc)) {
        throw new Error(`${proc.name} exited while waiting for ${what}. Last lines of ${displayPath(proc.log)}:\n${logTail(proc.log)}`);
      }
    }
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = (err as Error).message;
    }
    if (Date.now() > deadline) {
      const logs = watched.map((p) => `--- ${displayPath(p.log)}\n${logTail(p.log, 8)}`).join('\n');
      throw new Error(`Timed out after ${timeoutMs / 1000}s waiting for ${what}${lastError ? ` (last error: ${lastError})` : ''}.\n${logs}`);
    }
    await sleep(250);
  }
}

// ---------------------------------------------------------------------------------------------
// Configuration files

function kubeconfigYaml(server: string, caPem: string, user: string, token: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'kfn-local', cluster: { server, 'certificate-authority-data': Buffer.from(caPem).toString('base64') } }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: 'kfn-local', context: { cluster: 'kfn-local', user } }],
    'current-context': 'kfn-local',
  });
}

interface ComponentTokens {
  admin: string;
  controllerManager: string;
  scheduler: string;
  kwok: string;
  kubelet: string;
  kubeProxy: string;
}

function apiserverArgs(paths: ClusterPaths, ports: ClusterPorts, net: NodeNetwork): string[] {
  const pki = (f: string) => join(paths.pki, f);
  return [
    `--etcd-servers=http://127.0.0.1:${ports.etcd}`,
    '--bind-address=127.0.0.1',
    '--advertise-address=127.0.0.1',
    `--secure-port=${ports.apiserver}`,
    // The "kubernetes" Endpoints reconciler rejects loopback addresses; nothing needs it here.
    '--endpoint-reconciler-type=none',
    `--tls-cert-file=${pki('apiserver.crt')}`,
    `--tls-private-key-file=${pki('apiserver.key')}`,
    `--client-ca-file=${pki('ca.crt')}`,
    `--token-auth-file=${join(paths.dir, 'tokens.csv')}`,
    '--authorization-mode=Node,RBAC',
    // The kubelet may only change its own Node and the pods bound to it.
    '--enable-admission-plugins=NodeRestriction',
    `--kubelet-client-certificate=${pki('kubelet-client.crt')}`,
    `--kubelet-client-key=${pki('kubelet-client.key')}`,
    '--kubelet-preferred-address-types=InternalIP',
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    `--service-account-key-file=${pki('sa.pub')}`,
    `--service-account-signing-key-file=${pki('sa.key')}`,
    `--service-cluster-ip-range=${net.serviceCidr}`,
    '--allow-privileged=true',
    '--profiling=false',
  ];
}

function componentArgs(name: string, paths: ClusterPaths, state: ClusterState): string[] {
  const ports = state.ports;
  const node = nodePaths(paths.dir);
  const kubeconfig = (user: string) => `--kubeconfig=${join(paths.dir, 'kubeconfigs', `${user}.kubeconfig`)}`;
  switch (name) {
    case 'etcd':
      return [
        '--name=kfn',
        `--data-dir=${join(paths.dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${ports.etcd}`,
        `--advertise-client-urls=http://127.0.0.1:${ports.etcd}`,
        `--listen-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
        `--initial-cluster=kfn=http://127.0.0.1:${ports.etcdPeer}`,
        // A throwaway test cluster: durability is not worth an fsync per write.
        '--unsafe-no-fsync',
        '--log-level=warn',
      ];
    case 'kube-apiserver':
      return apiserverArgs(paths, ports, state.network);
    case 'kube-controller-manager':
      return [
        kubeconfig('controller-manager'),
        '--bind-address=127.0.0.1',
        `--secure-port=${ports.controllerManager}`,
        // One instance only: leader election would make a restart wait for the old lease.
        '--leader-elect=false',
        // Every controller runs under its own kube-system ServiceAccount, as kubeadm sets it up.
        '--use-service-account-credentials=true',
        `--service-account-private-key-file=${join(paths.pki, 'sa.key')}`,
        `--root-ca-file=${join(paths.pki, 'ca.crt')}`,
        `--cluster-signing-cert-file=${join(paths.pki, 'ca.crt')}`,
        `--cluster-signing-key-file=${join(paths.pki, 'ca.key')}`,
        // Its default client limit (20 requests/s) would make every scale test and benchmark
        // measure that limit: 1,000 Deployments took over 7 minutes to get their pods.
        '--kube-api-qps=200',
        '--kube-api-burst=400',
        '--profiling=false',
      ];
    case 'kube-scheduler':
      return [kubeconfig('scheduler'), '--bind-address=127.0.0.1', `--secure-port=${ports.scheduler}`, '--leader-elect=false', '--kube-api-qps=200', '--kube-api-burst=400', '--profiling=false'];
    case 'kwok':
      return [
        kubeconfig('kwok'),
        `--config=${join(paths.dir, 'kwok.yaml')}`,
        // Only the fake nodes; the real node has its kubelet.
        '--manage-all-nodes=false',
        '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake',
        '--node-ip=127.0.0.1',
        '--cidr=10.245.0.0/16',
        '--node-lease-duration-seconds=40',
      ];
    case 'containerd':
      return ['--config', node.containerdConfig];
    case 'kubelet':
      return [
        `--config=${node.kubeletConfig}`,
        kubeconfig('kubelet'),
        `--root-dir=${node.kubeletRoot}`,
        `--cert-dir=${join(node.kubeletRoot, 'pki')}`,
        `--hostname-override=${nodeName}`,
        `--node-ip=${gatewayOf(state.network.podSubnet)}`,
        '--v=1',
      ];
    case 'kube-proxy':
      return [`--config=${node.kubeProxyConfig}`, '--v=1'];
    default:
      throw new Error(`${name} is not a component the cluster runs`);
  }
}

async function writeClusterFiles(paths: ClusterPaths, state: ClusterState, credentials: ComponentTokens, sandboxImage: string): Promise<void> {
  const server = state.server;
  const node = nodePaths(paths.dir);
  for (const d of [paths.dir, paths.logs, paths.pki, join(paths.dir, 'kubeconfigs'), node.dir, node.cniConfDir, node.kubeletRoot]) mkdirSync(d, { recursive: true });
  const pki = generateClusterPki(state.network.apiserverServiceIp);
  const secret = { mode: 0o600 };
  writeFileSync(join(paths.pki, 'ca.crt'), pki.caCert);
  writeFileSync(join(paths.pki, 'ca.key'), pki.caKey, secret);
  writeFileSync(join(paths.pki, 'apiserver.crt'), pki.servingCert);
  writeFileSync(join(paths.pki, 'apiserver.key'), pki.servingKey, secret);
  writeFileSync(join(paths.pki, 'sa.key'), pki.serviceAccountKey, secret);
  writeFileSync(join(paths.pki, 'sa.pub'), pki.serviceAccountPublicKey);
  writeFileSync(join(paths.pki, 'kubelet-client.crt'), pki.kubeletClientCert);
  writeFileSync(join(paths.pki, 'kubelet-client.key'), pki.kubeletClientKey, secret);
  // Static tokens: token,user,uid,"groups". The components use the users the bootstrap RBAC
  // policy already grants their permissions to (the kubelet as itself under the Node
  // authorizer); admin and kwok, which fakes many kubelets, are cluster admins.
  writeFileSync(
    join(paths.dir, 'tokens.csv'),
    [
      `${credentials.admin},kfn-admin,kfn-admin,"system:masters"`,
      `${credentials.controllerManager},system:kube-controller-manager,system:kube-controller-manager`,
      `${credentials.scheduler},system:kube-scheduler,system:kube-scheduler`,
      `${credentials.kwok},kfn-kwok,kfn-kwok,"system:masters"`,
      `${credentials.kubelet},system:node:${nodeName},system:node:${nodeName},"system:nodes"`,
      `${credentials.kubeProxy},system:kube-proxy,system:kube-proxy`,
      '',
    ].join('\n'),
    secret,
  );
  writeFileSync(paths.kubeconfig, kubeconfigYaml(server, pki.caCert, 'kfn-admin', credentials.admin), secret);
  const component = (file: string, user: string, token: string) =>
    writeFileSync(join(paths.dir, 'kubeconfigs', `${file}.kubeconfig`), kubeconfigYaml(server, pki.caCert, user, token), secret);
  component('controller-manager', 'system:kube-controller-manager', credentials.controllerManager);
  component('scheduler', 'system:kube-scheduler', credentials.scheduler);
  component('kwok', 'kfn-kwok', credentials.kwok);
  component('kubelet', `system:node:${nodeName}`, credentials.kubelet);
  component('kube-proxy', 'system:kube-proxy', credentials.kubeProxy);
  writeFileSync(join(paths.dir, 'kwok.yaml'), kwokConfig());
  writeFileSync(node.containerdConfig, containerdConfig(node, sandboxImage));
  writeFileSync(join(node.cniConfDir, '10-kfn.conflist'), cniConfig(node, state.network));
  writeFileSync(node.kubeletConfig, kubeletConfig(node, state.network, state.nodePorts, join(paths.pki, 'ca.crt')));
  writeFileSync(join(node.dir, 'resolv.conf'), '# pods use the cluster DNS only\n');
  writeFileSync(node.kubeProxyConfig, kubeProxyConfig(state.network, state.nodePorts, join(paths.dir, 'kubeconfigs', 'kube-proxy.kubeconfig'), nodeName));
}

/**
 * kwok's configuration: its options, then the pod stages of cluster/kwok/stages.yaml (node
 * stages are kwok's built-in ones, which it uses when given none).
 */
function kwokConfig(): string {
  const options = stringify({ apiVersion: 'config.kwok.x-k8s.io/v1alpha1', kind: 'KwokConfiguration', options: {} });
  return `${options}---\n${readFileSync(join(import.meta.dirname, 'kwok', 'stages.yaml'), 'utf8')}`;
}

/** A fake node for kwok: tainted, so that only pods that tolerate fakeNodeTaint land on it. */
function fakeNodeManifest(name: string) {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', type: 'kwok' },
      annotations: { 'kwok.x-k8s.io/node': 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
    },
    spec: { taints: [fakeNodeTaint] },
  };
}

// ---------------------------------------------------------------------------------------------
// Commands

export interface UpOptions {
  paths?: ClusterPaths;
  ports?: Partial<ClusterPorts>;
  network?: Partial<NodeNetwork>;
  nodePorts?: Partial<NodePorts>;
  /** Fake (kwok) nodes to add beside the real one, for scale tests. */
  fakeNodes?: number;
  log?: (line: string) => void;
}

export interface UpResult {
  state: ClusterState;
  paths: ClusterPaths;
  /** True when a running cluster was found and left as it was. */
  reused: boolean;
  seconds: number;
}

/** The static token of `user` in tokens.csv (token,user,uid,"groups"), or '' when none. */
function tokenOf(paths: ClusterPaths, user: string): string {
  const line = readFileSync(join(paths.dir, 'tokens.csv'), 'utf8').split('\n').find((l) => l.split(',')[1] === user);
  return line?.split(',')[0] ?? '';
}

const adminToken = (paths: ClusterPaths) => tokenOf(paths, 'kfn-admin');

function caPem(paths: ClusterPaths): string {
  return readFileSync(join(paths.pki, 'ca.crt'), 'utf8');
}

/** True when every recorded process runs and the apiserver answers /readyz with ok. */
export async function clusterHealthy(paths: ClusterPaths, state = readState(paths)): Promise<boolean> {
  if (!state || !state.processes.every(isRunning)) return false;
  try {
    const res = await apiserverRequest(state.server, caPem(paths), adminToken(paths), '/readyz');
    return res.status === 200;
  } catch {
    return false;
  }
}

export async function clusterUp(options: UpOptions = {}): Promise<UpResult> {
  const paths = options.paths ?? clusterPaths();
  const log = options.log ?? ((line: string) => console.error(line));
  return withLock(paths, log, async () => {
    const started = Date.now();
    const existing = readState(paths);
    if (existing && (await clusterHealthy(paths, existing))) {
      return { state: existing, paths, reused: true, seconds: 0 };
    }
    checkNodePrerequisites();
    if (existing || existsSync(nodePaths(paths.dir).hostSnapshot)) {
      log('Found a stopped or broken local cluster; cleaning it up and starting a new one.');
      await stopAll(paths, existing, log);
    }
    rmSync(paths.dir, { recursive: true, force: true });

    const ports = { ...defaultPorts, ...options.ports };
    const network = { ...defaultNetwork, ...options.network };
    const nodePortsWanted = { ...defaultNodePorts, ...options.nodePorts };
    await checkPorts(ports, nodePortsWanted);
    gatewayOf(network.podSubnet); // a malformed --pod-subnet fails here, before anything starts
    await recoverAbandonedNode(paths, network.bridge, log);
    checkNetworkFree(network);
    const binaries = await ensureBinaries({ log });
    const images = buildBaseImages(binaries, log);
    const bootStart = Date.now();
    const server = `https://127.0.0.1:${ports.apiserver}`;
    const token = () => randomBytes(24).toString('hex');
    const credentials: ComponentTokens = { admin: token(), controllerManager: token(), scheduler: token(), kwok: token(), kubelet: token(), kubeProxy: token() };
    const state: ClusterState = {
      version: 1,
      kubernetes: binaries.versions.kubernetes,
      binDir: binaries.dir,
      ports,
      network,
      nodePorts: nodePortsWanted,
      fakeNodes: options.fakeNodes ?? 0,
      server,
      startedAt: new Date().toISOString(),
      processes: [],
    };
    mkdirSync(paths.dir, { recursive: true });
    // Recorded before the host is touched, so that `down` (or the next `up`) can restore it.
    writeFileSync(nodePaths(paths.dir).hostSnapshot, `${JSON.stringify(takeHostSnapshot(), null, 2)}\n`);
    recordNodeOwner(network.bridge, paths.dir);
    try {
      await writeClusterFiles(paths, state, credentials, images.sandbox);
      writeState(paths, state);
      setUpHostNetwork(network, ports.apiserver);
      await boot(paths, state, binaries, images, log);
    } catch (err) {
      log(`Start-up failed; stopping what was started. Logs: ${displayPath(paths.logs)} (kept until the next \`cluster up\`).`);
      await stopAll(paths, state, log);
      throw err;
    }
    log(`Control plane ready in ${((Date.now() - bootStart) / 1000).toFixed(1)}s.`);
    return { state, paths, reused: false, seconds: (Date.now() - started) / 1000 };
  });
}

/** The images every node needs, built (or found in the cache) before anything starts. */
function buildBaseImages(binaries: BinarySet, log: (line: string) => void): { sandbox: string; coredns: string; tarballs: string[] } {
  const recipes = baseRecipes(binaries);
  const started = Date.now();
  const built = recipes.map((r) => buildImage(r, binaries, log));
  if (built.some((b) => b.seconds > 0)) log(`Node images ready in ${((Date.now() - started) / 1000).toFixed(1)}s (cached in the kfn cache for the next time).`);
  const ref = (name: string) => imageRef(recipes.find((r) => r.name === name)!);
  return { sandbox: ref('pause'), coredns: ref('coredns'), tarballs: built.map((b) => b.tarball) };
}

/** The program a component runs: containerd comes from Debian, the rest from the build. */
function componentCommand(name: string, binaries: BinarySet): string {
  return name === 'containerd' ? '/usr/bin/containerd' : binaries.path(name as BinaryName);
}

interface NodeStatus {
  spec?: { taints?: { key: string }[] };
  status?: { conditions?: { type: string; status: string; message?: string }[] };
}

async function boot(paths: ClusterPaths, state: ClusterState, binaries: BinarySet, images: { coredns: string; tarballs: string[] }, log: (line: string) => void): Promise<void> {
  const start = (name: string) => {
    const record = startProcess(name, componentCommand(name, binaries), componentArgs(name, paths, state), join(paths.logs, `${name}.log`));
    state.processes.push(record);
    writeState(paths, state);
    return record;
  };
  const ca = caPem(paths);
  const token = adminToken(paths);
  const api = (path: string, method?: string, body?: unknown) => apiserverRequest(state.server, ca, token, path, method, body);
  const node = nodePaths(paths.dir);

  log(`Starting etcd on 127.0.0.1:${state.ports.etcd}, and containerd`);
  const etcd = start('etcd');
  const containerd = start('containerd');
  await waitUntil('etcd to be healthy', 30_000, [etcd], async () => {
    const res = await fetch(`http://127.0.0.1:${state.ports.etcd}/health`, { signal: AbortSignal.timeout(2000) });
    return res.ok ? true : undefined;
  });

  log(`Starting kube-apiserver on ${state.server}`);
  const apiserver = start('kube-apiserver');
  await waitUntil('containerd to serve', 30_000, [containerd], async () => (existsSync(node.containerdSocket) ? true : undefined));
  importImages(node.containerdSocket, images.tarballs);
  await waitUntil('kube-apiserver /readyz', 90_000, [etcd, apiserver], async () => {
    const res = await api('/readyz');
    if (res.status === 200) return true;
    throw new Error(`/readyz answered ${res.status}`);
  });

  log(`Starting kube-controller-manager, kube-scheduler, the kubelet and kube-proxy${state.fakeNodes ? ` and kwok (${state.fakeNodes} fake nodes)` : ''}`);
  const all = [etcd, containerd, apiserver, start('kube-controller-manager'), start('kube-scheduler'), start('kubelet'), start('kube-proxy')];
  if (state.fakeNodes) {
    all.push(start('kwok'));
    for (let i = 0; i < state.fakeNodes; i++) {
      const created = await api('/api/v1/nodes', 'POST', fakeNodeManifest(fakeNodeName(i)));
      if (created.status !== 201 && created.status !== 409) throw new Error(`creating fake node ${fakeNodeName(i)} failed (${created.status}): ${created.body}`);
    }
  }

  log(`Waiting for node ${nodeName} to register and be Ready`);
  await waitUntil(`node ${nodeName} to be Ready and schedulable`, 90_000, all, async () => {
    const res = await api(`/api/v1/nodes/${nodeName}`);
    if (res.status !== 200) throw new Error(`the kubelet has not registered the node yet (${res.status})`);
    const status = JSON.parse(res.body) as NodeStatus;
    const ready = status.status?.conditions?.find((c) => c.type === 'Ready');
    // The not-ready taint is added at registration and removed by the node-lifecycle controller.
    const tainted = status.spec?.taints?.some((t) => t.key.startsWith('node.kubernetes.io/'));
    if (ready?.status === 'True' && !tainted) return true;
    throw new Error(`Ready=${ready?.status ?? 'unknown'}${ready?.message ? `: ${ready.message}` : ''}`);
  });
  log('Starting cluster DNS (CoreDNS)');
  await waitUntil('the default ServiceAccount in namespace default', 60_000, all, async () => {
    const res = await api('/api/v1/namespaces/default/serviceaccounts/default');
    return res.status === 200 ? true : undefined;
  });
  for (const obj of dnsManifests(images.coredns, state.network.dnsServiceIp)) {
    const res = await api(collectionPath(obj), 'POST', obj);
    if (res.status !== 201 && res.status !== 409) throw new Error(`creating ${String(obj.kind)} for cluster DNS failed (${res.status}): ${res.body}`);
  }
  await waitUntil('CoreDNS to be available (kube-system/coredns)', 90_000, all, async () => {
    const res = await api('/apis/apps/v1/namespaces/kube-system/deployments/coredns');
    const dep = JSON.parse(res.body) as { status?: { availableReplicas?: number } };
    return (dep.status?.availableReplicas ?? 0) >= 1 ? true : undefined;
  });
}

/**
 * Stops every recorded process, then removes what the node left on the host. Works on a
 * half-started or crashed cluster too; says what could not be restored.
 */
async function stopAll(paths: ClusterPaths, state: ClusterState | undefined, log: (line: string) => void = () => {}): Promise<string[]> {
  const stopped: string[] = [];
  // Clients first, storage last, so nothing logs a storm of connection errors on the way down.
  for (const record of [...(state?.processes ?? [])].reverse()) {
    if (await stopProcess(record, record.name === 'kubelet' || record.name === 'containerd' ? 2000 : undefined)) stopped.push(`${record.name} (pid ${record.pid})`);
  }
  const node = nodePaths(paths.dir);
  const snapshot = readHostSnapshot(node);
  if (snapshot || existsSync(node.dir)) {
    const { leftovers } = await tearDownNode(node, state?.network ?? defaultNetwork, snapshot);
    if (leftovers.length) log(`Could not restore everything on this host:\n  ${leftovers.join('\n  ')}`);
  }
  return stopped;
}

// ---------------------------------------------------------------------------------------------
// Which cluster directory a node's bridge belongs to, kept in /run (gone at reboot, like the
// kernel state it describes), so that an `up` from another checkout — CI's fresh clone, say —
// can clean up after a cluster whose processes were killed without `down`.

const ownerFile = (bridge: string) => join('/run', 'kfn', `${bridge}.json`);

function recordNodeOwner(bridge: string, dir: string): void {
  mkdirSync(join('/run', 'kfn'), { recursive: true });
  writeFileSync(ownerFile(bridge), JSON.stringify({ dir }));
}

function forgetNodeOwner(bridge: string, dir: string): void {
  try {
    if ((JSON.parse(readFileSync(ownerFile(bridge), 'utf8')) as { dir: string }).dir === dir) rmSync(ownerFile(bridge), { force: true });
  } catch {
    /* none recorded */
  }
}

/**
 * When the bridge belongs to another cluster directory whose processes are all gone, removes
 * what that cluster left on the host (with its own record of the host), so this `up` can start.
 * A running cluster there is an error that says how to stop it.
 */
async function recoverAbandonedNode(paths: ClusterPaths, bridge: string, log: (line: string) => void): Promise<void> {
  let dir: string;
  try {
    dir = (JSON.parse(readFileSync(ownerFile(bridge), 'utf8')) as { dir: string }).dir;
  } catch {
    return;
  }
  if (dir === paths.dir) return;
  const other = clusterPaths(dir);
  const state = readState(other);
  if (state?.processes.some(isRunning)) {
    throw new Error(`The bridge ${bridge} belongs to the local cluster in ${dir}, which is running. Stop it (KFN_CLUSTER_DIR=${dir} kfn cluster down), or give this one another --bridge-name and --pod-subnet.`);
  }
  log(`Removing what a stopped local cluster (${displayPath(dir)}) left on this host.`);
  await stopAll(other, state, log);
  rmSync(ownerFile(bridge), { force: true });
}

export interface DownResult {
  stopped: string[];
  removed: boolean;
}

/** Stops exactly the processes recorded in the state (by PID) and removes the state directory. */
export async function clusterDown(options: { paths?: ClusterPaths; log?: (line: string) => void } = {}): Promise<DownResult> {
  const paths = options.paths ?? clusterPaths();
  const log = options.log ?? ((line: string) => console.error(line));
  return withLock(paths, log, async () => {
    const state = readState(paths);
    const stopped = await stopAll(paths, state, log);
    forgetNodeOwner(state?.network.bridge ?? defaultNetwork.bridge, paths.dir);
    const removed = existsSync(paths.dir);
    rmSync(paths.dir, { recursive: true, force: true });
    return { stopped, removed };
  });
}

export interface ComponentStatus {
  name: string;
  pid: number;
  running: boolean;
  residentBytes?: number;
  log: string;
}

export interface ClusterStatus {
  state?: ClusterState;
  healthy: boolean;
  components: ComponentStatus[];
  paths: ClusterPaths;
}

export async function clusterStatus(paths = clusterPaths()): Promise<ClusterStatus> {
  const state = readState(paths);
  const components = (state?.processes ?? []).map((p) => {
    const running = isRunning(p);
    return { name: p.name, pid: p.pid, running, residentBytes: running ? residentBytes(p.pid) : undefined, log: p.log };
  });
  return { state, healthy: await clusterHealthy(paths, state), components, paths };
}

function requireState(paths: ClusterPaths): ClusterState {
  const state = readState(paths);
  if (!state) throw new Error(`No local cluster state in ${displayPath(paths.dir)}: start one with \`npm run kfn -- cluster up\`.`);
  return state;
}

/** Stops one recorded component and starts it again with the same command line. */
async function restartComponent(paths: ClusterPaths, state: ClusterState, name: string, graceMs: number, downtimeMs = 0): Promise<ProcessRecord> {
  const index = state.processes.findIndex((p) => p.name === name);
  const old = state.processes[index];
  if (!old) throw new Error(`The cluster state records no ${name} process.`);
  await stopProcess(old, graceMs);
  if (downtimeMs) await sleep(downtimeMs);
  const fresh = startProcess(old.name, old.command, old.args, old.log);
  state.processes[index] = fresh;
  writeState(paths, state);
  return fresh;
}

/**
 * Stops kube-apiserver and starts it again with the same flags, keeping etcd running; resolves
 * once /readyz is ok. Clients see their watches and connections drop, and the new apiserver's
 * watch cache starts at etcd's current revision, so watches resumed from older
 * resourceVersions are refused with 410 Gone.
 *
 * A new apiserver answers requests a moment before its authorizer has synced, and clients that
 * reconnect in that moment get 403s; client-go components then back off for up to a minute or
 * two. Unless `restartControllers` is false, kube-controller-manager, kube-scheduler,
 * kube-proxy and kwok (when it runs) are restarted too once the apiserver is ready, so the rest of the cluster is healthy at once.
 */
export async function restartApiserver(options: { paths?: ClusterPaths; downtimeMs?: number; graceMs?: number; restartControllers?: boolean } = {}): Promise<void> {
  const paths = options.paths ?? clusterPaths();
  const state = requireState(paths);
  // While other components hold watches open, a graceful shutdown waits for them to drain;
  // a few seconds of grace, then SIGKILL, is closer to a real crash and keeps tests quick.
  const fresh = await restartComponent(paths, state, 'kube-apiserver', options.graceMs ?? 3000, options.downtimeMs);
  const ca = caPem(paths);
  const token = adminToken(paths);
  await waitUntil('kube-apiserver /readyz after restart', 90_000, [fresh], async () => {
    const res = await apiserverRequest(state.server, ca, token, '/readyz');
    return res.status === 200 ? true : undefined;
  });
  if (options.restartControllers === false) return;
  // /readyz is ok before the RBAC authorizer has synced; a component that connects then gets
  // 403s and backs off for a minute or two. Wait until a component's own token is authorized.
  const proxyToken = tokenOf(paths, 'system:kube-proxy');
  if (proxyToken) {
    await waitUntil('the restarted apiserver to authorize kube-proxy', 60_000, [fresh], async () => {
      const res = await apiserverRequest(state.server, ca, proxyToken, '/api/v1/services?limit=1');
      return res.status === 200 ? true : undefined;
    });
  }
  for (const name of ['kube-controller-manager', 'kube-scheduler', 'kube-proxy', 'kwok']) {
    if (state.processes.some((p) => p.name === name)) await restartComponent(paths, state, name, 3000);
  }
}

/**
 * Compacts etcd's history up to its current revision, so that older resourceVersions can no
 * longer be read from storage. Returns the compacted revision. A running apiserver's watch
 * cache may still serve watches from before it; `restartApiserver` drops that cache.
 */
export async function compactEtcd(options: { paths?: ClusterPaths } = {}): Promise<number> {
  const state = requireState(options.paths ?? clusterPaths());
  // The gRPC gateway takes base64 keys; any range read returns the store's current revision.
  const range = await etcdRequest(state.ports.etcd, '/v3/kv/range', { key: Buffer.from('/').toString('base64'), limit: 1 });
  const revision = Number((range.header as { revision?: string } | undefined)?.revision);
  if (!Number.isFinite(revision) || revision <= 0) throw new Error(`etcd returned no revision: ${JSON.stringify(range)}`);
  await etcdRequest(state.ports.etcd, '/v3/kv/compaction', { revision, physical: true });
  return revision;
}

/** Reads one key from etcd at `revision`; rejects with etcd's message if it was compacted. */
export async function etcdReadAt(revision: number, options: { paths?: ClusterPaths; key?: string } = {}): Promise<void> {
  const state = requireState(options.paths ?? clusterPaths());
  await etcdRequest(state.ports.etcd, '/v3/kv/range', { key: Buffer.from(options.key ?? '/').toString('base64'), limit: 1, revision });
}
