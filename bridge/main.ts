// The bridge process: its Reconcilers (from the cluster, a file or kfn dev), leadership (none,
// a Lease, or a Lease per shard: bridge/lead.ts), /healthz /readyz /metrics, JSON logs, a
// bounded graceful stop.
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import { hostname } from 'node:os';
import type { Server } from 'node:http';
import pino from 'pino';
import { Bridge } from './bridge.ts';
import type { Logger } from './log.ts';
import { loadReconcilerFile, type ReconcilerConfig } from './config.ts';
import { loadConnection } from '../kube/kubeconfig.ts';
import { undiciTransport } from '../kube/undici.ts';
import { Journal } from '../core/journal.ts';
import { KubeApi } from '../kube/api.ts';
import { lead, type Leadership } from './lead.ts';
import { BridgeMetrics } from './metrics.ts';
import type { WatcherOptions } from './watcher.ts';
import { startHealthServer } from './health.ts';
import { ClusterReconcilers, FixedReconcilers, type ReconcilerSource } from './reconcilers.ts';
import { KeptShards, preferredShard } from './shards.ts';

/** The bridge's old-space ceiling, in percent of its container's memory limit (of the host's without one). */
export const bridgeHeapPercent = 70;

/**
 * The V8 flags the bridge is meant to run with: its Deployment's command line passes them to
 * node (NODE_OPTIONS refuses --no-opt and --no-maglev) and the benchmarks measure with them.
 * What the bridge keeps is small (under 1 KiB per watched object); left alone, V8 lets the heap
 * grow to a share of the machine's memory before collecting, and its optimizing compilers
 * (Maglev, TurboFan) leave tens of MiB of compiler memory with the allocator. A small young
 * generation, an old-space ceiling of 70% of the container's memory limit (Node reads the
 * cgroup's; a fixed ceiling crash-looped a bridge whose Reconcilers needed more than it, whatever
 * the limit: the rest of the limit is code, stacks and buffers, about 60 MiB), and the
 * interpreter with the baseline compiler only:
 * 93 MiB resident at 10,000 watched objects instead of 120, for about 1.4× the CPU per
 * delivery: on 2 busy cores the write → delivery p99 at the highest rate was 1.1–1.2× a bare
 * watch's in runs of its own and 2.5× in the full benchmark run (docs/performance.md). At 100,000
 * watched objects the live heap is 72 MiB. A bridge facing thousands of
 * changes a second can drop the last three flags: more memory, less CPU.
 */
export const bridgeNodeOptions = `--max-semi-space-size=1 --max-old-space-size-percentage=${bridgeHeapPercent} --no-opt --no-maglev --optimize-for-size`;

/**
 * The same flags for a bridge outside a container (a benchmark's process), with the ceiling a
 * container limited to `limitMiB` would get: a host's memory is not what the Deployment has.
 */
export function bridgeNodeOptionsAt(limitMiB: number): string {
  return bridgeNodeOptions.replace(/--max-old-space-size-percentage=\d+/, `--max-old-space-size=${Math.floor((limitMiB * bridgeHeapPercent) / 100)}`);
}

export interface BridgeProcessOptions {
  kubeconfig?: string;
  /** The API client to use instead of one from the kubeconfig (kfn dev, with its admin's). */
  api?: KubeApi;
  /** Reconcilers from this YAML file instead of the cluster's Reconciler resources. */
  configFile?: string;
  /** How often the configFile is checked for a change no file-system notification told of (default 60 s). */
  configCheckMs?: number;
  /** These Reconcilers instead of the cluster's (kfn dev); `RunningBridge.setReconcilers` replaces them. */
  reconcilers?: ReconcilerConfig[];
  journal?: string;
  /** host:port for /healthz, /readyz and /metrics (default 127.0.0.1:8081; "0" disables). */
  metricsAddr?: string;
  leaderElect?: boolean;
  /** With leaderElect: split the objects over this many shards, each a Lease (`<leaseName>-<i>-of-<shards>`). */
  shards?: number;
  /** The shard this replica goes for first (default: its pod name's ordinal). */
  shard?: number;
  /**
   * With leaderElect and one Lease: a standby starts its watches at once and keeps every record,
   * delivering nothing, so that on taking the Lease it delivers from synced watches (as
   * controller-runtime's warm replicas do) instead of listing first. It costs the leader's
   * memory and watch traffic while it waits. Default: a standby watches nothing until it leads.
   * (Sharded replicas watch from their start already.)
   */
  warmStandby?: boolean;
  leaseNamespace?: string;
  leaseName?: string;
  identity?: string;
  /** CloudEvent `source` (default kfn://<host>/bridge). */
  source?: string;
  shutdownTimeoutMs?: number;
  logLevel?: string;
  /** Where the bridge logs (default: JSON lines on stdout at logLevel). */
  logger?: Logger;
  /** Also told of each Reconciler's problems (its sink, a watch), and of their end. */
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** Watch tuning: how the watches list (`--lists`), and for tests the rest. */
  watcher?: Partial<WatcherOptions>;
  /**
   * How the user installs the Reconciler CRD where this bridge runs (`install it with kubectl apply
   * -f …` of their copy of kfn), said when the cluster does not serve it; the CLI spells it
   * (cli/invocation.ts).
   */
  installCrd?: string;
  /**
   * Whether a Reconciler must name an identity to be delivered for (default: yes for Reconcilers
   * from the cluster, which anyone allowed to create one may write; no for a --config file or
   * given Reconcilers, which whoever runs the bridge wrote). `--require-identity=false` is for a
   * cluster of one tenant.
   */
  requireIdentity?: boolean;
  /** How often each Reconciler's rights are reviewed again (default 30 s). */
  identityRecheckMs?: number;
}

export interface RunningBridge {
  bridge: Bridge;
  metrics: BridgeMetrics;
  server?: Server;
  /** host:port of /healthz, /readyz and /metrics. */
  address?: string;
  /** With `reconcilers`: replaces them; answers which could not start (they are retried). */
  setReconcilers(configs: ReconcilerConfig[]): Promise<Map<string, Error>>;
  stop(): Promise<void>;
  /** Resolves when the bridge has stopped (after stop(), a signal or a lost lease). */
  done: Promise<void>;
}

function pinoLogger(level: string): Logger {
  const log = pino({ level, base: { component: 'kfn-bridge' } });
  return { info: (o, m) => log.info(o, m), warn: (o, m) => log.warn(o, m), error: (o, m) => log.error(o, m) };
}

/**
 * The bridge process, assembled once for every use (`kfn bridge`, the tests, `kfn dev`): the
 * Bridge, where its Reconcilers come from, leadership (none, one Lease, or a Lease per shard),
 * the health server, and a bounded graceful stop.
 */
export async function startBridge(options: BridgeProcessOptions): Promise<RunningBridge> {
  // 1. Its log, API client, metrics and journal.
  const logger = options.logger ?? pinoLogger(options.logLevel ?? 'info');
  const api = options.api ?? new KubeApi(loadConnection(options.kubeconfig, undiciTransport));
  const metrics = new BridgeMetrics();
  const journal = openJournal(options, logger, metrics);
  // 2. How many shards deliver, checked before anything watches.
  const shards = shardCount(options);
  // With shards, the records kept: the shards this replica holds and the one it goes for first
  // (--shard, or its pod name's ordinal). Leadership adds the shards it takes over.
  const kept = shards > 1 ? new KeptShards(shards, preferredShard(shards, options.shard, process.env.POD_NAME ?? hostname())) : undefined;
  // 3. The Bridge, and its Reconcilers: given (kfn dev), from a --config file, or the cluster's.
  //    The Bridge asks about the parts made after it (which keys are this replica's to deliver,
  //    whom to tell of a problem) through `later`.
  const later: Later = { stopping: false };
  // Standing by: a warm standby until it leads (and before leadership is known); a cold one
  // watches nothing meanwhile, so the question does not arise before then.
  const standingBy = () => later.leadership?.standby ?? !!options.warmStandby;
  const fixed = options.reconcilers ?? (options.configFile ? loadReconcilerFile(options.configFile) : undefined);
  const bridge = newBridge(options, { api, logger, metrics, journal, shards, kept, requireIdentity: options.requireIdentity ?? !fixed, standingBy }, later);
  const fixedSource = fixed ? new FixedReconcilers(bridge, fixed, logger) : undefined;
  // A standby writes no Reconciler's status: its view (no deliveries, so no sink problem) is not the leader's.
  const reconcilers: ReconcilerSource = (later.reconcilers = fixedSource ?? new ClusterReconcilers(bridge, api, logger, { watcher: options.watcher, installCrd: options.installCrd, writesStatus: () => !standingBy() }));
  // A --config file is read again when it changes (a mounted ConfigMap the kubelet updates, an
  // edit by hand): its Reconcilers change as the cluster's do, without a restart.
  const configWatch = options.configFile && fixedSource ? watchConfigFile(options.configFile, options.configCheckMs ?? 60_000, logger, (configs) => fixedSource.set(configs)) : undefined;
  // 4. /healthz, /readyz and /metrics: ready while standing by for the Lease, or once the
  //    Reconcilers are loaded and their watches synced (a warm standby: once its are).
  const health =
    options.metricsAddr === '0'
      ? undefined
      : await startHealthServer(options.metricsAddr ?? '127.0.0.1:8081', metrics, () => !later.stopping && (later.leadership?.standby && !options.warmStandby ? true : reconcilers.loaded && bridge.ready));
  // 5. The stop, in order: no new Reconcilers, the deliveries in flight finished (within the
  //    timeout), the Leases released, the journal flushed, the health server closed.
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  async function stop(): Promise<void> {
    if (later.stopping) return done;
    later.stopping = true;
    logger.info({ timeoutMs: options.shutdownTimeoutMs ?? 30_000 }, 'shutting down: finishing in-flight deliveries');
    configWatch?.stop();
    await reconcilers.stop();
    await bridge.stop(options.shutdownTimeoutMs ?? 30_000);
    await later.leadership?.stop();
    metrics.leader.set({ name: options.leaseName ?? 'kfn-bridge' }, 0);
    await journal?.flush();
    await health?.close();
    logger.info({}, 'stopped');
    resolveDone();
  }
  // 6. Leadership (bridge/lead.ts): the Reconcilers start delivering when this replica may.
  later.leadership = await lead({ ...options, shards, kept }, { api, logger, metrics, bridge, stop, nowDelivering: () => reconcilers.nowDelivering?.() }, () => reconcilers.start());
  return {
    bridge,
    metrics,
    server: health?.server,
    address: health?.address,
    setReconcilers: (configs) => {
      if (!fixedSource) throw new Error('setReconcilers: this bridge takes its Reconcilers from the cluster');
      return fixedSource.set(configs);
    },
    stop,
    done,
  };
}

/** The parts of a running bridge made after the Bridge, which it asks about. */
interface Later {
  leadership?: Leadership;
  reconcilers?: ReconcilerSource;
  stopping: boolean;
}

/** A journal that cannot be written is logged and counted; deliveries never wait for it. */
function openJournal(options: BridgeProcessOptions, logger: Logger, metrics: BridgeMetrics): Journal | undefined {
  const journal = options.journal ? new Journal(options.journal, { onProblem: (problem) => logger.warn({ journal: options.journal }, problem) }) : undefined;
  if (journal) metrics.trackJournal(journal);
  return journal;
}

/** The shard count the options ask for, refused when it cannot work. */
function shardCount(options: BridgeProcessOptions): number {
  const shards = options.shards ?? 1;
  if (!Number.isInteger(shards) || shards < 1) throw new Error(`--shards must be a whole number of 1 or more, not ${options.shards}`);
  if (shards > 1 && !options.leaderElect) throw new Error('--shards needs --leader-elect: each shard is a Lease that one replica holds');
  if (options.warmStandby && (!options.leaderElect || shards > 1)) throw new Error('--warm-standby is for --leader-elect with one Lease: without election nothing stands by, and sharded replicas watch from their start already');
  return shards;
}

/** The Bridge, delivering only the keys of the shards this replica holds when there are shards. */
function newBridge(
  options: BridgeProcessOptions,
  parts: { api: KubeApi; logger: Logger; metrics: BridgeMetrics; journal: Journal | undefined; shards: number; kept: KeptShards | undefined; requireIdentity: boolean; standingBy: () => boolean },
  later: Later,
): Bridge {
  const { logger, shards } = parts;
  return new Bridge({
    requireIdentity: parts.requireIdentity,
    ...(options.identityRecheckMs !== undefined ? { identityRecheckMs: options.identityRecheckMs } : {}),
    api: parts.api,
    log: logger,
    source: options.source,
    owns: shards > 1 || options.warmStandby ? (key) => later.leadership?.owns(key) ?? false : undefined,
    // A warm standby delivers nothing, and so scales no function to zero: the leader may be using it.
    ...(options.warmStandby ? { delivering: () => !parts.standingBy() } : {}),
    ...(parts.kept ? { keeps: (key: string) => parts.kept!.keeps(key) } : {}),
    journal: parts.journal,
    metrics: parts.metrics,
    watcher: options.watcher,
    onProblem: (name, source, problem) => {
      if (problem && !source.startsWith('identity')) logger.warn({ reconciler: name, source, problem }, source === 'sink' ? 'the sink cannot take deliveries' : 'a watch cannot work');
      later.reconcilers?.onProblem(name, source, problem);
      options.onProblem?.(name, source, problem);
    },
    onConcurrency: (name, concurrency) => later.reconcilers?.onConcurrency(name, concurrency),
  });
}

/** How long a --config file's directory must be quiet after a notification before it is read. */
const configSettleMs = 100;

/**
 * Hands `path`'s Reconcilers to `apply` when its text changes. The file's directory is watched
 * (inotify: an edit by hand, or the kubelet swapping a mounted ConfigMap's `..data` link), so an
 * idle bridge is not woken to look; it is also checked every `everyMs`, for a change no
 * notification told of (a file system without them, a watch that could not be set). A file that
 * cannot be read or parsed is reported and the Reconcilers in use are kept: a half-written or
 * wrong edit never stops deliveries.
 */
function watchConfigFile(path: string, everyMs: number, logger: Logger, apply: (configs: ReconcilerConfig[]) => Promise<unknown>): { stop(): void } {
  const read = () => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  };
  let applied = read();
  let checking = false;
  // A change told while one is being applied is looked at once that is done.
  let again = false;
  const check = (): void => {
    if (checking) {
      again = true;
      return;
    }
    const text = read();
    if (text === undefined || text === applied) return;
    let configs: ReconcilerConfig[];
    try {
      configs = loadReconcilerFile(path);
    } catch (err) {
      applied = text; // reported once per version of the file
      logger.error({ file: path, error: (err as Error).message }, 'the bridge configuration changed but cannot be used: the Reconcilers in use are kept');
      return;
    }
    applied = text;
    checking = true;
    logger.info({ file: path, reconcilers: configs.map((c) => c.name) }, 'the bridge configuration changed: Reconcilers updated');
    apply(configs)
      .catch((err) => logger.error({ file: path, error: String(err) }, 'applying the changed configuration failed'))
      .finally(() => {
        checking = false;
        if (again) {
          again = false;
          check();
        }
      });
  };
  // Notifications come as the file is written: it is read once they have paused, not half-written.
  let settle: NodeJS.Timeout | undefined;
  const changed = () => {
    clearTimeout(settle);
    settle = setTimeout(check, configSettleMs).unref();
  };
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(path), { persistent: false }, changed);
    watcher.on('error', (err) => logger.warn({ file: path, error: String(err) }, `cannot watch the configuration's directory; checking it every ${everyMs / 1000} s`));
  } catch (err) {
    logger.warn({ file: path, error: String(err) }, `cannot watch the configuration's directory; checking it every ${everyMs / 1000} s`);
  }
  const timer = setInterval(check, everyMs);
  timer.unref();
  return {
    stop: () => {
      clearInterval(timer);
      clearTimeout(settle);
      watcher?.close();
    },
  };
}
