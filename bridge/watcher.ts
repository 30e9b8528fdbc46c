// One list+watch of one kind, written as an explicit state machine, keeping a local store of
// what it has seen. It never gives up:
//
//   list ──ok──▶ watch(rv) ──stream ends / watchdog──▶ watch(latest rv)
//   (a streaming list is the list and its watch in one request: bridge/lists.ts)
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
import { ApiError, collectionPath, defaultMaxPageBytes, metadataAccept, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';
import { delay, systemClock, type Clock } from '../core/clock.ts';
import { Lister, StreamedList, type ListMode } from './lists.ts';
import { WatchStore, type Keeps, type WatchEvent } from './store.ts';
import { WatchHealth } from './watch-health.ts';

export interface WatcherOptions {
  /** 'metadata': PartialObjectMetadata only (small memory); 'full': whole objects. */
  projection: 'metadata' | 'full';
  /**
   * With 'full': keep only the compact record and these fields (dotted paths such as `status`
   * or `spec.selector`), the parts a function declares it reads; absent, the whole object.
   */
  fields?: string[];
  /**
   * How it lists (bridge/lists.ts): 'stream' (the default), a streaming list where the apiserver
   * serves one and pages where it does not; 'pages', always pages.
   */
  lists?: ListMode;
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
  lists: 'stream',
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

/**
 * Where the watch's lists stand: whether the first has been applied (and who waits for it), and a
 * relist() asked for — a list soon (`wanted`), its events told as what is (`widening`) until a
 * list started after the ask completes.
 */
class ListProgress {
  synced = false;
  wanted = false;
  widening = false;
  private readonly syncWaiters: (() => void)[] = [];

  /** True while the first list is applied, or a list relist() asked for (Watcher.listingWhatIs). */
  get listingWhatIs(): boolean {
    return !this.synced || this.widening;
  }

  ask(): void {
    this.wanted = this.widening = true;
  }

  /** A list begins (by pages, or streaming): counted, and the relist() asked for before it is under way. */
  listStarts(relist: boolean, stats: { lists: number; relists: number }): void {
    this.wanted = false;
    stats.lists++;
    if (relist) stats.relists++;
  }

  /** A list completed: asked again while it ran, the next one still widens. */
  listDone(): void {
    if (!this.wanted) this.widening = false;
  }

  /** Its completion told: the first list resolves those waiting for it. */
  told(): void {
    if (this.synced) return;
    this.synced = true;
    for (const resolve of this.syncWaiters.splice(0)) resolve();
  }

  waitForSync(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }
}

/** Those told of a watch's events, each in turn: one that throws is logged, and the rest are still told. */
class Listeners {
  private readonly fns = new Set<(event: WatchEvent) => void>();
  private readonly log: (error: Error) => void;

  constructor(log: (error: Error) => void) {
    this.log = log;
  }

  add(fn: (event: WatchEvent) => void): () => void {
    this.fns.add(fn);
    return () => this.fns.delete(fn);
  }

  tell(event: WatchEvent): void {
    for (const fn of this.fns) {
      try {
        fn(event);
      } catch (err) {
        // A listener bug must not stop the watch; it is logged and the stream goes on.
        this.log(err as Error);
      }
    }
  }
}

/** The error a watch's ERROR line carries. */
function errorOf(line: WatchLine): ApiError {
  const obj = line.object;
  return new ApiError(obj.code ?? 500, `watch error: ${obj.message ?? JSON.stringify(obj)}`, obj.reason);
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
  private readonly listeners = new Listeners((error) => this.log('warn', 'watch listener failed', { error: error.message }));
  private state: State = { phase: 'list', relist: false };
  private abort = new AbortController();
  private running: Promise<void> | undefined;
  /** Counters for metrics and tests. */
  readonly stats = { lists: 0, relists: 0, streamed: 0, watches: 0, errors: 0, gone: 0, watchdogRestarts: 0, events: 0 };
  private readonly clock: Clock;
  private readonly random: () => number;
  /** How it lists (streaming, or by pages). */
  private readonly lister: Lister;

  constructor(api: KubeApi, resource: ResourceInfo, options: WatcherOptions) {
    this.api = api;
    this.resource = resource;
    this.options = { ...watcherDefaults, ...options };
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.objects = new WatchStore(resource, this.options.projection, this.options.fields, options.inherit, options.keeps);
    this.store = this.objects.byKey;
    const log = (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => this.log(level, msg, fields);
    this.lister = new Lister(api, resource, { ...this.options, log });
    this.health = new WatchHealth({ resource, namespace: options.namespace, backoffMs: this.options.backoffMs, random: this.random, onProblem: options.onProblem, log });
  }

  /** The namespace watched, or undefined for all (or a cluster-scoped kind). */
  get namespace(): string | undefined {
    return this.options.namespace;
  }

  /** True once the first list has been applied. */
  get hasSynced(): boolean {
    return this.relisting.synced;
  }

  /**
   * True while the first list is applied, or a list relist() asked for: what these events tell
   * was there before, not a change just made (its work is low priority).
   */
  get listingWhatIs(): boolean {
    return this.relisting.listingWhatIs;
  }
  private readonly relisting = new ListProgress();
  /** The watch's current request, ended by relist(); and the streaming list it carries, if any. */
  private attempt: AbortController | undefined;
  private streaming: StreamedList | undefined;

  /**
   * Lists again, soon, from wherever the watch is (a list in progress, streaming or not, completes first): what
   * `keeps` now keeps more of is brought in, its objects told as `apply` events without `old`
   * while listingWhatIs holds. Changes the watch saw meanwhile are not lost: the list has them.
   * A store that has left nothing out has nothing to bring in: no list then.
   */
  relist(): void {
    if (this.isStopped() || !this.objects.leftSomeOut) return;
    this.relisting.ask();
    if (!this.streaming?.open) this.attempt?.abort();
  }

  /**
   * Whether the store may be falling behind the cluster (WatchHealth.failing): what it holds is
   * then not vouched for (bridge/snapshot.ts), and the function reads that kind itself.
   */
  get failing(): boolean {
    return this.health.failing;
  }
  /** Whether it works (bridge/watch-health.ts). */
  private readonly health: WatchHealth;

  /** Resolves once the first list has been applied. */
  waitForSync(): Promise<void> {
    return this.relisting.waitForSync();
  }

  subscribe(fn: (event: WatchEvent) => void): () => void {
    return this.listeners.add(fn);
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
    this.listeners.tell(event);
  }

  private log(level: 'info' | 'warn', msg: string, fields: Record<string, unknown> = {}): void {
    this.options.log?.(level, msg, { kind: this.resource.kind, apiVersion: this.resource.apiVersion, ...fields });
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
        if (this.lister.streams) return this.watch('', state.relist);
        try {
          this.relisting.listStarts(state.relist, this.stats);
          const { resourceVersion, objects } = await this.objects.applyList(this.lister.pages(this.abort.signal), (event) => this.emit(event));
          this.listed(resourceVersion, objects, state.relist, false);
          return { phase: 'watch', resourceVersion };
        } catch (err) {
          if (this.abort.signal.aborted) return { phase: 'stopped' };
          return this.listFailed(err, state);
        }
      case 'watch':
        return this.watch(state.resourceVersion);
      case 'wait':
        return (await delay(this.clock, state.ms, this.abort.signal)) ? state.then : { phase: 'stopped' };
      case 'stopped':
        return state;
    }
  }

  /** A list (of either kind) is complete at `resourceVersion`: the store is vouched for, `synced` told; the watch goes on from there. */
  private listed(resourceVersion: string, objects: number, relist: boolean, streamed: boolean): void {
    this.resourceVersion = resourceVersion;
    this.relisting.listDone();
    this.lister.listed();
    if (streamed) this.stats.streamed++;
    this.emit({ type: 'synced', relist, streamed });
    this.relisting.told();
    this.log('info', relist ? 'relisted' : 'listed', { objects, resourceVersion, ...(streamed ? { streamed } : {}) });
    this.health.listed();
  }

  /** A list failed (by pages, or streaming before its end): the store not vouched for; listed again after backoff. */
  private listFailed(err: unknown, state: State & { phase: 'list' }): State {
    this.stats.errors++;
    const ms = this.health.failed(err);
    this.log('warn', 'list failed; retrying', { error: (err as Error).message, retryInMs: ms });
    return { phase: 'wait', ms, then: state };
  }

  /**
   * Watches from `from`; with `listing` (a streaming list: a relist or not), from what exists. Its
   * initial events are then the list, taken into the store until their bookmark, after which
   * the same request goes on as the watch.
   */
  private async watch(from: string, listing?: boolean): Promise<State> {
    const list = (this.streaming = listing === undefined ? undefined : this.streamedList(listing));
    if (!list && this.relisting.wanted) return { phase: 'list', relist: true };
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
          query: list ? this.lister.streamQuery(timeoutSeconds) : { watch: 'true', resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds, labelSelector: this.options.labelSelector },
          accept: this.options.projection === 'metadata' ? metadataAccept : 'application/json',
          signal: attempt.signal,
          // Accepted: from here the store is as current as a watch that never broke — it has
          // everything up to the version it resumed from, and will be told of every change after.
          // A streaming list's store is vouched for at its bookmark (listed).
          onOpen: list ? undefined : () => (this.health.failing = false),
        },
        (line) => {
          resourceVersion = list?.open ? this.initialEvent(list, line as WatchLine) : this.handle(line as WatchLine, resourceVersion);
        },
        () => watchdog.feed(),
      );
      if (list?.open) throw new Error(attempt.signal.aborted ? 'aborted' : 'the watch ended before its initial events did');
      // The apiserver ended the watch (its timeout): resume where we are.
      this.health.ended();
      return { phase: 'watch', resourceVersion };
    } catch (err) {
      if (err instanceof Transition) return err.next;
      if (this.abort.signal.aborted) return { phase: 'stopped' };
      if (this.relisting.wanted && !list?.open) return { phase: 'list', relist: true };
      if (watchdog.silent) {
        this.stats.watchdogRestarts++;
        // Presume the connection dead (half-open): a new request on it would hang the same way.
        this.api.connection.reset();
      }
      // A streaming list cut before its bookmark: by pages at once where the apiserver refused it, else a failed list.
      const failed = watchdog.silent ? new Error(`silent for ${this.options.inactivityMs} ms`) : err;
      const next = { phase: 'list', relist: list?.relist || this.relisting.wanted } as const;
      if (list?.open) return this.lister.refused(failed) ? next : this.listFailed(failed, next);
      return this.watchFailed(err, resourceVersion, watchdog.silent);
    } finally {
      // Left by a throw from a line (a relist after the bookmark): the request ends here, not at its timeout.
      attempt.abort();
      this.attempt = this.streaming = undefined;
      watchdog.stop();
      this.abort.signal.removeEventListener('abort', onStop);
    }
  }

  /**
   * A line of a streaming list's initial events, taken into the list; an ERROR line (a 410 too) is
   * the list's failure. At the bookmark the list is done, and a relist() asked for meanwhile
   * starts now. Answers the version to resume from ('' until the bookmark).
   */
  private initialEvent(list: StreamedList, line: WatchLine): string {
    // Not an ApiError: an ERROR line (a 410, even a 422) fails this list; only an answer's 422 means not served.
    if (!list.take(line)) throw new Error(`before the bookmark: ${errorOf(line).message}`);
    if (list.open) return '';
    this.listed(list.resourceVersion, list.objects, list.relist, true);
    if (this.relisting.wanted) throw new Transition({ phase: 'list', relist: true }, 'a relist asked for during the list');
    return list.resourceVersion;
  }

  /** A streaming list begins: its intake, told to the listeners as a list's. */
  private streamedList(relist: boolean): StreamedList {
    this.relisting.listStarts(relist, this.stats);
    return new StreamedList(this.objects.beginList(), relist, (event) => this.emit(event));
  }

  /** A watch that had begun failed (a streaming list's, after its bookmark, too): what comes next. */
  private watchFailed(err: unknown, resourceVersion: string, silent: boolean): State {
    this.health.failing = true;
    if (silent) {
      this.log('warn', 'watch silent for too long; reconnecting', { inactivityMs: this.options.inactivityMs, resourceVersion });
      return { phase: 'watch', resourceVersion };
    }
    if (err instanceof ApiError && err.status === 410) return this.gone(resourceVersion);
    if (err instanceof ApiError && (err.status === 404 || err.status === 403)) {
      // The kind went away (its CRD deleted) or access did: say so, and list again — with
      // backoff — until it is back; the list then reconciles the store with what exists.
      this.stats.errors++;
      const ms = this.health.failed(err);
      this.log('warn', 'watch refused; listing again after backoff', { error: err.message, retryInMs: ms });
      return { phase: 'wait', ms, then: { phase: 'list', relist: true } };
    }
    this.stats.errors++;
    const ms = this.health.failed(err);
    this.log('warn', 'watch failed; resuming after backoff', { error: (err as Error).message, resourceVersion, retryInMs: ms });
    return { phase: 'wait', ms, then: { phase: 'watch', resourceVersion } };
  }

  /**
   * The watch cannot resume: changes since `resourceVersion` may be missing from the store until
   * the relist has completed. Both ways a 410 comes (a watch's ERROR line, the answer to a watch
   * request) pass here, so both leave the store not vouched for.
   */
  private gone(resourceVersion: string): State {
    this.health.failing = true;
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
        throw errorOf(line);
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
