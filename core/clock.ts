// Time as a parameter: the bridge's queue, backoff, resync and leases, and the SDK's deadlines,
// take a Clock, so their tests move time forward by hand instead of sleeping. The one place that
// knows the platform timer's limits.
import { setTimeout as sleep } from 'node:timers/promises';

export interface Clock {
  /**
   * Milliseconds since the epoch, counted on a monotonic clock: it never steps back or jumps
   * when the machine's time is set. Every deadline, timer and interval reads this.
   */
  now(): number;
  /**
   * The machine's wall time: for what other processes read (a Lease's renewTime, a delivery's
   * deadline sent to the function), never for measuring an interval here.
   */
  wall(): number;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  setTimer(fn: () => void, ms: number): () => void;
}

/**
 * The longest delay one platform timer takes: Node (like browsers) stores it in 32 bits and
 * runs a longer one after 1 ms — a requeue 75 days ahead would fire at once, forever.
 */
export const maxTimerMs = 2 ** 31 - 1;

/** The platform's timer functions, as the system clock uses them (a parameter for tests). */
export interface TimerPrimitives {
  /** Monotonic milliseconds (anchored at the epoch). */
  now(): number;
  /** Wall time (default: now). */
  wall?(): number;
  /** Starts a timer (one that does not keep the process alive); returns its handle. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(timer: unknown): void;
}

/**
 * A clock on the platform's timers that takes a delay of any length: a delay beyond
 * maxTimerMs is waited out in steps of at most maxTimerMs, each checked against now().
 */
export function timerClock(timers: TimerPrimitives): Clock {
  return {
    now: () => timers.now(),
    wall: () => (timers.wall ?? timers.now)(),
    setTimer(fn, ms) {
      const due = timers.now() + Math.max(0, ms);
      let timer: unknown;
      const arm = (wait: number) => {
        timer = timers.setTimeout(() => {
          const left = due - timers.now();
          // Node's timers count whole milliseconds on a loop time taken at the start of each
          // turn, so they fire up to a millisecond before a finer now() says: that is due, not
          // another wake for the fraction.
          if (left >= 1) arm(left);
          else fn();
        }, Math.min(Math.max(0, wait), maxTimerMs));
      };
      arm(ms);
      return () => timers.clearTimeout(timer);
    },
  };
}

/**
 * The process's clock: performance.now() anchored at the wall time the process started
 * (performance.timeOrigin), so a step of the machine's time neither stalls a timer nor
 * releases a hold early; Date.now() only for wall().
 */
export const systemClock: Clock = timerClock({
  now: () => performance.timeOrigin + performance.now(),
  wall: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout),
});

/**
 * Waits `ms` on `clock`: true when the time has passed, false as soon as `signal` aborts (or if
 * it has). On the system clock the wait keeps the process alive, as any awaited sleep does (the
 * system clock's own timers do not: a queue's or a resync's timer must not hold a process open).
 */
export function delay(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  if (clock === systemClock) return sleep(Math.min(Math.max(0, ms), maxTimerMs), true, { signal }).then(() => true, () => false);
  return new Promise((resolve) => {
    const onAbort = () => {
      cancel();
      resolve(false);
    };
    const cancel = clock.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Waits for `work` to settle, at most `ms` on `clock`: true when it settled (fulfilled or
 * rejected) in time, false when the time ran out first. Its timer ends with it.
 */
export async function within(clock: Clock, work: Promise<unknown>, ms: number): Promise<boolean> {
  let cancel = () => {};
  const timeout = new Promise<false>((resolve) => {
    cancel = clock.setTimer(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true, () => true), timeout]);
  } finally {
    cancel();
  }
}

export interface WaitOptions {
  /** Give up after this long (default 60 s). */
  timeoutMs?: number;
  /** Or give up at this time on the clock (a deadline several waits share). */
  deadline?: number;
  /** Between checks (default 250 ms). */
  intervalMs?: number;
  clock?: Clock;
  /** Checked before every round: a reason to stop waiting at once (a process that died), or undefined. */
  abandon?: () => string | undefined;
  /** More to say when the wait times out (the last lines of a log). */
  context?: () => string;
}

/** Thrown by a check of `waitFor`: what is awaited can no longer happen, so stop waiting now. */
export class WaitAbandoned extends Error {}

/**
 * Polls `check` until it returns something other than undefined, false or null, and returns
 * that. An error thrown by `check` counts as "not yet", but for WaitAbandoned, which ends the
 * wait. A timeout's error names what was awaited, the last value seen and the last error: what
 * the world looked like. `deadline` is on the same clock (`clock.now()`, the system clock's by
 * default).
 */
export async function waitFor<T>(what: string, check: () => T | undefined | false | null | Promise<T | undefined | false | null>, options: WaitOptions = {}): Promise<T> {
  const clock = options.clock ?? systemClock;
  const started = clock.now();
  const deadline = options.deadline ?? started + (options.timeoutMs ?? 60_000);
  let last: unknown;
  let lastError: unknown;
  for (;;) {
    const abandoned = options.abandon?.();
    if (abandoned) throw new Error(abandoned);
    try {
      const value = await check();
      if (value !== undefined && value !== false && value !== null) return value;
      last = value;
    } catch (err) {
      if (err instanceof WaitAbandoned) throw err;
      lastError = err;
    }
    if (clock.now() >= deadline) {
      const parts = [`Timed out after ${Math.round((deadline - started) / 100) / 10}s waiting for ${what}.`];
      if (last !== undefined) parts.push(`Last value: ${JSON.stringify(last)}`);
      if (lastError) parts.push(`Last error: ${lastError instanceof Error ? lastError.message : String(lastError)}`);
      if (options.context) parts.push(options.context());
      throw new Error(parts.join('\n'));
    }
    await delay(clock, options.intervalMs ?? 250);
  }
}

interface PendingTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** A clock that only moves when told to; timers fire in time order during `advance`. */
export class FakeClock implements Clock {
  private current: number;
  private seq = 0;
  // Invariant: every scheduled, uncancelled timer is in `timers`; none has `at` < `current`
  // except while `advance` is firing them.
  private timers: PendingTimer[] = [];

  constructor(start = 1_700_000_000_000) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  /** How far the wall time is from now(): moved by stepWall, as an operator or NTP sets the time. */
  private wallOffset = 0;

  wall(): number {
    return this.current + this.wallOffset;
  }

  /** Sets the wall time forward (or back, with a negative `ms`) without moving monotonic time. */
  stepWall(ms: number): void {
    this.wallOffset += ms;
  }

  setTimer(fn: () => void, ms: number): () => void {
    const timer: PendingTimer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((t) => t !== timer);
    };
  }

  /** Moves time forward by `ms`, firing every timer that falls due, in order. */
  advance(ms: number): void {
    const target = this.current + ms;
    for (;;) {
      const next = this.timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!next) break;
      this.timers = this.timers.filter((t) => t !== next);
      this.current = Math.max(this.current, next.at);
      next.fn();
    }
    this.current = target;
  }

  pendingTimers(): number {
    return this.timers.length;
  }
}
