// `kfn bridge`: run the watch → CloudEvents bridge.
import { startBridge } from '../bridge/main.ts';
import { startTracing } from '../core/tracing.ts';
import { KubeApi } from '../kube/api.ts';
import { connectCluster } from '../kube/cluster-failures.ts';
import { describeCluster } from '../kube/kubeconfig.ts';
import { undiciTransport } from '../kube/undici.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';

const usage = `Usage: kfn bridge [options]

Watches the kinds named by Reconciler resources (kfn.dev/v1alpha1) and delivers reconcile
CloudEvents to their functions, with per-object serialisation, backoff, resync and no lost
changes across watch gaps. Changes to Reconcilers apply without a restart.

Options:
${clusterFlagsUsage(20)}
  --config F            take Reconcilers from this YAML file instead of the cluster
  --journal F           append one JSON line per delivery and outcome to F (rotates at 10 MiB)
  --metrics-addr A      host:port for /healthz, /readyz and /metrics (default 127.0.0.1:8081; 0 = off)
  --leader-elect        run as one of several replicas: deliver only while holding the Lease
  --shards N            with --leader-elect: split the objects over N shards, one Lease each
                        (<lease-name>-0-of-N … -(N-1)-of-N); each replica delivers the shards
                        it holds. Replicas of another shard count stand by until the one
                        recorded in <lease-name>-layout has gone (a rollout of --shards)
  --shard I             the shard this replica goes for first (default: its pod name's ordinal)
  --warm-standby        with --leader-elect (one Lease): a standby watches and keeps every
                        record from its start, so that on taking the Lease it delivers without
                        listing first; it then costs the leader's memory while it waits
  --lists M             how watches list: stream (default: a streaming list, one watch with
                        sendInitialEvents, where the apiserver serves one, pages where not) or
                        pages (always pages of 500)
  --lease-namespace N   namespace of the Lease (default $POD_NAMESPACE or kfn-system)
  --lease-name N        name of the Lease (default kfn-bridge)
  --shutdown-timeout S  seconds to let in-flight deliveries finish on SIGTERM (default 30)
  --require-identity B  true or false: deliver for a Reconciler only when it names an identity
                        (spec.serviceAccount). Default true for Reconcilers from the cluster,
                        false for a --config file; false is for a cluster of one tenant
  --log-level L         trace, debug, info (default), warn, error
  -h, --help            show this help

Logs are JSON lines on stdout. Until the apiserver answers and lists the Reconcilers, the bridge
tries again every 5 s, logging each attempt with what failed (the server refused the connection
or did not answer within 10 s, naming it; or the Reconciler CRD is not installed, and how to
install it); it keeps running, /healthz answers and /readyz does not until it has listed.`;

const flags = {
  ...clusterFlags,
  config: { type: 'string' },
  journal: { type: 'string' },
  'metrics-addr': { type: 'string' },
  'leader-elect': { type: 'boolean' },
  shards: { type: 'string' },
  shard: { type: 'string' },
  'warm-standby': { type: 'boolean' },
  lists: { type: 'string' },
  'lease-namespace': { type: 'string' },
  'lease-name': { type: 'string' },
  'shutdown-timeout': { type: 'string' },
  'require-identity': { type: 'string' },
  'log-level': { type: 'string' },
} as const;

/**
 * How the user installs the Reconciler CRD from where they run `kfn bridge`: their copy of kfn's
 * manifests (cli/invocation.ts). Loaded only outside a pod: the bridge's image carries the bundled
 * CLI without kfn's files, and there the bridge's own words name the chart instead.
 */
async function crdInstallHere(): Promise<string | undefined> {
  try {
    const { kfnChart, reconcilerCrdInstall } = await import('./invocation.ts');
    return `install it with ${reconcilerCrdInstall()} (or kfn's Helm chart, ${kfnChart()})`;
  } catch {
    return undefined;
  }
}

export const bridgeCommand: Command = {
  name: 'bridge',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values } = parseCommandArgs('bridge', argv, flags);
    const shutdownSeconds = Number(values['shutdown-timeout'] ?? 30);
    const requireIdentity = values['require-identity'];
    const lists = values.lists;
    if (lists !== undefined && lists !== 'stream' && lists !== 'pages') throw new UsageError(`kfn bridge: --lists takes stream or pages, not ${JSON.stringify(lists)}`);
    if (requireIdentity !== undefined && requireIdentity !== 'true' && requireIdentity !== 'false') throw new UsageError(`kfn bridge: --require-identity takes true or false, not ${JSON.stringify(requireIdentity)}`);
    // The bridge judges its connection's failures itself (it retries, never stops): left plain.
    // Its one line goes to standard error; standard output is its JSON log.
    const cluster = connectCluster(values, { transport: undiciTransport, explain: false });
    console.error(`kfn bridge: ${describeCluster(cluster)}`);
    // Spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or …_TRACES_ENDPOINT) says where.
    const tracing = await startTracing('kfn-bridge');
    const running = await startBridge({
      api: new KubeApi(cluster.connection),
      ...(cluster.via === 'in-cluster' ? {} : { installCrd: await crdInstallHere() }),
      configFile: values.config,
      journal: values.journal,
      metricsAddr: values['metrics-addr'],
      leaderElect: values['leader-elect'] ?? false,
      shards: values.shards === undefined ? undefined : Number(values.shards),
      shard: values.shard === undefined ? undefined : Number(values.shard),
      warmStandby: values['warm-standby'] ?? false,
      ...(lists ? { watcher: { lists } } : {}),
      leaseNamespace: values['lease-namespace'],
      leaseName: values['lease-name'],
      shutdownTimeoutMs: Number.isFinite(shutdownSeconds) ? shutdownSeconds * 1000 : 30_000,
      logLevel: values['log-level'],
      ...(requireIdentity !== undefined ? { requireIdentity: requireIdentity === 'true' } : {}),
    });
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void running.stop());
    // A bridge runs until stopped, even with nothing to watch yet.
    const keepAlive = setInterval(() => {}, 1 << 30);
    await running.done;
    clearInterval(keepAlive);
    await tracing?.shutdown();
    // Deliveries still in flight after --shutdown-timeout are abandoned, not waited for: their
    // objects were handed over as held (bridge/holds.ts), and the pod's grace period is bounded.
    process.exit(0);
  },
};
