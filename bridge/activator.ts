// Scale to zero without a second platform. The bridge is the only caller of a function, so it
// knows first when one is needed and when none has been for a while: for a function that runs as
// a Deployment (or a shared host's), it is the activator Knative would be.
//
//   a key to deliver ─▶ admit(): a pod ready? ──yes──▶ deliver (and scale out by queue depth)
//                               │ no
//                               └─▶ hold the key ─▶ wake(): scale 0 → 1 (the scale subresource),
//                                   poll the Deployment until a pod is ready ─▶ release the held keys
//   answered ─▶ idle for idleSeconds, nothing in flight ─▶ scale to 0
//
// Held keys are not failures: they keep their reason and place (the work queue delivers each key
// once and in order) and are queued again the moment a pod is ready. A start that does not come
// (an image that cannot be pulled, a crash loop) is said on the Reconciler (SinkNotReady, with the
// Deployment's own conditions) while the wake goes on, slower. At rest nothing runs here: no
// timer while at zero, one timer while up (the idle window, re-armed only when it fires), and the
// Deployment is read only while waking — no watch, no poll.
import { connect } from 'node:net';
import type { Clock } from '../core/clock.ts';
import type { ReadCondition } from '../core/conditions.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';
import type { Logger } from './log.ts';

/** Which Deployment a sink runs as, and how the bridge scales it (a Reconciler's spec.sink.scaleToZero, defaults filled in). */
export interface ScaleTarget {
  namespace: string;
  name: string;
  /** Seconds without a delivery before it goes back to zero. */
  idleSeconds: number;
  /** The most replicas it is scaled out to while keys wait. */
  maxReplicas: number;
  /** Keys waiting or in flight per replica before another is added. */
  keysPerReplica: number;
}

/** How often the Deployment is read while a pod starts: often at first (a start takes a second or two), then calmly. */
export function wakePollMs(elapsedMs: number): number {
  return elapsedMs < 10_000 ? 100 : 1000;
}

/** After this long without a ready pod, the start is said to have failed (the wake goes on). */
export const startReportMs = 60_000;

/**
 * A pod ready is not yet a sink that answers: the Service's proxy rules follow the endpoints a
 * moment later, and a delivery refused in that moment would be retried with a growing backoff
 * (seconds, for a window of a second). So held keys wait until a connection to the sink is taken,
 * tried every reachPollMs, for at most reachMaxMs; then they go anyway, to the delivery's retries.
 */
export const reachPollMs = 50;
export const reachMaxMs = 10_000;

interface DeploymentView {
  spec?: { replicas?: number };
  status?: { readyReplicas?: number; replicas?: number; conditions?: ReadCondition[] };
}

export class Activator {
  readonly target: ScaleTarget;
  private readonly api: KubeApi;
  private readonly clock: Clock;
  private readonly log: Logger;
  /** Told of a start that failed (and of its end: undefined), by every Reconciler using it. */
  private readonly reporters = new Set<(problem: string | undefined) => void>();
  /** The replicas it was last scaled to or read at; undefined until first read. */
  private replicas: number | undefined;
  /** Whether a pod was ready when last looked at (undefined: not known, look before delivering). */
  private ready: boolean | undefined;
  private waking: Promise<void> | undefined;
  /** Keys held until a pod is ready, each once, with what queues it again. */
  private readonly held = new Map<string, () => void>();
  private inFlight = 0;
  private lastActive: number;
  private cancelIdle: (() => void) | undefined;
  private scaling = false;
  private stopped = false;
  private problem: string | undefined;
  /** Wakes so far, and scale changes (for tests and the log). */
  readonly stats = { wakes: 0, scaledTo: [] as number[] };

  /** Whether the sink takes a connection now (sinkAccepts); undefined: not asked. */
  private readonly reachable: (() => Promise<boolean>) | undefined;

  /** Whether this bridge delivers anything now: a standby's activator never scales to zero. */
  private readonly delivering: () => boolean;
  /** This bridge stood by when the idle window was last looked at. */
  private stoodBy = false;

  constructor(target: ScaleTarget, api: KubeApi, clock: Clock, log: Logger, reachable?: () => Promise<boolean>, delivering: () => boolean = () => true) {
    this.target = target;
    this.delivering = delivering;
    this.reachable = reachable;
    this.api = api;
    this.clock = clock;
    this.log = log;
    // A function found running when the bridge starts is idle from now on: the window starts here.
    this.lastActive = clock.now();
    this.armIdle();
  }

  private get where(): string {
    return `Deployment ${this.target.namespace}/${this.target.name}`;
  }

  /** Adds a Reconciler's reporter of failed starts; returns its removal. */
  report(fn: (problem: string | undefined) => void): () => void {
    this.reporters.add(fn);
    if (this.problem) fn(this.problem);
    return () => this.reporters.delete(fn);
  }

  /**
   * Whether a delivery of `key` may go now. If no pod is ready, the key is held: `requeue` is
   * called once one is (the caller returns without delivering), once however often the key was
   * held meanwhile. `depth`: the keys waiting and in flight, by which it is scaled out.
   */
  admit(key: string, requeue: () => void, depth: number): boolean {
    this.lastActive = this.clock.now();
    if (this.ready && this.replicas) {
      this.scaleOut(depth);
      return true;
    }
    this.held.set(key, requeue);
    void this.wake();
    return false;
  }

  /** A delivery starts. */
  started(): void {
    this.inFlight++;
    this.lastActive = this.clock.now();
  }

  /**
   * A delivery ended. `unreachable`: the sink could not be reached at all (connection refused,
   * no route): the pod may be gone (scaled down by someone else, evicted), so the Deployment is
   * looked at again before the next delivery.
   */
  finished(unreachable: boolean): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    this.lastActive = this.clock.now();
    if (unreachable) this.ready = undefined;
    this.armIdle();
  }

  /** Scales to `replicas` through the scale subresource. */
  private async scaleTo(replicas: number): Promise<void> {
    await this.api.request('PATCH', `/apis/apps/v1/namespaces/${this.target.namespace}/deployments/${this.target.name}/scale`, {
      body: { spec: { replicas } },
      contentType: 'application/merge-patch+json',
    });
    this.replicas = replicas;
    this.stats.scaledTo.push(replicas);
  }

  /** Reads the Deployment until a pod is ready, scaling it from zero first; then releases the held keys. */
  private wake(): Promise<void> {
    this.waking ??= (async () => {
      this.stats.wakes++;
      const since = this.clock.now();
      try {
        while (!this.stopped) {
          try {
            const d = await this.api.request<DeploymentView>('GET', `/apis/apps/v1/namespaces/${this.target.namespace}/deployments/${this.target.name}`);
            this.replicas = d.spec?.replicas ?? 1;
            if (this.replicas < 1) {
              await this.scaleTo(1);
              this.log.info({ deployment: `${this.target.namespace}/${this.target.name}` }, 'scaled from zero: a delivery is waiting');
            }
            if ((d.status?.readyReplicas ?? 0) > 0 && this.replicas > 0) {
              this.ready = true;
              this.setProblem(undefined);
              break;
            }
            if (this.clock.now() - since >= startReportMs) this.setProblem(`scaled ${this.where} from zero for a delivery, but no pod of it has been ready for ${Math.round((this.clock.now() - since) / 1000)} s${conditionsOf(d)}; deliveries wait for it`);
          } catch (err) {
            if (err instanceof ApiError && (err.status === 403 || err.status === 404)) {
              this.setProblem(
                err.status === 404
                  ? `${this.where}, which its spec.sink.scaleToZero names, does not exist; deliveries wait for it`
                  : `the bridge may not scale ${this.where} (grant it get on deployments and get, patch on deployments/scale there: kfn deploy does): ${err.message}`,
              );
            } else if (this.clock.now() - since >= startReportMs) this.setProblem(`cannot read ${this.where}: ${(err as Error).message}`);
          }
          await new Promise<void>((resolve) => this.clock.setTimer(resolve, wakePollMs(this.clock.now() - since)));
        }
      } finally {
        this.waking = undefined;
      }
      if (this.stopped) return;
      const readyMs = this.clock.now() - since;
      await this.untilReachable();
      if (this.stopped) return;
      this.log.info({ deployment: `${this.target.namespace}/${this.target.name}`, ms: this.clock.now() - since, readyMs, held: this.held.size }, 'a pod is ready; delivering what waited');
      const held = [...this.held.values()];
      this.held.clear();
      this.lastActive = this.clock.now();
      this.armIdle();
      for (const requeue of held) requeue();
    })();
    return this.waking;
  }

  /** Waits (up to reachMaxMs) until the sink takes a connection. */
  private async untilReachable(): Promise<void> {
    if (!this.reachable) return;
    const since = this.clock.now();
    while (!this.stopped && this.clock.now() - since < reachMaxMs) {
      if (await this.reachable().catch(() => false)) return;
      await new Promise<void>((resolve) => this.clock.setTimer(resolve, reachPollMs));
    }
    if (!this.stopped) this.log.warn({ deployment: `${this.target.namespace}/${this.target.name}`, ms: reachMaxMs }, 'a pod is ready but its sink took no connection; delivering anyway');
  }

  /** More replicas while more keys wait than those running take, up to maxReplicas. */
  private scaleOut(depth: number): void {
    const wanted = Math.min(this.target.maxReplicas, Math.max(1, Math.ceil(depth / this.target.keysPerReplica)));
    if (this.scaling || !this.replicas || wanted <= this.replicas) return;
    this.scaling = true;
    this.scaleTo(wanted)
      .then(() => this.log.info({ deployment: `${this.target.namespace}/${this.target.name}`, replicas: wanted, waiting: depth }, 'scaled out: keys are waiting'))
      .catch((err: Error) => this.log.warn({ deployment: `${this.target.namespace}/${this.target.name}`, error: err.message }, 'could not scale out'))
      .finally(() => (this.scaling = false));
  }

  /** One timer while up: when it fires, it goes to zero if nothing happened for the idle window, else waits out the rest. */
  private armIdle(): void {
    if (this.cancelIdle || this.stopped || this.replicas === 0) return;
    const idleMs = this.target.idleSeconds * 1000;
    this.cancelIdle = this.clock.setTimer(() => {
      this.cancelIdle = undefined;
      if (this.stopped) return;
      const quietFor = this.clock.now() - this.lastActive;
      // Busy (a delivery in flight, a wake): the window starts again once it ends (finished()
      // moves lastActive); until then, looked at again a window later. A standby is busy: it
      // cannot tell whether the leader uses the function; its window starts when it is first
      // seen delivering.
      const standby = !this.delivering();
      const busy = this.inFlight > 0 || this.waking || this.held.size > 0 || standby || this.stoodBy;
      this.stoodBy = standby;
      if (busy || quietFor < idleMs) {
        this.lastActive = Math.max(this.lastActive, busy ? this.clock.now() : this.lastActive);
        this.armIdle();
        return;
      }
      this.ready = false;
      this.scaleTo(0)
        .then(() => this.log.info({ deployment: `${this.target.namespace}/${this.target.name}`, idleSeconds: this.target.idleSeconds }, 'scaled to zero: idle'))
        .catch((err: Error) => {
          this.ready = undefined;
          this.log.warn({ deployment: `${this.target.namespace}/${this.target.name}`, error: err.message }, 'could not scale to zero; trying again after the idle window');
          this.armIdle();
        });
    }, Math.max(0, this.lastActive + idleMs - this.clock.now()));
  }

  private setProblem(problem: string | undefined): void {
    if (problem === this.problem) return;
    this.problem = problem;
    for (const fn of this.reporters) fn(problem);
  }

  stop(): void {
    this.stopped = true;
    this.cancelIdle?.();
    this.cancelIdle = undefined;
    this.held.clear();
  }
}

function conditionsOf(d: DeploymentView): string {
  const said = (d.status?.conditions ?? []).filter((c) => c.status !== 'True' || c.reason === 'ProgressDeadlineExceeded').map((c) => `${c.type}=${c.status} (${c.reason ?? ''}${c.message ? `: ${c.message}` : ''})`);
  return said.length ? ` (its conditions: ${said.join('; ')})` : '';
}

/** Whether `uri`'s host takes a TCP connection within `timeoutMs` (refused while the Service's proxy rules lag its endpoints). */
export function sinkAccepts(uri: string, timeoutMs = 1000): Promise<boolean> {
  const url = new URL(uri);
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  return new Promise((resolve) => {
    const socket = connect({ host: url.hostname.replace(/^\[|\]$/g, ''), port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}
