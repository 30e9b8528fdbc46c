// Which objects a function may still be reconciling, so that no second delivery of one reaches
// it before the first has ended: a delivery in flight; one that failed in a way that may leave
// the function at work (bridge/outcome.ts); and, across processes, what the previous holder of
// a Lease handed over on leaving, or — when it left without a word (killed, partitioned) —
// everything it could have had in flight. The Bridge keeps one Holds for all its controllers,
// so a controller rebuilt after a Reconciler edit sees the holds of the one before it.
import type { Takeover } from './leader.ts';
import { deadlineGraceMs } from './outcome.ts';
import type { Clock } from '../core/clock.ts';

/** The Lease annotation a holder leaving gracefully writes its holds into. */
export const heldAnnotation = 'kfn.dev/held';

/** The longest any delivery may run: the schema's maximum timeoutSeconds. */
const longestTimeoutMs = 900_000;

/** Past this size, a hand-over says "everything" instead of listing keys (annotations are bounded). */
const maxHandOverChars = 64 * 1024;

/** What a holder hands over: per Reconciler, per key, how many ms it is still held; or everything. */
type HandOver = { [reconciler: string]: { [key: string]: number } } | { all: number };

export class Holds {
  private readonly clock: Clock;
  /** Reconciler → key → until when (clock.now()), and who holds it. */
  private readonly byKey = new Map<string, Map<string, { until: number; by?: object }>>();
  /**
   * Holds on every key `covers` selects: after a holder that said nothing, each waits its
   * Reconciler's timeout from `from`; after one that handed over everything, until `until`.
   */
  private blankets: { covers: (key: string) => boolean; from: number; until?: number }[] = [];
  /**
   * The longest timeout of the Reconcilers served (the Bridge keeps it up to date): how long a
   * blanket lasts, and what it is handed on as.
   */
  longestTimeoutMs = longestTimeoutMs;

  constructor(clock: Clock) {
    this.clock = clock;
  }

  /** Told when a hold ends before its time because its delivery answered: `by` is who held it. */
  onReleased?: (reconciler: string, key: string, by: object | undefined) => void;

  /** No delivery of `key` before `until`; `by` is who holds it (a controller, for onReleased). */
  hold(reconciler: string, key: string, until: number, by?: object): void {
    let keys = this.byKey.get(reconciler);
    if (!keys) this.byKey.set(reconciler, (keys = new Map()));
    keys.set(key, { until: Math.max(until, keys.get(key)?.until ?? 0), by });
  }

  /**
   * The key's delivery answered: its hold ends, or becomes `replacement` (an answer that may
   * leave the function at work). Holds taken over from elsewhere were over before it was sent.
   */
  release(reconciler: string, key: string, replacement?: number, by?: object): void {
    const keys = this.byKey.get(reconciler);
    if (replacement !== undefined) return void keys?.set(key, { until: replacement, by });
    if (!keys?.delete(key)) return;
    if (keys.size === 0) this.byKey.delete(reconciler);
    this.onReleased?.(reconciler, key, by);
  }

  /**
   * Until when `key` is held (undefined: not held now), for a Reconciler whose deliveries take
   * at most `timeoutMs`.
   */
  until(reconciler: string, key: string, timeoutMs: number): number | undefined {
    const now = this.clock.now();
    this.blankets = this.blankets.filter((b) => this.endOf(b) > now);
    let until = this.byKey.get(reconciler)?.get(key)?.until ?? 0;
    for (const b of this.blankets) if (b.covers(key)) until = Math.max(until, b.until ?? b.from + timeoutMs + deadlineGraceMs);
    if (until > now) return until;
    this.byKey.get(reconciler)?.delete(key);
    return undefined;
  }

  /** The annotation that hands the holds of the keys `covers` selects to the next holder. */
  handOver(covers: (key: string) => boolean): string {
    const now = this.clock.now();
    const out: { [reconciler: string]: { [key: string]: number } } = {};
    let latest = 0;
    for (const [reconciler, keys] of this.byKey) {
      for (const [key, { until }] of keys) {
        if (until <= now || !covers(key)) continue;
        (out[reconciler] ??= {})[key] = Math.ceil(until - now);
        latest = Math.max(latest, until - now);
      }
    }
    // A blanket taken over is handed on whole (whose keys it covers is not known by key).
    const blankets = this.blankets.filter((b) => this.endOf(b) > now);
    for (const b of blankets) latest = Math.max(latest, this.endOf(b) - now);
    const listed = JSON.stringify(out);
    return blankets.length || listed.length > maxHandOverChars ? JSON.stringify({ all: Math.ceil(latest) }) : listed;
  }

  /**
   * Takes the keys `covers` selects over as `takeover` says: what a previous holder handed over
   * is held for as long as it said, counted from now (it wrote it earlier: the wait is never
   * short); after a holder that said nothing, every key waits its Reconciler's timeout plus
   * the grace. Answers what it did, for the log.
   */
  takeOver(takeover: Takeover, covers: (key: string) => boolean): string {
    const now = this.clock.now();
    if (takeover.from === 'nobody') return 'nothing held before';
    if (takeover.from === 'expired') {
      this.blankets.push({ covers, from: now });
      return `the previous holder ${takeover.holder} left without handing over: every key waits its Reconciler's timeoutSeconds before its first delivery`;
    }
    // A note that is not what a bridge writes says nothing sure: everything waits the longest.
    let handed: HandOver = { all: longestTimeoutMs + deadlineGraceMs };
    try {
      const parsed: unknown = JSON.parse(takeover.note ?? '{}');
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) handed = parsed as HandOver;
    } catch {
      /* kept: everything waits */
    }
    if (typeof handed.all === 'number') {
      this.blankets.push({ covers, from: now, until: now + Math.min(handed.all, longestTimeoutMs + deadlineGraceMs) });
      return 'the previous holder handed over more than it could list: every key waits';
    }
    let n = 0;
    for (const [reconciler, keys] of Object.entries(handed as Record<string, Record<string, number>>)) {
      for (const [key, ms] of Object.entries(keys)) {
        if (typeof ms !== 'number' || !covers(key)) continue;
        this.hold(reconciler, key, now + Math.min(ms, longestTimeoutMs + deadlineGraceMs));
        n++;
      }
    }
    return `${n} key(s) held as the previous holder handed them over`;
  }

  private endOf(b: { from: number; until?: number }): number {
    return b.until ?? b.from + this.longestTimeoutMs + deadlineGraceMs;
  }
}
