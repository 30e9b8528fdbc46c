// Who delivers, and from when: this replica alone (no leader election), the holder of one Lease,
// or the holders of a Lease per shard. A replica that takes keys over holds first what the
// previous holder may have left running (bridge/holds.ts), one shard layout delivers at a time
// (bridge/layout.ts), and losing a Lease exits the process at once: another replica may be
// delivering already.
import { hostname } from 'node:os';
import type { KubeApi } from '../kube/api.ts';
import type { Bridge } from './bridge.ts';
import { heldAnnotation } from './holds.ts';
import { LayoutGate } from './layout.ts';
import { LeaderElector, type Takeover } from './leader.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics } from './metrics.ts';
import { shardOf, ShardSet, type KeptShards } from './shards.ts';

/** Who delivers: this replica alone, the holder of one Lease, or the holders of a Lease per shard. */
export interface Leadership {
  /** True while this replica waits for the Lease: ready to take over, delivering nothing. */
  readonly standby: boolean;
  owns(key: string): boolean;
  stop(): Promise<void>;
}

/** The bridge's options that choose the mode (BridgeProcessOptions has their documentation). */
export interface LeadOptions {
  leaderElect?: boolean;
  /** 1, or more with leaderElect: a Lease per shard. */
  shards: number;
  /**
   * Given exactly when there are shards: the shards whose records the Bridge keeps (its
   * `keeps`), the one this replica goes for first among them; the shards taken over are added.
   */
  kept?: KeptShards;
  leaseNamespace?: string;
  leaseName?: string;
  identity?: string;
  /** One Lease: the standby watches from its start, delivering nothing until it leads. */
  warmStandby?: boolean;
}

/** What leadership acts on: the Bridge's holds and deliveries, the leader metric, and the process's stop. */
export interface LeadingParts {
  api: KubeApi;
  logger: Logger;
  metrics: BridgeMetrics;
  bridge: Bridge;
  stop(): Promise<void>;
  /** Told when a warm standby begins to deliver. */
  nowDelivering?(): void;
}

/**
 * Starts delivering (`start`) when this replica may: at once without leader election; once it
 * holds the Lease with it; with shards, at once, delivering the keys of the shards it holds
 * (every replica watches everything and keeps the records of its shards). No Leadership
 * without election: this replica delivers every key.
 */
export async function lead(options: LeadOptions, parts: LeadingParts, start: () => Promise<void>): Promise<Leadership | undefined> {
  if (options.kept) return leadShards(options.kept, election(options, parts, start));
  if (!options.leaderElect) return leadAlone(options, parts, start);
  return leadOneLease(election(options, parts, start), options.warmStandby ? start : undefined);
}

/** No election: this replica delivers everything, at once. */
async function leadAlone(options: LeadOptions, parts: LeadingParts, start: () => Promise<void>): Promise<undefined> {
  parts.metrics.leader.set({ name: options.leaseName ?? 'kfn-bridge' }, 1);
  await start();
  return undefined;
}

/**
 * One Lease: this replica stands by until it holds the Lease, then delivers every key. A cold
 * standby watches nothing until then, and lists everything on leading. A warm one (`warmStart`:
 * the Reconcilers started at once) watches and keeps every record while it waits, delivering
 * nothing (the Bridge's `owns` answers no) and writing no status; on leading, every key is
 * queued at low priority — what changed while it stood by among them.
 */
async function leadOneLease(e: Election, warmStart?: () => Promise<void>): Promise<Leadership> {
  const { api, logger, metrics, bridge, nowDelivering } = e.parts;
  let delivering = false;
  const elector = new LeaderElector({ api, namespace: e.namespace, name: e.leaseName, identity: e.identity, log: e.log, handOverAnnotation: heldAnnotation, handOver: () => bridge.holds.handOver(() => true) });
  metrics.leader.set({ name: e.leaseName }, 0);
  logger.info({ identity: e.identity, lease: e.leaseName, warm: !!warmStart }, 'waiting for leadership');
  const onLeading = async (takeover: Takeover) => {
    if (!(await e.admit(() => true))) return e.stepDown();
    e.takeOver(takeover, () => true, e.leaseName);
    delivering = true;
    if (warmStart) {
      metrics.leader.set({ name: e.leaseName }, 1);
      const queued = bridge.redeliver(() => true);
      logger.info({ queued }, 'leading: delivering from the records kept while standing by');
      nowDelivering?.();
    } else {
      await e.deliver();
    }
    e.watchLayout();
  };
  const onLost = (why: string) => {
    logger.error({ why }, 'lost leadership; exiting');
    metrics.leader.set({ name: e.leaseName }, 0);
    process.exit(1);
  };
  await warmStart?.();
  void e.gate
    .claim()
    .then(() => elector.run(onLeading, onLost))
    .catch(e.failed);
  return {
    get standby() {
      return warmStart ? !delivering : !elector.isLeader;
    },
    owns: () => delivering,
    stop: () => elector.stop(true),
  };
}

/** A Lease per shard: this replica delivers at once, the keys of the shards it holds, and goes for more. */
async function leadShards(kept: KeptShards, e: Election): Promise<Leadership> {
  const { logger, metrics, bridge } = e.parts;
  const shards = kept.shards;
  const inShard = (shard: number) => (key: string) => shardOf(key, shards) === shard;
  const shardSet: ShardSet = new ShardSet({
    api: e.parts.api,
    namespace: e.namespace,
    leaseName: e.leaseName,
    identity: e.identity,
    shards,
    preferred: kept.preferred,
    log: e.log,
    handOverAnnotation: heldAnnotation,
    handOver: (shard) => bridge.holds.handOver(inShard(shard)),
    onGained: (shard, takeover) => {
      e.takeOver(takeover, inShard(shard), shardSet.leaseName(shard));
      metrics.leader.set({ name: shardSet.leaseName(shard) }, 1);
      // A shard whose records were not kept: each watch lists again, and its objects are queued
      // (low priority) as the lists bring them in; those already kept are queued now.
      const relisted = kept.add(shard);
      if (relisted) bridge.relistWatches();
      const queued = bridge.redeliver(inShard(shard));
      logger.info({ shard, shards: shardSet.shards, queued, relisted }, 'delivering a shard');
    },
    onLost: (shard, why) => {
      logger.error({ shard, why }, 'lost a shard; exiting');
      process.exit(1);
    },
    admit: (shard) => e.admit(inShard(shard)),
  });
  logger.info({ identity: e.identity, shards, lease: shardSet.leaseName(0).replace(/-0-of-/, '-<shard>-of-') }, 'sharded: watching everything, keeping the records of the shards held and delivering them');
  await e.deliver();
  void e.gate
    .claim()
    .then(() => (shardSet.start(), e.watchLayout()))
    .catch(e.failed);
  return { standby: false, owns: (key) => shardSet.owns(key), stop: () => shardSet.stop() };
}

/** What both elected modes share: the Lease's names, the shard layout's gate, taking over and stepping down. */
interface Election {
  parts: LeadingParts;
  namespace: string;
  leaseName: string;
  identity: string;
  log(msg: string, fields?: Record<string, unknown>): void;
  gate: LayoutGate;
  /** Counts this replica a leader and starts its deliveries. */
  deliver(): Promise<void>;
  /** Before delivering keys another replica delivered: holds those it may have left running. */
  takeOver(takeover: Takeover, covers: (key: string) => boolean, lease: string): void;
  /** Whether this replica's shard layout may deliver now, taking over what the layout's record holds for `covers`. */
  admit(covers: (key: string) => boolean): Promise<boolean>;
  /** Another layout is recorded: hands over what is held (stop releases the Leases) and exits. */
  stepDown(): void;
  /** Steps down when another layout is recorded later. */
  watchLayout(): void;
  /** A Lease that cannot be claimed or run stops the bridge. */
  failed(err: unknown): void;
}

function election(options: LeadOptions, parts: LeadingParts, start: () => Promise<void>): Election {
  const { api, logger, metrics, bridge } = parts;
  const leaseName = options.leaseName ?? 'kfn-bridge';
  const namespace = options.leaseNamespace ?? process.env.POD_NAMESPACE ?? 'kfn-system';
  const log = (msg: string, fields?: Record<string, unknown>) => logger.info(fields ?? {}, msg);
  // One shard layout delivers at a time (bridge/layout.ts): this replica's is its shard count.
  const gate = new LayoutGate({ api, namespace, leaseName, shards: options.shards, log, handOverAnnotation: heldAnnotation });
  const takeOver = (takeover: Takeover, covers: (key: string) => boolean, lease: string) => {
    const what = bridge.holds.takeOver(takeover, covers);
    if (takeover.from !== 'nobody') logger.info({ lease, from: takeover.from }, what);
    // The previous holder's last writes may be ahead of this bridge's watches, and its waits are
    // not handed over: nothing is vouched for until the watches have caught up with the cluster.
    if (takeover.from !== 'nobody') void bridge.fenceSnapshots();
  };
  const stepDown = () => {
    logger.error({ lease: gate.recordName }, 'another shard layout is recorded as the one that delivers; stopping');
    void parts.stop().then(() => process.exit(1));
  };
  return {
    parts,
    namespace,
    leaseName,
    identity: options.identity ?? `${hostname()}-${process.pid}`,
    log,
    gate,
    deliver: async () => {
      metrics.leader.set({ name: leaseName }, 1);
      await start();
    },
    takeOver,
    admit: async (covers) => {
      const takeovers = await gate.admit();
      for (const t of takeovers ?? []) takeOver(t, covers, gate.recordName);
      return takeovers !== undefined;
    },
    stepDown,
    watchLayout: () => void gate.watch(stepDown),
    failed: (err) => {
      logger.error({ error: String(err) }, 'bridge failed');
      void parts.stop();
    },
  };
}
