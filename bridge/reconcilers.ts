// Where a bridge's Reconcilers come from: a fixed list (a file, or the functions `kfn dev`
// serves), or the cluster's Reconciler objects, whose changes apply without a restart and whose
// Ready condition says whether each one works and, when it does not, why.
import type { Bridge } from './bridge.ts';
import type { Logger } from './log.ts';
import { InvalidReconcilerError, parseReconciler, type ReconcilerConfig } from './config.ts';
import { Watcher, type WatcherOptions } from './watcher.ts';
import { delay } from '../core/clock.ts';
import { sameCondition, settleCondition, type Condition } from '../core/conditions.ts';
import { reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { ApiError, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';
import { explainFailure, type ClusterIdentity } from '../kube/cluster-failures.ts';
import { NoAnswer } from '../kube/connection.ts';

/** How often Reconcilers that could not start (their kind not served yet), or could not be listed, are tried again. */
export const retrySeconds = 5;
/** How long one attempt to find the Reconciler kind may wait for the apiserver's answer (as a command's first look at its cluster). */
export const discoveryTimeoutMs = 10_000;
/** How to install the Reconciler CRD, said when none is given (the bridge's image runs without kfn's files beside it). */
export const defaultCrdInstall = "install kfn's Helm chart, which holds it, or kubectl apply -f lib/manifests/crds/ of the kfn package";
/** The least time between two writes of one Reconciler's status.concurrency. */
export const concurrencyStatusMs = 10_000;

/** What gives the bridge its Reconcilers, once this replica may deliver. */
export interface ReconcilerSource {
  start(): Promise<void>;
  /** True once the first set has been handed to the bridge (the leader's readiness). */
  readonly loaded: boolean;
  /** Told when a Reconciler's sink or a watch stops working (`problem`), and when it works again. */
  onProblem(name: string, source: string, problem: string | undefined): void;
  /** Told when a Reconciler's deliveries in flight at once change (its status says the latest). */
  onConcurrency(name: string, concurrency: number): void;
  /** Told when a warm standby, started already, begins to deliver: its view of each Reconciler is written. */
  nowDelivering?(): void;
  stop(): Promise<void>;
}

function logFailures(log: Logger, failed: Map<string, Error>): void {
  for (const [name, err] of failed) log.error({ reconciler: name, error: err.message }, `reconciler could not start; retrying in ${retrySeconds} s`);
}

/**
 * A fixed list, replaced only by `set`. Reconcilers whose kinds are not served yet (a CRD being
 * installed) are tried again every retrySeconds; the ones that started are left as they are.
 */
export class FixedReconcilers implements ReconcilerSource {
  loaded = false;
  private configs: ReconcilerConfig[];
  private readonly bridge: Bridge;
  private readonly log: Logger;
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;
  private started = false;

  constructor(bridge: Bridge, configs: ReconcilerConfig[], log: Logger) {
    this.bridge = bridge;
    this.configs = configs;
    this.log = log;
  }

  async start(): Promise<void> {
    this.started = true;
    await this.apply();
    this.loaded = true;
  }

  /**
   * Replaces the list (kfn dev after a function's reload, a changed --config file); answers
   * which could not start. A replica that does not deliver yet only keeps it for start().
   */
  async set(configs: ReconcilerConfig[]): Promise<Map<string, Error>> {
    this.configs = configs;
    return this.started ? this.apply() : new Map();
  }

  onProblem(): void {}

  onConcurrency(): void {}

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
  }

  private async apply(): Promise<Map<string, Error>> {
    if (this.stopped) return new Map();
    clearTimeout(this.retry);
    const failed = await this.bridge.setReconcilers(this.configs);
    logFailures(this.log, failed);
    if (failed.size) {
      this.retry = setTimeout(() => void this.apply().catch((err) => this.log.error({ error: String(err) }, 'applying Reconcilers failed')), retrySeconds * 1000);
      this.retry.unref();
    }
    return failed;
  }
}

/**
 * The cluster's Reconciler objects, watched: a change (of spec or metadata: the bridge's own
 * status writes change no generation) is applied 200 ms later, with those around it. Each
 * Reconciler's Ready condition is written when it changes: Running, InvalidSpec, WatchFailed,
 * SinkNotReady, IdentityForbidden (its identity may not see what it would be sent).
 */
export class ClusterReconcilers implements ReconcilerSource {
  loaded = false;
  private readonly bridge: Bridge;
  private readonly api: KubeApi;
  private readonly log: Logger;
  private readonly watcherOptions: Partial<WatcherOptions> | undefined;
  private watcher: Watcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Set only while the last apply left a Reconciler that could not start: at rest, no timer. */
  private cancelRetry: (() => void) | undefined;
  private applying = Promise.resolve();
  private stopped = false;
  /** What keeps each Reconciler from working, by source (`sink`, `watch <kind>`), until it works again. */
  private readonly problems = new Map<string, Map<string, string>>();
  /** Each Reconciler's deliveries in flight at once, not written to its status yet. */
  private readonly concurrency = new Map<string, number>();
  private concurrencyTimer: NodeJS.Timeout | undefined;
  /** Aborted by stop(): ends a wait to ask the apiserver again. */
  private readonly stopping = new AbortController();
  private readonly installCrd: string;
  /** Whether this replica writes the Reconcilers' status now (a standby does not). */
  private readonly writesStatus: () => boolean;

  /**
   * `options.installCrd`: how the user installs the Reconciler CRD where this bridge runs (`install
   * it with kubectl apply -f …` of their copy of kfn), said when the apiserver does not serve it.
   */
  constructor(bridge: Bridge, api: KubeApi, log: Logger, options: { watcher?: Partial<WatcherOptions>; installCrd?: string; writesStatus?: () => boolean } = {}) {
    this.bridge = bridge;
    this.api = api;
    this.log = log;
    this.watcherOptions = options.watcher;
    this.installCrd = options.installCrd ?? defaultCrdInstall;
    this.writesStatus = options.writesStatus ?? (() => true);
  }

  nowDelivering(): void {
    this.schedule(0);
  }

  async start(): Promise<void> {
    const resource = await this.reconcilerResource();
    if (!resource) return; // stopped before the apiserver answered
    this.watcher = new Watcher(this.api, resource, { projection: 'full', log: (level, msg, fields) => this.log[level](fields ?? {}, msg), ...this.watcherOptions });
    this.watcher.subscribe((event) => {
      if (event.type === 'apply' && event.old && event.old.metadata.generation === event.object.metadata.generation) return;
      this.schedule();
    });
    this.watcher.start();
    await this.watcher.waitForSync();
    this.schedule(0);
  }

  /**
   * The Reconciler kind as the apiserver serves it, asked until it answers: a bridge may start
   * before its apiserver answers (a cluster coming up, a network not there yet), and a server
   * process keeps trying where a command would stop. Each attempt that fails is logged with what
   * failed — the connection (refused, no answer within discoveryTimeoutMs), naming the server,
   * or the kind not served: its CRD missing — and the next comes retrySeconds later. Until one
   * succeeds and the Reconcilers are listed, `loaded` stays false, and so /readyz. Undefined
   * when stopped first.
   */
  private async reconcilerResource(): Promise<ResourceInfo | undefined> {
    const clock = this.bridge.clock;
    const cluster: ClusterIdentity = { where: this.api.connection.source, server: this.api.connection.server };
    for (let attempt = 1; !this.stopped; attempt++) {
      const deadline = new AbortController();
      const cancel = clock.setTimer(() => deadline.abort(new NoAnswer('answer', discoveryTimeoutMs, new URL(cluster.server))), discoveryTimeoutMs);
      try {
        return await this.api.withSignal(deadline.signal).resource(reconcilerApiVersion, reconcilerKind);
      } catch (err) {
        if (this.stopped) return undefined;
        const error = deadline.signal.aborted ? explainFailure(deadline.signal.reason, cluster)! : this.whyNotFound(err, cluster);
        this.log.error({ attempt, server: cluster.server, error }, `cannot list Reconcilers; trying again in ${retrySeconds} s`);
      } finally {
        cancel();
      }
      await delay(clock, retrySeconds * 1000, this.stopping.signal);
    }
    return undefined;
  }

  /** What kept the apiserver from naming the Reconciler kind: the CRD missing only when it answered so. */
  private whyNotFound(err: unknown, cluster: ClusterIdentity): string {
    if (err instanceof ApiError && err.status === 404) return `the Reconciler CRD is not installed (${cluster.where}, server ${cluster.server}): ${this.installCrd}, or run the bridge with --config <file>`;
    return explainFailure(err, cluster) ?? `${(err as Error).message} (${cluster.where}, server ${cluster.server})`;
  }

  onProblem(name: string, source: string, problem: string | undefined): void {
    let current = this.problems.get(name);
    if (!current) this.problems.set(name, (current = new Map()));
    if (problem) current.set(source, problem);
    else current.delete(source);
    const obj = this.watcher?.store.get(name);
    if (!obj) return;
    let config: ReconcilerConfig | undefined;
    try {
      config = parseReconciler(obj);
    } catch {
      return; // an invalid spec keeps its InvalidSpec verdict
    }
    void this.writeStatus(obj, config);
  }

  onConcurrency(name: string, concurrency: number): void {
    // The limit moves with every few answers while it learns: the status says the latest, written
    // at most once per concurrencyStatusMs per Reconciler.
    this.concurrency.set(name, concurrency);
    if (this.concurrencyTimer) return;
    this.concurrencyTimer = setTimeout(() => {
      this.concurrencyTimer = undefined;
      const latest = [...this.concurrency];
      this.concurrency.clear();
      for (const [reconciler, value] of latest) void this.writeConcurrency(reconciler, value);
    }, concurrencyStatusMs);
    this.concurrencyTimer.unref();
  }

  private async writeConcurrency(name: string, concurrency: number): Promise<void> {
    const obj = this.watcher?.store.get(name);
    if (!obj || this.stopped || !this.writesStatus() || (obj.status as { concurrency?: number } | undefined)?.concurrency === concurrency) return;
    await this.api
      .request('PATCH', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}/status`, { body: { status: { concurrency } }, contentType: 'application/merge-patch+json' })
      .catch((e) => this.log.warn({ reconciler: name, error: String(e) }, 'could not write the Reconciler\'s concurrency to its status'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    clearTimeout(this.timer);
    clearTimeout(this.concurrencyTimer);
    this.cancelRetry?.();
    await this.watcher?.stop();
  }

  private schedule(delayMs = 200): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.applying = this.applying.then(() => this.apply()).catch((err) => this.log.error({ error: String(err) }, 'applying Reconcilers failed'));
    }, delayMs);
    this.timer.unref();
  }

  private async apply(): Promise<void> {
    if (!this.watcher || this.stopped) return;
    const valid: { config: ReconcilerConfig; obj: KubeObject }[] = [];
    for (const obj of this.watcher.store.values()) {
      try {
        valid.push({ config: parseReconciler(obj), obj });
      } catch (err) {
        const message = err instanceof InvalidReconcilerError ? err.problems.join('; ') : (err as Error).message;
        this.log.warn({ reconciler: obj.metadata.name, problems: message }, 'invalid Reconciler ignored');
        await this.writeStatus(obj, undefined, { reason: 'InvalidSpec', message });
      }
    }
    const failed = await this.bridge.setReconcilers(valid.map((v) => v.config));
    for (const { config, obj } of valid) {
      const error = failed.get(config.name);
      await this.writeStatus(obj, config, error ? { reason: 'WatchFailed', message: error.message } : undefined);
    }
    logFailures(this.log, failed);
    // Reconcilers whose kinds are not served yet (a CRD installed later) are tried again after
    // retrySeconds; once all have started, no timer is left (an idle bridge was woken every 5 s).
    this.cancelRetry?.();
    this.cancelRetry = undefined;
    if (failed.size > 0 && !this.stopped) {
      this.cancelRetry = this.bridge.clock.setTimer(() => {
        this.cancelRetry = undefined;
        this.schedule(0);
      }, retrySeconds * 1000);
    }
    this.loaded = true;
  }

  /** What keeps a Reconciler from working now: its first problem's reason, every problem's message. */
  private problemOf(name: string): { reason: string; message: string } | undefined {
    const current = this.problems.get(name);
    if (!current?.size) return undefined;
    // An identity refused comes first: nothing is delivered whatever else is wrong.
    const [source, message] = current.has('identity') ? ['identity', current.get('identity')!] : [...current.entries()][0]!;
    const reasons: Record<string, string> = { sink: 'SinkNotReady', identity: 'IdentityForbidden', clock: 'ClockSkew', activator: 'SinkNotReady' };
    return { reason: reasons[source] ?? 'WatchFailed', message: current.size > 1 ? [...current.values()].join('; ') : message };
  }

  /** Writes a Reconciler's Ready condition, only when it changed (no write on every resync). */
  private async writeStatus(obj: KubeObject, config: ReconcilerConfig | undefined, failure?: { reason: string; message: string }): Promise<void> {
    if (!this.writesStatus()) return;
    const problem = failure ?? this.problemOf(obj.metadata.name);
    const verdict = problem ? { status: 'False' as const, ...problem } : { status: 'True' as const, reason: 'Running', message: runningMessage(config!) };
    const conditions = (obj.status as { conditions?: Condition[] } | undefined)?.conditions;
    const generation = obj.metadata.generation;
    const condition = settleCondition(conditions, { type: 'Ready', ...verdict }, generation, new Date());
    if (sameCondition(conditions?.find((c) => c.type === 'Ready'), condition)) return;
    await this.api
      .request('PATCH', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${obj.metadata.name}/status`, {
        body: { status: { observedGeneration: generation, conditions: [condition] } },
        contentType: 'application/merge-patch+json',
      })
      .catch((e) => this.log.warn({ error: String(e) }, 'could not write Reconciler status'));
  }
}

function runningMessage(config: ReconcilerConfig): string {
  const ref = config.sink.ref;
  return `delivering ${config.for.kind} events to ${config.sink.uri ?? `${ref?.kind} ${ref?.namespace ? `${ref.namespace}/` : ''}${ref?.name}`}`;
}
