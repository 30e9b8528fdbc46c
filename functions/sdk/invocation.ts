// What the steps of one invocation share, whichever module holds them: runtime.ts runs them in
// the order docs/functions.md gives, children.ts and finalizer.ts hold two of them, and neither
// needs anything of runtime.ts.
import type { Logger } from 'pino';
import type { Change } from '../../core/response.ts';
import type { KubeApi, ResourceInfo } from '../../kube/api.ts';
import type { Reconciler } from './reconciler.ts';

/** A failure the bridge should retry: HTTP 500 with a message naming the object and the step. */
export class ReconcileError extends Error {
  readonly step: string;
  constructor(step: string, object: string, cause: unknown) {
    super(`${step} for ${object} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.step = step;
  }
}

/** What a step gets of the invocation it runs in. */
export interface InvocationScope {
  readonly reconciler: Reconciler;
  /** Bound to the delivery's deadline, every request counted. */
  readonly api: KubeApi;
  readonly log: Logger;
  readonly now: () => Date;
  /** The primary, as messages name it. */
  readonly name: string;
  readonly primaryPath: string;
  /** Every write so far, in order: the answer's `changes`, and a failure's. */
  readonly changes: Change[];
  /** Runs one step, unless the deadline has passed; a failure names the step and the object. */
  step<T>(what: string, fn: () => Promise<T>): Promise<T>;
  /** The resource of a kind: as the event names it for a kind the reconciler owns, else from discovery. */
  resource(apiVersion: string, kind: string): Promise<ResourceInfo>;
}
