// A stand-in for the apiserver's transport, for unit tests of the watch and routing logic
// (never for testing against Kubernetes itself: integration tests use the real cluster). It
// keeps objects of one resource with resourceVersions, serves paged lists and watches, and
// lets a test push watch events, bookmarks and 410s, and end a watch as the apiserver would.
import { ApiError, ResponseTooLarge, type KubeApi, type KubeObject, type RequestOptions, type ResourceInfo } from '../../kube/api.ts';

interface OpenWatch {
  query: Record<string, unknown>;
  onLine: (value: unknown) => void;
  end: (err?: Error) => void;
  /** A streaming list's watch while its initial events are sent: the changes meanwhile, sent after them. */
  held?: unknown[];
  /** Its consumer threw: nothing more is read, but the request stays open until aborted. */
  unread?: boolean;
}

export class FakeApiServer {
  readonly resource: ResourceInfo;
  private objects = new Map<string, KubeObject>();
  private rv = 1;
  private watches = new Set<OpenWatch>();
  /** Every request, in order: method, path and query. */
  readonly requests: { method: string; path: string; query: Record<string, unknown> }[] = [];
  /** The oldest resourceVersion a watch may resume from (a compaction raises it: 410 below). */
  compactedBelow = 0;
  /** False: the kind is not served (its CRD deleted): every request answers 404. */
  served = true;
  /**
   * Whether it serves a streaming list (a watch with sendInitialEvents=true), as Kubernetes 1.34+
   * does: its initial events one per turn of the event loop, then the bookmark that ends them.
   * False, it refuses one as invalid (422), as 1.33 does as shipped.
   */
  streamingLists = true;

  constructor(resource: Partial<ResourceInfo> = {}) {
    this.resource = { apiVersion: 'example.com/v1', kind: 'Widget', plural: 'widgets', namespaced: true, verbs: ['list', 'watch'], ...resource };
  }

  private key(o: KubeObject): string {
    return `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
  }

  /** Creates or changes an object (a new resourceVersion); open watches see it. */
  put(name: string, extra: Partial<KubeObject['metadata']> = {}, namespace = 'ns'): KubeObject {
    const key = `${namespace}/${name}`;
    const existed = this.objects.has(key);
    const obj: KubeObject = { metadata: { name, namespace, uid: `uid-${name}`, ...extra, resourceVersion: String(++this.rv) } };
    this.objects.set(key, obj);
    this.broadcast({ type: existed ? 'MODIFIED' : 'ADDED', object: structuredClone(obj) });
    return obj;
  }

  remove(name: string, namespace = 'ns', quietly = false): void {
    const obj = this.objects.get(`${namespace}/${name}`);
    if (!obj) return;
    this.objects.delete(`${namespace}/${name}`);
    const gone = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++this.rv) } };
    if (!quietly) this.broadcast({ type: 'DELETED', object: gone });
  }

  /** Sends a bookmark at the current resourceVersion to open watches. */
  bookmark(): string {
    const rv = String(++this.rv);
    this.broadcast({ type: 'BOOKMARK', object: { metadata: { resourceVersion: rv } } });
    return rv;
  }

  /** Ends every open watch as the apiserver does at its timeout (cleanly) or with an error line. */
  endWatches(error?: { code: number; message: string }): void {
    for (const w of [...this.watches]) {
      if (error) w.onLine({ type: 'ERROR', object: { code: error.code, message: error.message } });
      w.end();
    }
  }

  get openWatches(): number {
    return this.watches.size;
  }

  get currentVersion(): string {
    return String(this.rv);
  }

  private broadcast(line: unknown): void {
    for (const w of this.watches) {
      if (w.held) w.held.push(structuredClone(line));
      else w.onLine(structuredClone(line));
    }
  }

  /** Sends a streaming list's initial events (what matches, as of now) one per turn, then the bookmark that ends them and what changed meanwhile. */
  private async sendInitialEvents(w: OpenWatch, path: string): Promise<void> {
    const rv = String(this.rv);
    const objects = [...this.objects.values()].filter((o) => this.matches(o, w.query, path)).sort((a, b) => this.key(a).localeCompare(this.key(b)));
    w.held = [];
    for (const object of objects) {
      await new Promise((resolve) => setImmediate(resolve));
      if (!this.watches.has(w)) return;
      w.onLine({ type: 'ADDED', object: structuredClone(object) });
    }
    await new Promise((resolve) => setImmediate(resolve));
    if (!this.watches.has(w)) return;
    w.onLine({ type: 'BOOKMARK', object: { metadata: { resourceVersion: rv, annotations: { 'k8s.io/initial-events-end': 'true' } } } });
    const held = w.held;
    w.held = undefined;
    for (const line of held) if (this.watches.has(w)) w.onLine(line);
  }

  private matches(o: KubeObject, query: Record<string, unknown>, path: string): boolean {
    const ns = path.match(/\/namespaces\/([^/]+)\//)?.[1];
    if (ns && o.metadata.namespace !== ns) return false;
    const selector = query.labelSelector as string | undefined;
    if (!selector) return true;
    return selector.split(',').every((term) => {
      const [k, v] = term.split('=');
      return o.metadata.labels?.[k!] === v;
    });
  }

  /** A KubeApi whose transport is this fake (only what the watcher and bridge use). */
  api(): KubeApi {
    const server = this;
    const fake = {
      connection: { reset() {}, server: 'https://fake', headers: () => ({}) },
      async resource() {
        return server.resource;
      },
      async request(method: string, path: string, options: RequestOptions = {}) {
        const query = Object.fromEntries(Object.entries(options.query ?? {}).filter(([, v]) => v !== undefined));
        server.requests.push({ method, path, query });
        if (!server.served) throw new ApiError(404, 'the server could not find the requested resource');
        if (method !== 'GET') throw new ApiError(405, `${method} not supported by the fake`);
        const all = [...server.objects.values()].filter((o) => server.matches(o, query, path)).sort((a, b) => server.key(a).localeCompare(server.key(b)));
        const start = Number(query.continue ?? 0);
        const limit = Number(query.limit ?? all.length);
        const page = all.slice(start, start + limit);
        const next = start + limit < all.length ? String(start + limit) : undefined;
        const answer = { metadata: { resourceVersion: String(server.rv), ...(next ? { continue: next } : {}) }, items: page };
        // As KubeApi reads a bounded answer: one too long is dropped.
        if (options.maxBytes !== undefined && Buffer.byteLength(JSON.stringify(answer)) > options.maxBytes) throw new ResponseTooLarge(`GET ${path}`, options.maxBytes);
        return structuredClone(answer);
      },
      stream(path: string, options: RequestOptions, onLine: (value: unknown) => void, onData?: () => void) {
        const query = Object.fromEntries(Object.entries(options.query ?? {}).filter(([, v]) => v !== undefined));
        server.requests.push({ method: 'WATCH', path, query });
        if (!server.served) return Promise.reject(new ApiError(404, 'the server could not find the requested resource'));
        const streaming = query.sendInitialEvents === 'true';
        if (streaming && !server.streamingLists) return Promise.reject(new ApiError(422, 'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled', 'Invalid'));
        if (streaming && (query.resourceVersionMatch !== 'NotOlderThan' || query.allowWatchBookmarks !== 'true')) return Promise.reject(new ApiError(422, 'sendInitialEvents requires resourceVersionMatch NotOlderThan and allowWatchBookmarks', 'Invalid'));
        if (!streaming && Number(query.resourceVersion) < server.compactedBelow) return Promise.reject(new ApiError(410, 'too old resource version'));
        return new Promise<void>((resolve, reject) => {
          const w: OpenWatch = {
            query,
            onLine: (line) => {
              const obj = (line as { object?: KubeObject }).object;
              if (w.unread || (obj?.metadata?.name && !server.matches(obj, query, path))) return;
              // A line the consumer throws on rejects the stream with that error. The request is
              // then ended only by its signal, as the real one is: the watch stays open until aborted.
              try {
                onData?.();
                onLine(line);
              } catch (err) {
                w.unread = true;
                reject(err);
              }
            },
            end: (err) => {
              server.watches.delete(w);
              if (err) reject(err);
              else resolve();
            },
          };
          server.watches.add(w);
          options.onOpen?.();
          if (streaming) void server.sendInitialEvents(w, path);
          options.signal?.addEventListener('abort', () => w.end(Object.assign(new Error('aborted'), { name: 'AbortError' })), { once: true });
        });
      },
    };
    return fake as unknown as KubeApi;
  }
}

/** Resolves once `check` returns a value other than undefined (polling each turn of the event loop). */
export async function until<T>(what: string, check: () => T | undefined, turns = 10_000): Promise<T> {
  for (let i = 0; i < turns; i++) {
    const v = check();
    if (v !== undefined) return v;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`never happened: ${what}`);
}
