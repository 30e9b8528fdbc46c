// Time from a change to Ready: from the moment the bridge's watch shows a primary's new
// generation (or the object created, or first listed) until it shows the primary's Ready
// condition True for that generation, as kfn_bridge_change_to_ready_seconds reports it. Only
// objects waiting to be Ready after such a change are held (their key, generation and since
// when). It needs the primary's status, which the watch of a contract-2 Reconciler (or one
// mapping by a field of the primary) keeps; the intake (bridge/intake.ts) makes none for a metadata-only watch.
import { readyForGeneration } from '../core/conditions.ts';
import type { KubeObject } from '../kube/api.ts';

export class TimeToReady {
  /** Key → the generation awaited and since when (clock ms). */
  private readonly waiting = new Map<string, { generation: number; since: number }>();
  private readonly observe: (seconds: number) => void;

  constructor(observe: (seconds: number) => void) {
    this.observe = observe;
  }

  /**
   * A primary as its watch shows it now (added or updated; `old`, the version before, when the
   * watch had one). Timing starts with a change of the spec — a new object, or a new generation —
   * not with a Ready object falling back (a pod lost): that is an outage, not a change to wait for.
   */
  seen(key: string, obj: KubeObject, now: number, old?: KubeObject): void {
    const generation = obj.metadata.generation ?? 0;
    const waiting = this.waiting.get(key);
    if (readyForGeneration(obj)) {
      if (waiting && waiting.generation <= generation) {
        this.waiting.delete(key);
        this.observe(Math.max(0, now - waiting.since) / 1000);
      }
      return;
    }
    const changed = !old || (old.metadata.generation ?? 0) !== generation;
    // A new generation while one is awaited: the clock keeps running from the first change the
    // object is not yet Ready for (what a user waiting on it sees).
    if (!waiting) {
      if (changed) this.waiting.set(key, { generation, since: now });
    } else if (generation > waiting.generation) waiting.generation = generation;
  }

  /** The primary is gone (or no longer this Reconciler's): nothing to wait for. */
  gone(key: string): void {
    this.waiting.delete(key);
  }

  /** Objects awaited now (for tests). */
  get size(): number {
    return this.waiting.size;
  }
}
