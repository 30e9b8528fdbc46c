// The host as the node leaves it: what `up` records before changing anything (the sysctls the
// kubelet and kube-proxy change, which fixed paths exist, which iptables chains and nft tables
// exist: host.json in the state directory), and how `down` (or `up` after a crash) puts it back:
// kill what runs in the pods' cgroups, unmount everything under the state directory, remove the
// bridge, kfn's nft table, the chains that were not there before and the cgroups it created,
// and restore the sysctls.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { linkExists, nftTable, run, type NodeNetwork, type NodePaths } from './node.ts';

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
