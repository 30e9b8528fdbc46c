// Which events a function has already taken, so that a captured request sent again is refused
// (ReplayGuard), and the newest version of each object it took one for, so that an older event
// cannot take a reconcile back to an older spec (NewestVersions).
//
// A delivery is one event id at one attempt (a retry of the same observation keeps its id and
// counts the attempt up, and both are signed). Each is remembered for as long as the signed
// time window could still let it in — the time the event gave, plus the clock skew the window
// allows on either side — and then forgotten, so memory is bounded by the deliveries of that
// window, and by `maxEntries` past it (the oldest go first).
//
// A restart forgets: a request captured in the last window (at most the Reconciler's timeout
// plus two minutes) could be taken once more by the new process.
import { clockSkewMs, maxDeliveryMs } from '../../core/event.ts';
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

/**
 * The newest resourceVersion of each object (by uid) the function has taken an event for. An
 * event that carries the object (contract 2's `observed.primary`: what the reconcile applies) at
 * an older version is refused: a captured request sent again after a newer one was taken would
 * apply children from an older spec. An event that carries only a reference (contract 1, `kfn
 * replay`) is never refused — the function reads the object as it is now — and never lowers the
 * newest. Versions compare as numbers (Kubernetes guarantees it since 1.35); one that is not a
 * number is not compared.
 *
 * An entry is kept for maxDeliveryMs plus the skew either side after it was last taken: an older
 * event was sent before the newer one, so its time window (core/event.ts) has closed by then and
 * the time check refuses it. Memory is bounded by the objects reconciled in that time, and by
 * `maxEntries` (the least recently taken go first: only their protection is lost). A restart,
 * and another replica, start without it: docs/bridge.md says what a replay can still do.
 */
export class NewestVersions {
  private readonly clock: Clock;
  private readonly maxEntries: number;
  /** Object → its newest version and until when (clock.now()) it is kept; in the order they were last taken, which is the order they expire in. */
  private readonly newest = new Map<string, { version: string; until: number }>();

  constructor(clock: Clock, maxEntries = 100_000) {
    this.clock = clock;
    this.maxEntries = maxEntries;
  }

  get size(): number {
    return this.newest.size;
  }

  /**
   * Takes an event for `object` at `version`: undefined, or — when the event carries the object
   * (`carriesObject`) and an older version than one taken — the newer version, and it is refused.
   */
  take(object: string, version: string | undefined, carriesObject: boolean): string | undefined {
    const now = this.clock.now();
    this.forgetExpired(now);
    if (version === undefined || !/^\d+$/.test(version)) return undefined;
    const known = this.newest.get(object);
    if (known && compareVersions(version, known.version) < 0) return carriesObject ? known.version : undefined;
    this.newest.delete(object);
    if (this.newest.size >= this.maxEntries) this.newest.delete(this.newest.keys().next().value!);
    this.newest.set(object, { version, until: now + maxDeliveryMs + 2 * clockSkewMs });
    return undefined;
  }

  private forgetExpired(now: number): void {
    for (const [object, { until }] of this.newest) {
      if (until >= now) return;
      this.newest.delete(object);
    }
  }
}

/** Two decimal resourceVersions compared as numbers, however long. */
function compareVersions(a: string, b: string): number {
  const x = a.replace(/^0+(?=\d)/, '');
  const y = b.replace(/^0+(?=\d)/, '');
  return x.length !== y.length ? x.length - y.length : x < y ? -1 : x > y ? 1 : 0;
}
