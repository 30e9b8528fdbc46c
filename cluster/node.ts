// The real node of the local cluster: containerd + runc + the CNI bridge plugin, a kubelet
// registered as `kfn-node-0` under its own identity (system:node:kfn-node-0, Node authorizer,
// NodeRestriction), and kube-proxy in iptables mode. Pods really run.
//
// Networking, all of it the cluster's own:
//   bridge `kfn0` (--bridge-name) with 10.244.0.1/24 (--pod-subnet): the node's IP and the
//     pods' gateway; pods get 10.244.0.2… from host-local IPAM;
//   Services in 10.96.0.0/16 through kube-proxy; NodePorts also answer on 127.0.0.1;
//   the apiserver stays on 127.0.0.1 and pods reach it as the `kubernetes` Service
//     (10.96.0.1:443), which a DNAT rule of kfn's own nft table sends to 127.0.0.1 — the
//     bridge allows loopback routing (route_localnet) on itself only.
//
// Leaving the host as found: before changing anything, `up` records the sysctls the kubelet
// and kube-proxy change, which fixed paths exist, and which iptables chains and nft tables
// exist (host.json in the state directory). `down` (and `up` after a crash) kills what runs in
// the pods' cgroups, stops the node's processes, unmounts everything under the state
// directory, removes the bridge, kfn's nft table, the chains that were not there before and
// the cgroups it created, and restores the sysctls.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';

export interface NodeNetwork {
  /** Name of the Linux bridge the pods attach to. */
  bridge: string;
  /** The node's pod subnet (a /24); its first address is the node's IP and the pods' gateway. */
  podSubnet: string;
  /** The cluster's pod CIDR, of which podSubnet is part (kube-proxy's --cluster-cidr). */
  clusterCidr: string;
  serviceCidr: string;
  /** The `kubernetes` Service's ClusterIP. */
  apiserverServiceIp: string;
  /** The cluster DNS Service's ClusterIP (the kubelet's clusterDNS). */
  dnsServiceIp: string;
}

export const defaultNetwork: NodeNetwork = {
  bridge: 'kfn0',
  podSubnet: '10.244.0.0/24',
  clusterCidr: '10.244.0.0/16',
  serviceCidr: '10.96.0.0/16',
  apiserverServiceIp: '10.96.0.1',
  dnsServiceIp: '10.96.0.10',
};

/** The first host address of a subnet: 10.244.0.0/24 → 10.244.0.1. */
export function gatewayOf(subnet: string): string {
  const [addr, bits] = subnet.split('/');
  const parts = (addr ?? '').split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255) || bits !== '24' || parts[3] !== 0) {
    throw new Error(`pod subnet ${subnet} is not an IPv4 /24 network address such as 10.244.0.0/24`);
  }
  return `${parts[0]}.${parts[1]}.${parts[2]}.1`;
}

export interface NodePaths {
  dir: string;
  containerdConfig: string;
  containerdSocket: string;
  cniConfDir: string;
  kubeletRoot: string;
  kubeletConfig: string;
  kubeProxyConfig: string;
  hostSnapshot: string;
}

export function nodePaths(clusterDir: string): NodePaths {
  const dir = join(clusterDir, 'node');
  return {
    dir,
    containerdConfig: join(dir, 'containerd.toml'),
    // Unix socket paths are limited to 107 bytes; the state directory may be deep.
    containerdSocket: join(dir, 'containerd.sock'),
    cniConfDir: join(dir, 'cni', 'net.d'),
    kubeletRoot: join(dir, 'kubelet'),
    kubeletConfig: join(dir, 'kubelet.yaml'),
    kubeProxyConfig: join(dir, 'kube-proxy.yaml'),
    hostSnapshot: join(clusterDir, 'host.json'),
  };
}

// ---------------------------------------------------------------------------------------------
// Prerequisites

/** The Debian packages the real node needs, and a command of each that shows it is installed. */
export const nodePackages: { pkg: string; probe: string }[] = [
  { pkg: 'containerd', probe: '/usr/bin/containerd' },
  { pkg: 'runc', probe: 'runc' },
  { pkg: 'containernetworking-plugins', probe: '/usr/lib/cni/bridge' },
  { pkg: 'iptables', probe: 'iptables-save' },
  { pkg: 'nftables', probe: 'nft' },
  { pkg: 'iproute2', probe: 'ip' },
];

function onPath(command: string): boolean {
  if (command.startsWith('/')) return existsSync(command);
  return (process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
    .split(':')
    .concat(['/usr/sbin', '/sbin'])
    .some((dir) => existsSync(join(dir, command)));
}

export function missingNodePackages(): string[] {
  return nodePackages.filter((p) => !onPath(p.probe)).map((p) => p.pkg);
}

export const installCommand = (packages: string[]) => `apt-get update && apt-get install -y --no-install-recommends ${packages.join(' ')}`;

/** Fails with what to do when this machine cannot run the real node. */
export function checkNodePrerequisites(): void {
  if (process.platform !== 'linux') throw new Error('The local cluster runs real containers and needs Linux.');
  if (process.getuid?.() !== 0) {
    throw new Error('The local cluster runs a kubelet and containerd, which need root: run as root (e.g. with sudo).');
  }
  const missing = missingNodePackages();
  if (missing.length) {
    throw new Error(`The real node needs Debian packages that are not installed: ${missing.join(', ')}.\nInstall them with:\n  ${installCommand(missing)}\n(or run \`npm run kfn -- cluster deps\`, which runs that command).`);
  }
}

// ---------------------------------------------------------------------------------------------
// Host state: what to restore

/** Sysctls the kubelet, kube-proxy or the CNI bridge plugin may change. */
const watchedSysctls = [
  'net/ipv4/ip_forward',
  'net/ipv4/conf/all/route_localnet',
  'net/bridge/bridge-nf-call-iptables',
  'net/bridge/bridge-nf-call-ip6tables',
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];

/** Fixed paths the kubelet, CNI and runc create even with their directories moved. */
const watchedPaths = ['/var/lib/kubelet', '/var/lib/cni', '/usr/libexec/kubernetes', '/run/containerd', '/var/run/netns', '/var/log/pods', '/var/log/containers', '/etc/kubernetes'];

/** Cgroups the kubelet and containerd create, under every hierarchy. */
const watchedCgroups = ['kubepods', 'k8s.io'];

export interface HostSnapshot {
  sysctls: Record<string, string>;
  paths: string[];
  cgroups: string[];
  /** "iptables:nat:CHAIN" → existed before. */
  chains: string[];
  nftTables: string[];
}

function readSysctl(key: string): string | undefined {
  try {
    return readFileSync(join('/proc/sys', key), 'utf8').trim();
  } catch {
    return undefined;
  }
}

function cgroupRoots(): string[] {
  const roots: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const fields = line.split(' ');
    const sep = fields.indexOf('-');
    const fstype = fields[sep + 1];
    if ((fstype === 'cgroup' || fstype === 'cgroup2') && fields[4]) roots.push(fields[4]);
  }
  return roots;
}

const run = (command: string, args: string[]) => spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });

const iptablesFamilies = ['iptables', 'ip6tables'] as const;

/** Chains per table from `iptables-save`: "iptables:nat:KUBE-SERVICES". */
function listChains(): string[] {
  const chains: string[] = [];
  for (const family of iptablesFamilies) {
    let table = '';
    for (const line of run(`${family}-save`, []).stdout.split('\n')) {
      if (line.startsWith('*')) table = line.slice(1);
      else if (line.startsWith(':')) chains.push(`${family}:${table}:${line.slice(1).split(' ')[0]}`);
    }
  }
  return chains;
}

function listNftTables(): string[] {
  return run('nft', ['list', 'tables']).stdout.split('\n').map((l) => l.replace(/^table /, '').trim()).filter(Boolean);
}

export function takeHostSnapshot(): HostSnapshot {
  const sysctls: Record<string, string> = {};
  for (const key of watchedSysctls) {
    const value = readSysctl(key);
    if (value !== undefined) sysctls[key] = value;
  }
  return {
    sysctls,
    paths: watchedPaths.filter((p) => existsSync(p)),
    cgroups: cgroupRoots().flatMap((root) => watchedCgroups.map((c) => join(root, c))).filter((p) => existsSync(p)),
    chains: listChains(),
    nftTables: listNftTables(),
  };
}

/** What differs between two snapshots, one line per difference (empty when the host is as found). */
export function hostDifferences(before: HostSnapshot, after: HostSnapshot): string[] {
  const diffs: string[] = [];
  for (const [key, value] of Object.entries(before.sysctls)) {
    if (after.sysctls[key] !== value) diffs.push(`sysctl ${key.replaceAll('/', '.')} was ${value}, is ${after.sysctls[key]}`);
  }
  const compare = (what: string, a: string[], b: string[]) => {
    for (const x of b) if (!a.includes(x)) diffs.push(`${what} ${x} was added`);
    for (const x of a) if (!b.includes(x)) diffs.push(`${what} ${x} was removed`);
  };
  compare('path', before.paths, after.paths);
  compare('cgroup', before.cgroups, after.cgroups);
  compare('chain', before.chains, after.chains);
  compare('nft table', before.nftTables, after.nftTables);
  return diffs;
}

// ---------------------------------------------------------------------------------------------
// Setting up the host

function ip(args: string[], what: string): void {
  const out = run('ip', args);
  if (out.status !== 0) throw new Error(`${what} failed: ip ${args.join(' ')}: ${out.stderr.trim()}`);
}

function linkExists(name: string): boolean {
  return run('ip', ['link', 'show', 'dev', name]).status === 0;
}

/** Fails with the flag to use when the bridge name or the pod subnet is taken by something else. */
export function checkNetworkFree(net: NodeNetwork): void {
  if (linkExists(net.bridge)) {
    throw new Error(`A network interface named ${net.bridge} already exists on this machine. Remove it, or choose another name with \`kfn cluster up --bridge-name <name>\`.`);
  }
  const gateway = gatewayOf(net.podSubnet);
  const prefix = gateway.split('.').slice(0, 3).join('.');
  const routes = run('ip', ['-4', 'route', 'show']).stdout;
  const clash = routes.split('\n').find((r) => r.startsWith(`${prefix}.`) || r.startsWith(net.podSubnet));
  const addrs = run('ip', ['-4', '-o', 'addr', 'show']).stdout;
  if (clash || addrs.includes(` ${prefix}.`)) {
    throw new Error(`The pod subnet ${net.podSubnet} is already in use on this machine (${(clash ?? 'an address in it').trim()}). Choose another with \`kfn cluster up --pod-subnet <a.b.c.0/24>\`.`);
  }
}

const nftTable = 'kfn';

export function setUpHostNetwork(net: NodeNetwork, apiserverPort: number): void {
  const gateway = gatewayOf(net.podSubnet);
  ip(['link', 'add', net.bridge, 'type', 'bridge'], `creating bridge ${net.bridge}`);
  ip(['addr', 'add', `${gateway}/24`, 'dev', net.bridge], `adding ${gateway} to ${net.bridge}`);
  ip(['link', 'set', net.bridge, 'up'], `bringing ${net.bridge} up`);
  // Loopback routing on the bridge only, so the DNAT below may send pod traffic to 127.0.0.1.
  writeFileSync(`/proc/sys/net/ipv4/conf/${net.bridge}/route_localnet`, '1');
  const rules = [
    `table ip ${nftTable} {`,
    '  chain prerouting {',
    // Before kube-proxy's nat rules (priority -100): the kubernetes Service is the local apiserver.
    '    type nat hook prerouting priority -110; policy accept;',
    `    iifname "${net.bridge}" ip daddr ${net.apiserverServiceIp} tcp dport 443 dnat to 127.0.0.1:${apiserverPort}`,
    '  }',
    '}',
  ].join('\n');
  const out = spawnSync('nft', ['-f', '-'], { input: rules, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`adding kfn's nft table failed: ${out.stderr.trim()}`);
}

// ---------------------------------------------------------------------------------------------
// Configuration files

export function containerdConfig(paths: NodePaths, sandboxImage: string): string {
  const q = (s: string) => JSON.stringify(s);
  return `version = 2
root = ${q(join(paths.dir, 'containerd', 'root'))}
state = ${q(join(paths.dir, 'containerd', 'state'))}
[grpc]
  address = ${q(paths.containerdSocket)}
[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(paths.dir, 'containerd', 'opt'))}
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(sandboxImage)}
  # Root in this kind of VM lacks CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    # runc's state beside containerd's, not in /run/containerd.
    Root = ${q(join(paths.dir, 'containerd', 'runc'))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = ${q(paths.cniConfDir)}
`;
}

export function cniConfig(paths: NodePaths, net: NodeNetwork): string {
  return `${JSON.stringify(
    {
      cniVersion: '0.4.0',
      name: 'kfn',
      plugins: [
        {
          type: 'bridge',
          bridge: net.bridge,
          isGateway: true,
          hairpinMode: true,
          ipMasq: false,
          ipam: { type: 'host-local', dataDir: join(paths.dir, 'cni', 'ipam'), ranges: [[{ subnet: net.podSubnet, gateway: gatewayOf(net.podSubnet) }]], routes: [{ dst: '0.0.0.0/0' }] },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
        { type: 'loopback' },
      ],
    },
    null,
    2,
  )}\n`;
}

export interface NodePorts {
  kubelet: number;
  kubeletHealthz: number;
  kubeProxyMetrics: number;
  kubeProxyHealthz: number;
}

export const defaultNodePorts: NodePorts = { kubelet: 10250, kubeletHealthz: 10248, kubeProxyMetrics: 10249, kubeProxyHealthz: 10256 };

export function kubeletConfig(paths: NodePaths, net: NodeNetwork, ports: NodePorts, caFile: string): string {
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    containerRuntimeEndpoint: `unix://${paths.containerdSocket}`,
    cgroupDriver: 'cgroupfs',
    // The machines this runs on mount cgroup v1; kubelet 1.35 refuses v1 unless told.
    failCgroupV1: false,
    failSwapOn: false,
    address: gatewayOf(net.podSubnet),
    port: ports.kubelet,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: ports.kubeletHealthz,
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: caFile } },
    authorization: { mode: 'Webhook' },
    clusterDomain: 'cluster.local',
    clusterDNS: [net.dnsServiceIp],
    // Pods get the cluster DNS only, never the host's resolvers (nothing outside is reachable).
    resolvConf: join(paths.dir, 'resolv.conf'),
    podLogsDir: join(paths.dir, 'pod-logs'),
    serializeImagePulls: false,
    evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '5%', 'imagefs.available': '5%' },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    // Report status often: tests and the demo wait on it.
    nodeStatusReportFrequency: '10s',
    syncFrequency: '10s',
    fileCheckFrequency: '10s',
    shutdownGracePeriod: '0s',
  });
}

export function kubeProxyConfig(net: NodeNetwork, ports: NodePorts, kubeconfig: string, nodeName: string): string {
  return stringify({
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    clientConnection: { kubeconfig },
    hostnameOverride: nodeName,
    mode: 'iptables',
    clusterCIDR: net.clusterCidr,
    bindAddress: '127.0.0.1',
    healthzBindAddress: `127.0.0.1:${ports.kubeProxyHealthz}`,
    metricsBindAddress: `127.0.0.1:${ports.kubeProxyMetrics}`,
    // NodePorts on the node IP and on 127.0.0.1 (iptables mode sets route_localnet for that).
    nodePortAddresses: [`${gatewayOf(net.podSubnet)}/32`, '127.0.0.1/32'],
    iptables: { localhostNodePorts: true, syncPeriod: '30s', minSyncPeriod: '0s' },
    // Leave the host's conntrack table size and timeouts alone.
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
  });
}

// ---------------------------------------------------------------------------------------------
// Tearing down

function mountsUnder(dir: string): string[] {
  const unescape = (p: string) => p.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => unescape(line.split(' ')[4] ?? ''))
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
}

function pidsInCgroup(dir: string): number[] {
  const pids: number[] = [];
  const walk = (d: string) => {
    try {
      for (const p of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) if (p) pids.push(Number(p));
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    } catch {
      /* gone meanwhile */
    }
  };
  walk(dir);
  return pids;
}

function removeCgroupTree(dir: string): void {
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
    rmdirSync(dir);
  } catch {
    /* not there, or still busy: reported by the host check */
  }
}

/** Processes of containerd shims serving this node's containerd (found by its socket path). */
function shimPids(socket: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmdline[0]?.includes('containerd-shim') && cmdline.includes(socket)) pids.push(Number(entry));
    } catch {
      /* exited */
    }
  }
  return pids;
}

function killAll(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** Removes the chains kfn's node added to iptables (and their jump rules), table by table. */
function removeAddedChains(before: Set<string>): void {
  for (const family of iptablesFamilies) {
    const dump = run(`${family}-save`, []).stdout;
    const tables = new Map<string, string[]>();
    let table = '';
    for (const line of dump.split('\n')) {
      if (line.startsWith('*')) tables.set((table = line.slice(1)), [line]);
      else if (table) tables.get(table)!.push(line);
    }
    for (const [name, lines] of tables) {
      const added = new Set(lines.filter((l) => l.startsWith(':')).map((l) => l.slice(1).split(' ')[0]!).filter((c) => !before.has(`${family}:${name}:${c}`)));
      if (!added.size) continue;
      const refersToAdded = (l: string) => {
        const words = l.split(/\s+/);
        if (l.startsWith(':')) return added.has(l.slice(1).split(' ')[0]!);
        if (!l.startsWith('-A ')) return false;
        if (added.has(words[1]!)) return true;
        const j = words.findIndex((w) => w === '-j' || w === '-g');
        return j >= 0 && added.has(words[j + 1]!);
      };
      const kept = `${lines.filter((l) => !refersToAdded(l)).join('\n')}\n`;
      spawnSync(`${family}-restore`, ['--table', name], { input: kept, encoding: 'utf8' });
    }
  }
}

export interface TeardownResult {
  /** Host differences left after cleaning up (empty when the host is as found). */
  leftovers: string[];
}

/**
 * Removes everything the node put on the host. Safe to run on a half-started or crashed node,
 * and more than once. Call after the node's processes (kubelet, kube-proxy, containerd) stopped.
 */
export async function tearDownNode(paths: NodePaths, net: NodeNetwork, before: HostSnapshot | undefined): Promise<TeardownResult> {
  // 1. Whatever still runs in the pods' cgroups, and the shims that supervised it.
  const created = cgroupRoots()
    .flatMap((root) => watchedCgroups.map((c) => join(root, c)))
    .filter((p) => existsSync(p) && !(before?.cgroups ?? []).includes(p));
  for (let i = 0; i < 20; i++) {
    const pids = [...created.flatMap(pidsInCgroup), ...shimPids(paths.containerdSocket)];
    if (!pids.length) break;
    killAll(pids);
    await sleep(100);
  }
  // 2. Mounts under the node's directory (pod volumes, overlay rootfs, network namespaces), deepest first.
  for (const mount of mountsUnder(paths.dir).sort((a, b) => b.length - a.length)) {
    if (run('umount', [mount]).status !== 0) run('umount', ['-l', mount]);
  }
  for (const cgroup of created) removeCgroupTree(cgroup);
  // 3. Network: the bridge (pod veths went with their namespaces), kfn's nft table, added chains.
  if (linkExists(net.bridge)) run('ip', ['link', 'del', net.bridge]);
  if (listNftTables().includes(`ip ${nftTable}`)) run('nft', ['delete', 'table', 'ip', nftTable]);
  if (before) {
    removeAddedChains(new Set(before.chains));
    for (const table of listNftTables()) {
      if (!before.nftTables.includes(table)) run('nft', ['delete', 'table', ...table.split(' ')]);
    }
    // 4. Sysctls and fixed paths.
    for (const [key, value] of Object.entries(before.sysctls)) {
      if (readSysctl(key) !== value) {
        try {
          writeFileSync(join('/proc/sys', key), value);
        } catch {
          /* reported as a leftover */
        }
      }
    }
    for (const path of watchedPaths) {
      if (!before.paths.includes(path) && existsSync(path)) {
        for (const mount of mountsUnder(path).sort((a, b) => b.length - a.length)) run('umount', ['-l', mount]);
        rmSync(path, { recursive: true, force: true });
      }
    }
  }
  return { leftovers: before ? hostDifferences(before, takeHostSnapshot()) : [] };
}

export function readHostSnapshot(paths: NodePaths): HostSnapshot | undefined {
  try {
    return JSON.parse(readFileSync(paths.hostSnapshot, 'utf8')) as HostSnapshot;
  } catch {
    return undefined;
  }
}
