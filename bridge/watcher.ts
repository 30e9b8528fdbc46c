// One list+watch of one kind, written as an explicit state machine, keeping a local store of
// what it has seen. It never gives up:
//
//   list ──ok──▶ watch(rv) ──stream ends / watchdog──▶ watch(latest rv)
//    ▲  │                  ──410 Gone──────────────▶ list (relist; vanished objects → delete)
//    │  └─error─▶ wait ─┐  ──other error───────────▶ wait ──▶ watch(latest rv)
//    └──────────────────┘
//
// Every state says what happens on error: a failed list waits (capped, jittered backoff) and
// lists again; a failed watch waits and resumes from the last resourceVersion seen (bookmarks
// included); only 410 Gone (the version is too old to resume) forces a relist, which compares
// the fresh list with the store and reports objects that disappeared meanwhile as deletes.
//
// Events are a small closed set: `apply` (added or changed, with the previous version when
// known), `delete` (seen or inferred), `synced` (a list has been fully applied). A delete is
// a notification, not a guarantee: an object can vanish between two lists without any
// intermediate state being seen, which is what finalizers are for.
//
// What the store keeps of each object depends on the projection. A `metadata` watch keeps a
// compact record (see `recordOf`): what routing and delivery read, and a digest of what makes
// a change worth a reconcile, not the object. A `full` watch keeps whole objects (less
// managedFields), for the few users that read fields of them.
import { ApiError, collectionPath, defaultMaxPageBytes, listPages, metadataAccept, metadataListAccept, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';
import { delay, systemClock, type Clock } from '../core/clock.ts';
import { WatchStore, type Keeps, type WatchEvent } from './store.ts';

export interface WatcherOptions {
  /** 'metadata': PartialObjectMetadata only (small memory); 'full': whole objects. */
  projection: 'metadata' | 'full';
  /**
   * With 'full': keep only the compact record and these fields (dotted paths such as `status`
   * or `spec.selector`), the parts a function declares it reads; absent, the whole object.
   */
  fields?: string[];
  /** Page size of lists (default 500, as client-go); halved while pages are larger than maxPageBytes. */
  pageSize?: number;
  /** The most bytes one list page may take (default 8 MiB): the bridge never holds a larger answer. */
  maxPageBytes?: number;
  /** Restart a watch that has sent nothing (not even a bookmark) for this long (default 150 s; the apiserver bookmarks about once a minute). */
  inactivityMs?: number;
  /** Server-side watch timeout range in seconds (default 300–600, as client-go's reflector). */
  watchTimeoutSeconds?: [number, number];
  /** Backoff after errors: first and longest delay (default 500 ms, 30 s), jittered. */
  backoffMs?: [number, number];
  /** The backoff's waits and the watchdog run on it (default the system clock). */
  clock?: Clock;
  /** Draws the backoff's jitter and the watch timeout in its range, from [0, 1) (default Math.random). */
  random?: () => number;
  /** Watch one namespace only (a namespaced kind); default all. */
  namespace?: string;
  /** Watch only objects matching this label selector (server-side). */
  labelSelector?: string;
  /**
   * Told when the watch cannot work for a reason a person must fix — the kind is not served
   * (its CRD deleted), or access is forbidden — and told `undefined` once it works again.
   */
  onProblem?: (problem: string | undefined) => void;
  log?: (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;
  /**
   * The store of a watch of the same objects this one replaces: what it held and this one's first
   * list no longer has vanished between the two, and is told as a delete.
   */
  inherit?: Map<string, KubeObject>;
  /**
   * Which objects the store keeps (all when absent): asked for each object listed or changed.
   * Every event is still told; one the store did not keep says `kept: false`. When the answer
   * widens, relist() brings in what was not kept.
   */
  keeps?: Keeps;
}

/** The defaults of the options that have one (each said on WatcherOptions). */
const watcherDefaults = {
  pageSize: 500,
  maxPageBytes: defaultMaxPageBytes,
  inactivityMs: 150_000,
  watchTimeoutSeconds: [300, 600],
  backoffMs: [500, 30_000],
} satisfies Partial<WatcherOptions>;

type State =
  | { phase: 'list'; relist: boolean }
  | { phase: 'watch'; resourceVersion: string }
  | { phase: 'wait'; ms: number; then: State }
  | { phase: 'stopped' };

interface WatchLine {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: KubeObject & { code?: number; reason?: string; message?: string };
}

/** relist() asked for: a list soon (`wanted`), its events told as what is (`widening`) until a list started after the ask completes. */
class RelistRequest {
  wanted = false;
  widening = false;

  ask(): void {
    this.wanted = this.widening = true;
  }

  listStarts(): void {
    this.wanted = false;
  }

  /** A list completed: asked again while it ran, the next one still widens. */
  listDone(): void {
    if (!this.wanted) this.widening = false;
  }
}

/** Thrown inside the watch loop to leave it for a given next state. */
class Transition extends Error {
  readonly next: State;
  constructor(next: State, why: string) {
    super(why);
    this.next = next;
  }
}

/** Ends a watch that has sent nothing (not even a bookmark) for `ms`: fed by everything it sends, stopped when it ends. */
class Watchdog {
  /** True once it ended the watch. */
  silent = false;
  private cancel: (() => void) | undefined;
  private readonly clock: Clock;
  private readonly ms: number;
  private readonly onSilent: () => void;

  constructor(clock: Clock, ms: number, onSilent: () => void) {
    this.clock = clock;
    this.ms = ms;
    this.onSilent = onSilent;
  }

  feed(): void {
    this.cancel?.();
    this.cancel = this.clock.setTimer(() => {
      this.silent = true;
      this.onSilent();
    }, this.ms);
  }

  stop(): void {
    this.cancel?.();
  }
}

/** The wait after `failures` failures in a row: doubling from `first` up to `max`, jittered down by up to half. */
function backoffMs([first, max]: [number, number], failures: number, random: () => number): number {
  const base = Math.min(max, first * 2 ** Math.min(failures, 30));
  return Math.round(base * (0.5 + random() * 0.5));
}

/** What a person must know about a failure to list or watch a kind, or undefined for a transient one. */
function problemOf(err: unknown, resource: ResourceInfo, namespace: string | undefined): string | undefined {
  if (!(err instanceof ApiError)) return undefined;
  const what = `${resource.apiVersion} ${resource.kind}${namespace ? ` in namespace ${namespace}` : ''}`;
  if (err.status === 404) return `the API no longer serves ${what} (was its CRD deleted?); watching again once it is served`;
  if (err.status === 403) return `the bridge may not list/watch ${what}: ${err.message}`;
  return undefined;
}

export class Watcher {
  readonly resource: ResourceInfo;
  /** Everything the watcher knows, by namespace/name: compact records, or whole objects for a `full` watch. */
  readonly store: Map<string, KubeObject>;
  /** The store, and how a list or a watch line changes it (bridge/store.ts). */
  private readonly objects: WatchStore;
  private readonly api: KubeApi;
  private readonly options: Required<Omit<WatcherOptions, 'log' | 'namespace' | 'labelSelector' | 'onProblem' | 'clock' | 'random' | 'fields' | 'inherit' | 'keeps'>> & Pick<WatcherOptions, 'log' | 'namespace' | 'labelSelector' | 'onProblem' | 'fields'>;
  /**
   * The resourceVersion the watch has reached (its list's, then each event's and bookmark's):
   * every change to the objects it watches up to this version is in the store. '' before the
   * first list.
   */
  resourceVersion = '';
  private problem: string | undefined;
  private readonly listeners = new Set<(event: WatchEvent) => void>();
  private state: State = { phase: 'list', relist: false };
  private abort = new AbortController();
  private failures = 0;
  private running: Promise<void> | undefined;
  private synced = false;
  private readonly syncWaiters: (() => void)[] = [];
  /** Counters for metrics and tests. */
  readonly stats = { lists: 0, relists: 0, watches: 0, errors: 0, gone: 0, watchdogRestarts: 0, events: 0 };
  private readonly clock: Clock;
  private readonly random: () => number;
  /** Objects asked for a list page: options.pageSize, less once pages of it were too large. */
  private pageSize: number;

  constructor(api: KubeApi, resource: ResourceInfo, options: WatcherOptions) {
    this.api = api;
    this.resource = resource;
    this.options = { ...watcherDefaults, ...options };
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.objects = new WatchStore(resource, this.options.projection, this.options.fields, options.inherit, options.keeps);
    this.store = this.objects.byKey;
    this.pageSize = this.options.pageSize;
  }

  /** The namespace watched, or undefined for all (or a cluster-scoped kind). */
  get namespace(): string | undefined {
    return this.options.namespace;
  }

  /** True once the first list has been applied. */
  get hasSynced(): boolean {
    return this.synced;
  }

  /**
   * True while the first list is applied, or a list relist() asked for: what these events tell
   * was there before, not a change just made (its work is low priority).
   */
  get listingWhatIs(): boolean {
    return !this.synced || this.relisting.widening;
  }
  private readonly relisting = new RelistRequest();
  /** The watch's current request, ended by relist(). */
  private attempt: AbortController | undefined;

  /**
   * Lists again, soon, from wherever the watch is (a list in progress completes first): what
   * `keeps` now keeps more of is brought in, its objects told as `apply` events without `old`
   * while listingWhatIs holds. Changes the watch saw meanwhile are not lost: the list has them.
   * A store that has left nothing out has nothing to bring in: no list then.
   */
  relist(): void {
    if (this.isStopped() || !this.objects.leftSomeOut) return;
    this.relisting.ask();
    this.attempt?.abort();
  }

  /**
   * Whether the store may be falling behind the cluster: the last list or watch failed (a 410
   * Gone included, however it came) and no list has succeeded, nor a watch been accepted, since.
   * What it holds is then not vouched for (bridge/snapshot.ts): the function reads that kind
   * itself until the watch works again.
   */
  get failing(): boolean {
    return this.broken;
  }
  private broken = false;

  /** Resolves once the first list has been applied. */
  waitForSync(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  subscribe(fn: (event: WatchEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.state = { phase: 'stopped' };
    this.abort.abort();
    await this.running;
  }

  private emit(event: WatchEvent): void {
    for (const fn of this.listeners) {
      try {
        fn(event);
      } catch (err) {
        // A listener bug must not stop the watch; it is logged and the stream goes on.
        this.log('warn', 'watch listener failed', { error: (err as Error).message });
      }
    }
  }

  private log(level: 'info' | 'warn', msg: string, fields: Record<string, unknown> = {}): void {
    this.options.log?.(level, msg, { kind: this.resource.kind, apiVersion: this.resource.apiVersion, ...fields });
  }

  private backoff(): number {
    return backoffMs(this.options.backoffMs, this.failures++, this.random);
  }

  private isStopped(): boolean {
    return this.state.phase === 'stopped';
  }

  private async run(): Promise<void> {
    while (!this.isStopped()) {
      const next = await this.step(this.state);
      // stop() may have run while the step was in progress; it has the last word.
      if (!this.isStopped()) this.state = next;
    }
  }

  private async step(state: State): Promise<State> {
    switch (state.phase) {
      case 'list':
        try {
          const resourceVersion = await this.list(state.relist);
          this.failures = 0;
          this.broken = false;
          this.report(undefined);
          return { phase: 'watch', resourceVersion };
        } catch (err) {
          if (this.abort.signal.aborted) return { phase: 'stopped' };
          this.broken = true;
          const problem = problemOf(err, this.resource, this.options.namespace);
          if (problem) this.report(problem); // a transient error leaves the last verdict as it is
          this.stats.errors++;
          const ms = this.backoff();
          this.log('warn', 'list failed; retrying', { error: (err as Error).message, retryInMs: ms });
          return { phase: 'wait', ms, then: state };
        }
      case 'watch':
        return this.watch(state.resourceVersion);
      case 'wait':
        return (await delay(this.clock, state.ms, this.abort.signal)) ? state.then : { phase: 'stopped' };
      case 'stopped':
        return state;
    }
  }

  /** Lists every page, applies the result to the store, returns the list's resourceVersion. */
  private async list(relist: boolean): Promise<string> {
    this.relisting.listStarts();
    this.stats.lists++;
    if (relist) this.stats.relists++;
    const path = collectionPath(this.resource, this.options.namespace);
    const accept = this.options.projection === 'metadata' ? metadataListAccept : 'application/json';
    const pages = listPages<KubeObject>(this.api, path, {
      query: { labelSelector: this.options.labelSelector },
      accept,
      signal: this.abort.signal,
      pageSize: this.pageSize,
      maxPageBytes: this.options.maxPageBytes,
      onSmallerPages: (n) => {
        this.pageSize = n; // kept for the next lists: these objects are large
        this.log('warn', `a list page was larger than ${this.options.maxPageBytes} bytes: asking for ${n} objects a page`, { pageSize: n });
      },
    });
    const { resourceVersion, objects } = await this.objects.applyList(pages, (event) => this.emit(event));
    this.resourceVersion = resourceVersion;
    this.relisting.listDone();
    this.emit({ type: 'synced', relist });
    if (!this.synced) {
      this.synced = true;
      for (const resolve of this.syncWaiters.splice(0)) resolve();
    }
    this.log('info', relist ? 'relisted' : 'listed', { objects, resourceVersion });
    return resourceVersion;
  }

  private async watch(from: string): Promise<State> {
    if (this.relisting.wanted) return { phase: 'list', relist: true };
    this.stats.watches++;
    let resourceVersion = from;
    const [min, max] = this.options.watchTimeoutSeconds;
    const timeoutSeconds = Math.round(min + this.random() * (max - min));
    const attempt = (this.attempt = new AbortController());
    const onStop = () => attempt.abort();
    this.abort.signal.addEventListener('abort', onStop);
    const watchdog = new Watchdog(this.clock, this.options.inactivityMs, () => attempt.abort());
    try {
      watchdog.feed();
      await this.api.stream(
        collectionPath(this.resource, this.options.namespace),
        {
          query: { watch: 'true', resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds, labelSelector: this.options.labelSelector },
          accept: this.options.projection === 'metadata' ? metadataAccept : 'application/json',
          signal: attempt.signal,
          // Accepted: from here the store is as current as a watch that never broke — it has
          // everything up to the version it resumed from, and will be told of every change after.
          onOpen: () => (this.broken = false),
        },
        (line) => {
          resourceVersion = this.handle(line as WatchLine, resourceVersion);
        },
        () => watchdog.feed(),
      );
      // The apiserver ended the watch (its timeout): resume where we are.
      this.failures = 0;
      return { phase: 'watch', resourceVersion };
    } catch (err) {
      if (err instanceof Transition) return err.next;
      if (this.abort.signal.aborted) return { phase: 'stopped' };
      if (this.relisting.wanted) return { phase: 'list', relist: true };
      this.broken = true;
      if (watchdog.silent) {
        this.stats.watchdogRestarts++;
        // Presume the connection dead (half-open): a new request on it would hang the same way.
        this.api.connection.reset();
        this.log('warn', 'watch silent for too long; reconnecting', { inactivityMs: this.options.inactivityMs, resourceVersion });
        return { phase: 'watch', resourceVersion };
      }
      if (err instanceof ApiError && err.status === 410) return this.gone(resourceVersion);
      if (err instanceof ApiError && (err.status === 404 || err.status === 403)) {
        // The kind went away (its CRD deleted) or access did: say so, and list again — with
        // backoff — until it is back; the list then reconciles the store with what exists.
        this.report(problemOf(err, this.resource, this.options.namespace)!);
        this.stats.errors++;
        const ms = this.backoff();
        this.log('warn', 'watch refused; listing again after backoff', { error: err.message, retryInMs: ms });
        return { phase: 'wait', ms, then: { phase: 'list', relist: true } };
      }
      this.stats.errors++;
      const ms = this.backoff();
      this.log('warn', 'watch failed; resuming after backoff', { error: (err as Error).message, resourceVersion, retryInMs: ms });
      return { phase: 'wait', ms, then: { phase: 'watch', resourceVersion } };
    } finally {
      this.attempt = undefined;
      watchdog.stop();
      this.abort.signal.removeEventListener('abort', onStop);
    }
  }

  private report(problem: string | undefined): void {
    if (problem === this.problem) return;
    this.problem = problem;
    if (problem) this.log('warn', 'watch cannot work', { problem });
    else this.log('info', 'watch works again', {});
    this.options.onProblem?.(problem);
  }

  /**
   * The watch cannot resume: changes since `resourceVersion` may be missing from the store until
   * the relist has completed. Both ways a 410 comes (a watch's ERROR line, the answer to a watch
   * request) pass here, so both leave the store not vouched for.
   */
  private gone(resourceVersion: string): State {
    this.broken = true;
    this.stats.gone++;
    this.log('info', 'resourceVersion expired (410 Gone); relisting', { resourceVersion });
    return { phase: 'list', relist: true };
  }

  /** Applies one watch line; returns the resourceVersion to resume from. */
  private handle(line: WatchLine, resourceVersion: string): string {
    const obj = line.object;
    switch (line.type) {
      case 'BOOKMARK':
        this.resourceVersion = obj.metadata?.resourceVersion ?? resourceVersion;
        return this.resourceVersion;
      case 'ERROR':
        if (obj.code === 410) throw new Transition(this.gone(resourceVersion), 'gone');
        throw new ApiError(obj.code ?? 500, `watch error: ${obj.message ?? JSON.stringify(obj)}`, obj.reason);
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED': {
        this.stats.events++;
        const event = this.objects.line(line.type, obj);
        this.resourceVersion = event.object.metadata.resourceVersion ?? resourceVersion;
        this.emit(event);
        return this.resourceVersion;
      }
    }
  }
}
