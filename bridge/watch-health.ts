// Whether one watch works, as its users and its retries see it: whether its store is vouched for,
// the problem a person must fix (the kind not served, access forbidden), and how long to wait
// before trying again after failures in a row. The Watcher (bridge/watcher.ts) tells it what
// happened; it keeps no clock of its own.
import { ApiError, type ResourceInfo } from '../kube/api.ts';

/** The wait after `failures` failures in a row: doubling from `first` up to `max`, jittered down by up to half. */
export function backoffMs([first, max]: [number, number], failures: number, random: () => number): number {
  const base = Math.min(max, first * 2 ** Math.min(failures, 30));
  return Math.round(base * (0.5 + random() * 0.5));
}

/** What a person must know about a failure to list or watch a kind, or undefined for a transient one. */
export function problemOf(err: unknown, resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, namespace: string | undefined): string | undefined {
  if (!(err instanceof ApiError)) return undefined;
  const what = `${resource.apiVersion} ${resource.kind}${namespace ? ` in namespace ${namespace}` : ''}`;
  if (err.status === 404) return `the API no longer serves ${what} (was its CRD deleted?); watching again once it is served`;
  if (err.status === 403) return `the bridge may not list/watch ${what}: ${err.message}`;
  return undefined;
}

export interface WatchHealthOptions {
  resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>;
  namespace?: string;
  /** Backoff after errors: first and longest delay, jittered by `random`. */
  backoffMs: [number, number];
  random: () => number;
  /** Told a problem a person must fix, and `undefined` once the watch works again. */
  onProblem?: (problem: string | undefined) => void;
  log: (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;
}

export class WatchHealth {
  /**
   * Whether the store may be falling behind the cluster: the last list or watch failed (a 410
   * Gone included, however it came) and no list has succeeded, nor a watch been accepted, since.
   */
  failing = false;
  private failures = 0;
  private problem: string | undefined;
  private readonly o: WatchHealthOptions;

  constructor(options: WatchHealthOptions) {
    this.o = options;
  }

  /** A list completed: the store vouched for, the backoff from its start, any problem over. */
  listed(): void {
    this.failures = 0;
    this.failing = false;
    this.report(undefined);
  }

  /** A watch the apiserver ended in its own time: the next failure backs off from the start. */
  ended(): void {
    this.failures = 0;
  }

  /**
   * A list or watch failed with `err`: failing, its problem said when a person must fix it (a
   * transient error leaves the last verdict as it is). Answers the wait before the next try.
   */
  failed(err: unknown): number {
    this.failing = true;
    const problem = problemOf(err, this.o.resource, this.o.namespace);
    if (problem) this.report(problem);
    return backoffMs(this.o.backoffMs, this.failures++, this.o.random);
  }

  private report(problem: string | undefined): void {
    if (problem === this.problem) return;
    this.problem = problem;
    if (problem) this.o.log('warn', 'watch cannot work', { problem });
    else this.o.log('info', 'watch works again', {});
    this.o.onProblem?.(problem);
  }
}
