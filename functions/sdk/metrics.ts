// A function's own metrics, in Prometheus' text format on GET /metrics: its reconciles by kind
// and result, how long they took, the writes they made, the requests it refused, and the
// process' CPU and memory. The bridge's metrics say what was delivered and answered; these say
// what the function did with it, per process (a Deployment's replicas each report their own).
//
// Written out here rather than with prom-client: a handful of counters and one histogram, and
// prom-client's load time (~0.1 s) would land on every cold start, which a function that scales
// to zero pays on each wake. The names follow controller-runtime's where they mean the same.
import { performance } from 'node:perf_hooks';

export type ReconcileResultLabel = 'success' | 'requeue' | 'requeue_after' | 'error';

/** Seconds: a reconcile from a few milliseconds (nothing to write) to the longest deadline. */
export const reconcileBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];

interface Histogram {
  counts: number[];
  sum: number;
  count: number;
}

function escape(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function labels(pairs: Record<string, string>): string {
  const parts = Object.entries(pairs).map(([k, v]) => `${k}="${escape(v)}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

export class FunctionMetrics {
  private readonly reconciles = new Map<string, { labels: Record<string, string>; value: number }>();
  private readonly writes = new Map<string, { labels: Record<string, string>; value: number }>();
  private readonly refused = new Map<string, { labels: Record<string, string>; value: number }>();
  private readonly info = new Map<string, { labels: Record<string, string>; value: number }>();
  private readonly times = new Map<string, { labels: Record<string, string>; value: Histogram }>();
  private readonly startedAt = (performance.timeOrigin ?? Date.now()) / 1000;

  /** `fn` (reconciling `kind`) is served by this process: its reconciles count from zero, and kfn_function_info names it. */
  serving(fn: string, kind: string): void {
    for (const result of ['success', 'requeue', 'requeue_after', 'error'] as const) bump(this.reconciles, { function: fn, kind, result }, 0);
    bump(this.info, { function: fn, kind }, 0);
  }

  /** One reconcile of `fn` (a primary of `kind`) that ended with `result` after `seconds`, having written `writes` objects. */
  reconciled(fn: string, kind: string, result: ReconcileResultLabel, seconds: number, writes: number): void {
    bump(this.reconciles, { function: fn, kind, result }, 1);
    if (writes) bump(this.writes, { function: fn, kind }, writes);
    const key = `${fn}\0${kind}`;
    let h = this.times.get(key);
    if (!h) this.times.set(key, (h = { labels: { function: fn, kind }, value: { counts: reconcileBuckets.map(() => 0), sum: 0, count: 0 } }));
    const i = reconcileBuckets.findIndex((b) => seconds <= b);
    if (i >= 0) h.value.counts[i]!++;
    h.value.sum += seconds;
    h.value.count++;
  }

  /** A request `fn` refused (bad signature, a replay, malformed) with HTTP `status`. */
  refusedRequest(fn: string, status: number): void {
    bump(this.refused, { function: fn, status: String(status) }, 1);
  }

  /** The exposition: what GET /metrics answers. */
  text(): string {
    const out: string[] = [];
    const counter = (name: string, help: string, series: Map<string, { labels: Record<string, string>; value: number }>) => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const s of series.values()) out.push(`${name}${labels(s.labels)} ${s.value}`);
    };
    counter('kfn_function_reconcile_total', 'Reconciles run by this process, by function, kind and result (success, requeue, requeue_after, error).', this.reconciles);
    counter('kfn_function_writes_total', 'Objects written (applied, patched, deleted) by reconciles, by function and kind.', this.writes);
    counter('kfn_function_refused_requests_total', 'Requests refused before a reconcile ran (unsigned, replayed, malformed, the wrong kind), by function and HTTP status.', this.refused);
    out.push('# HELP kfn_function_info The functions this process serves (1 each), by function and kind.', '# TYPE kfn_function_info gauge');
    for (const s of this.info.values()) out.push(`kfn_function_info${labels(s.labels)} 1`);
    const name = 'kfn_function_reconcile_time_seconds';
    out.push(`# HELP ${name} Time a reconcile took in the function, from the event read to the answer, by function and kind.`, `# TYPE ${name} histogram`);
    for (const { labels: l, value: h } of this.times.values()) {
      let cumulative = 0;
      reconcileBuckets.forEach((b, i) => {
        cumulative += h.counts[i]!;
        out.push(`${name}_bucket${labels({ ...l, le: String(b) })} ${cumulative}`);
      });
      out.push(`${name}_bucket${labels({ ...l, le: '+Inf' })} ${h.count}`, `${name}_sum${labels(l)} ${h.sum}`, `${name}_count${labels(l)} ${h.count}`);
    }
    const cpu = process.cpuUsage();
    out.push(
      '# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.',
      '# TYPE process_cpu_seconds_total counter',
      `process_cpu_seconds_total ${(cpu.user + cpu.system) / 1e6}`,
      '# HELP process_resident_memory_bytes Resident memory size in bytes.',
      '# TYPE process_resident_memory_bytes gauge',
      `process_resident_memory_bytes ${process.memoryUsage.rss()}`,
      '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.',
      '# TYPE process_start_time_seconds gauge',
      `process_start_time_seconds ${Math.round(this.startedAt)}`,
    );
    return `${out.join('\n')}\n`;
  }
}

function bump(series: Map<string, { labels: Record<string, string>; value: number }>, l: Record<string, string>, by: number): void {
  const key = Object.values(l).join('\0');
  const s = series.get(key);
  if (s) s.value += by;
  else series.set(key, { labels: l, value: by });
}

/** Every function app of this process reports here (a shared host's functions too, each by its name). */
export const processMetrics = new FunctionMetrics();

/** The exposition's content type. */
export const metricsContentType = 'text/plain; version=0.0.4; charset=utf-8';
