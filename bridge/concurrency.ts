// How many deliveries a Reconciler may have in flight at once, learnt from its function's answers
// (per-key serialisation is the work queue's and never changes). A stateless function can take
// several events at once, and a serverless one says when it cannot: so the limit grows while the
// function keeps its pace and falls when it pushes back, as TCP's congestion window does —
// additive increase, multiplicative decrease — between 1 and the Reconciler's
// maxConcurrentReconciles, its ceiling.
//
// What counts as pushing back: a 429 or 503 (Knative's activator and queue-proxy, Lambda's
// throttle behind a Function URL, any proxy in front), no answer (a timeout, a refused or broken
// connection), a 502/504 from a proxy; and latency rising well above the function's own
// baseline, which is how a function on a busy node or a saturated pod shows it first.
import type { Clock } from '../core/clock.ts';

/** What one answered delivery says of the function's pace. */
export interface Answer {
  /** HTTP status of the answer; undefined when none came. */
  status?: number;
  /** From sending the event to its answer. */
  durationMs: number;
  /** Deliveries of this Reconciler in flight when it was answered, itself included. */
  inFlight: number;
}

export const adaptiveDefaults = {
  /** Latency this many times the baseline is the function slowing down. */
  tolerance: 2,
  /** … and this much above it in absolute terms (a 2 ms reconcile taking 5 ms is noise, not load). */
  slackMs: 10,
  /** The limit's factor on pushback; on a latency rise it falls less (latencyDecrease). */
  decrease: 0.5,
  latencyDecrease: 0.75,
  /** At most one decrease per this long (or per recent latency, when longer): the answers of one overload episode count once. */
  holdMs: 1000,
  /** The recent latency's smoothing (exponential, per answer). */
  smoothing: 0.3,
  /** How fast the baseline follows a recent latency above it, per answer: a function that became slower for good is not throttled for ever. */
  baselineDrift: 0.002,
};

/** Whether an answer is the function (or what fronts it) pushing back. */
export const pushesBack = (status: number | undefined) => status === undefined || status === 429 || status === 502 || status === 503 || status === 504;

export class AdaptiveLimit {
  private limit = 1;
  private recentMs: number | undefined;
  private baselineMs: number | undefined;
  private lastDecrease = Number.NEGATIVE_INFINITY;
  private readonly ceiling: number;
  private readonly clock: Clock;
  private readonly options: typeof adaptiveDefaults;

  constructor(ceiling: number, clock: Clock, options: Partial<typeof adaptiveDefaults> = {}) {
    this.ceiling = Math.max(1, ceiling);
    this.clock = clock;
    this.options = { ...adaptiveDefaults, ...options };
  }

  /** Deliveries that may be in flight now. */
  get current(): number {
    return Math.max(1, Math.min(this.ceiling, Math.floor(this.limit)));
  }

  /** Takes one answer into account; returns whether the limit changed. */
  answered(answer: Answer): boolean {
    const before = this.current;
    const o = this.options;
    if (pushesBack(answer.status)) {
      this.decrease(o.decrease);
    } else {
      const d = answer.durationMs;
      this.recentMs = this.recentMs === undefined ? d : this.recentMs + o.smoothing * (d - this.recentMs);
      this.baselineMs = this.baselineMs === undefined || this.recentMs < this.baselineMs ? this.recentMs : this.baselineMs + o.baselineDrift * (this.recentMs - this.baselineMs);
      if (this.recentMs > o.tolerance * this.baselineMs && this.recentMs - this.baselineMs > o.slackMs) this.decrease(o.latencyDecrease);
      // Grow only when the limit is what held deliveries back: a window never filled says nothing.
      else if (answer.inFlight >= this.current && this.limit < this.ceiling) this.limit = Math.min(this.ceiling, this.limit + 1 / this.current);
    }
    return this.current !== before;
  }

  private decrease(factor: number): void {
    const now = this.clock.now();
    if (now - this.lastDecrease < Math.max(this.options.holdMs, this.recentMs ?? 0)) return;
    this.lastDecrease = now;
    this.limit = Math.max(1, this.limit * factor);
  }
}
