// How a watch lists its kind. Where the apiserver serves it, as a streaming list: one watch with
// sendInitialEvents=true, which sends what exists as ADDED events, ends them with a bookmark
// annotated k8s.io/initial-events-end, and goes on as the watch (the WatchList feature: served by
// default in Kubernetes 1.32 and from 1.34 on, not in 1.33, whose gate ships off; client-go's
// reflectors use it by default since 1.35). Where it does not, by pages of 500.
//
// Why streaming first: the apiserver serves it from its watch cache object by object, where a
// page of a large list is built whole in its memory. Measured on this project's cluster (P8,
// docs/performance.md; one run, streaming first): at 120,000 objects the bridge's streaming
// lists raised the apiserver's Go heap by 142 MiB against 225 by pages, and listed in 11.4 s
// against 13.3; and they are one request per watch where pages were 240 LIST requests.
//
// Why pages still: an apiserver without the feature (before 1.27, 1.33 as shipped, or with its
// gate off) refuses the request as invalid (422), as may an aggregated API's own server: that
// watch then lists by pages from there on, and says so once. A 429 means the apiserver's watch
// cache of the kind is not ready yet (a CRD just established), where a LIST is served from etcd:
// that one list goes by pages at once. A streaming list that fails
// otherwise — cut, ended before its bookmark (the apiserver closing a watcher that fell behind,
// a restart, its timeout), an ERROR line — is a failed list, tried again after backoff; after
// three in a row the next attempt lists by pages, and the one after streams again. (client-go,
// as far as this project knows, falls back to a LIST after one failed streaming list; kfn
// retries the stream first, since a cut is usually the apiserver's, not a lack of support.)
import { ApiError, collectionPath, listPages, metadataListAccept, type KubeApi, type KubeObject, type ResourceInfo } from '../kube/api.ts';
import type { ListIntake, WatchEvent } from './store.ts';

/** 'stream': a streaming list where the apiserver serves one, pages where not; 'pages': always pages. */
export type ListMode = 'stream' | 'pages';

/** The annotation of the bookmark that ends a streaming list's initial events. */
export const initialEventsEnd = 'k8s.io/initial-events-end';

/**
 * The query of a streaming list: no resourceVersion with NotOlderThan is a consistent read (what
 * exists now, as a quorum read would answer), and its end comes as a bookmark, so bookmarks are
 * on. timeoutSeconds as any watch's (5–10 minutes): it bounds the wait for the bookmark too.
 * 120,000 objects streamed in 11 s here; a million, by that rate about 100 s, is an estimate.
 */
export function streamingListQuery(labelSelector: string | undefined, timeoutSeconds: number): Record<string, string | number | undefined> {
  return { watch: 'true', sendInitialEvents: 'true', resourceVersionMatch: 'NotOlderThan', allowWatchBookmarks: 'true', timeoutSeconds, labelSelector };
}

/** Whether a failed streaming list says the apiserver does not serve one (not that listing failed): its options refused as invalid (422). */
export function refusesStreaming(err: unknown): boolean {
  return err instanceof ApiError && err.status === 422;
}

/** Streaming lists failed in a row after which the next attempt lists by pages. */
export const streamAttempts = 3;

interface Line {
  type: string;
  object: KubeObject;
}

/** One streaming list under way: its initial events taken into the store until the bookmark that ends them. */
export class StreamedList {
  readonly relist: boolean;
  /** False once the bookmark came: the lines after it are the watch's. */
  open = true;
  /** The list's resourceVersion (the bookmark's) and how many objects it named that the store keeps, once it ended. */
  resourceVersion = '';
  objects = 0;
  private readonly intake: ListIntake;
  private readonly tell: (event: WatchEvent) => void;

  constructor(intake: ListIntake, relist: boolean, tell: (event: WatchEvent) => void) {
    this.intake = intake;
    this.relist = relist;
    this.tell = tell;
  }

  /** Takes a line of the initial events, answering true; false for one that is not (an ERROR, which the watch handles). */
  take(line: Line): boolean {
    switch (line.type) {
      case 'ADDED':
      case 'MODIFIED':
        this.intake.take(line.object, this.tell);
        return true;
      case 'BOOKMARK':
        if (line.object.metadata?.annotations?.[initialEventsEnd] === 'true') {
          this.objects = this.intake.end(this.tell);
          this.resourceVersion = line.object.metadata.resourceVersion ?? '';
          this.open = false;
        }
        return true;
      case 'DELETED':
        this.intake.forget(line.object, this.tell);
        return true;
      default:
        return false;
    }
  }
}

type Log = (level: 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;

/** How one watch lists: streaming until the apiserver refuses it, then by pages of a size whose answers fit. */
export class Lister {
  /** 'stream' until a streaming list was refused. */
  mode: ListMode;
  /** Streaming lists failed since the last list completed. */
  private failedStreams = 0;
  /** Objects asked for a page: the option's, less once pages of it were too large (kept for the next lists: these objects are large). */
  private pageSize: number;
  private readonly api: KubeApi;
  private readonly resource: ResourceInfo;
  private readonly o: { lists: ListMode; pageSize: number; maxPageBytes: number; projection: 'metadata' | 'full'; namespace?: string; labelSelector?: string; log?: Log };

  constructor(api: KubeApi, resource: ResourceInfo, options: Lister['o']) {
    this.api = api;
    this.resource = resource;
    this.o = options;
    this.mode = options.lists;
    this.pageSize = options.pageSize;
  }

  /** Whether the next list streams: unless refused, or after streamAttempts failed streaming lists in a row (that one attempt by pages). */
  get streams(): boolean {
    return this.mode === 'stream' && this.failedStreams < streamAttempts;
  }

  /** A list completed (either way): the next one streams again, where served. */
  listed(): void {
    this.failedStreams = 0;
  }

  /** The query of a streaming list (streamingListQuery) of this watch's objects. */
  streamQuery(timeoutSeconds: number): Record<string, string | number | undefined> {
    return streamingListQuery(this.o.labelSelector, timeoutSeconds);
  }

  /** A list by pages, bounded in bytes (listPages): halved while a page is too large. */
  pages(signal: AbortSignal): AsyncIterable<{ items?: KubeObject[]; metadata?: { resourceVersion?: string } }> {
    return listPages<KubeObject>(this.api, collectionPath(this.resource, this.o.namespace), {
      query: { labelSelector: this.o.labelSelector },
      accept: this.o.projection === 'metadata' ? metadataListAccept : 'application/json',
      signal,
      pageSize: this.pageSize,
      maxPageBytes: this.o.maxPageBytes,
      onSmallerPages: (n) => {
        this.pageSize = n;
        this.o.log?.('warn', `a list page was larger than ${this.o.maxPageBytes} bytes: asking for ${n} objects a page`, { pageSize: n });
      },
    });
  }

  /**
   * A streaming list ended before its bookmark with `err`. True when the next list goes by pages
   * at once: the apiserver does not serve one (refused as invalid: pages from now on, said once),
   * or its watch cache is not ready (429: this one list). False: it failed as any list may
   * (counted towards one attempt by pages), and is tried again after backoff.
   */
  refused(err: unknown): boolean {
    if (err instanceof ApiError && err.status === 429) {
      this.failedStreams = streamAttempts;
      this.o.log?.('info', "the apiserver's watch cache of this kind is not ready; this list by pages", { why: err.message });
      return true;
    }
    if (!refusesStreaming(err)) {
      if (++this.failedStreams === streamAttempts) this.o.log?.('warn', `${streamAttempts} streaming lists in a row failed; the next list goes by pages`, { error: (err as Error).message });
      return false;
    }
    this.mode = 'pages';
    this.o.log?.('info', 'the apiserver does not serve a streaming list of this kind; listing by pages', { why: (err as Error).message });
    return true;
  }
}
