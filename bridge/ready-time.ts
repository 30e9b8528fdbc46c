// Time from a change to Ready: from the moment the bridge's watch shows a primary's new
// generation (or the object created) until it shows the primary's Ready condition True for that
// generation, as kfn_bridge_change_to_ready_seconds reports it. Only objects waiting to be Ready
// are held (their key, generation and since when), so an idle fleet costs nothing. It needs the
// primary's status, which a contract-2 Reconciler's watch keeps (the events carry the primary
// whole); with a metadata-only watch no object is ever seen Ready, and nothing is observed.
import { readyForGeneration } from '../core/conditions.ts';
import type { KubeObject } from '../kube/api.ts';

export class TimeToReady {
  /** Key → the generation awaited and since when (clock ms). */
  private readonly waiting = new Map<string, { generation: number; since: number }>();
  private readonly observe: (seconds: number) => void;

  constructor(observe: (seconds: number) => void) {
    this.observe = observe;
  }

  /** A primary as its watch shows it now (added or updated). */
  seen(key: string, obj: KubeObject, now: number): void {
    const generation = obj.metadata.generation ?? 0;
    const waiting = this.waiting.get(key);
    if (readyForGeneration(obj)) {
      if (waiting && waiting.generation <= generation) {
        this.waiting.delete(key);
        this.observe(Math.max(0, now - waiting.since) / 1000);
      }
      return;
    }
    // A new generation while one is awaited: the clock keeps running from the first change the
    // object is not yet Ready for (what a user waiting on it sees).
    if (!waiting) this.waiting.set(key, { generation, since: now });
    else if (generation > waiting.generation) waiting.generation = generation;
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
