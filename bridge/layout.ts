// One shard layout delivers at a time. A bridge replica's layout is its number of shards: 1 for
// a leader (the Lease `<lease>`), N for sharded replicas (the Leases `<lease>-<i>-of-<N>`).
// Two layouts side by side — a rollout from --shards 2 to --shards 3, a --leader-elect replica
// beside sharded ones — split the same keys differently, so a key could be delivered by a
// replica of each. The Lease `<lease>-layout` records the layout that may deliver:
//
//   claim:  a replica of another layout waits, holding no Lease, until no Lease of any other
//           layout is live and the record has not just changed, then records its own. A record
//           this replica saw change to another layout stands for a Lease duration, the time
//           that layout's replicas have to take their Leases: two layouts waiting for a third
//           to go do not take turns writing it (one does, the other stands by). A Lease is
//           live while it is held and its record has changed within its duration as this
//           replica saw it, on this replica's own clock (as client-go's election judges its
//           Lease): the renewTime another
//           machine wrote is never compared with this one's wall clock, so skew between them
//           neither ends a live Lease nor keeps a dead one. A Lease seen and then found gone
//           (deleted by hand, by an undeploy) changed when it was found gone: its holder's last
//           renewal was accepted before the deletion, and the holder stops leading within its
//           renew deadline of that renewal, shorter than the Lease's duration. The price: a
//           Lease left held by a replica that was killed is waited for a duration, and taken
//           over as expired, by every replica that starts while it is there; its age by the
//           wall clock that wrote it cannot be trusted.
//   admit:  after taking one of its Leases, a replica delivers only once the record still names
//           its layout and no other layout's Lease is live (a replica of the old layout that
//           took a Lease in the instant of the change sees the record on its next check, and
//           lets go first).
//   check:  the record must still name the layout (looked at every poll for a Lease duration
//           after admission, every 10 s after that, when only a hand edit can change it); if
//           not, the replica stops.
//
// So a rollout from one layout to another delivers with the old layout until its last replica
// has gone, then with the new one; a replica whose layout is not recorded stands by. Leases
// named `<lease>-<i>` (the layout of earlier versions) count as another layout.
import { defaultLeaseDurationMs, type Takeover } from './leader.ts';
import { systemClock, type Clock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';

export interface LayoutOptions {
  api: KubeApi;
  namespace: string;
  leaseName: string;
  /** This replica's layout: 1 for a leader, N for N shards. */
  shards: number;
  clock?: Clock;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** How often Leases are looked at while waiting (default 2 s, the retry period). */
  pollMs?: number;
  /**
   * How often a replica that delivers looks at the record once it has delivered for a Lease
   * duration (default 10 s; every `pollMs` before). Another layout records itself only when it
   * sees no Lease of this one live: that can still happen in the instant this replica takes its
   * Lease (a claim read before it and written after), not once the Lease has been renewed for a
   * duration, when only a hand edit changes the record.
   */
  checkMs?: number;
  /** The annotation a Lease's hand-over note is in (read from another layout's released Leases). */
  handOverAnnotation?: string;
}

interface Lease {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: { holderIdentity?: string; renewTime?: string; leaseDurationSeconds?: number; leaseTransitions?: number };
}

/** What this replica last saw of another layout's Lease, and when (clock.now()) that last changed. */
interface Seen {
  /** The record as seen: a change of any of these (or the Lease found gone) restarts its duration. */
  holder?: string;
  renewTime?: string;
  transitions?: number;
  resourceVersion?: string;
  /** Gone from the list since `changedAt`; `holder` is who held it when last seen. */
  gone: boolean;
  changedAt: number;
  durationMs: number;
  note?: string;
}

/** The Leases of a layout: `<lease>` for one leader, `<lease>-<i>-of-<N>` for N shards. */
export function layoutLeaseNames(leaseName: string, shards: number): string[] {
  return shards === 1 ? [leaseName] : Array.from({ length: shards }, (_, i) => `${leaseName}-${i}-of-${shards}`);
}

export class LayoutGate {
  private readonly o: LayoutOptions;
  private readonly clock: Clock;
  /** Per Lease of another layout seen since this gate started: what was last seen of it, and when it last changed. */
  private readonly seen = new Map<string, Seen>();
  /** The record as this replica last saw it, and when (clock.now()) it saw it change; -Infinity: unchanged since first seen. */
  private recordSeen?: { version?: string; changedAt: number };

  constructor(options: LayoutOptions) {
    this.o = options;
    this.clock = options.clock ?? systemClock;
  }

  get recordName(): string {
    return `${this.o.leaseName}-layout`;
  }

  private get leases(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.o.namespace}/leases`;
  }

  private sleep(ms: number = this.o.pollMs ?? 2000): Promise<void> {
    return new Promise((resolve) => this.clock.setTimer(resolve, ms));
  }

  /**
   * The layout the record names (undefined: no record yet), with its resourceVersion and how long
   * ago this replica saw it change (Infinity: not since this replica first read it).
   */
  private async record(): Promise<{ shards?: number; lease?: Lease; changedMsAgo: number }> {
    let lease: Lease | undefined;
    try {
      lease = await this.o.api.request<Lease>('GET', `${this.leases}/${this.recordName}`);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    }
    const now = this.clock.now();
    const version = lease?.metadata.resourceVersion;
    if (!this.recordSeen) this.recordSeen = { version, changedAt: -Infinity };
    else if (this.recordSeen.version !== version) this.recordSeen = { version, changedAt: now };
    return { shards: Number(lease?.spec?.holderIdentity?.replace(/^shards=/, '')) || undefined, lease, changedMsAgo: now - this.recordSeen.changedAt };
  }

  /**
   * Looks at every Lease of another layout once: answers the names of those live now. A Lease
   * first seen held counts as live until it has gone a whole duration unchanged; one seen held
   * and then gone, until a whole duration after it was found gone.
   */
  private async othersLive(): Promise<string[]> {
    const own = new Set(layoutLeaseNames(this.o.leaseName, this.o.shards));
    const ours = new RegExp(`^${this.o.leaseName.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(-\\d+(-of-\\d+)?)?$`);
    const list = await this.o.api.request<{ items: Lease[] }>('GET', this.leases);
    // Dated when the answer arrived: a renewal it shows was sent no later than that.
    const now = this.clock.now();
    const listed = new Set<string>();
    for (const lease of list.items) {
      const name = lease.metadata.name;
      if (own.has(name) || !ours.test(name)) continue;
      listed.add(name);
      const spec = lease.spec ?? {};
      const seen: Omit<Seen, 'changedAt'> = {
        holder: spec.holderIdentity || undefined,
        renewTime: spec.renewTime,
        transitions: spec.leaseTransitions,
        resourceVersion: lease.metadata.resourceVersion,
        gone: false,
        durationMs: (spec.leaseDurationSeconds ?? 15) * 1000,
        note: this.o.handOverAnnotation ? lease.metadata.annotations?.[this.o.handOverAnnotation] : undefined,
      };
      const last = this.seen.get(name);
      const changed = !last || last.gone || last.holder !== seen.holder || last.renewTime !== seen.renewTime || last.transitions !== seen.transitions || last.resourceVersion !== seen.resourceVersion;
      this.seen.set(name, { ...seen, changedAt: changed ? now : last.changedAt });
    }
    for (const [name, last] of this.seen) {
      if (!listed.has(name) && !last.gone) this.seen.set(name, { ...last, gone: true, changedAt: now });
    }
    return [...this.seen].filter(([, s]) => s.holder && now - s.changedAt <= s.durationMs).map(([name]) => name);
  }

  /**
   * Waits until the record names this layout, making it so once no Lease of another layout is
   * live. Called before competing for any Lease: a replica waiting here holds none.
   */
  async claim(signal?: AbortSignal): Promise<void> {
    let said = '';
    while (!signal?.aborted) {
      let why: string;
      try {
        const { shards, lease, changedMsAgo } = await this.record();
        if (shards === this.o.shards) return;
        const live = await this.othersLive();
        // Recorded a moment ago by replicas of another layout that may not have taken their Leases yet.
        const justRecorded = shards !== undefined && changedMsAgo <= defaultLeaseDurationMs;
        if (live.length === 0 && !justRecorded) {
          const spec = { holderIdentity: `shards=${this.o.shards}` };
          if (lease) await this.o.api.request('PUT', `${this.leases}/${this.recordName}`, { body: { ...lease, spec: { ...lease.spec, ...spec } } });
          else await this.o.api.request('POST', this.leases, { body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.recordName, namespace: this.o.namespace }, spec } });
          this.o.log?.('shard layout recorded', { lease: this.recordName, shards: this.o.shards, before: shards ?? 'none' });
          return;
        }
        why =
          live.length > 0
            ? `standing by: the layout of ${shards ?? 'an earlier version'} shard(s) still delivers (${live.join(', ')}); this replica has ${this.o.shards}`
            : `standing by: the layout of ${shards} shard(s) was just recorded and its replicas are taking their Leases; this replica has ${this.o.shards}`;
      } catch (err) {
        // Another replica wrote first (409): look again. The apiserver away (a restart): wait for it, as the Lease's own election does.
        why = err instanceof ApiError && err.status === 409 ? '' : `the shard layout cannot be read or recorded yet (${(err as Error).message}); retrying`;
      }
      if (why && why !== said) this.o.log?.(why, { lease: this.recordName });
      said = why;
      await this.sleep();
    }
  }

  /**
   * After taking one of this layout's Leases: waits until no other layout's Lease is live and
   * answers what their holders left (for bridge/holds.ts); undefined when the record names
   * another layout now — the caller lets its Lease go and claims again.
   */
  async admit(signal?: AbortSignal): Promise<Takeover[] | undefined> {
    while (!signal?.aborted) {
      try {
        if ((await this.record()).shards !== this.o.shards) return undefined;
        if ((await this.othersLive()).length === 0) {
          // Every other layout's Lease has been let go (its note says what it held), has expired, or
          // has been gone a whole duration (its holder, last seen, may have left deliveries running).
          return [...this.seen.values()].filter((s) => s.holder || s.note).map((s): Takeover => (s.holder ? { from: 'expired', holder: s.holder } : { from: 'released', note: s.note }));
        }
      } catch (err) {
        this.o.log?.(`the shard layout cannot be read yet (${(err as Error).message}); retrying`, { lease: this.recordName });
      }
      await this.sleep();
    }
    return undefined;
  }

  /** True while the record names this layout. */
  async current(): Promise<boolean> {
    return (await this.record()).shards === this.o.shards;
  }

  /**
   * Checks the record every `checkMs`, one check at a time, until it names another layout
   * (then calls `onReplaced` once) or `signal` aborts. A check the apiserver does not answer
   * decides nothing: the Lease's own renewal does.
   */
  async watch(onReplaced: () => void, signal?: AbortSignal): Promise<void> {
    const from = this.clock.now();
    while (!signal?.aborted) {
      await this.sleep(this.clock.now() - from < defaultLeaseDurationMs ? undefined : (this.o.checkMs ?? 10_000));
      if (signal?.aborted) return;
      if ((await this.current().catch(() => true)) === false) return onReplaced();
    }
  }
}
