// `kfn knative …`: Knative Serving (with Traefik as its ingress) on the local cluster.
import { loadConnection } from '../kube/kubeconfig.ts';
import { KubeApi } from '../kube/api.ts';
import { ensureBinaries } from '../cluster/build.ts';
import { clusterHealthy } from '../cluster/controlplane.ts';
import { clusterPaths } from '../cluster/paths.ts';
import { cachedKnativeBinaries, ensureKnativeBinaries, installKnative, knativeStatus, knativeVersions, uninstallKnative } from '../cluster/knative.ts';
import { nodePaths } from '../cluster/node.ts';
import { parseCommandArgs, unknownCommand, UsageError, wantsHelp, type Command } from './command.ts';
import { kfnCommand } from './invocation.ts';

const say = (line: string) => console.error(line);

const usage = `Usage: kfn knative <command> [options]

Knative Serving ${knativeVersions().serving} on the local cluster, built from its Go modules
(controller, webhook, activator, autoscaler, queue-proxy), with Traefik ${knativeVersions().traefik} as
its ingress (Traefik's Knative provider). Functions then run as Knative Services:
\`kfn deploy <fn> --target knative\`.

Commands:
  install   build (first time about 10 minutes), import the images, apply, wait until ready
  build     only build (or find cached) Knative's and Traefik's binaries, printing where they are
  status    the Knative and ingress components and whether each is available (exit 3 if not)
  uninstall remove Knative Serving (and with its CRDs every Knative Service) and Traefik

Options:
  --timeout S   seconds to wait for the components (install; default 300)
  -h, --help    show this help

\`kfn cluster up --knative\` starts the cluster and installs Knative in one step.`;

/** Installs Knative on the running local cluster (used by `knative install` and `cluster up --knative`). */
export async function installOnLocalCluster(options: { timeoutSeconds?: number; log?: (line: string) => void } = {}): Promise<void> {
  const log = options.log ?? say;
  const paths = clusterPaths();
  if (!(await clusterHealthy(paths))) throw new UsageError(`The local cluster is not running: start it with \`${kfnCommand('cluster up')}\` (or \`${kfnCommand('cluster up --knative')}\`).`, 3);
  const binaries = await ensureBinaries({ log });
  const api = new KubeApi(loadConnection(paths.kubeconfig));
  await installKnative({ api, binaries, containerdSocket: nodePaths(paths.dir).containerdSocket, log, timeoutSeconds: options.timeoutSeconds });
}

const flags = { timeout: { type: 'string' } } as const;

export const knativeCommand: Command = {
  name: 'knative',
  usage,
  options: flags,
  async run(argv) {
    const [sub, ...rest] = argv;
    if (!sub || wantsHelp([sub])) return (console.log(usage), sub ? 0 : 2);
    const { values } = parseCommandArgs(`knative ${sub}`, rest, flags);
    if (sub === 'install') {
      const timeoutSeconds = values.timeout === undefined ? 300 : Number(values.timeout);
      if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) throw new UsageError('--timeout must be a positive number of seconds');
      await installOnLocalCluster({ timeoutSeconds });
      return 0;
    }
    if (sub === 'status') {
      const paths = clusterPaths();
      if (!(await clusterHealthy(paths))) return (console.log('Local cluster: not running.'), 3);
      const status = await knativeStatus(new KubeApi(loadConnection(paths.kubeconfig)));
      if (!status) return (console.log(`Knative: not installed (\`${kfnCommand('knative install')}\`).`), 3);
      printKnativeStatus(status, console.log);
      return status.every((s) => s.ready) ? 0 : 3;
    }
    if (sub === 'build') {
      const k = await ensureKnativeBinaries({ log: say });
      console.log(k.dir);
      return 0;
    }
    if (sub === 'uninstall') {
      const paths = clusterPaths();
      if (!(await clusterHealthy(paths))) throw new UsageError('The local cluster is not running.', 3);
      const k = cachedKnativeBinaries();
      if (!k) throw new UsageError('Knative was not built on this machine (its manifests come from the build): nothing kfn installed to remove.', 1);
      await uninstallKnative(new KubeApi(loadConnection(paths.kubeconfig)), k, { log: say });
      say('Knative Serving and Traefik removed.');
      return 0;
    }
    throw unknownCommand('kfn knative', sub, ['install', 'build', 'status', 'uninstall'], usage);
  },
};

export function printKnativeStatus(status: NonNullable<Awaited<ReturnType<typeof knativeStatus>>>, print: (line: string) => void): void {
  const v = knativeVersions();
  print(`Knative Serving ${v.serving}, ingress Traefik ${v.traefik}: ${status.every((s) => s.ready) ? 'ready' : 'NOT ready'}`);
  for (const s of status) print(`  ${`${s.namespace}/${s.name}`.padEnd(28)}  ${(s.ready ? 'available' : 'waiting').padEnd(9)}  ${s.detail}`);
}
