// The bridge process: configuration from Reconciler resources (or a file), leader election,
// /healthz /readyz /metrics, JSON logs, and a bounded graceful shutdown.
import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import pino from 'pino';
import { Bridge, type Logger } from './bridge.ts';
import { InvalidReconcilerError, loadReconcilerFile, parseReconciler, type ReconcilerConfig } from './config.ts';
import { reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { loadConnection } from '../kube/connection.ts';
import { Journal } from '../core/journal.ts';
import { KubeApi, type KubeObject } from '../kube/api.ts';
import { LeaderElector } from './leader.ts';
import { preferredShard, shardOf, ShardSet } from './shards.ts';
import { BridgeMetrics } from './metrics.ts';
import { Watcher, type WatcherOptions } from './watcher.ts';
import { sameCondition, settleCondition, type Condition } from '../core/conditions.ts';

/**
 * The V8 flags the bridge is meant to run with: its Deployment's command line passes them to
 * node (NODE_OPTIONS refuses --no-opt and --no-maglev) and the benchmarks measure with them.
 * What the bridge keeps is small (under 1 KiB per watched object); left alone, V8 lets the heap
 * grow to a share of the machine's memory before collecting, and its optimizing compilers
 * (Maglev, TurboFan) leave tens of MiB of compiler memory with the allocator. A small young
 * generation, a modest old-space ceiling, and the interpreter with the baseline compiler only:
 * 93 MiB resident at 10,000 watched objects instead of 120, for about 1.4× the CPU per
 * delivery: on 2 busy cores the write → delivery p99 at the highest rate was 1.1–1.2× a bare
 * watch's in runs of its own and 2.5× in the full benchmark run (docs/performance.md). At 100,000
 * watched objects the live heap is 72 MiB, inside the ceiling. A bridge facing thousands of
 * changes a second can drop the last three flags: more memory, less CPU.
 */
export const bridgeNodeOptions = '--max-semi-space-size=1 --max-old-space-size=160 --no-opt --no-maglev --optimize-for-size';

/** How often Reconcilers that could not start (their kind not served yet) are tried again. */
const retrySeconds = 5;

export interface BridgeProcessOptions {
  kubeconfig?: string;
  /** Reconcilers from this YAML file instead of the cluster's Reconciler resources. */
  configFile?: string;
  journal?: string;
  /** host:port for /healthz, /readyz and /metrics (default 127.0.0.1:8081; "0" disables). */
  metricsAddr?: string;
  leaderElect?: boolean;
  /** With leaderElect: split the objects over this many shards, each a Lease (`<leaseName>-<i>`). */
  shards?: number;
  /** The shard this replica goes for first (default: its pod name's ordinal). */
  shard?: number;
  leaseNamespace?: string;
  leaseName?: string;
  identity?: string;
  shutdownTimeoutMs?: number;
  logLevel?: string;
  /** For tests: watch tuning. */
  watcher?: Partial<WatcherOptions>;
}

export interface RunningBridge {
  bridge: Bridge;
  metrics: BridgeMetrics;
  server?: Server;
  address?: string;
  stop(): Promise<void>;
  /** Resolves when the bridge has stopped (after stop(), a signal or a lost lease). */
  done: Promise<void>;
}

function parseAddr(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  const host = i > 0 ? addr.slice(0, i) : '127.0.0.1';
  const port = Number(i >= 0 ? addr.slice(i + 1) : addr);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--metrics-addr must be host:port, not "${addr}"`);
  return { host, port };
}

/** Writes a Reconciler's Ready condition (only when it changed: no write on every resync). */
const runningMessage = (config: ReconcilerConfig) => `delivering ${config.for.kind} events to ${config.sink.uri ?? `${config.sink.ref?.kind} ${config.sink.ref?.namespace ? `${config.sink.ref.namespace}/` : ''}${config.sink.ref?.name}`}`;

async function writeReconcilerStatus(api: KubeApi, obj: KubeObject, ready: boolean, reason: string, message: string): Promise<void> {
  const conditions = (obj.status as { conditions?: Condition[] } | undefined)?.conditions;
  const generation = obj.metadata.generation;
  const condition = settleCondition(conditions, { type: 'Ready', status: ready ? 'True' : 'False', reason, message }, generation, new Date());
  if (sameCondition(conditions?.find((c) => c.type === 'Ready'), condition)) return;
  await api.request('PATCH', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${obj.metadata.name}/status`, {
    body: { status: { observedGeneration: generation, conditions: [condition] } },
    contentType: 'application/merge-patch+json',
  });
}

export async function startBridge(options: BridgeProcessOptions): Promise<RunningBridge> {
  const log = pino({ level: options.logLevel ?? 'info', base: { component: 'kfn-bridge' } });
  const logger: Logger = {
    info: (o, m) => log.info(o, m),
    warn: (o, m) => log.warn(o, m),
    error: (o, m) => log.error(o, m),
  };
  const api = new KubeApi(loadConnection(options.kubeconfig));
  const metrics = new BridgeMetrics();
  const journal = options.journal ? new Journal(options.journal) : undefined;
  const identity = options.identity ?? `${hostname()}-${process.pid}`;
  // What keeps each Reconciler from working (its sink, a watch), shown as its Ready condition
  // until it works again.
  const problems = new Map<string, Map<string, string>>();
  const problemOf = (name: string): { reason: string; message: string } | undefined => {
    const current = problems.get(name);
    if (!current?.size) return undefined;
    const [source, message] = [...current.entries()][0]!;
    return { reason: source === 'sink' ? 'SinkNotReady' : 'WatchFailed', message: current.size > 1 ? [...current.values()].join('; ') : message };
  };
  const shards = options.shards ?? 1;
  if (!Number.isInteger(shards) || shards < 1) throw new Error(`--shards must be a whole number of 1 or more, not ${options.shards}`);
  if (shards > 1 && !options.leaderElect) throw new Error('--shards needs --leader-elect: each shard is a Lease that one replica holds');
  let shardSet: ShardSet | undefined;
  const bridge = new Bridge({
    api,
    log: logger,
    owns: shards > 1 ? (key) => shardSet?.owns(key) ?? false : undefined,
    journal,
    metrics,
    watcher: options.watcher,
    onProblem: (name, source, problem) => {
      let current = problems.get(name);
      if (!current) problems.set(name, (current = new Map()));
      if (problem) current.set(source, problem);
      else current.delete(source);
      if (problem) logger.warn({ reconciler: name, source, problem }, source === 'sink' ? 'the sink cannot take deliveries' : 'a watch cannot work');
      const obj = configWatcher?.store.get(name);
      if (!obj) return;
      const config = (() => {
        try {
          return parseReconciler(obj);
        } catch {
          return undefined;
        }
      })();
      const now = problemOf(name);
      void (now ? writeReconcilerStatus(api, obj, false, now.reason, now.message) : config ? writeReconcilerStatus(api, obj, true, 'Running', runningMessage(config)) : Promise.resolve()).catch((e) =>
        logger.warn({ error: String(e) }, 'could not write Reconciler status'),
      );
    },
  });

  // Where Reconcilers come from: a fixed file, or the cluster (changes apply without restart).
  let fileConfigs: ReconcilerConfig[] | undefined;
  if (options.configFile) fileConfigs = loadReconcilerFile(options.configFile);
  let configWatcher: Watcher | undefined;
  let configLoaded = false;

  let stopping = false;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  let elector: LeaderElector | undefined;
  const leaseName = options.leaseName ?? 'kfn-bridge';

  async function applyClusterConfig(): Promise<void> {
    if (!configWatcher || stopping) return;
    const objects = [...configWatcher.store.values()];
    const valid: { config: ReconcilerConfig; obj: KubeObject }[] = [];
    for (const obj of objects) {
      try {
        valid.push({ config: parseReconciler(obj), obj });
      } catch (err) {
        const message = err instanceof InvalidReconcilerError ? err.problems.join('; ') : (err as Error).message;
        logger.warn({ reconciler: obj.metadata.name, problems: message }, 'invalid Reconciler ignored');
        await writeReconcilerStatus(api, obj, false, 'InvalidSpec', message).catch((e) => logger.warn({ error: String(e) }, 'could not write Reconciler status'));
      }
    }
    const failed = await bridge.setReconcilers(valid.map((v) => v.config));
    for (const { config, obj } of valid) {
      const error = failed.get(config.name);
      const problem = problemOf(config.name);
      const write = error
        ? writeReconcilerStatus(api, obj, false, 'WatchFailed', error.message)
        : problem
          ? writeReconcilerStatus(api, obj, false, problem.reason, problem.message)
          : writeReconcilerStatus(api, obj, true, 'Running', runningMessage(config));
      await write.catch((e) => logger.warn({ error: String(e) }, 'could not write Reconciler status'));
      if (error) logger.error({ reconciler: config.name, error: error.message }, `reconciler could not start; retrying in ${retrySeconds} s`);
    }
    configLoaded = true;
  }

  let configTimer: NodeJS.Timeout | undefined;
  let applying = Promise.resolve();
  const scheduleConfig = (delayMs = 200) => {
    clearTimeout(configTimer);
    configTimer = setTimeout(() => {
      applying = applying.then(applyClusterConfig).catch((err) => logger.error({ error: String(err) }, 'applying Reconcilers failed'));
    }, delayMs);
    configTimer.unref();
  };

  async function lead(): Promise<void> {
    metrics.leader.set({ name: leaseName }, 1);
    if (fileConfigs) {
      const configs = fileConfigs;
      // Reconcilers whose kinds are not served yet (a CRD being installed) are retried, as
      // they are in cluster mode; the ones that started are left as they are.
      const apply = async () => {
        if (stopping) return;
        const failed = await bridge.setReconcilers(configs);
        for (const [name, err] of failed) logger.error({ reconciler: name, error: err.message }, `reconciler could not start; retrying in ${retrySeconds} s`);
        if (failed.size) setTimeout(() => void apply().catch((err) => logger.error({ error: String(err) }, 'applying Reconcilers failed')), retrySeconds * 1000).unref();
      };
      await apply();
      configLoaded = true;
      return;
    }
    const resource = await api.resource(reconcilerApiVersion, reconcilerKind).catch((err) => {
      throw new Error(`${(err as Error).message}. Install it with: kubectl apply -f manifests/crds/ (or run with --config <file>)`);
    });
    configWatcher = new Watcher(api, resource, { projection: 'full', log: (level, msg, fields) => logger[level](fields ?? {}, msg), ...options.watcher });
    configWatcher.subscribe((event) => {
      // Status writes (ours) change no generation: only spec/metadata changes re-apply.
      if (event.type === 'apply' && event.old && event.old.metadata.generation === event.object.metadata.generation) return;
      scheduleConfig();
    });
    configWatcher.start();
    await configWatcher.waitForSync();
    scheduleConfig(0);
    // Reconcilers whose kinds are not served yet (CRD installed later) are retried.
    const retry = setInterval(() => scheduleConfig(0), retrySeconds * 1000);
    retry.unref();
    void done.then(() => clearInterval(retry));
  }

  // Health, readiness and metrics.
  let server: Server | undefined;
  let address: string | undefined;
  if (options.metricsAddr !== '0') {
    const { host, port } = parseAddr(options.metricsAddr ?? '127.0.0.1:8081');
    server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/healthz') return void res.writeHead(200).end('ok');
      if (path === '/readyz') {
        // A standby is ready to take over; a leader is ready once its initial lists are in.
        const ready = !stopping && (!elector || elector.isLeader ? configLoaded && bridge.ready : true);
        return void res.writeHead(ready ? 200 : 503).end(ready ? 'ok' : 'initial lists not complete');
      }
      if (path === '/metrics') {
        metrics.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
          (err) => res.writeHead(500).end(String(err)),
        );
        return;
      }
      res.writeHead(404).end('not found: try /healthz, /readyz or /metrics');
    });
    await new Promise<void>((resolve, reject) => {
      server!.once('error', (err) => reject(new Error(`cannot listen on ${host}:${port} for /metrics: ${err.message}`)));
      server!.listen(port, host, resolve);
    });
    const a = server.address();
    address = typeof a === 'object' && a ? `${a.address}:${a.port}` : undefined;
  }

  async function stop(): Promise<void> {
    if (stopping) return done;
    stopping = true;
    logger.info({ timeoutMs: options.shutdownTimeoutMs ?? 30_000 }, 'shutting down: finishing in-flight deliveries');
    clearTimeout(configTimer);
    await configWatcher?.stop();
    await bridge.stop(options.shutdownTimeoutMs ?? 30_000);
    await elector?.stop(true);
    await shardSet?.stop();
    await journal?.flush();
    metrics.leader.set({ name: leaseName }, 0);
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server?.closeAllConnections();
    logger.info({}, 'stopped');
    resolveDone();
  }

  const leaseNamespace = options.leaseNamespace ?? process.env.POD_NAMESPACE ?? 'kfn-system';
  if (shards > 1) {
    // Every replica watches everything at once (a warm standby); it delivers the keys of the
    // shards whose Leases it holds.
    shardSet = new ShardSet({
      api,
      namespace: leaseNamespace,
      leaseName,
      identity,
      shards,
      preferred: preferredShard(shards, options.shard, process.env.POD_NAME ?? hostname()),
      log: (msg, fields) => logger.info(fields ?? {}, msg),
      onGained: (shard) => {
        metrics.leader.set({ name: shardSet!.leaseName(shard) }, 1);
        const queued = bridge.redeliver((key) => shardOf(key, shards) === shard);
        logger.info({ shard, shards: shardSet!.shards, queued }, 'delivering a shard');
      },
      onLost: (shard, why) => {
        // Another replica may take the shard now: stop at once, without finishing work.
        logger.error({ shard, why }, 'lost a shard; exiting');
        process.exit(1);
      },
    });
    logger.info({ identity, shards, lease: `${leaseName}-<shard>` }, 'sharded: watching everything, delivering the shards held');
    await lead();
    shardSet.start();
  } else if (options.leaderElect) {
    elector = new LeaderElector({
      api,
      namespace: leaseNamespace,
      name: leaseName,
      identity,
      log: (msg, fields) => logger.info(fields ?? {}, msg),
    });
    metrics.leader.set({ name: leaseName }, 0);
    logger.info({ identity, lease: leaseName }, 'waiting for leadership');
    void elector
      .run(lead, (why) => {
        // Another replica may be delivering already: stop at once, without finishing work.
        logger.error({ why }, 'lost leadership; exiting');
        metrics.leader.set({ name: leaseName }, 0);
        process.exit(1);
      })
      .catch((err) => {
        logger.error({ error: String(err) }, 'bridge failed');
        void stop();
      });
  } else {
    await lead();
  }
  return { bridge, metrics, server, address, stop, done };
}
