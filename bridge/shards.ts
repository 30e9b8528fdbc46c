// Sharding: N bridge replicas split the objects between them. Shard i is a Lease of its own
// (`<lease>-<i>-of-<N>`, taken and renewed as in leader election; bridge/layout.ts keeps two
// layouts from delivering at once); a replica delivers the keys that
// hash to the shards whose Leases it holds, and nothing else. Every replica watches everything
// but keeps records only for the shards it holds and the one it goes for first (KeptShards):
// its memory falls with the number of shards. Taking another shard over is a matter of its Lease
// and one list of each watch, which brings that shard's records in.
//
// Each replica first goes for its own shard (its ordinal: --shard, or the trailing number of a
// StatefulSet pod's name) and, after a delay, for any shard whose Lease nobody renews: a replica
// that dies has its shard taken over by another once the Lease expires (15 s after its last
// renewal, as seen by replicas that watch every Lease from their start). A replica that
// cannot renew a Lease it holds exits at once, as a leader does: no key is delivered by two
// replicas at once. Shards are not handed back when the replica comes back; it waits as a
// standby for the shard it would prefer.
import { LeaderElector, type Takeover } from './leader.ts';
import { layoutLeaseNames } from './layout.ts';
import { systemClock, type Clock } from '../core/clock.ts';
import type { KubeApi } from '../kube/api.ts';

/** The shard of an object key (FNV-1a, 32 bits): stable across processes and versions. */
export function shardOf(key: string, shards: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % shards;
}

/**
 * The shards whose records a sharded replica keeps: those it holds and the one it goes for
 * first (so its first lists keep what it will most likely deliver). A shard taken over beyond
 * them is added; the watches then list again to bring its records in.
 */
export class KeptShards {
  readonly shards: number;
  readonly preferred: number | undefined;
  private readonly kept = new Set<number>();

  constructor(shards: number, preferred: number | undefined) {
    this.shards = shards;
    this.preferred = preferred;
    if (preferred !== undefined) this.kept.add(preferred);
  }

  /** Whether the records of the primary `key` are kept. */
  keeps(key: string): boolean {
    return this.kept.has(shardOf(key, this.shards));
  }

  /** Keeps `shard`'s records too: true when they were not kept before (the watches must list them). */
  add(shard: number): boolean {
    if (this.kept.has(shard)) return false;
    this.kept.add(shard);
    return true;
  }
}

/** The shard a replica goes for first: `--shard`, else its name's ordinal (`kfn-bridge-2` → 2), else none. */
export function preferredShard(shards: number, explicit: number | undefined, podName: string | undefined): number | undefined {
  if (explicit !== undefined) {
    if (!Number.isInteger(explicit) || explicit < 0 || explicit >= shards) throw new Error(`--shard must be a whole number from 0 to ${shards - 1}, not ${explicit}`);
    return explicit;
  }
  const ordinal = podName?.match(/-(\d+)$/)?.[1];
  return ordinal === undefined ? undefined : Number(ordinal) % shards;
}

export interface ShardOptions {
  api: KubeApi;
  namespace: string;
  /** Lease names are `<leaseName>-<shard>-of-<shards>`. */
  leaseName: string;
  identity: string;
  shards: number;
  preferred?: number;
  /** How long a replica waits before going for shards other than its own (default 15 s: the Lease duration). */
  takeoverDelayMs?: number;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** The Leases' timing runs on it (default the system clock). */
  clock?: Clock;
  /** A shard's Lease was taken: deliver its keys from now on (after what the takeover says is held). */
  onGained: (shard: number, takeover: Takeover) => void;
  /** What a shard's Lease hands over on release (LeaderElectionOptions.handOver), in this annotation. */
  handOverAnnotation?: string;
  handOver?: (shard: number) => string;
  /** A held Lease could not be renewed: the caller must stop delivering at once (exit). */
  onLost: (shard: number, why: string) => void;
  /**
   * Asked after a shard's Lease is taken, before its keys are delivered: false when this
   * replica may not deliver after all (another shard layout is recorded: bridge/layout.ts).
   */
  admit?: (shard: number) => Promise<boolean>;
}

export class ShardSet {
  private readonly o: ShardOptions;
  private readonly held = new Set<number>();
  private readonly electors: LeaderElector[] = [];

  constructor(options: ShardOptions) {
    if (!Number.isInteger(options.shards) || options.shards < 1) throw new Error(`--shards must be a whole number of 1 or more, not ${options.shards}`);
    this.o = options;
  }

  /** Whether this replica delivers `key` now. */
  owns(key: string): boolean {
    return this.held.has(shardOf(key, this.o.shards));
  }

  /** The shards held now, in order. */
  get shards(): number[] {
    return [...this.held].sort((a, b) => a - b);
  }

  leaseName(shard: number): string {
    return layoutLeaseNames(this.o.leaseName, this.o.shards)[shard]!;
  }

  /** Starts competing for the shards: its own at once, the others after the takeover delay. */
  start(): void {
    const { preferred, shards, leaseDurationMs, renewDeadlineMs, retryPeriodMs } = this.o;
    const timing = Object.fromEntries(Object.entries({ leaseDurationMs, renewDeadlineMs, retryPeriodMs }).filter(([, v]) => v !== undefined));
    for (let shard = 0; shard < shards; shard++) {
      // Every Lease is watched from the start (so a dead holder's expiry is judged from now);
      // other replicas' shards are claimed only after the takeover delay.
      const delay = preferred === undefined || shard === preferred ? 0 : (this.o.takeoverDelayMs ?? 15_000);
      const { handOver, handOverAnnotation } = this.o;
      const elector = new LeaderElector({
        api: this.o.api,
        namespace: this.o.namespace,
        name: this.leaseName(shard),
        identity: this.o.identity,
        acquireAfter: (this.o.clock ?? systemClock).now() + delay,
        clock: this.o.clock,
        ...timing,
        ...(handOver ? { handOverAnnotation, handOver: () => handOver(shard) } : {}),
      });
      this.electors.push(elector);
      void elector
        .run(
          async (takeover) => {
            if (this.o.admit && !(await this.o.admit(shard))) return this.o.onLost(shard, 'another shard layout is recorded as the one that delivers');
            this.held.add(shard);
            this.o.log?.('took shard', { shard, lease: this.leaseName(shard) });
            this.o.onGained(shard, takeover);
          },
          (why) => {
            this.held.delete(shard);
            this.o.onLost(shard, why);
          },
        )
        .catch((err) => this.o.onLost(shard, (err as Error).message));
    }
  }

  /** Stops renewing; releases the held Leases so other replicas take the shards at once. */
  async stop(): Promise<void> {
    this.held.clear();
    await Promise.all(this.electors.map((e) => e.stop(true)));
  }
}
