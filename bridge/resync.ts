// Periodic resync: every tracked key is handed to `enqueue` once per period, and the keys are
// spread evenly over the period so that 1,000 objects make about 1,000/period deliveries per
// second rather than one burst. Each key gets a slot from a low-discrepancy sequence (the
// golden ratio), so the spread stays even as keys come and go; the sequence starts at a random
// point, so that bridges restarted together do not line up. A schedule sets one timer, for the
// next tick whose slot holds a key, and none without keys: an idle bridge is woken for due work
// only, and every schedule of a process ticks on the same instants, so their work shares wakes.
//
// A sink that scales to zero (a Knative Service, a Lambda) is the opposite case: spread keys
// would wake it again and again over the period, and every wake is a cold start. There the keys
// come as one batch per period (`batch`), all in one slot chosen at random.
import type { Clock } from '../core/clock.ts';

const goldenFraction = (Math.sqrt(5) - 1) / 2;

export interface ResyncOptions {
  periodMs: number;
  clock: Clock;
  enqueue: (key: string) => void;
  /** Resolution of the schedule (default 1 s). */
  tickMs?: number;
  random?: () => number;
  /** Every key in the same slot: one batch per period (a sink that scales to zero). */
  batch?: boolean;
}

export class ResyncSchedule {
  private readonly clock: Clock;
  private readonly enqueue: (key: string) => void;
  private readonly tickMs: number;
  private readonly random: () => number;
  private periodMs: number;
  // Invariant: every tracked key is in `slotOf` and in exactly the bucket `slotOf` names; a
  // bucket exists only while it holds a key, so memory follows the keys, not the period's length.
  private readonly buckets = new Map<number, Set<string>>();
  /** Slots in a period: one per tick. */
  private slots: number;
  private readonly slotOf = new Map<string, number>();
  private sequence = 0;
  private offset: number;
  private cancel: (() => void) | undefined;
  private started = false;
  private epoch = 0;
  /** The first tick not yet served. */
  private next = 1;
  /** The tick the timer is set for (undefined: none set). */
  private armedTick: number | undefined;
  private readonly batch: boolean;

  constructor(options: ResyncOptions) {
    this.batch = options.batch ?? false;
    this.clock = options.clock;
    this.enqueue = options.enqueue;
    this.tickMs = options.tickMs ?? 1000;
    this.random = options.random ?? Math.random;
    this.periodMs = options.periodMs;
    this.slots = this.slotsIn(this.periodMs);
    this.offset = this.random();
  }

  private slotsIn(periodMs: number): number {
    return Math.max(1, Math.round(periodMs / this.tickMs));
  }

  /** Buckets held now (at most one per tracked key, whatever the period). */
  get bucketCount(): number {
    return this.buckets.size;
  }

  private slotFor(): number {
    if (this.batch) return Math.floor(this.offset * this.slots);
    // The random offset is the jitter: each process (and each period change) starts the
    // sequence somewhere else, while keys stay evenly spaced within it.
    const fraction = (this.offset + this.sequence++ * goldenFraction) % 1;
    return Math.floor(fraction * this.slots);
  }

  track(key: string): void {
    if (this.slotOf.has(key) || this.periodMs <= 0) return;
    const slot = this.place(key);
    if (!this.started) return;
    this.skipToNow();
    // Only a key due before the timer set changes which tick is next.
    if (this.armedTick === undefined || this.tickOf(slot) < this.armedTick) this.arm();
  }

  /** Gives `key` the next slot of the sequence, and returns the slot. */
  private place(key: string): number {
    const slot = this.slotFor();
    this.slotOf.set(key, slot);
    let bucket = this.buckets.get(slot);
    if (!bucket) this.buckets.set(slot, (bucket = new Set()));
    bucket.add(key);
    return slot;
  }

  /** The first tick from `from` on that serves `slot`. */
  private tickOf(slot: number, from = this.next): number {
    return from + ((((slot - from) % this.slots) + this.slots) % this.slots);
  }

  /**
   * Moves the next tick to serve up to now when no earlier one is owed: with no timer set, or the
   * one set not yet due, the ticks whose time has passed had no keys when it was set. A timer
   * that is late (a blocked event loop) keeps them: it serves each in turn when it fires.
   */
  private skipToNow(): void {
    const now = Math.floor((this.clock.now() - this.epoch) / this.tickMs) + 1;
    if (now > this.next && (this.armedTick === undefined || this.armedTick >= now)) this.next = now;
  }

  untrack(key: string): void {
    const slot = this.slotOf.get(key);
    if (slot === undefined) return;
    const bucket = this.buckets.get(slot)!;
    bucket.delete(key);
    this.slotOf.delete(key);
    if (bucket.size > 0) return;
    this.buckets.delete(slot);
    // The slot the timer is set for is empty now: the timer moves to the next one with keys, or
    // goes with the last key (a wake that would serve nothing).
    if (this.started && this.armedTick !== undefined && this.armedTick % this.slots === slot) {
      this.skipToNow();
      this.arm();
    }
  }

  get size(): number {
    return this.slotOf.size;
  }

  /** Changes the period, re-spreading every key over the new one. */
  setPeriod(periodMs: number): void {
    if (periodMs === this.periodMs) return;
    const keys = [...this.slotOf.keys()];
    this.periodMs = periodMs;
    this.slots = this.slotsIn(periodMs);
    this.buckets.clear();
    this.slotOf.clear();
    this.sequence = 0;
    this.offset = this.random();
    if (periodMs > 0) for (const key of keys) this.place(key);
    if (!this.started) return;
    this.skipToNow();
    this.arm();
  }

  start(): void {
    if (this.started || this.periodMs <= 0) return;
    this.started = true;
    // Ticks fall on whole multiples of tickMs on the clock, the same instants in every schedule of
    // the process: the Reconcilers' resyncs due in the same second share one wake, not one each.
    this.epoch = Math.floor(this.clock.now() / this.tickMs) * this.tickMs;
    this.next = 1;
    this.arm();
  }

  stop(): void {
    this.started = false;
    this.cancel?.();
    this.cancel = undefined;
    this.armedTick = undefined;
  }

  /**
   * The first tick from `from` on whose slot holds keys (undefined: no keys). Sparse buckets are
   * searched by slot, dense ones by walking the ticks (the next one is then a tick or two away).
   */
  private dueTick(from: number): number | undefined {
    if (this.buckets.size === 0) return undefined;
    if (this.buckets.size * 4 < this.slots) {
      let first = Infinity;
      for (const slot of this.buckets.keys()) first = Math.min(first, this.tickOf(slot, from));
      return first;
    }
    for (let tick = from; ; tick++) if (this.buckets.has(tick % this.slots)) return tick;
  }

  /**
   * Sets the one timer for the next tick with keys due: an idle process is not woken on the
   * ticks between (with a dozen objects and a period of minutes, most ticks are empty).
   */
  private arm(): void {
    if (!this.started) return;
    const tick = this.dueTick(this.next);
    if (tick === this.armedTick) return;
    this.cancel?.();
    this.cancel = undefined;
    this.armedTick = tick;
    if (tick === undefined) return;
    // Timers are set against the epoch, so delays in firing do not add up over a period.
    this.cancel = this.clock.setTimer(() => {
      this.cancel = undefined;
      this.armedTick = undefined;
      this.next = tick + 1;
      const bucket = this.buckets.get(tick % this.slots);
      for (const key of bucket ?? []) this.enqueue(key);
      this.arm();
    }, this.epoch + tick * this.tickMs - this.clock.now());
  }
}
