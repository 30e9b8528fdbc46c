// P8's list modes: at each size, a bare client reads every MyWeb and ConfigMap of the namespace
// in each of the two ways the apiserver serves a kind's initial state —
//
//   paginated   LIST requests of 500 (what kfn's bridge and controller-runtime's reflectors
//               before client-go 1.35 do);
//   streaming   one watch with sendInitialEvents=true (the WatchList feature: the state as ADDED
//               events from the watch cache, ended by a bookmark annotated
//               k8s.io/initial-events-end), what client-go's reflectors do by default since 1.35;
//
// and for each, how long it took and what the apiserver's Go heap in use (go_memstats_heap_inuse_bytes,
// looked at every 250 ms) rose by meanwhile — its resident set only grows, so the second mode
// would inherit the first's. Paginated first, then streaming, then paginated again: the two
// paginated figures show what the order does.
import { setTimeout as sleep } from 'node:timers/promises';
import { sumMetric } from './common.ts';
import type { KubeApi } from '../../kube/api.ts';

/** What the probes use of the bench: the cluster, the MyWebs' collection, its clock. */
export interface ListBench {
  api: KubeApi;
  webs(ns: string): string;
  now(): number;
}

export type ListMode = 'paginated' | 'streaming';

export interface ListProbe {
  mode: ListMode;
  objects: number;
  seconds: number;
  /** The apiserver's Go heap in use before, and its highest while the list ran (MiB). */
  heapBeforeMiB: number;
  heapPeakMiB: number;
  /** Why this mode could not be measured (the apiserver does not serve it). */
  error?: string;
}

const heapInUse = async (b: Pick<ListBench, 'api'>) => sumMetric(await b.api.text('GET', '/metrics'), (l) => l.startsWith('go_memstats_heap_inuse_bytes ')) / 2 ** 20;

/** The three probes at this size, one after the other, each after the apiserver's heap has had 10 s to settle. */
export async function listModes(b: ListBench, ns: string): Promise<ListProbe[]> {
  const probes: ListProbe[] = [];
  for (const mode of ['paginated', 'streaming', 'paginated'] as const) {
    await sleep(10_000);
    probes.push(await listProbe(b, ns, mode));
  }
  return probes;
}

/** The apiserver's Go heap in use now, and its highest from now until stop() (MiB), a look every 250 ms. */
export async function apiserverHeap(b: Pick<ListBench, 'api'>): Promise<{ beforeMiB: number; stop(): Promise<{ beforeMiB: number; peakMiB: number }> }> {
  const beforeMiB = await heapInUse(b);
  let peakMiB = beforeMiB;
  let looking = true;
  const looker = (async () => {
    while (looking) {
      peakMiB = Math.max(peakMiB, await heapInUse(b).catch(() => 0));
      await sleep(250);
    }
  })();
  return {
    beforeMiB,
    async stop() {
      looking = false;
      await looker;
      return { beforeMiB, peakMiB };
    },
  };
}

async function listProbe(b: ListBench, ns: string, mode: ListMode): Promise<ListProbe> {
  const heap = await apiserverHeap(b);
  const started = b.now();
  let objects = 0;
  let error: string | undefined;
  try {
    for (const path of [b.webs(ns), `/api/v1/namespaces/${ns}/configmaps`]) objects += mode === 'paginated' ? await paginated(b, path) : await streaming(b, path);
  } catch (err) {
    error = (err as Error).message;
  }
  const seconds = (b.now() - started) / 1000;
  const { beforeMiB: heapBeforeMiB, peakMiB: heapPeakMiB } = await heap.stop();
  return { mode, objects, seconds, heapBeforeMiB, heapPeakMiB, ...(error ? { error } : {}) };
}

async function paginated(b: ListBench, path: string): Promise<number> {
  let n = 0;
  let next: string | undefined;
  do {
    const page = await b.api.request<{ items: unknown[]; metadata: { continue?: string } }>('GET', path, { query: { limit: 500, continue: next } });
    n += page.items.length;
    next = page.metadata.continue || undefined;
  } while (next);
  return n;
}

async function streaming(b: ListBench, path: string): Promise<number> {
  let n = 0;
  const abort = new AbortController();
  const query = 'watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true';
  await b.api
    .stream(`${path}?${query}`, { signal: abort.signal }, (line) => {
      const event = line as { type: string; object: { message?: string; metadata?: { annotations?: Record<string, string> } } };
      if (event.type === 'ADDED') n++;
      else if (event.type === 'BOOKMARK' && event.object.metadata?.annotations?.['k8s.io/initial-events-end'] === 'true') abort.abort();
      else if (event.type === 'ERROR') throw new Error(`the streaming list of ${path} failed: ${event.object.message ?? JSON.stringify(event.object)}`);
    })
    .catch((err: unknown) => {
      if (!abort.signal.aborted) throw err;
    });
  if (!abort.signal.aborted) throw new Error(`the streaming list of ${path} ended without the bookmark that ends its initial events`);
  return n;
}

/** The table's line for one size's probes. */
export function listModesLine(webs: number, probes: ListProbe[]): string {
  const one = (p: ListProbe) => (p.error ? `${p.mode}: ${p.error}` : `${p.mode} ${p.seconds.toFixed(1)} s, heap +${(p.heapPeakMiB - p.heapBeforeMiB).toFixed(0)} MiB (to ${p.heapPeakMiB.toFixed(0)})`);
  return `  list modes at ${webs} (a bare client, ${probes.find((p) => !p.error)?.objects ?? '?'} objects; the apiserver's Go heap in use): ${probes.map(one).join('; ')}`;
}
