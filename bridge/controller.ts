// One Reconciler's controller, in the parts controller-runtime keeps apart: what it hears (its
// watches' events routed to keys, and its resyncs: bridge/intake.ts), why each key wants a
// delivery (bridge/pending.ts), the per-key work queue, its deliveries (bridge/delivery-loop.ts),
// whether its identity may see what it is sent (bridge/access.ts), and contract 2's waits for
// the function's own writes (bridge/snapshot-waits.ts). The Controller assembles them, hands
// each watch event out, and is what the Bridge talks to. The traces and the metrics watch the
// parts from the edges.
//
//   watch event ─▶ onEvent ─▶ Intake ─▶ Observations + WorkQueue ─▶ DeliveryLoop ─▶ Sink
//   ResyncSchedule ──────────────┘            ▲                          │
//                                             └──── carryOut(settle()) ◀─┘
import { AccessReview, type AccessContext } from './access.ts';
import type { Activator } from './activator.ts';
import type { ReconcilerConfig } from './config.ts';
import { DeliveryLoop, type DeliveryContext } from './delivery-loop.ts';
import { Intake, type IntakeContext } from './intake.ts';
import { Observations } from './pending.ts';
import { Sink } from './sink.ts';
import { SnapshotWaits } from './snapshot-waits.ts';
import { DeliveryTraces } from './traces.ts';
import type { Watcher } from './watcher.ts';
import type { WatchEvent } from './store.ts';
import { WorkQueue } from './workqueue.ts';
import type { KindRef } from '../core/objects.ts';
import type { KubeObject } from '../kube/api.ts';

/** What a controller uses of the bridge it runs in. */
export interface ControllerContext extends AccessContext, DeliveryContext, IntakeContext {
  /**
   * The identity's verdict changed: allowed, the Reconciler's watches are started (none runs
   * before: a Reconciler that may not be delivered for costs no more than its record); refused,
   * they are let go.
   */
  accessChanged?: (controller: Controller, allowed: boolean) => Promise<void>;
  /** The activator of the Deployment the sink runs as, when the bridge scales it to zero (bridge/activator.ts). */
  activator?: (config: ReconcilerConfig) => { activator: Activator; release: () => void } | undefined;
}

export class Controller {
  readonly config: ReconcilerConfig;
  readonly queue: WorkQueue;
  private readonly observations: Observations;
  private readonly intake: Intake;
  private readonly access: AccessReview;
  private readonly delivery: DeliveryLoop;
  /** Contract 2: what deliveries carry of the watches, and the writes they wait for. */
  private readonly snapshots: SnapshotWaits | undefined;
  private readonly bridge: ControllerContext;
  /** The activator of the sink's Deployment, when the bridge scales it to zero; released at stop. */
  private readonly activation: { activator: Activator; release: () => void } | undefined;
  private readonly unreport: (() => void) | undefined;

  constructor(bridge: ControllerContext, config: ReconcilerConfig) {
    this.bridge = bridge;
    this.config = config;
    const traces = new DeliveryTraces(config.name);
    const sink = new Sink(config, bridge.api, bridge.log, (problem) => bridge.onProblem?.(config.name, 'sink', problem), { allowPlainHttp: config.sink.allowPlainHttp === true });
    this.activation = bridge.activator?.(config);
    // A start that does not come is the sink's problem, as one that does not answer is.
    this.unreport = this.activation?.activator.report((problem) => bridge.onProblem?.(config.name, 'activator', problem));
    const metrics = bridge.metrics;
    this.queue = new WorkQueue({ clock: bridge.clock, backoff: config.backoff, rateLimit: config.rateLimit, observer: metrics?.queueObserver(config.name) });
    this.observations = new Observations(traces, (key) => this.queue.isDelayed(key));
    this.intake = new Intake(bridge, config, this.queue, this.observations);
    this.snapshots = config.contract === 2 ? new SnapshotWaits(bridge, config, this.queue, this.intake.watches.of) : undefined;
    metrics?.controllerStarted(config.name, bridge.clock.wall() / 1000);
    metrics?.maxConcurrent.set({ controller: config.name }, config.maxConcurrentReconciles);
    this.access = new AccessReview(bridge, config, {
      refused: async () => {
        // Nothing is kept of what it may not see: its watches go, and with them what it tracked.
        this.forgetObjects();
        await this.bridge.accessChanged?.(this, false);
      },
      allowed: async () => this.bridge.accessChanged?.(this, true),
      redeliver: () => this.intake.redeliverAll(),
    });
    this.delivery = new DeliveryLoop(bridge, config, {
      queue: this.queue,
      observations: this.observations,
      watches: this.intake.watches,
      snapshots: this.snapshots,
      access: this.access,
      sink,
      activator: this.activation?.activator,
      traces,
      holder: this,
    });
    this.intake.start();
    this.access.start();
  }

  /** True once the identity may see what it is sent (or none is needed): the watches may run. */
  get allowed(): boolean {
    return this.access.allowed;
  }

  /** RBAC changed: the identity's rights are reviewed now, not at the next period. */
  reviewSoon(): void {
    this.access.reviewSoon();
  }

  /** Lets go of every object it tracked (its identity was refused): its watches are let go next. */
  private forgetObjects(): void {
    this.intake.forget();
    this.snapshots?.undeferAll();
    this.observations.clear();
  }

  /** The Reconciler's primary watches (one per namespace it names, or one for all). */
  get primaryWatches(): Watcher[] {
    return this.intake.watches.primary;
  }

  /** A watch of an owned or watched kind this Reconciler uses. */
  addWatch(kind: KindRef, watcher: Watcher): void {
    this.intake.watches.add(kind, watcher);
  }

  /** A shared watch replaced by one that keeps more of each object. */
  replaceWatch(old: Watcher, replaced: Watcher): void {
    this.intake.watches.replace(old, replaced);
  }

  /**
   * Contract 2, after taking objects over from another holder (a leader, a shard): nothing is
   * vouched for until this bridge's watches have reached what the cluster holds now
   * (SnapshotWaits.fence).
   */
  async fenceSnapshots(): Promise<void> {
    const watch = this.intake.watches.primary[0];
    if (!this.snapshots || !watch) return;
    await this.snapshots.fence(this.bridge.api, watch);
  }

  /** Takes over what the controller of the Reconciler's previous spec knew that still holds: the waits for its writes. */
  inherit(previous: Controller): void {
    if (this.snapshots && previous.snapshots) this.snapshots.adopt(previous.snapshots);
  }

  /** The requeues kept behind newer observations (the bridge's white-box tests read how many). */
  get requeues(): ReadonlyMap<string, unknown> {
    return this.observations.requeues;
  }

  /** Queues `key` again now: a hold on it ended early (the controller this one replaced got its answer). */
  wake(key: string): void {
    this.intake.wake(key);
  }

  /** Queues every primary `which` selects (a shard just taken over), as a resync would. */
  redeliver(which: (key: string) => boolean): number {
    return this.intake.redeliver(which);
  }

  /** Whether this Reconciler needs `obj` (of `kind`) kept when only the primaries `keeps` says are (bridge/routing.ts). */
  needs(kind: KindRef, obj: KubeObject, keeps: (primaryKey: string) => boolean): boolean {
    return this.intake.needs(kind, obj, keeps);
  }

  /** An event of one of its watches: while the identity is not allowed only a primary's deletion is kept; else contract 2 sees it, then the intake routes it. */
  onEvent(kind: KindRef, event: WatchEvent, initial: boolean): void {
    if (event.type === 'synced') return;
    if (!this.allowed) return this.intake.whileNotAllowed(kind, event);
    this.snapshots?.onEvent(kind, event);
    this.intake.onEvent(kind, event, initial);
  }

  async stop(timeoutMs: number): Promise<boolean> {
    this.access.stop();
    this.unreport?.();
    this.activation?.release();
    this.snapshots?.undeferAll();
    this.intake.stop();
    const finished = await this.delivery.stop(timeoutMs);
    this.queue.shutDown();
    // Traces of observations never delivered end here (the next controller observes them afresh).
    this.observations.stop();
    return finished;
  }
}
