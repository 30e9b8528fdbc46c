// Prometheus metrics of the bridge. Where a metric means what controller-runtime's metric of
// the same name means, it has that name and labels (`controller` is the Reconciler's name,
// `name` the work queue's), so existing dashboards and alerts work unchanged.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { QueueObserver } from './workqueue.ts';
import { sinkFailureReasons } from './delivery.ts';

export type WatchState = 'synced' | 'listing' | 'failing';

/** How often the event loop's delay is sampled for nodejs_eventloop_lag_p50/p90/p99 (ms). */
export const eventLoopSampleMs = 1000;

export class BridgeMetrics {
  readonly registry = new Registry();
  readonly reconcileTotal = new Counter({
    name: 'controller_runtime_reconcile_total',
    help: 'Total number of reconciliations per controller, by result (success, error, requeue, requeue_after).',
    labelNames: ['controller', 'result'],
    registers: [this.registry],
  });
  readonly reconcileErrors = new Counter({
    name: 'controller_runtime_reconcile_errors_total',
    help: 'Total number of reconciliation errors per controller.',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly terminalErrors = new Counter({
    name: 'controller_runtime_terminal_reconcile_errors_total',
    help: 'Total number of terminal reconciliation errors (4xx answers) per controller.',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly reconcileTime = new Histogram({
    name: 'controller_runtime_reconcile_time_seconds',
    help: 'Length of time per reconciliation (one delivery to the function) per controller.',
    labelNames: ['controller'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60],
    registers: [this.registry],
  });
  readonly activeWorkers = new Gauge({
    name: 'controller_runtime_active_workers',
    help: 'Number of currently used workers per controller.',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly maxConcurrent = new Gauge({
    name: 'controller_runtime_max_concurrent_reconciles',
    help: 'Maximum number of concurrent reconciles per controller.',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly concurrency = new Gauge({
    name: 'kfn_bridge_concurrency_limit',
    help: 'Deliveries a Reconciler may have in flight now, learnt from its function\'s answers (at most controller_runtime_max_concurrent_reconciles).',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly depth = new Gauge({ name: 'workqueue_depth', help: 'Current depth of workqueue.', labelNames: ['name'], registers: [this.registry] });
  readonly adds = new Counter({ name: 'workqueue_adds_total', help: 'Total number of adds handled by workqueue.', labelNames: ['name'], registers: [this.registry] });
  readonly retries = new Counter({ name: 'workqueue_retries_total', help: 'Total number of retries handled by workqueue.', labelNames: ['name'], registers: [this.registry] });
  readonly throttled = new Counter({ name: 'kfn_bridge_rate_limited_retries_total', help: 'Retries the overall rate limit (spec.rateLimit) delayed beyond their per-object backoff.', labelNames: ['name'], registers: [this.registry] });
  readonly throttleDelay = new Histogram({
    name: 'kfn_bridge_rate_limit_delay_seconds',
    help: 'Extra wait the overall rate limit added to a retry.',
    labelNames: ['name'],
    buckets: [0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [this.registry],
  });
  readonly queueDuration = new Histogram({
    name: 'workqueue_queue_duration_seconds',
    help: 'How long in seconds an item stays in workqueue before being requested.',
    labelNames: ['name'],
    buckets: [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 0.001, 0.01, 0.1, 1, 10, 100, 1000],
    registers: [this.registry],
  });
  readonly workDuration = new Histogram({
    name: 'workqueue_work_duration_seconds',
    help: 'How long in seconds processing an item from workqueue takes.',
    labelNames: ['name'],
    buckets: [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 0.001, 0.01, 0.1, 1, 10, 100, 1000],
    registers: [this.registry],
  });
  readonly leader = new Gauge({
    name: 'leader_election_master_status',
    help: 'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.',
    labelNames: ['name'],
    registers: [this.registry],
  });
  readonly deliveries = new Counter({
    name: 'kfn_bridge_deliveries_total',
    help: 'Deliveries to functions by Reconciler, reason and HTTP status ("none" when no answer came).',
    labelNames: ['controller', 'reason', 'code'],
    registers: [this.registry],
  });
  readonly watchEvents = new Counter({
    name: 'kfn_bridge_watch_events_total',
    help: 'Watch events received, by kind and type.',
    labelNames: ['kind', 'type'],
    registers: [this.registry],
  });
  readonly relists = new Counter({
    name: 'kfn_bridge_watch_relists_total',
    help: 'Relists after 410 Gone, by kind.',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly lists = new Counter({
    name: 'kfn_bridge_watch_lists_total',
    help: "Lists completed, by kind and mode: stream (a streaming list, a watch with sendInitialEvents: no LIST request) or pages (where the apiserver does not serve one, for one list after three failed streaming lists, or --lists pages).",
    labelNames: ['kind', 'mode'],
    registers: [this.registry],
  });

  readonly invalidAnswers = new Counter({
    name: 'kfn_bridge_invalid_answers_total',
    help: "Deliveries whose 2xx answer was not the contract's response (not JSON, cut at 1 MiB, a malformed field): retried with backoff.",
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly staleSnapshotSkips = new Counter({
    name: 'kfn_bridge_stale_snapshot_skips_total',
    help: "Deliveries postponed because the bridge's watches had not yet seen the writes of the object's last reconcile (contract 2: no reconcile decides on a snapshot older than its own writes).",
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly snapshotLagFallbacks = new Counter({
    name: 'kfn_bridge_snapshot_lag_fallbacks_total',
    help: 'Deliveries sent without the snapshot of a kind whose watch lagged behind the last reconcile\'s writes for too long (the function reads that kind from the apiserver).',
    labelNames: ['controller'],
    registers: [this.registry],
  });

  readonly sinkFailures = new Counter({
    name: 'kfn_bridge_sink_failures_total',
    help: "Deliveries that got no answer of the function's own, by Reconciler and reason (timeout, connection, tls, credentials, unauthorized, throttled, unavailable, gateway, duplicate, misrouted, invalid_answer, clock_skew).",
    labelNames: ['controller', 'reason'],
    registers: [this.registry],
  });
  readonly clockSkew = new Gauge({
    name: 'kfn_bridge_clock_skew_seconds',
    help: "How far the function's clock is from the bridge's (positive: ahead), measured when it refused an event for its time (more than the 60 s the contract allows); 0 once it takes events again.",
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly heldBack = new Counter({
    name: 'kfn_bridge_held_back_total',
    help: 'Deliveries postponed because an earlier delivery of the same object may still be running (one that timed out, one of a replaced controller or of the previous Lease holder).',
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly changeToReady = new Histogram({
    name: 'kfn_bridge_change_to_ready_seconds',
    help: "Time from the bridge seeing a primary's new generation (or the object created) to its Ready condition True for that generation.",
    labelNames: ['controller'],
    buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800],
    registers: [this.registry],
  });
  readonly info = new Gauge({
    name: 'kfn_bridge_info',
    help: "Always 1: marks a scrape target as a kfn bridge (the alerts and the dashboard join controller-runtime's metric names on it, which other operators export too).",
    registers: [this.registry],
  });
  readonly lastAnswer = new Gauge({
    name: 'kfn_bridge_last_answer_timestamp_seconds',
    help: "When a delivery of the Reconciler last got the function's own answer (done, requeue, a refusal or an error); the controller's start before the first.",
    labelNames: ['controller'],
    registers: [this.registry],
  });
  readonly lastSinkFailure = new Gauge({
    name: 'kfn_bridge_last_sink_failure_timestamp_seconds',
    help: "When a delivery of the Reconciler last failed before the function answered (0: never).",
    labelNames: ['controller'],
    registers: [this.registry],
  });
  /** The journal whose failures the journal's counters export (none: they stay at 0). */
  private journal: { readonly failures: number; readonly dropped: number } | undefined;
  /**
   * What the journal could not write: its failed writes and rotations, and the lines it dropped.
   * Registered whether or not the bridge journals, so that the rule that reads them
   * (KfnJournalFailing) has a series to compare from the first scrape.
   */
  readonly journalFailures = this.journalCounter('kfn_bridge_journal_failures_total', 'Journal writes and rotations that failed (a read-only, full or broken volume); deliveries go on.', 'failures');
  readonly journalDropped = this.journalCounter('kfn_bridge_journal_dropped_lines_total', 'Journal lines dropped unwritten because the volume did not keep up (the queue is bounded).', 'dropped');

  private watchStates: () => Iterable<{ kind: string; state: WatchState; records: number }> = () => [];
  readonly watches = (() => {
    const metrics = this;
    return new Gauge({
      name: 'kfn_bridge_watches',
      help: "The bridge's watches by kind and state: synced (listed and watching), listing (its first list not in yet) or failing (cannot work: the kind not served, forbidden; retrying).",
      labelNames: ['kind', 'state'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const { kind, state } of metrics.watchStates()) this.inc({ kind, state });
      },
    });
  })();
  readonly watchRecords = (() => {
    const metrics = this;
    return new Gauge({
      name: 'kfn_bridge_watch_records',
      help: "The records the bridge's watches keep, by kind: what its memory grows with. A sharded replica keeps those its shards need.",
      labelNames: ['kind'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const { kind, records } of metrics.watchStates()) this.inc({ kind }, records);
      },
    });
  })();

  constructor(options: { defaultMetrics?: boolean } = {}) {
    // The event loop's delay sampled once a second, not prom-client's default every 10 ms: that
    // timer alone woke an idle bridge 100 times a second (about 0.26 s of CPU a minute).
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: eventLoopSampleMs });
    this.info.set(1);
  }

  private journalCounter(name: string, help: string, field: 'failures' | 'dropped'): Counter {
    const metrics = this;
    let counted = 0;
    return new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        const now = metrics.journal?.[field] ?? 0;
        if (now > counted) this.inc(now - counted);
        counted = now;
      },
    });
  }

  /** Exports what `journal` could not write (the bridge's --journal). */
  trackJournal(journal: { readonly failures: number; readonly dropped: number }): void {
    this.journal = journal;
  }

  /** Where kfn_bridge_watches reads the watches from when scraped. */
  trackWatches(states: () => Iterable<{ kind: string; state: WatchState; records: number }>): void {
    this.watchStates = states;
  }

  /**
   * Starts a Reconciler's counters at zero, as controller-runtime does for its own: a dashboard's
   * rate of errors reads 0, not "no data", before the first error, and an alert on an increase
   * sees the first one.
   */
  controllerStarted(controller: string, nowSeconds: number): void {
    this.lastAnswer.set({ controller }, nowSeconds);
    this.lastSinkFailure.set({ controller }, 0);
    this.clockSkew.set({ controller }, 0);
    for (const result of ['success', 'error', 'requeue', 'requeue_after']) this.reconcileTotal.inc({ controller, result }, 0);
    for (const counter of [this.reconcileErrors, this.terminalErrors, this.heldBack, this.invalidAnswers, this.staleSnapshotSkips, this.snapshotLagFallbacks]) counter.inc({ controller }, 0);
    for (const reason of sinkFailureReasons) this.sinkFailures.inc({ controller, reason }, 0);
  }

  /** A watch of `kind` started: its relists count from zero. */
  watchStarted(kind: string): void {
    this.relists.inc({ kind }, 0);
    for (const mode of ['stream', 'pages']) this.lists.inc({ kind, mode }, 0);
  }

  /** The observer a Reconciler's work queue reports to. */
  queueObserver(name: string): QueueObserver {
    this.retries.inc({ name }, 0);
    this.adds.inc({ name }, 0);
    this.depth.set({ name }, 0);
    return {
      added: () => this.adds.inc({ name }),
      depth: (d) => this.depth.set({ name }, d),
      queued: (_k, ms) => this.queueDuration.observe({ name }, ms / 1000),
      worked: (_k, ms) => this.workDuration.observe({ name }, ms / 1000),
      retried: () => this.retries.inc({ name }),
      throttled: (_k, ms) => {
        this.throttled.inc({ name });
        this.throttleDelay.observe({ name }, ms / 1000);
      },
    };
  }
}
