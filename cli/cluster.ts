// `kfn cluster …`: build, start, stop and inspect the local Kubernetes control plane.
import { writeFileSync } from 'node:fs';
import { KubeApi } from '../kube/api.ts';
import { loadConnection } from '../kube/kubeconfig.ts';
import { ensureBinaries, firstBuild } from '../cluster/build.ts';
import { startRegistry } from '../cluster/registry.ts';
import { clusterDown, clusterStatus, clusterUp } from '../cluster/controlplane.ts';
import { clusterPaths, displayPath } from '../cluster/paths.ts';
import { defaultPorts, type ClusterPorts } from '../cluster/state.ts';
import { defaultNetwork, defaultNodePorts, installCommand, installNodePackages, missingNodePackages, nodePackages, type NodePorts } from '../cluster/node.ts';
import { kubeconfigForToken, parseServiceAccountRef, requestServiceAccountToken } from '../kube/serviceaccount.ts';
import { parseCommandArgs, parsePort, unknownCommand, UsageError, wantsHelp, type Command, type Options } from './command.ts';
import { kfnCommand, kfnCommandForOutput } from './invocation.ts';

const usage = `Usage: kfn cluster <command> [options]

The local cluster: real etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
127.0.0.1, and one real node (kubelet, containerd, runc, CNI, kube-proxy, CoreDNS) on which
pods really run; kwok adds fake nodes for scale. Built from Go modules and Debian packages.

Commands:
  deps     install the Debian packages the node needs (containerd, runc, CNI plugins, …)
  up       build the binaries and images if needed, start the cluster, wait until it is ready
  down     stop the processes 'up' started (by PID) and remove the cluster's state
  status   say what runs, where, and how much memory it uses (exit 3 when not running)
  env      print 'export KUBECONFIG=…' for the running cluster (use: eval "$(kfn cluster env)")
  build    only build (or find cached) binaries, printing where they are
  token    print a token for a ServiceAccount (TokenRequest), or write a kubeconfig using it
  registry start the cluster's OCI registry (CNCF Distribution), which the node pulls from

Run 'kfn cluster <command> --help' for a command's options.`;

const upUsage = `Usage: kfn cluster up [options]

Starts the local cluster, building its binaries and images first if the cache has none (the
first build takes ${firstBuild} and 8 GiB of disk). A second 'up' while it runs does nothing;
an 'up' after a crash cleans up what was left and starts afresh. Needs root; installs the
Debian packages the node needs (\`kfn cluster deps\`) if they are missing.
The admin kubeconfig is written to .kfn/cluster/kubeconfig; logs go to .kfn/cluster/logs/.

Options:
  --knative                     also install Knative Serving and Traefik (as \`kfn knative install\`)
  --fake-nodes N                add N kwok nodes (tainted ${'kfn.dev/fake-node=true:NoSchedule'}) for scale tests
  --bridge-name NAME            the pods' Linux bridge (default ${defaultNetwork.bridge})
  --pod-subnet CIDR             the node's pod /24; its .1 is the node IP (default ${defaultNetwork.podSubnet})
  --kubelet-port N              kubelet HTTPS port on the node IP (default ${defaultNodePorts.kubelet})
  --kubelet-healthz-port N      kubelet health port on 127.0.0.1 (default ${defaultNodePorts.kubeletHealthz})
  --kube-proxy-metrics-port N   (default ${defaultNodePorts.kubeProxyMetrics})
  --kube-proxy-healthz-port N   (default ${defaultNodePorts.kubeProxyHealthz})
  --apiserver-port N            kube-apiserver HTTPS port (default ${defaultPorts.apiserver})
  --etcd-port N                 etcd client port (default ${defaultPorts.etcd})
  --etcd-peer-port N            etcd peer port (default ${defaultPorts.etcdPeer})
  --controller-manager-port N   kube-controller-manager HTTPS port (default ${defaultPorts.controllerManager})
  --scheduler-port N            kube-scheduler HTTPS port (default ${defaultPorts.scheduler})
  -h, --help                    show this help

Environment:
  KFN_CLUSTER_DIR   where the cluster's state lives (default .kfn/cluster in the repository)
  KFN_CACHE_DIR     where built binaries are cached (default ~/.cache/kfn)
  GO                the Go toolchain to build with (default: 'go' on PATH, then /usr/local/go/bin/go)`;

const tokenUsage = `Usage: kfn cluster token <namespace>/<serviceaccount> [options]

Requests a token for the ServiceAccount through the TokenRequest API (as the cluster admin)
and prints it, so a program can run under that ServiceAccount's RBAC permissions.

Options:
  --duration SECONDS    how long the token is valid (default 3600, at least 600)
  --kubeconfig-out F    write a kubeconfig for the cluster that uses the token, instead of printing it
  --kubeconfig F        the admin kubeconfig to request with (default: the local cluster's)
  -h, --help            show this help`;

const simpleUsage: Record<string, string> = {
  down: 'Usage: kfn cluster down\n\nStops exactly the processes that `kfn cluster up` started (by recorded PID), removes the pods\' containers,\nmounts, network and cgroups, restores the sysctls the node changed, and removes .kfn/cluster.',
  deps: `Usage: kfn cluster deps [--check]\n\nInstalls the Debian packages the real node needs (as root):\n  ${installCommand(nodePackages.map((p) => p.pkg))}\nWith --check, only says which are missing (exit 3 when some are).`,
  status: 'Usage: kfn cluster status\n\nShows whether the local cluster runs, its components, PIDs, memory, ports and files.\nExit status: 0 when running and ready, 3 otherwise.',
  env: `Usage: kfn cluster env\n\nPrints shell lines that point kubectl and other clients at the local cluster:\n  eval "$(${kfnCommandForOutput('cluster env')})"`,
  build: 'Usage: kfn cluster build\n\nBuilds the control-plane binaries from Go modules, or finds them in the cache, and prints the directory.',
  registry: [
    'Usage: kfn cluster registry [--auth]',
    '',
    "Starts the running cluster's OCI registry (CNCF Distribution, built from its Go module on first",
    "use, about a minute) on the node's address on the pod network, so the host, the node's",
    'containerd (plain HTTP for that address only) and pods reach it at one name; prints that',
    'name (host:port). Its storage is in the cluster\'s state directory. Push to it with',
    '`kfn image push --registry local` or `kfn deploy --registry local`.',
    '',
    '  --auth   ask for a user and password (htpasswd), as a real registry does; they are printed,',
    '           and `--registry local` uses them (and gives the pods a pull Secret)',
  ].join('\n'),
};

/** The flags of each subcommand that takes any (`up`'s are beside it). */
const subcommandFlags = {
  deps: { check: { type: 'boolean' } },
  token: { duration: { type: 'string' }, 'kubeconfig-out': { type: 'string' }, kubeconfig: { type: 'string' } },
  registry: { auth: { type: 'boolean' } },
} as const;

const say = (line: string) => console.error(line);

function formatMiB(bytes: number | undefined): string {
  return bytes === undefined ? '-' : `${Math.round(bytes / 1024 ** 2)} MiB`;
}

const upFlags = {
  'apiserver-port': { type: 'string' },
  'etcd-port': { type: 'string' },
  'etcd-peer-port': { type: 'string' },
  'controller-manager-port': { type: 'string' },
  'scheduler-port': { type: 'string' },
  'fake-nodes': { type: 'string' },
  'bridge-name': { type: 'string' },
  'pod-subnet': { type: 'string' },
  'kubelet-port': { type: 'string' },
  'kubelet-healthz-port': { type: 'string' },
  'kube-proxy-metrics-port': { type: 'string' },
  'kube-proxy-healthz-port': { type: 'string' },
  knative: { type: 'boolean' },
} as const;

async function up(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(upUsage), 0);
  const { values } = parseCommandArgs('cluster up', argv, upFlags);
  const ports: Partial<ClusterPorts> = {};
  const set = (key: keyof ClusterPorts, flag: string, value: string | undefined) => {
    const port = parsePort(flag, value);
    if (port !== undefined) ports[key] = port;
  };
  set('apiserver', '--apiserver-port', values['apiserver-port']);
  set('etcd', '--etcd-port', values['etcd-port']);
  set('etcdPeer', '--etcd-peer-port', values['etcd-peer-port']);
  set('controllerManager', '--controller-manager-port', values['controller-manager-port']);
  set('scheduler', '--scheduler-port', values['scheduler-port']);
  const nodePorts: Partial<NodePorts> = {};
  for (const [key, flag] of [['kubelet', 'kubelet-port'], ['kubeletHealthz', 'kubelet-healthz-port'], ['kubeProxyMetrics', 'kube-proxy-metrics-port'], ['kubeProxyHealthz', 'kube-proxy-healthz-port']] as const) {
    const port = parsePort(`--${flag}`, values[flag]);
    if (port !== undefined) nodePorts[key] = port;
  }
  const fakeNodes = values['fake-nodes'] === undefined ? 0 : Number(values['fake-nodes']);
  if (!Number.isInteger(fakeNodes) || fakeNodes < 0 || fakeNodes > 1000) throw new UsageError(`--fake-nodes must be a whole number from 0 to 1000, not "${values['fake-nodes']}"`);
  if (values['bridge-name'] !== undefined && !/^[a-zA-Z0-9_-]{1,15}$/.test(values['bridge-name'])) throw new UsageError('--bridge-name must be a network interface name: 1 to 15 letters, digits, - or _');
  const network = { ...(values['bridge-name'] ? { bridge: values['bridge-name'] } : {}), ...(values['pod-subnet'] ? { podSubnet: values['pod-subnet'] } : {}) };
  const result = await clusterUp({ ports, nodePorts, network, fakeNodes, log: say });
  const kubeconfig = displayPath(result.paths.kubeconfig);
  if (result.reused) {
    say(`The local cluster is already running (${result.state.server}); ${result.addedFakeNodes ? `added fake nodes ${result.addedFakeNodes.join(', ')}.` : 'nothing to do.'}`);
  } else {
    say(`Local cluster up: Kubernetes ${result.state.kubernetes} at ${result.state.server} (${result.seconds.toFixed(1)}s).`);
  }
  if (values.knative) await (await import('./knative.ts')).installOnLocalCluster({ log: say });
  say(`  kubeconfig: ${kubeconfig}`);
  say(`  try:        kubectl --kubeconfig ${kubeconfig} get nodes`);
  say(`  or:         eval "$(${kfnCommandForOutput('cluster env')})"`);
  say(`  stop with:  ${kfnCommand('cluster down')}`);
  return 0;
}

async function deps(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.deps), 0);
  const { values } = parseCommandArgs('cluster deps', argv, subcommandFlags.deps);
  const missing = missingNodePackages();
  if (!missing.length) {
    say(`The node's Debian packages are installed (${nodePackages.map((p) => p.pkg).join(', ')}).`);
    return 0;
  }
  if (values.check) {
    say(`Missing Debian packages: ${missing.join(', ')}. Install them with:\n  ${installCommand(missing)}`);
    return 3;
  }
  try {
    installNodePackages(say);
  } catch (err) {
    throw new UsageError((err as Error).message, 1);
  }
  say('Installed.');
  return 0;
}

async function down(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.down), 0);
  parseCommandArgs('cluster down', argv, {});
  const result = await clusterDown({ log: say });
  if (result.stopped.length) say(`Stopped ${result.stopped.join(', ')}.`);
  else say('No local cluster process was running.');
  if (result.removed) say(`Removed ${displayPath(clusterPaths().dir)}.`);
  return 0;
}

async function status(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.status), 0);
  parseCommandArgs('cluster status', argv, {});
  const s = await clusterStatus();
  if (!s.state) {
    console.log(`Local cluster: not running (start it with \`${kfnCommand('cluster up')}\`).`);
    return 3;
  }
  const total = s.components.reduce((sum, c) => sum + (c.residentBytes ?? 0), 0);
  console.log(`Local cluster: ${s.healthy ? 'running and ready' : 'NOT healthy'} — Kubernetes ${s.state.kubernetes}, started ${s.state.startedAt}`);
  console.log(`  API server  ${s.state.server}`);
  console.log(`  etcd        http://127.0.0.1:${s.state.ports.etcd}`);
  console.log(`  kubeconfig  ${displayPath(s.paths.kubeconfig)}`);
  console.log(`  binaries    ${s.state.binDir}`);
  console.log('');
  console.log('  COMPONENT                 PID      STATE     MEMORY   LOG');
  for (const c of s.components) {
    console.log(`  ${c.name.padEnd(24)}  ${String(c.pid).padEnd(7)}  ${(c.running ? 'running' : 'stopped').padEnd(8)}  ${formatMiB(c.residentBytes).padStart(7)}  ${displayPath(c.log)}`);
  }
  console.log(`  ${'total'.padEnd(24)}  ${''.padEnd(7)}  ${''.padEnd(8)}  ${formatMiB(total).padStart(7)}`);
  if (s.healthy) {
    const { knativeStatus } = await import('../cluster/knative.ts');
    const kn = await knativeStatus(new KubeApi(loadConnection(s.paths.kubeconfig)));
    console.log('');
    if (kn) (await import('./knative.ts')).printKnativeStatus(kn, (l) => console.log(`  ${l}`));
    else console.log(`  Knative: not installed (\`${kfnCommand('knative install')}\`)`);
  }
  if (!s.healthy) console.log('\nSome components are not running or the API server is not ready; see the logs, or restart with `kfn cluster down && kfn cluster up`.');
  return s.healthy ? 0 : 3;
}

async function env(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.env), 0);
  parseCommandArgs('cluster env', argv, {});
  const s = await clusterStatus();
  if (!s.state) throw new UsageError(`The local cluster is not running: start it with \`${kfnCommand('cluster up')}\`.`, 3);
  console.log(`export KUBECONFIG='${s.paths.kubeconfig}'`);
  console.log(`# kubectl matching the cluster's version: ${s.state.binDir}/kubectl`);
  return 0;
}

async function build(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.build), 0);
  parseCommandArgs('cluster build', argv, {});
  const binaries = await ensureBinaries({ log: say });
  say(`Control-plane binaries (Kubernetes ${binaries.versions.kubernetes}) are in:`);
  console.log(binaries.dir);
  return 0;
}

async function token(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(tokenUsage), 0);
  const { values, positionals } = parseCommandArgs('cluster token', argv, subcommandFlags.token, true);
  if (positionals.length !== 1) throw new UsageError(`kfn cluster token: expected one <namespace>/<serviceaccount>\n\n${tokenUsage}`);
  const ref = parseServiceAccountRef(positionals[0]!);
  const duration = values.duration === undefined ? 3600 : Number(values.duration);
  if (!Number.isInteger(duration) || duration < 600) throw new UsageError('--duration must be a whole number of seconds, at least 600');
  const adminKubeconfig = values.kubeconfig ?? clusterPaths().kubeconfig;
  const tok = await requestServiceAccountToken(new KubeApi(loadConnection(adminKubeconfig)), ref, duration);
  if (values['kubeconfig-out']) {
    writeFileSync(values['kubeconfig-out'], kubeconfigForToken(adminKubeconfig, tok, `${ref.namespace}-${ref.name}`), { mode: 0o600 });
    say(`Wrote a kubeconfig for ServiceAccount ${ref.namespace}/${ref.name} to ${values['kubeconfig-out']} (valid ${duration}s).`);
  } else {
    console.log(tok);
  }
  return 0;
}

async function registry(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.registry), 0);
  const { values } = parseCommandArgs('cluster registry', argv, subcommandFlags.registry);
  const running = await startRegistry({ auth: values.auth, log: say });
  say(`The local registry ${running.started ? 'runs' : 'already runs'} at ${running.host}${running.auth ? `, user ${running.auth.username}, password ${running.auth.password}` : ''}.`);
  console.log(running.host);
  return 0;
}

const subcommands: Record<string, (argv: string[]) => Promise<number>> = { deps, up, down, status, env, build, token, registry };
/** What `--help` shows for each subcommand, and the flags its parser takes. */
const subcommandHelp: Record<string, { usage: string; options: Options }> = {
  deps: { usage: simpleUsage.deps!, options: subcommandFlags.deps },
  up: { usage: upUsage, options: upFlags },
  down: { usage: simpleUsage.down!, options: {} },
  status: { usage: simpleUsage.status!, options: {} },
  env: { usage: simpleUsage.env!, options: {} },
  build: { usage: simpleUsage.build!, options: {} },
  token: { usage: tokenUsage, options: subcommandFlags.token },
  registry: { usage: simpleUsage.registry!, options: subcommandFlags.registry },
};

export const clusterCommand: Command = {
  name: 'cluster',
  usage,
  options: {},
  subcommands: subcommandHelp,
  async run(argv) {
    const [sub, ...rest] = argv;
    if (!sub || sub === '--help' || sub === '-h' || sub === 'help') return (console.log(usage), sub ? 0 : 2);
    const fn = subcommands[sub];
    if (!fn) {
      throw unknownCommand('kfn cluster', sub, Object.keys(subcommands), usage);
    }
    return fn(rest);
  },
};
