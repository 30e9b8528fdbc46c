// `kfn cluster …`: build, start, stop and inspect the local Kubernetes control plane.
import { writeFileSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { ensureBinaries } from '../cluster/build.ts';
import { clusterDown, clusterPaths, clusterStatus, clusterUp, defaultPorts, displayPath, type ClusterPorts } from '../cluster/controlplane.ts';
import { kubeConfigForToken, parseServiceAccountRef, requestServiceAccountToken } from '../cluster/serviceaccount.ts';
import { parseCommandArgs, parsePort, UsageError, wantsHelp, type Command } from './command.ts';

const usage = `Usage: kfn cluster <command> [options]

The local control plane: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kwok (one fake, always-Ready node), built from Go modules and run on 127.0.0.1.

Commands:
  up       build the binaries if needed, start the cluster, wait until it is ready
  down     stop the processes 'up' started (by PID) and remove the cluster's state
  status   say what runs, where, and how much memory it uses (exit 3 when not running)
  env      print 'export KUBECONFIG=…' for the running cluster (use: eval "$(kfn cluster env)")
  build    only build (or find cached) binaries, printing where they are
  token    print a token for a ServiceAccount (TokenRequest), or write a kubeconfig using it

Run 'kfn cluster <command> --help' for a command's options.`;

const upUsage = `Usage: kfn cluster up [options]

Starts the local cluster, building its binaries first if the cache has none (the first build
takes about 10 minutes and 6 GiB of disk). A second 'up' while it runs does nothing.
The admin kubeconfig is written to .kfn/cluster/kubeconfig; logs go to .kfn/cluster/logs/.

Options:
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
  down: 'Usage: kfn cluster down\n\nStops exactly the processes that `kfn cluster up` started (by recorded PID) and removes .kfn/cluster.',
  status: 'Usage: kfn cluster status\n\nShows whether the local cluster runs, its components, PIDs, memory, ports and files.\nExit status: 0 when running and ready, 3 otherwise.',
  env: 'Usage: kfn cluster env\n\nPrints shell lines that point kubectl and other clients at the local cluster:\n  eval "$(npm run --silent kfn -- cluster env)"',
  build: 'Usage: kfn cluster build\n\nBuilds the control-plane binaries from Go modules, or finds them in the cache, and prints the directory.',
};

const say = (line: string) => console.error(line);

function formatMiB(bytes: number | undefined): string {
  return bytes === undefined ? '-' : `${Math.round(bytes / 1024 ** 2)} MiB`;
}

async function up(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(upUsage), 0);
  const { values } = parseCommandArgs('cluster up', argv, {
    'apiserver-port': { type: 'string' },
    'etcd-port': { type: 'string' },
    'etcd-peer-port': { type: 'string' },
    'controller-manager-port': { type: 'string' },
    'scheduler-port': { type: 'string' },
  });
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
  const result = await clusterUp({ ports, log: say });
  const kubeconfig = displayPath(result.paths.kubeconfig);
  if (result.reused) {
    say(`The local cluster is already running (${result.state.server}); nothing to do.`);
  } else {
    say(`Local cluster up: Kubernetes ${result.state.kubernetes} at ${result.state.server} (${result.seconds.toFixed(1)}s).`);
  }
  say(`  kubeconfig: ${kubeconfig}`);
  say(`  try:        kubectl --kubeconfig ${kubeconfig} get nodes`);
  say(`  or:         eval "$(npm run --silent kfn -- cluster env)"`);
  say('  stop with:  npm run kfn -- cluster down');
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
    console.log('Local cluster: not running (start it with `npm run kfn -- cluster up`).');
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
  if (!s.healthy) console.log('\nSome components are not running or the API server is not ready; see the logs, or restart with `kfn cluster down && kfn cluster up`.');
  return s.healthy ? 0 : 3;
}

async function env(argv: string[]): Promise<number> {
  if (wantsHelp(argv)) return (console.log(simpleUsage.env), 0);
  parseCommandArgs('cluster env', argv, {});
  const s = await clusterStatus();
  if (!s.state) throw new UsageError('The local cluster is not running: start it with `npm run kfn -- cluster up`.', 3);
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
  const { values, positionals } = parseCommandArgs(
    'cluster token',
    argv,
    { duration: { type: 'string' }, 'kubeconfig-out': { type: 'string' }, kubeconfig: { type: 'string' } },
    true,
  );
  if (positionals.length !== 1) throw new UsageError(`kfn cluster token: expected one <namespace>/<serviceaccount>\n\n${tokenUsage}`);
  const ref = parseServiceAccountRef(positionals[0]!);
  const duration = values.duration === undefined ? 3600 : Number(values.duration);
  if (!Number.isInteger(duration) || duration < 600) throw new UsageError('--duration must be a whole number of seconds, at least 600');
  const admin = new KubeConfig();
  admin.loadFromFile(values.kubeconfig ?? clusterPaths().kubeconfig);
  const tok = await requestServiceAccountToken(admin, ref, duration);
  if (values['kubeconfig-out']) {
    const kc = kubeConfigForToken(admin, tok, `${ref.namespace}-${ref.name}`);
    writeFileSync(values['kubeconfig-out'], stringify(JSON.parse(kc.exportConfig())), { mode: 0o600 });
    say(`Wrote a kubeconfig for ServiceAccount ${ref.namespace}/${ref.name} to ${values['kubeconfig-out']} (valid ${duration}s).`);
  } else {
    console.log(tok);
  }
  return 0;
}

const subcommands: Record<string, (argv: string[]) => Promise<number>> = { up, down, status, env, build, token };

export const clusterCommand: Command = {
  name: 'cluster',
  summary: 'build, start, stop and inspect the local Kubernetes control plane',
  usage,
  async run(argv) {
    const [sub, ...rest] = argv;
    if (!sub || sub === '--help' || sub === '-h' || sub === 'help') return (console.log(usage), sub ? 0 : 2);
    const fn = subcommands[sub];
    if (!fn) throw new UsageError(`kfn cluster: unknown command "${sub}"\n\n${usage}`);
    return fn(rest);
  },
};
