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
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ensureBinaries, type BinaryName, type BinarySet } from './build.ts';
import { dnsManifests } from './dns.ts';
import { applyObject, KubeApi } from '../kube/api.ts';
import { connectionFromOptions } from '../kube/connection.ts';
import { baseRecipes, buildImage, importImages, imageRef } from './images.ts';
import { checkNetworkFree, checkNodePrerequisites, defaultNetwork, defaultNodePorts, gatewayOf, nodePaths, setUpHostNetwork, type NodeNetwork, type NodePorts } from './node.ts';
import { readHostSnapshot, takeHostSnapshot, tearDownNode } from './host.ts';
import { isRunning, logTail, residentBytes, startProcess, stopProcess, type ProcessRecord } from './processes.ts';
import { adminToken, caPem, checkPorts, defaultPorts, fakeNodeName, nodeName, readState, requireState, tokenOf, withLock, writeState, type ClusterPorts, type ClusterState } from './state.ts';
import { componentArgs, fakeNodeManifest, writeClusterFiles, type ComponentTokens } from './components.ts';
import { clusterPaths, displayPath, type ClusterPaths } from './paths.ts';
import { waitFor } from '../core/clock.ts';

// ---------------------------------------------------------------------------------------------
// Probes

/** The admin's API client for a cluster being started or checked (the same client as everything else). */
function adminApi(paths: ClusterPaths, state: ClusterState, token = adminToken(paths)): KubeApi {
  return new KubeApi(connectionFromOptions({ server: state.server, ca: caPem(paths), token, source: `the local cluster (${displayPath(paths.dir)})` }));
}

/** True when the apiserver answers /readyz with ok; false when it does not answer, or not yet. */
function apiserverReady(api: KubeApi): Promise<boolean> {
  return api.text('GET', '/readyz', { signal: AbortSignal.timeout(5000) }).then(() => true, () => false);
}

/** The field manager of what the control plane applies itself (fake nodes, cluster DNS). */
const fieldManager = 'kfn-cluster';

/**
 * Polls `check` until it returns a value, failing at once if one of `watched` processes exits;
 * the error says what was awaited and shows the last log lines of whatever went wrong.
 */
function waitUntil<T>(what: string, timeoutMs: number, watched: ProcessRecord[], check: () => Promise<T | undefined>): Promise<T> {
  return waitFor(what, check, {
    timeoutMs,
    abandon: () => {
      const dead = watched.find((proc) => !isRunning(proc));
      return dead && `${dead.name} exited while waiting for ${what}. Last lines of ${displayPath(dead.log)}:\n${logTail(dead.log)}`;
    },
    context: () => watched.map((p) => `--- ${displayPath(p.log)}\n${logTail(p.log, 8)}`).join('\n'),
  });
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
  /** True when a running cluster was found and kept (given the fake nodes asked for, if it lacked them). */
  reused: boolean;
  /** The fake nodes added to the running cluster it kept. */
  addedFakeNodes?: string[];
  seconds: number;
}

/**
 * What `up` does with a healthy running cluster, given what is asked of it: keep it as it is,
 * give it the fake nodes it lacks (kwok, and the nodes, join a running control plane as they
 * would a starting one), or start it anew when that cannot be done.
 */
export type ReusePlan = { action: 'reuse' } | { action: 'add-fake-nodes'; names: string[]; total: number; startKwok: boolean } | { action: 'restart'; reason: string };

/**
 * The plan for a running cluster recorded as `state`, asked for `wanted`. `kwokUnavailable`
 * says why kwok cannot be started beside it (its binary or files missing), if it cannot. More
 * fake nodes than asked for are kept: they take only pods that tolerate their taint.
 */
export function reusePlan(state: Pick<ClusterState, 'fakeNodes' | 'processes'>, wanted: Pick<UpOptions, 'fakeNodes'>, kwokUnavailable?: string): ReusePlan {
  const want = wanted.fakeNodes ?? 0;
  const have = state.fakeNodes ?? 0;
  if (want <= have) return { action: 'reuse' };
  const kwokRuns = state.processes.some((p) => p.name === 'kwok');
  if (!kwokRuns && kwokUnavailable) return { action: 'restart', reason: `it has ${have} fake nodes, ${want} are needed, and kwok cannot be started beside it (${kwokUnavailable})` };
  return { action: 'add-fake-nodes', names: Array.from({ length: want - have }, (_, i) => fakeNodeName(have + i)), total: want, startKwok: !kwokRuns };
}

/** Why kwok cannot be started beside the running cluster (a file its start needs is missing), or undefined. */
function kwokUnavailable(paths: ClusterPaths, state: ClusterState): string | undefined {
  const needed = [join(state.binDir, 'kwok'), join(paths.dir, 'kwok.yaml'), join(paths.dir, 'kubeconfigs', 'kwok.kubeconfig')];
  const missing = needed.filter((file) => !existsSync(file));
  return missing.length ? `missing: ${missing.map(displayPath).join(', ')}` : undefined;
}

/** Starts kwok (when it does not run yet) and registers the fake nodes `plan` names with it; resolves once they are Ready. */
async function addFakeNodes(paths: ClusterPaths, state: ClusterState, plan: Extract<ReusePlan, { action: 'add-fake-nodes' }>, log: (line: string) => void): Promise<void> {
  log(`The running local cluster has ${state.fakeNodes} fake nodes and ${plan.total} are needed: adding ${plan.names.join(', ')} (kwok)`);
  if (plan.startKwok) {
    const record = startProcess('kwok', join(state.binDir, 'kwok'), componentArgs('kwok', paths, state), join(paths.logs, 'kwok.log'));
    // Recorded at once, so that `down` stops it whatever happens next.
    state.processes.push(record);
    writeState(paths, state);
  }
  const api = adminApi(paths, state);
  for (const name of plan.names) await applyObject(api, fakeNodeManifest(name), fieldManager);
  const kwok = state.processes.filter((p) => p.name === 'kwok');
  await waitUntil(`fake nodes ${plan.names.join(', ')} to be Ready`, 60_000, kwok, async () => {
    for (const name of plan.names) {
      const node = await api.request<NodeStatus>('GET', `/api/v1/nodes/${name}`);
      const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
      if (ready?.status !== 'True') throw new Error(`${name}: Ready=${ready?.status ?? 'unknown'}`);
    }
    return true;
  });
  // Only now: a state that counts them promises they are there.
  state.fakeNodes = plan.total;
  writeState(paths, state);
}

/** True when every recorded process runs and the apiserver answers /readyz with ok. */
export async function clusterHealthy(paths: ClusterPaths, state = readState(paths)): Promise<boolean> {
  if (!state || !state.processes.every(isRunning)) return false;
  try {
    return await apiserverReady(adminApi(paths, state));
  } catch {
    return false; // its credentials are gone: not a cluster to reuse
  }
}

export async function clusterUp(options: UpOptions = {}): Promise<UpResult> {
  const paths = options.paths ?? clusterPaths();
  const log = options.log ?? ((line: string) => console.error(line));
  return withLock(paths, log, async () => {
    const started = Date.now();
    const existing = readState(paths);
    let restarting = false;
    if (existing && (await clusterHealthy(paths, existing))) {
      const plan = reusePlan(existing, options, kwokUnavailable(paths, existing));
      if (plan.action === 'reuse') return { state: existing, paths, reused: true, seconds: 0 };
      if (plan.action === 'add-fake-nodes') {
        await addFakeNodes(paths, existing, plan, log);
        return { state: existing, paths, reused: true, addedFakeNodes: plan.names, seconds: (Date.now() - started) / 1000 };
      }
      log(`Restarting the running local cluster: ${plan.reason}.`);
      restarting = true;
    }
    checkNodePrerequisites(log);
    if (existing || existsSync(nodePaths(paths.dir).hostSnapshot)) {
      if (!restarting) log('Found a stopped or broken local cluster; cleaning it up and starting a new one.');
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
  const api = adminApi(paths, state);
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
  await waitUntil('kube-apiserver /readyz', 90_000, [etcd, apiserver], () => api.text('GET', '/readyz', { signal: AbortSignal.timeout(5000) }).then(() => true));

  log(`Starting kube-controller-manager, kube-scheduler, the kubelet and kube-proxy${state.fakeNodes ? ` and kwok (${state.fakeNodes} fake nodes)` : ''}`);
  const all = [etcd, containerd, apiserver, start('kube-controller-manager'), start('kube-scheduler'), start('kubelet'), start('kube-proxy')];
  if (state.fakeNodes) {
    all.push(start('kwok'));
    for (let i = 0; i < state.fakeNodes; i++) await applyObject(api, fakeNodeManifest(fakeNodeName(i)), fieldManager);
  }

  log(`Waiting for node ${nodeName} to register and be Ready`);
  await waitUntil(`node ${nodeName} to be Ready and schedulable`, 90_000, all, async () => {
    const status = await api.request<NodeStatus>('GET', `/api/v1/nodes/${nodeName}`).catch((err: unknown) => {
      throw new Error(`the kubelet has not registered the node yet (${(err as Error).message})`);
    });
    const ready = status.status?.conditions?.find((c) => c.type === 'Ready');
    // The not-ready taint is added at registration and removed by the node-lifecycle controller.
    const tainted = status.spec?.taints?.some((t) => t.key.startsWith('node.kubernetes.io/'));
    if (ready?.status === 'True' && !tainted) return true;
    throw new Error(`Ready=${ready?.status ?? 'unknown'}${ready?.message ? `: ${ready.message}` : ''}`);
  });
  log('Starting cluster DNS (CoreDNS)');
  await waitUntil('the default ServiceAccount in namespace default', 60_000, all, () => api.request('GET', '/api/v1/namespaces/default/serviceaccounts/default').then(() => true));
  for (const obj of dnsManifests(images.coredns, state.network.dnsServiceIp)) {
    await applyObject(api, obj as Parameters<typeof applyObject>[1], fieldManager).catch((err: unknown) => {
      throw new Error(`creating ${String(obj.kind)} for cluster DNS failed: ${(err as Error).message}`);
    });
  }
  await waitUntil('CoreDNS to be available (kube-system/coredns)', 90_000, all, async () => {
    const dep = await api.request<{ status?: { availableReplicas?: number } }>('GET', '/apis/apps/v1/namespaces/kube-system/deployments/coredns');
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

interface DeploymentStatus {
  metadata: { generation?: number };
  spec?: { replicas?: number };
  status?: { observedGeneration?: number; replicas?: number; updatedReplicas?: number; availableReplicas?: number };
}

/** `kubectl rollout restart` and `rollout status`: new pods, each ready before an old one stops. */
async function rollOut(api: KubeApi, namespace: string, name: string, watched: ProcessRecord[]): Promise<void> {
  const path = `/apis/apps/v1/namespaces/${namespace}/deployments/${name}`;
  const body = { spec: { template: { metadata: { annotations: { 'kfn.dev/restartedAt': new Date().toISOString() } } } } };
  const patched = await api.request<DeploymentStatus>('PATCH', path, { body, contentType: 'application/strategic-merge-patch+json' });
  const generation = patched.metadata.generation ?? 0;
  await waitUntil(`the rolling restart of ${namespace}/${name}`, 120_000, watched, async () => {
    const d = await api.request<DeploymentStatus>('GET', path);
    const want = d.spec?.replicas ?? 1;
    const s = d.status ?? {};
    return (s.observedGeneration ?? 0) >= generation && s.updatedReplicas === want && s.availableReplicas === want && s.replicas === want ? true : undefined;
  });
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
 * kube-proxy, kwok (when it runs) and the kubelet are restarted too once the apiserver is ready,
 * and CoreDNS rolled, so the rest of the cluster is healthy at once.
 */
export async function restartApiserver(options: { paths?: ClusterPaths; downtimeMs?: number; graceMs?: number; restartControllers?: boolean } = {}): Promise<void> {
  const paths = options.paths ?? clusterPaths();
  const state = requireState(paths);
  // While other components hold watches open, a graceful shutdown waits for them to drain;
  // a few seconds of grace, then SIGKILL, is closer to a real crash and keeps tests quick.
  const fresh = await restartComponent(paths, state, 'kube-apiserver', options.graceMs ?? 3000, options.downtimeMs);
  await waitUntil('kube-apiserver /readyz after restart', 90_000, [fresh], async () => ((await apiserverReady(adminApi(paths, state))) ? true : undefined));
  if (options.restartControllers === false) return;
  // /readyz is ok before the RBAC authorizer has synced; a component that connects then gets
  // 403s and backs off for a minute or two. Wait until a component's own token is authorized.
  const proxyToken = tokenOf(paths, 'system:kube-proxy');
  if (proxyToken) {
    const proxy = adminApi(paths, state, proxyToken);
    await waitUntil('the restarted apiserver to authorize kube-proxy', 60_000, [fresh], () => proxy.request('GET', '/api/v1/services', { query: { limit: 1 } }).then(() => true));
  }
  // The kubelet too: its pod watch (client-go's reflector) retries with a backoff that doubles
  // per failure up to 30 s, jittered up to twice that, and is reset only after two quiet minutes.
  // Each restart fails its reconnects a few times, so restarts a minute apart left the node
  // unaware of new pods for a minute and more (their Services had no endpoints). Its containers
  // keep running; the new kubelet lists its pods at once.
  for (const name of ['kube-controller-manager', 'kube-scheduler', 'kube-proxy', 'kwok', 'kubelet']) {
    if (state.processes.some((p) => p.name === name)) await restartComponent(paths, state, name, name === 'kubelet' ? 2000 : 3000);
  }
  // CoreDNS watches Services the same way and answered no name of a new Service for as long:
  // a rolling restart (its new pod is ready before the old one stops, so names never stop
  // resolving) gives it a fresh watch.
  await rollOut(adminApi(paths, state), 'kube-system', 'coredns', [fresh]);
}