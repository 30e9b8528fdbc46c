// P8's namespaces case: N namespaces with one MyWeb each, and each contender started fresh,
// alone, with a sink of its own:
//
//   kfn, naming them     the bundled bridge, a Reconciler naming the N namespaces (past ten,
//                        one cluster-wide watch of the kind, filtered: bridge/config.ts);
//   kfn, naming none     the same Reconciler over every namespace;
//   ApiServerSource,     Knative's receive adapter with the N namespaces in its source config (a
//   naming them          reflector per namespace, as its Deployment runs);
//   ApiServerSource, all the adapter with allNamespaces.
//
// For each: the apiserver's LISTs of MyWebs and its 429 answers (any resource) from its own
// counters, before the spawn and once the contender delivers, and the MyWeb watches it holds open; the time from spawn to
// its first delivery of the probe (the MyWeb in the last namespace, changed every half second
// meanwhile: the adapter tells no event for what exists at its start); its settled RSS. The
// adapter runs without client-side rate limits (test/bench/peers/apiserversource), so its
// requests are not slowed here as they would be in its Deployment.
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { reconcilerApiVersion, reconcilerKind } from '../../core/names.ts';
import { MyWeb } from '../../functions/myweb/index.ts';
import { inParallel, sumMetric } from './common.ts';
import { until, type Child, type ScaleBench, type Sink } from './scale.ts';

export interface NamespacesRow {
  contender: string;
  lists: number;
  watches: number;
  /** 429 answers of the apiserver meanwhile (client-side throttling is not seen from there). */
  throttled: number;
  deliveringS: number;
  rssMiB: number;
}

export interface NamespacesResult {
  namespaces: number;
  rows: NamespacesRow[];
}

/** What the namespaces case takes besides ScaleBench: the adapter's binary. */
export interface NamespacesBench extends ScaleBench {
  adapter: string;
}

/**
 * The apiserver's counters now: LISTs of MyWebs and 429s of anything (apiserver_request_total,
 * which counts a request when it ends), and the MyWeb watches open (apiserver_longrunning_requests:
 * a watch is counted in the total only once it ends).
 */
async function counters(b: ScaleBench): Promise<{ lists: number; watches: number; throttled: number }> {
  const text = await b.api.text('GET', '/metrics');
  const requests = (line: string) => line.startsWith('apiserver_request_total{');
  return {
    lists: sumMetric(text, (l) => requests(l) && l.includes('resource="mywebs"') && l.includes('verb="LIST"')),
    watches: sumMetric(text, (l) => l.startsWith('apiserver_longrunning_requests{') && l.includes('resource="mywebs"') && l.includes('verb="WATCH"')),
    throttled: sumMetric(text, (l) => requests(l) && l.includes('code="429"')),
  };
}

/** Makes `count` namespaces with one MyWeb each, measures each contender in turn, deletes the namespaces. */
export async function atManyNamespaces(b: NamespacesBench, count: number, sink: Sink, log: (line: string) => void): Promise<NamespacesResult> {
  const prefix = await b.createNamespace('kfn-compare-nsx');
  const names = [prefix, ...Array.from({ length: count - 1 }, (_, i) => `${prefix}-${i + 1}`)];
  try {
    log(`P8 namespaces: making ${count} namespaces with a MyWeb each`);
    await inParallel(count - 1, 16, (i) => b.api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: names[i + 1] } } }));
    await inParallel(count, 16, (i) => b.api.request('POST', b.webs(names[i]!), { body: b.web('w', 30000 + (i % 2700)) }));
    const probeNs = names.at(-1)!;
    const group = MyWeb.apiVersion.split('/')[0]!;
    const reconciler = (path: string, namespaces: string[]) => {
      const file = join(b.dir, `namespaces${path.replace(/\//g, '-')}.yaml`);
      const spec = { for: { apiVersion: MyWeb.apiVersion, kind: MyWeb.kind }, contract: 1, sink: { uri: `${sink.url}${path}` }, namespaces, maxConcurrentReconciles: 8, resyncPeriodSeconds: 0 };
      writeFileSync(file, stringify({ apiVersion: reconcilerApiVersion, kind: reconcilerKind, metadata: { name: 'namespaces' }, spec }));
      return [...b.bridgeNodeOptions.split(' ').filter(Boolean), b.bundle, 'bridge', `--kubeconfig=${b.kubeconfig}`, `--config=${file}`, '--log-level=error', '--metrics-addr=0'];
    };
    const adapterEnv = (path: string, config: object) => ({ NAME: 'compare', NAMESPACE: names[0]!, K_SINK: `${sink.url}${path}`, K_SOURCE_CONFIG: JSON.stringify({ resources: [{ gvr: { Group: group, Version: 'v1', Resource: 'mywebs' } }], mode: 'Resource', ...config }) });
    const contenders: { contender: string; path: string; start: () => Child }[] = [
      { contender: `kfn, naming the ${count}`, path: '/kfn-named', start: () => b.startProcess('namespaces-kfn-named', process.execPath, reconciler('/kfn-named', names)) },
      { contender: 'kfn, naming none', path: '/kfn-all', start: () => b.startProcess('namespaces-kfn-all', process.execPath, reconciler('/kfn-all', [])) },
      { contender: `ApiServerSource, naming the ${count}`, path: '/adapter-named', start: () => b.startProcess('namespaces-adapter-named', b.adapter, ['--kubeconfig', b.kubeconfig], adapterEnv('/adapter-named', { namespaces: names })) },
      { contender: 'ApiServerSource, all namespaces', path: '/adapter-all', start: () => b.startProcess('namespaces-adapter-all', b.adapter, ['--kubeconfig', b.kubeconfig], adapterEnv('/adapter-all', { allNamespaces: true, namespaces: [] })) },
    ];
    const rows: NamespacesRow[] = [];
    let seq = 0;
    for (const c of contenders) {
      const before = await counters(b);
      sink.watchFor(c.path, (subject) => new RegExp(`(^|/)${probeNs}(/|$)`).test(subject));
      const started = b.now();
      const child = c.start();
      // The probe changes every half second until the contender delivers it.
      const probing = (async () => {
        while (sink.taken.first === undefined && child.exitCode === null) {
          await b.api.request('PATCH', `${b.webs(probeNs)}/w`, { body: { metadata: { labels: { probe: String(++seq) } } }, contentType: 'application/merge-patch+json' }).catch(() => undefined);
          await sleep(500);
        }
      })();
      try {
        const first = await until(`${c.contender}'s first delivery`, child, () => sink.taken.first);
        await probing;
        // What it asks for once delivering: its lists and watches are all open.
        await sleep(5000);
        const after = await counters(b);
        const rssMiB = await b.settledRss(child.pid!);
        const row = { contender: c.contender, lists: after.lists - before.lists, watches: after.watches - before.watches, throttled: after.throttled - before.throttled, deliveringS: (first - started) / 1000, rssMiB };
        log(`P8 namespaces, ${row.contender}: ${row.lists} LISTs, ${row.watches} WATCHes, ${row.throttled} answered 429, delivering after ${row.deliveringS.toFixed(1)} s, ${row.rssMiB.toFixed(0)} MiB`);
        rows.push(row);
      } finally {
        await b.stop(child);
        await probing;
      }
    }
    return { namespaces: count, rows };
  } finally {
    log(`P8 namespaces: deleting the ${count} namespaces`);
    await inParallel(count - 1, 16, (i) => b.api.request('DELETE', `/api/v1/namespaces/${names[i + 1]}`).catch(() => undefined));
    await b.deleteNamespace(prefix).catch((err: Error) => log(`P8 namespaces: ${err.message}; it goes on being deleted in the background`));
  }
}

/** The namespaces case's lines of the table. */
export function namespacesTable(r: NamespacesResult): string[] {
  const lines = ['', `P8 namespaces: ${r.namespaces} namespaces with a MyWeb each, each contender started fresh (the apiserver's MyWeb LIST requests and 429s until it delivers, the MyWeb watches it then holds open; spawn → first delivery of a change in the last namespace)`];
  lines.push(`  ${'contender'.padEnd(36)} LISTs  WATCHes  429s  delivering s  RSS MiB`);
  for (const row of r.rows) lines.push(`  ${row.contender.padEnd(36)} ${String(row.lists).padStart(5)}  ${String(row.watches).padStart(7)}  ${String(row.throttled).padStart(4)}  ${row.deliveringS.toFixed(1).padStart(12)}  ${row.rssMiB.toFixed(0).padStart(7)}`);
  return lines;
}
