// The cluster a command talks to, chosen once for every command: kubectl's rules
// (kube/kubeconfig.ts: --kubeconfig, $KUBECONFIG merged, ~/.kube/config, in-cluster; --context;
// -n), said in one line before the command acts — with the namespace it acts in, for a command
// that acts in one — and checked to answer. kfn's own local cluster
// is used when asked (--local-cluster), or when no kubeconfig is found and it is running; only
// in kfn's own checkout, where `npm start` and `npm test` rely on it, does a command start it
// unasked. Otherwise a cluster that cannot be used is one message: what was tried, and the two
// ways on.
import { writeFileSync } from 'node:fs';
import { KubeApi } from '../kube/api.ts';
import { ClusterUnavailable, checkClusterAnswers, connectCluster, type ResolvedCluster } from '../kube/cluster-failures.ts';
import type { TransportFactory } from '../kube/connection.ts';
import { describeCluster, NoClusterConfigured, type ClusterSelection } from '../kube/kubeconfig.ts';
import { clusterPaths, compiled } from '../cluster/paths.ts';
import { readState } from '../cluster/state.ts';
import { UsageError } from './command.ts';
import { kfnCommand } from './invocation.ts';

/** What a command's flags chose: kubectl's three, and whether kfn's local cluster was asked for. */
export interface ClusterFlags extends ClusterSelection {
  'local-cluster'?: boolean;
}

export interface ChosenCluster extends ResolvedCluster {
  api: KubeApi;
  /** Whether it is kfn's own local cluster (its node takes images imported on this machine). */
  local: boolean;
  /** Whether this choice started kfn's local cluster (then the command that asked may stop it). */
  started: boolean;
}

export interface ChooseOptions {
  /** Where the one line goes (default: standard error, leaving standard output to the command's result). */
  log?: (line: string) => void;
  /**
   * In kfn's checkout only: start the local cluster when no kubeconfig is found (`kfn dev`,
   * `npm start`), and, for `npm start`, also when the chosen cluster does not answer and the
   * user named none (today's demo). An installed kfn never does.
   */
  startLocalInCheckout?: 'when-none' | 'when-none-or-silent';
  /** Look at the cluster before returning (default true); a server process retries instead. */
  check?: boolean;
  /** The connection explains its failures (default true; the bridge judges its own). */
  explain?: boolean;
  transport?: TransportFactory;
  /** How long the first look may take (default 10 s). */
  checkWithinMs?: number;
  /**
   * The namespace the command acts in, said on the line (`…, in namespace kfn-system`), given
   * the cluster (whose `namespace` is kubectl's choice: -n, else the context's, else default).
   * A command that acts in none, or in every one, gives none.
   */
  actsIn?: (cluster: ResolvedCluster) => string | undefined;
}

const twoWaysOn = `point kfn at your cluster (--kubeconfig, --context or $KUBECONFIG), or use kfn's own local cluster: \`${kfnCommand('cluster up')}\`, then --local-cluster`;

/** Whether `server` is the running local cluster's apiserver. */
function isLocalCluster(server: string): boolean {
  return readState(clusterPaths())?.server.replace(/\/$/, '') === server;
}

/** kfn's local cluster, started (and on first use built) if it is not running. */
async function localCluster(flags: ClusterFlags, options: ChooseOptions, log: (line: string) => void, why: string): Promise<ResolvedCluster & { started: boolean }> {
  const { clusterUp } = await import('../cluster/controlplane.ts');
  const { firstBuild } = await import('../cluster/build.ts');
  log(`${why}: starting kfn's local cluster if it is not running (the first run builds it from source: ${firstBuild})`);
  const up = await clusterUp({ log: (l) => log(`  ${l}`) });
  return { ...connectCluster({ kubeconfig: up.paths.kubeconfig, namespace: flags.namespace }, { transport: options.transport, explain: options.explain }), started: !up.reused };
}

/** The running local cluster, when no kubeconfig is found: using it starts nothing. */
async function runningLocalCluster(flags: ClusterFlags, options: ChooseOptions): Promise<ResolvedCluster | undefined> {
  if (flags.context || !readState(clusterPaths())) return undefined;
  const { clusterHealthy } = await import('../cluster/controlplane.ts');
  if (!(await clusterHealthy(clusterPaths()))) return undefined;
  return connectCluster({ kubeconfig: clusterPaths().kubeconfig, namespace: flags.namespace }, { transport: options.transport, explain: options.explain });
}

/**
 * The cluster for a command, as kubectl would choose it, said in one line and looked at: a
 * cluster that cannot be used throws ClusterUnavailable, one line naming what was tried.
 */
export async function chooseCluster(flags: ClusterFlags, options: ChooseOptions = {}): Promise<ChosenCluster> {
  const log = options.log ?? ((line: string) => console.error(line));
  const inCheckout = !compiled && !!options.startLocalInCheckout;
  const named = !!(flags.kubeconfig || flags.context);
  let cluster: ResolvedCluster & { started?: boolean };
  if (flags['local-cluster']) {
    if (named) throw new UsageError('--local-cluster uses kfn\'s own cluster: it cannot go with --kubeconfig or --context');
    cluster = await localCluster(flags, options, log, '--local-cluster');
  } else {
    try {
      cluster = connectCluster(flags, { transport: options.transport, explain: options.explain });
    } catch (err) {
      if (!(err instanceof NoClusterConfigured)) throw err;
      const running = await runningLocalCluster(flags, options);
      if (running) cluster = running;
      else if (inCheckout) cluster = await localCluster(flags, options, log, `${err.message}`);
      else throw new ClusterUnavailable(`no cluster to use: ${err.message}; kfn's local cluster is not running. To go on, ${twoWaysOn}`, 'no-answer');
    }
  }
  const said = (c: ResolvedCluster) => {
    const namespace = options.actsIn?.(c);
    return describeCluster(c) + (namespace ? `, in namespace ${namespace}` : '');
  };
  log(said(cluster) + (isLocalCluster(cluster.server) && cluster.via !== 'in-cluster' ? " — kfn's local cluster" : ''));
  if (options.check !== false) {
    try {
      await checkClusterAnswers(cluster, { withinMs: options.checkWithinMs });
    } catch (err) {
      if (!(err instanceof ClusterUnavailable)) throw err;
      if (err.reason !== 'credentials' && options.startLocalInCheckout === 'when-none-or-silent' && !compiled && !named && !isLocalCluster(cluster.server)) {
        cluster = await localCluster(flags, options, log, `That cluster does not answer (${err.message})`);
        log(said(cluster) + " — kfn's local cluster");
      } else {
        throw err.reason === 'no-answer' ? new ClusterUnavailable(`${err.message}. Or ${twoWaysOn}`, err.reason, { cause: err }) : err;
      }
    }
  }
  return { ...cluster, api: new KubeApi(cluster.connection), local: isLocalCluster(cluster.server), started: !!cluster.started };
}

/**
 * The cluster for a command that needs it only now and then (kfn replay), chosen at once:
 * kubectl's rules, else a local cluster that has state on this machine; said in one line, not
 * looked at (its first request fails in one line if it does not answer), nothing started.
 */
export function clusterNow(flags: ClusterSelection, options: Pick<ChooseOptions, 'log' | 'actsIn'> = {}): ChosenCluster {
  let cluster: ResolvedCluster;
  try {
    cluster = connectCluster(flags);
  } catch (err) {
    if (!(err instanceof NoClusterConfigured)) throw err;
    if (flags.context || !readState(clusterPaths())) throw new ClusterUnavailable(`no cluster to use: ${err.message}; kfn's local cluster is not running. To go on, ${twoWaysOn}`, 'no-answer');
    cluster = connectCluster({ kubeconfig: clusterPaths().kubeconfig, namespace: flags.namespace });
  }
  const namespace = options.actsIn?.(cluster);
  (options.log ?? ((line: string) => console.error(line)))(describeCluster(cluster) + (namespace ? `, in namespace ${namespace}` : ''));
  return { ...cluster, api: new KubeApi(cluster.connection), local: isLocalCluster(cluster.server), started: false };
}

/**
 * The chosen context as a kubeconfig file of its own (mode 0600) at `path`, for what runs in
 * another process (a bridge, a function) or reads a file (the tokens' kubeconfigs).
 */
export function writeClusterKubeconfig(cluster: ResolvedCluster, path: string): string {
  writeFileSync(path, cluster.kubeconfig, { mode: 0o600 });
  return path;
}
