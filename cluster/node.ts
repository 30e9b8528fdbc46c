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
// This file: the node's network and paths, its prerequisites, and setting the host's network
// up. Its configuration files are node-config.ts's; leaving the host as found is host.ts's.
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Runs a host command to its end, its output as text. */
export const run = (command: string, args: string[]) => spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });

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

export interface NodePorts {
  kubelet: number;
  kubeletHealthz: number;
  kubeProxyMetrics: number;
  kubeProxyHealthz: number;
}

export const defaultNodePorts: NodePorts = { kubelet: 10250, kubeletHealthz: 10248, kubeProxyMetrics: 10249, kubeProxyHealthz: 10256 };

export interface NodePaths {
  dir: string;
  containerdConfig: string;
  containerdSocket: string;
  registryHostsDir: string;
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
    // containerd's per-registry settings (hosts.toml), read at each pull: the local registry's.
    registryHostsDir: join(dir, 'containerd', 'certs.d'),
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

/**
 * Installs the node's missing Debian packages with apt-get, saying the command first (as root;
 * otherwise fails with the command to run). Returns what it installed.
 */
export function installNodePackages(log: (line: string) => void): string[] {
  const missing = missingNodePackages();
  if (!missing.length) return [];
  if (process.getuid?.() !== 0) throw new Error(`The real node needs Debian packages that are not installed: ${missing.join(', ')}. Installing them needs root; run as root:\n  ${installCommand(missing)}`);
  log(`Installing the node's Debian packages (about half a minute): ${installCommand(missing)}`);
  for (const args of [['update'], ['install', '-y', '--no-install-recommends', ...missing]]) {
    const out = spawnSync('apt-get', args, { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    if (out.status !== 0) throw new Error(`apt-get ${args[0]} failed (exit ${out.status ?? out.signal}); see its output above. By hand: ${installCommand(missing)}`);
  }
  const still = missingNodePackages();
  if (still.length) throw new Error(`After apt-get install, still missing: ${still.join(', ')}.`);
  return missing;
}

/** Fails with what to do when this machine cannot run the real node; installs its Debian packages. */
export function checkNodePrerequisites(log: (line: string) => void): void {
  if (process.platform !== 'linux') throw new Error('The local cluster runs real containers and needs Linux.');
  if (process.getuid?.() !== 0) {
    throw new Error('The local cluster runs a kubelet and containerd, which need root: run as root (e.g. with sudo).');
  }
  installNodePackages(log);
}

// ---------------------------------------------------------------------------------------------
// Setting up the host

function ip(args: string[], what: string): void {
  const out = run('ip', args);
  if (out.status !== 0) throw new Error(`${what} failed: ip ${args.join(' ')}: ${out.stderr.trim()}`);
}

export function linkExists(name: string): boolean {
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

/** kfn's own nft table on the host (its NAT rules). */
export const nftTable = 'kfn';

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
