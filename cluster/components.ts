// The files the control plane's components read (PKI, static tokens, kubeconfigs, the node's
// containerd, CNI, kubelet and kube-proxy configuration, kwok's) and each component's flags.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { cniConfig, containerdConfig, kubeletConfig, kubeProxyConfig } from './node-config.ts';
import { gatewayOf, nodePaths, type NodeNetwork } from './node.ts';
import { type ClusterPaths } from './paths.ts';
import { generateClusterPki } from './pki.ts';
import { fakeNodeTaint, nodeName, type ClusterPorts, type ClusterState } from './state.ts';

export function kubeconfigYaml(server: string, caPem: string, user: string, token: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'kfn-local', cluster: { server, 'certificate-authority-data': Buffer.from(caPem).toString('base64') } }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: 'kfn-local', context: { cluster: 'kfn-local', user } }],
    'current-context': 'kfn-local',
  });
}

export interface ComponentTokens {
  admin: string;
  controllerManager: string;
  scheduler: string;
  kwok: string;
  kubelet: string;
  kubeProxy: string;
}

export function apiserverArgs(paths: ClusterPaths, ports: ClusterPorts, net: NodeNetwork): string[] {
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
    // MutatingAdmissionPolicy (beta in 1.34 and 1.35, off unless asked): a function's declared
    // defaults are written by the apiserver itself, as on a cluster that serves it.
    '--feature-gates=MutatingAdmissionPolicy=true',
    '--runtime-config=admissionregistration.k8s.io/v1beta1=true',
  ];
}

export function componentArgs(name: string, paths: ClusterPaths, state: ClusterState): string[] {
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

export async function writeClusterFiles(paths: ClusterPaths, state: ClusterState, credentials: ComponentTokens, sandboxImage: string): Promise<void> {
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
export function kwokConfig(): string {
  const options = stringify({ apiVersion: 'config.kwok.x-k8s.io/v1alpha1', kind: 'KwokConfiguration', options: {} });
  return `${options}---\n${readFileSync(join(import.meta.dirname, 'kwok', 'stages.yaml'), 'utf8')}`;
}

/** A fake node for kwok: tainted, so that only pods that tolerate fakeNodeTaint land on it. */
export function fakeNodeManifest(name: string) {
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
