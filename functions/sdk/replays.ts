// Which events a function has already taken, so that a captured request sent again is refused.
// A delivery is one event id at one attempt (a retry of the same observation keeps its id and
// counts the attempt up, and both are signed). Each is remembered for as long as the signed
// time window could still let it in — the time the event gave, plus the clock skew the window
// allows on either side — and then forgotten, so memory is bounded by the deliveries of that
// window, and by `maxEntries` past it (the oldest go first).
//
// A restart forgets: a request captured in the last window (at most the Reconciler's timeout
// plus two minutes) could be taken once more by the new process.
import { clockSkewMs } from '../../core/event.ts';
import type { Clock } from '../../core/clock.ts';

export class ReplayGuard {
  private readonly clock: Clock;
  private readonly maxEntries: number;
  /** Delivery (id and attempt) → until when (clock.now()) it is remembered; in insertion order. */
  private readonly seen = new Map<string, number>();

  constructor(clock: Clock, maxEntries = 200_000) {
    this.clock = clock;
    this.maxEntries = maxEntries;
  }

  /** True the first time this delivery arrives within its window; false for a copy. */
  admit(id: string, attempt: number, timeLeftMs: number): boolean {
    const now = this.clock.now();
    this.forgetExpired(now);
    const key = `${attempt}:${id}`;
    const until = this.seen.get(key);
    if (until !== undefined && until >= now) return false;
    if (this.seen.size >= this.maxEntries) this.seen.delete(this.seen.keys().next().value!);
    this.seen.set(key, now + timeLeftMs + 2 * clockSkewMs);
    return true;
  }

  /** Drops entries whose window has closed: entries expire in about the order they came. */
  private forgetExpired(now: number): void {
    for (const [key, until] of this.seen) {
      if (until >= now) return;
      this.seen.delete(key);
    }
  }
}
