// The node's configuration files: containerd's, the CNI bridge network's, the kubelet's and
// kube-proxy's, written from the cluster's network and ports.
import { join } from 'node:path';
import { stringify } from 'yaml';
import { gatewayOf, type NodeNetwork, type NodePaths, type NodePorts } from './node.ts';

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
  [plugins."io.containerd.grpc.v1.cri".registry]
    # <host:port>/hosts.toml per registry (the local one: plain HTTP, for that address only).
    config_path = ${q(paths.registryHostsDir)}
`;
}

/** containerd's hosts.toml for a registry served over plain HTTP at `host` (host:port): pulls and tag resolution from it, over HTTP, for that address only. */
export function plainHttpRegistryHosts(host: string): string {
  return `server = "http://${host}"

[host."http://${host}"]
  capabilities = ["pull", "resolve"]
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
    // Images reach this node two ways: imported (kfn.local/…) and pulled from the local registry.
    // Once the kubelet has pulled an image, Kubernetes 1.35's default (NeverVerifyPreloadedImages,
    // KEP-2535) has it verify the pull credentials of every other name of that image by pulling
    // it — and kfn.local is no registry: the same image imported under kfn.local stopped running.
    imagePullCredentialsVerificationPolicy: 'NeverVerify',
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
