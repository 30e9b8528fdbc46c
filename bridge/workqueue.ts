// The per-key work queue: a key is never handed to two workers at once; adding a key that is
// already waiting does nothing more; adding a key while it is being processed makes it run
// exactly once more after `done`. Real changes ("high") are served before resync and
// initial-list work ("low"). Failures back off per key, exponentially, until `forget`; a retry
// still waiting when the key is handed out again is made moot by that delivery, and gives way
// to whatever is asked after it.
//
// The shape follows client-go's workqueue (add / get / done / forget / shutDown), with the
// delaying and rate-limiting layers folded in, a priority lane, and the clock injected.
import { systemClock, within, type Clock } from '../core/clock.ts';

export type Priority = 'high' | 'low';

export interface BackoffOptions {
  /** First retry delay after a failure (default 5 ms, as controller-runtime). */
  baseDelayMs: number;
  /** Longest delay (default 1000 s, as controller-runtime). */
  maxDelayMs: number;
}

export const defaultBackoff: BackoffOptions = { baseDelayMs: 5, maxDelayMs: 1_000_000 };

/**
 * How long a key waits before its next try, as client-go's RateLimiter: `when` records one
 * more try of the key and answers the wait; `forget` clears what the limiter knows of it.
 */
export interface RateLimiter {
  when(key: string): number;
  forget(key: string): void;
  retries(key: string): number;
}

/** Per-key exponential backoff: base·2^failures, capped; `forget` resets a key. */
export class ExponentialBackoff implements RateLimiter {
  private readonly failures = new Map<string, number>();
  private readonly options: BackoffOptions;
  constructor(options: BackoffOptions = defaultBackoff) {
    this.options = options;
  }

  /** Records one more failure of `key` and returns how long to wait before retrying it. */
  when(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    // 2^n overflows to Infinity for large n; the cap applies either way.
    return Math.min(this.options.baseDelayMs * 2 ** n, this.options.maxDelayMs);
  }

  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  forget(key: string): void {
    this.failures.delete(key);
  }
}

export interface RateLimitOptions {
  /** Retries allowed per second across all keys of one queue, in the long run (default 10). */
  qps: number;
  /** Retries allowed at once before `qps` applies (default 100). */
  burst: number;
}

export const defaultRateLimit: RateLimitOptions = { qps: 10, burst: 100 };

/**
 * The overall limit on retries, as controller-runtime's default (a token bucket of 10 qps,
 * burst 100, taken together with the per-key backoff: the longer delay wins). When a function
 * is down, every failing key backs off on its own schedule; this keeps their sum bounded.
 * Each retry takes a token; with none left it waits for the next one (tokens go negative, so
 * retries queue up in order, like golang.org/x/time/rate's Reserve).
 */
export class TokenBucket implements RateLimiter {
  private tokens: number;
  private last: number;
  private readonly options: RateLimitOptions;
  private readonly clock: Clock;
  constructor(options: RateLimitOptions, clock: Clock) {
    this.options = options;
    this.clock = clock;
    this.tokens = options.burst;
    this.last = clock.now();
  }

  /** Takes a token; returns how long to wait until it is really there (0 when it is now). The bucket is shared: the key does not matter. */
  when(): number {
    const now = this.clock.now();
    this.tokens = Math.min(this.options.burst, this.tokens + ((now - this.last) * this.options.qps) / 1000);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.options.qps);
  }

  forget(): void {}

  retries(): number {
    return 0;
  }
}

/** What the queue reports, for Prometheus or tests; every method is optional. */
export interface QueueObserver {
  added?(key: string, priority: Priority): void;
  depth?(depth: number): void;
  /** Time a key waited between becoming ready and being handed out. */
  queued?(key: string, ms: number): void;
  /** Time from `get` to `done`. */
  worked?(key: string, ms: number): void;
  retried?(key: string): void;
  /** A retry the overall rate limit delayed beyond its key's backoff, and by how much. */
  throttled?(key: string, extraMs: number): void;
}

export interface WorkQueueOptions {
  clock?: Clock;
  backoff?: BackoffOptions;
  rateLimit?: RateLimitOptions;
  observer?: QueueObserver;
}

export class WorkQueue {
  private readonly clock: Clock;
  /** Each key's own wait after a failure. */
  private readonly backoff: RateLimiter;
  /** The wait all retries together are held to. */
  private readonly bucket: RateLimiter;
  private readonly observer: QueueObserver;

  // Keys ready to hand out, in order, one lane per priority.
  // Invariant: every key in a lane is in `dirty` and not in `processing`, and in one lane only.
  private readonly lanes: Record<Priority, Set<string>> = { high: new Set(), low: new Set() };
  // Keys that need processing, with the priority and the time they became ready.
  // A key may be dirty and processing at once: it was added while a worker had it, and goes
  // back into its lane at `done`.
  private readonly dirty = new Map<string, { priority: Priority; since: number }>();
  // Keys handed out by `get` and not yet `done`, with the time they were handed out.
  private readonly processing = new Map<string, number>();
  // Delayed adds: at most one timer per key, the earliest asked for — except a `moot` one, which
  // any add asked later replaces, however late. Moot: a retry (addRateLimited) whose key has been
  // handed out since it was asked; that delivery, of the newest state, was the retry, so what
  // its answer asks decides. A moot retry nothing replaces still comes. A time asked by addAfter
  // (a requeueAfter, a hold) is never moot: a newer change delivered first does not cancel it
  // (docs/contract.md: the requeue still follows when its wait ends).
  // Invariant: `moot` only on a `retry`.
  private readonly waiting = new Map<string, { at: number; priority: Priority; cancel: () => void; retry: boolean; moot: boolean }>();
  private readonly listeners = new Set<() => void>();
  private shuttingDown = false;

  constructor(options: WorkQueueOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.backoff = new ExponentialBackoff(options.backoff ?? defaultBackoff);
    this.bucket = new TokenBucket(options.rateLimit ?? defaultRateLimit, this.clock);
    this.observer = options.observer ?? {};
  }

  /** Marks `key` as needing processing now. A "high" add promotes a waiting "low" key. */
  add(key: string, priority: Priority = 'high'): void {
    if (this.shuttingDown) return;
    this.observer.added?.(key, priority);
    const entry = this.dirty.get(key);
    if (entry) {
      if (priority === 'high' && entry.priority === 'low') {
        entry.priority = 'high';
        if (this.lanes.low.delete(key)) this.lanes.high.add(key);
      }
      return;
    }
    this.dirty.set(key, { priority, since: this.clock.now() });
    if (this.processing.has(key)) return; // re-queued by done()
    this.lanes[priority].add(key);
    this.changed();
  }

  /**
   * Adds `key` after `delayMs`. If it is already due earlier, the earlier time stands, unless
   * that is a moot retry (see `waiting`). A delay of 0 or less adds it now, the earliest of all:
   * the key's timer is dropped.
   */
  addAfter(key: string, delayMs: number, priority: Priority = 'high'): void {
    this.delayedAdd(key, delayMs, priority, false);
  }

  private delayedAdd(key: string, delayMs: number, priority: Priority, retry: boolean): void {
    if (this.shuttingDown) return;
    const at = this.clock.now() + delayMs;
    const existing = this.waiting.get(key);
    if (delayMs > 0 && existing && !existing.moot && existing.at <= at) return;
    existing?.cancel();
    this.waiting.delete(key);
    if (delayMs <= 0) return this.add(key, priority);
    const cancel = this.clock.setTimer(() => {
      this.waiting.delete(key);
      this.add(key, priority);
    }, delayMs);
    this.waiting.set(key, { at, priority, cancel, retry, moot: false });
  }

  /**
   * Adds `key` after the longest of: its next backoff delay (a failure), the overall rate
   * limit's wait, and `minDelayMs` (a Retry-After); returns the delay used.
   */
  addRateLimited(key: string, minDelayMs = 0): number {
    const own = Math.max(this.backoff.when(key), minDelayMs);
    const overall = this.bucket.when(key);
    const delay = Math.max(own, overall);
    this.observer.retried?.(key);
    if (overall > own) this.observer.throttled?.(key, overall - own);
    this.delayedAdd(key, delay, 'high', true);
    return delay;
  }

  /** Clears `key`'s failure count (a success). */
  forget(key: string): void {
    this.backoff.forget(key);
    this.bucket.forget(key);
  }

  retries(key: string): number {
    return this.backoff.retries(key);
  }

  /** Hands out the next ready key ("high" first), or undefined when none is ready. */
  get(): string | undefined {
    const key = firstOf(this.lanes.high) ?? firstOf(this.lanes.low);
    if (key === undefined) return undefined;
    const entry = this.dirty.get(key)!;
    this.lanes[entry.priority].delete(key);
    this.dirty.delete(key);
    const delayed = this.waiting.get(key);
    if (delayed?.retry) delayed.moot = true;
    const now = this.clock.now();
    this.processing.set(key, now);
    this.observer.queued?.(key, now - entry.since);
    this.observer.depth?.(this.length);
    return key;
  }

  /** Ends processing of `key`; if it was added meanwhile, it becomes ready again. */
  done(key: string): void {
    const started = this.processing.get(key);
    if (started === undefined) return;
    this.processing.delete(key);
    this.observer.worked?.(key, this.clock.now() - started);
    const entry = this.dirty.get(key);
    if (entry && !this.shuttingDown) {
      this.lanes[entry.priority].add(key);
      this.changed();
    }
  }

  /** Stops taking new keys; keys being processed may still be `done`. */
  shutDown(): void {
    this.shuttingDown = true;
    for (const w of this.waiting.values()) w.cancel();
    this.waiting.clear();
    this.lanes.high.clear();
    this.lanes.low.clear();
    this.dirty.clear();
    this.changed();
  }

  /** Keys ready to be handed out. */
  get length(): number {
    return this.lanes.high.size + this.lanes.low.size;
  }

  get inFlight(): number {
    return this.processing.size;
  }

  /** True while `key` has a delayed add pending. */
  isDelayed(key: string): boolean {
    return this.waiting.has(key);
  }

  /** Keys with a delayed add pending (requeueAfter, backoff). */
  get delayed(): number {
    return this.waiting.size;
  }

  /** Calls `fn` whenever a key may have become ready; returns an unsubscribe function. */
  onReady(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private changed(): void {
    this.observer.depth?.(this.length);
    for (const fn of this.listeners) fn();
  }
}

function firstOf(set: Set<string>): string | undefined {
  for (const key of set) return key;
  return undefined;
}

/** Handlers a Workers starts before it lets the event loop turn: timers and I/O between them. */
const startsPerTurn = 64;

/**
 * Runs `handle` for ready keys, at most `concurrency` at once. `handle` decides what happens to
 * a key afterwards (forget, addRateLimited, addAfter); the key is `done` when it settles.
 * Resolves `stop()` once in-flight handlers have finished.
 */
export class Workers {
  private running = 0;
  /** Handlers started since the event loop last turned (see pumpNextTurn). */
  private startedThisTurn = 0;
  private turnPending = false;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly unsubscribe: () => void;
  private stopped = false;
  private readonly queue: WorkQueue;
  /** Handlers at once: fixed, or asked at each start (an adaptive limit, bridge/concurrency.ts). */
  private readonly concurrency: () => number;
  private readonly handle: (key: string) => Promise<void>;
  private readonly clock: Clock;

  constructor(queue: WorkQueue, concurrency: number | (() => number), handle: (key: string) => Promise<void>, clock: Clock = systemClock) {
    this.queue = queue;
    this.clock = clock;
    this.concurrency = typeof concurrency === 'number' ? () => Math.max(1, concurrency) : () => Math.max(1, concurrency());
    this.handle = handle;
    this.unsubscribe = queue.onReady(() => this.pump());
    this.pump();
  }

  get busy(): number {
    return this.running;
  }

  /**
   * Starts once the event loop has turned: handlers that settle at once (a key held back,
   * nothing to send) would otherwise start the next in a microtask, and a queue of them would
   * run to its end with no timer or I/O in between (a Lease's renewal among them).
   */
  private pumpNextTurn(): void {
    if (this.turnPending) return;
    this.turnPending = true;
    setImmediate(() => {
      this.turnPending = false;
      this.startedThisTurn = 0;
      this.pump();
    });
  }

  private pump(): void {
    while (!this.stopped && this.running < this.concurrency()) {
      if (this.startedThisTurn >= startsPerTurn) return this.pumpNextTurn();
      const key = this.queue.get();
      if (key === undefined) return;
      this.startedThisTurn++;
      this.running++;
      const work = (async () => {
        try {
          await this.handle(key);
        } catch {
          // `handle` owns error handling; a throw here is a bug, so retry with backoff.
          this.queue.addRateLimited(key);
        } finally {
          this.running--;
          this.queue.done(key);
        }
      })();
      this.inFlight.add(work);
      void work.finally(() => {
        this.inFlight.delete(work);
        this.pump();
      });
    }
  }

  /** Stops starting work and waits (up to `timeoutMs`) for in-flight handlers. */
  async stop(timeoutMs = 30_000): Promise<boolean> {
    this.stopped = true;
    this.unsubscribe();
    return within(this.clock, Promise.all([...this.inFlight]), timeoutMs);
  }
}
