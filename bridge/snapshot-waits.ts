// Contract 2 around each delivery of one Reconciler (the bookkeeping itself is bridge/snapshot.ts's):
// the observed state a delivery carries, or a wait until the watches have seen its key's last
// writes — woken by the event that shows one, or by a timer at the end of maxSnapshotWaitMs —;
// what an answer says the next delivery must wait for; the fence after a take-over; and the
// sweep of children no watch holds.
import type { DeliveryResult } from './delivery.ts';
import type { Logger } from './log.ts';
import type { BridgeMetrics } from './metrics.ts';
import type { ReconcilerConfig } from './config.ts';
import { maxSnapshotWaitMs, Snapshots, type WatchesOf } from './snapshot.ts';
import type { Watcher } from './watcher.ts';
import type { WatchEvent } from './store.ts';
import type { WorkQueue } from './workqueue.ts';
import type { Clock } from '../core/clock.ts';
import type { ObservedState } from '../core/event.ts';
import type { KindRef } from '../core/objects.ts';
import { collectionPath, type KubeApi, type KubeObject } from '../kube/api.ts';

/** How often contract 2's bookkeeping is swept of children no watch holds (Snapshots.sweep). */
const sweepEveryMs = 60_000;

/** What the waits use of the bridge they run in. */
export interface SnapshotWaitsContext {
  clock: Clock;
  log: Logger;
  metrics?: BridgeMetrics;
}

export class SnapshotWaits {
  /** Contract 2: what deliveries carry of the watches, and the writes they wait for. */
  private readonly snapshots: Snapshots;
  /** When the snapshots' bookkeeping was last swept (at most once every sweepEveryMs, after a delivery). */
  private sweptAt = 0;
  /**
   * Keys held back until the watches have seen their last writes, each with the timer of its
   * longest wait. Woken by the watch event that shows a write (onEvent); should none come (a
   * version reached only through a bookmark, a watch that lags), the timer delivers it at the
   * end of the wait, without the lagging kinds. Only these keys are woken by events.
   */
  private readonly deferred = new Map<string, () => void>();
  private readonly bridge: SnapshotWaitsContext;
  private readonly config: ReconcilerConfig;
  private readonly queue: WorkQueue;
  private readonly watchesOf: WatchesOf;

  constructor(bridge: SnapshotWaitsContext, config: ReconcilerConfig, queue: WorkQueue, watchesOf: WatchesOf) {
    this.bridge = bridge;
    this.config = config;
    this.queue = queue;
    this.watchesOf = watchesOf;
    this.snapshots = new Snapshots(config);
  }

  /** A watch event: the bookkeeping follows it, and a delivery held back until its last writes are seen may go. */
  onEvent(kind: KindRef, event: Exclude<WatchEvent, { type: 'synced' }>): void {
    this.snapshots.onEvent(kind, event);
    // A delivery held back until its last writes are seen: this may be one of them.
    if (this.deferred.size) {
      for (const key of this.snapshots.waitingFor(kind, event.object)) if (this.deferred.has(key)) this.queue.add(key);
    }
  }

  /**
   * Contract 2, after taking objects over from another holder (a leader, a shard): nothing is
   * vouched for until this bridge's watches have reached what the cluster holds now, which is
   * at least what the previous holder's deliveries wrote. One consistent list of the primary
   * kind (one object) tells the cluster's current resourceVersion.
   */
  async fence(api: KubeApi, watch: Watcher): Promise<void> {
    const snapshots = this.snapshots;
    // At once, before any delivery of what was taken over: nothing vouched for until it is known.
    snapshots.fencePending();
    try {
      const list = await api.request<{ metadata?: { resourceVersion?: string } }>('GET', collectionPath(watch.resource, watch.namespace), { query: { limit: 1 } });
      snapshots.fenceAt(list.metadata?.resourceVersion);
    } catch (err) {
      snapshots.fenceAt(undefined);
      throw err;
    }
  }

  /** Takes over what the waits of the Reconciler's previous spec knew that still holds: the waits for its writes. */
  adopt(previous: SnapshotWaits): void {
    this.snapshots.adopt(previous.snapshots);
  }

  /**
   * The observed state for a delivery of `key`, or 'wait' when its watches have not yet seen
   * the writes of its last reconcile (the key is queued again shortly). After
   * maxSnapshotWaitMs the delivery goes without the lagging kinds, which the function reads.
   */
  observedFor(key: string, live: KubeObject): ObservedState | undefined | 'wait' {
    const snapshots = this.snapshots;
    const now = this.bridge.clock.now();
    if (now - this.sweptAt >= sweepEveryMs) {
      // Due with a delivery (an idle bridge is not woken for it), run after it: the sweep walks
      // every child the Reconciler holds, which this delivery need not wait for.
      this.sweptAt = now;
      this.bridge.clock.setTimer(() => {
        const released = snapshots.sweep(this.watchesOf, this.bridge.clock.now());
        if (released.baselines || released.children) this.bridge.log.info({ reconciler: this.config.name, ...released }, 'released the bookkeeping of children no watch holds');
      }, 0);
    }
    const readiness = snapshots.readiness(key, this.watchesOf, now);
    if (readiness.kind === 'wait') {
      if (readiness.first) this.bridge.metrics?.staleSnapshotSkips.inc({ controller: this.config.name });
      this.defer(key, readiness.since);
      return 'wait';
    }
    this.undefer(key);
    if (readiness.kind === 'lagging') {
      this.bridge.metrics?.snapshotLagFallbacks.inc({ controller: this.config.name });
      this.bridge.log.warn({ reconciler: this.config.name, key, kinds: [...readiness.kinds], waitedMs: maxSnapshotWaitMs }, "the bridge's watches have not seen the last reconcile's writes; delivering without their snapshot (the function reads those kinds itself)");
    }
    return snapshots.observed(live, this.watchesOf, readiness.kind === 'lagging' ? readiness.kinds : undefined);
  }

  /**
   * Takes what a done or requeue answer says the next delivery must wait for. The answer was
   * checked against the contract (core/response.ts); should the bookkeeping still refuse it,
   * the delivery counts as failed rather than throwing past the key's hold.
   */
  noteAnswer(key: string, result: DeliveryResult, now: number): DeliveryResult {
    const { outcome } = result;
    // A failure that reports writes: its retry waits for them (the answer was checked already).
    if (outcome.kind === 'retry' && outcome.written) this.snapshots.noteWrites(key, outcome.written, now);
    if (outcome.kind !== 'done' && outcome.kind !== 'requeue') return result;
    try {
      this.snapshots.noteAnswer(key, outcome.response, now);
      return result;
    } catch (err) {
      const problem = (err as Error).message;
      return { ...result, outcome: { kind: 'retry', why: `invalid answer: ${problem}`, invalidAnswer: problem } };
    }
  }

  /** The key's primary is gone: nothing more to wait for before delivering it (a new object of the name starts afresh). */
  forget(key: string): void {
    this.snapshots.forget(key);
  }

  private defer(key: string, since: number): void {
    if (this.deferred.has(key)) return;
    const cancel = this.bridge.clock.setTimer(() => {
      this.deferred.delete(key);
      this.queue.add(key);
    }, Math.max(0, since + maxSnapshotWaitMs - this.bridge.clock.now()));
    this.deferred.set(key, cancel);
  }

  undefer(key: string): void {
    this.deferred.get(key)?.();
    this.deferred.delete(key);
  }

  /** Every key held back goes back to waiting for its next event or resync (the identity was refused, or the controller stops). */
  undeferAll(): void {
    for (const key of [...this.deferred.keys()]) this.undefer(key);
  }
}
