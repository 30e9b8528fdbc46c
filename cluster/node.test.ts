import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cniConfig, containerdConfig } from './node-config.ts';
import { gatewayOf, nodePaths } from './node.ts';
import { hostDifferences, type HostSnapshot } from './host.ts';

test('gatewayOf gives the first address of a /24 and refuses anything else', () => {
  assert.equal(gatewayOf('10.244.0.0/24'), '10.244.0.1');
  for (const bad of ['10.244.0.0/16', '10.244.0.5/24', '300.1.1.0/24', 'kfn0']) assert.throws(() => gatewayOf(bad), /not an IPv4 \/24 network address/);
});

test('hostDifferences names every sysctl, path, cgroup, chain and table that changed', () => {
  const before: HostSnapshot = { sysctls: { 'net/ipv4/ip_forward': '0' }, paths: [], cgroups: [], chains: ['iptables:filter:INPUT'], nftTables: [] };
  assert.deepEqual(hostDifferences(before, structuredClone(before)), []);
  const after: HostSnapshot = { sysctls: { 'net/ipv4/ip_forward': '1' }, paths: ['/var/lib/kubelet'], cgroups: [], chains: ['iptables:filter:INPUT', 'iptables:nat:KUBE-SERVICES'], nftTables: ['ip nat'] };
  assert.deepEqual(hostDifferences(before, after), [
    'sysctl net.ipv4.ip_forward was 0, is 1',
    'path /var/lib/kubelet was added',
    'chain iptables:nat:KUBE-SERVICES was added',
    'nft table ip nat was added',
  ]);
});

test('the node keeps containerd, runc and CNI state under its own directory', () => {
  const paths = nodePaths('/state/cluster');
  const toml = containerdConfig(paths, 'kfn.local/pause:1');
  for (const line of ['root = "/state/cluster/node/containerd/root"', 'restrict_oom_score_adj = true', 'runtime_type = "io.containerd.runc.v2"', 'Root = "/state/cluster/node/containerd/runc"', 'sandbox_image = "kfn.local/pause:1"']) {
    assert.ok(toml.includes(line), `containerd.toml has ${line}`);
  }
  const cni = JSON.parse(cniConfig(paths, { bridge: 'kfn9', podSubnet: '10.99.0.0/24', clusterCidr: '10.99.0.0/16', serviceCidr: '10.96.0.0/16', apiserverServiceIp: '10.96.0.1', dnsServiceIp: '10.96.0.10' }));
  assert.equal(cni.plugins[0].bridge, 'kfn9');
  assert.deepEqual(cni.plugins[0].ipam.ranges, [[{ subnet: '10.99.0.0/24', gateway: '10.99.0.1' }]]);
  assert.equal(cni.plugins[0].ipam.dataDir, '/state/cluster/node/cni/ipam');
});
