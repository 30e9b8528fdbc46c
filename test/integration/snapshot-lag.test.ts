// Contract 2 under a lagging cache: the bridge's watch of a child kind gets every line seconds
// late while the function writes, is edited and resyncs every second. No reconcile may act on a
// snapshot older than its own writes: the child's content never goes back to an older version,
// the status that reports it never regresses, Ready never flaps at one generation; and the
// bridge counts the deliveries it held back for the watch to catch up.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { stringify } from 'yaml';
import { startBridge } from '../../bridge/main.ts';
import { waitFor } from '../../core/clock.ts';
import { ConfigMap, defineKind, defineReconciler, serve, t } from '../../functions/sdk/index.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { applyObject, KubeApi, type RequestOptions } from '../../kube/api.ts';
import { loadConnection } from '../../kube/kubeconfig.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { freePort } from '../support/bridge.ts';

/** An API client whose watches of one resource deliver every line `lagMs` late, in order. */
class LaggingApi extends KubeApi {
  lagMs = 0;
  private readonly plural: string;
  constructor(kubeconfig: string, plural: string) {
    super(loadConnection(kubeconfig));
    this.plural = plural;
  }
  override async stream(path: string, options: RequestOptions, onLine: (value: unknown) => void, onData?: () => void): Promise<void> {
    if (!path.endsWith(`/${this.plural}`) || options.query?.watch !== 'true') return super.stream(path, options, onLine, onData);
    let chain: Promise<void> = Promise.resolve();
    try {
      await super.stream(path, options, (line) => {
        const due = Date.now() + this.lagMs;
        chain = chain.then(async () => {
          await sleep(Math.max(0, due - Date.now()));
          onLine(line);
        });
      }, onData);
    } finally {
      await chain;
    }
  }
}

test('a lagging watch of a child kind: no reconcile acts on a snapshot older than its own writes', async (tc: TestContext) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(tc, cluster, 'lag');
  const group = `${uniqueName('lag')}.kfn.test`;
  const Site = defineKind({ group, version: 'v1', kind: 'Site', spec: t.Object({ version: t.Integer({ minimum: 1 }) }), status: t.Object({ childVersion: t.Optional(t.Integer()) }) });
  await applyObject(api, crdOf(Site) as never, 'kfn-test');
  tc.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${Site.plural}.${group}`).catch(() => undefined));
  await waitFor('the Site CRD to be served', () => api.resource(Site.apiVersion, Site.kind));

  // The page of a Site holds its version and a token made when the page is first made, and kept
  // from the live page ever after (what a function does with a generated name or password): a
  // reconcile that sees a snapshot without its own first write makes a second token. The status
  // reports the version the live page has, as the snapshot shows it.
  const fn = defineReconciler({
    for: Site,
    owns: [ConfigMap],
    // The page's data is what it reads of it.
    observe: [{ kind: ConfigMap, fields: ['data'] }],
    reconcile(site, ctx) {
      const live = ctx.owned(ConfigMap, `${site.metadata.name}-page`);
      const childVersion = Number(live?.data?.version ?? 0);
      const token = live?.data?.token ?? randomUUID();
      return {
        children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${site.metadata.name}-page` }, data: { version: String(site.spec.version), token } }],
        status: { childVersion },
        ready: childVersion === site.spec.version ? true : { ready: false, reason: 'PageBehind', message: `the page has version ${childVersion}` },
      };
    },
  });
  const port = await freePort();
  const server = await serve(fn, { port, hostname: '127.0.0.1', credentials: { kind: 'none' }, insecure: true, api, log: pino({ level: 'silent' }) } as never);
  tc.after(() => void server.close());

  const dir = mkdtempSync(join(tmpdir(), 'kfn-lag-'));
  tc.after(() => rmSync(dir, { recursive: true, force: true }));
  const reconciler = functionManifests(fn, { namespace: ns, sinkUri: `http://127.0.0.1:${port}/`, namespaces: [ns], resyncPeriodSeconds: 1 }).find((o) => o.kind === 'Reconciler') as { spec: Record<string, unknown> };
  delete reconciler.spec.auth;
  // No identity: the function's ServiceAccount is not made here, and the bridge's file is the test's own.
  delete reconciler.spec.serviceAccount;
  assert.equal(reconciler.spec.contract, 2);
  const configFile = join(dir, 'bridge.yaml');
  writeFileSync(configFile, stringify(reconciler));
  const lagging = new LaggingApi(cluster.paths.kubeconfig, 'configmaps');
  const bridge = await startBridge({ api: lagging, configFile, metricsAddr: '127.0.0.1:0', logLevel: 'error', shutdownTimeoutMs: 5000 });
  tc.after(() => bridge.stop());

  // What the test sees, from its own watches (not lagged): every version of the page and of the Site.
  const pages: number[] = [];
  const tokens = new Set<string>();
  const statuses: { generation: number; childVersion?: number; ready?: string; observedGeneration?: number }[] = [];
  const stop = new AbortController();
  const streamErrors: string[] = [];
  tc.after(() => stop.abort());
  const path = `/apis/${Site.apiVersion}/namespaces/${ns}/${Site.plural}`;
  // A new CRD's watch cache may still be starting ("storage is (re)initializing"): list until
  // it answers, then watch from the list's version.
  const watchAll = async (collection: string, what: string, onObject: (o: Record<string, unknown>) => void) => {
    const list = await waitFor(`a list of ${what}`, () => api.request<{ metadata: { resourceVersion: string } }>('GET', collection).catch(() => undefined), { timeoutMs: 30_000 });
    void api
      .stream(collection, { query: { watch: 'true', resourceVersion: list.metadata.resourceVersion }, signal: stop.signal }, (line) => onObject((line as { object: Record<string, unknown> }).object))
      .catch((err: Error) => void (stop.signal.aborted || streamErrors.push(`${what}: ${err.message}`)));
  };
  await watchAll(`/api/v1/namespaces/${ns}/configmaps`, 'configmaps', (obj) => {
    const o = obj as unknown as { data?: { version?: string; token?: string } };
    if (o.data?.version) pages.push(Number(o.data.version));
    if (o.data?.token) tokens.add(o.data.token);
  });
  await watchAll(path, 'sites', (obj) => {
    const o = obj as unknown as { metadata: { generation: number }; status?: { childVersion?: number; observedGeneration?: number; conditions?: { type: string; status: string }[] } };
    statuses.push({ generation: o.metadata.generation, childVersion: o.status?.childVersion, observedGeneration: o.status?.observedGeneration, ready: o.status?.conditions?.find((c) => c.type === 'Ready')?.status });
  });

  // The bridge's watch of ConfigMaps gets every line 3 s late from the start: each write of the
  // page is seen by the bridge 3 s after it was made, while resyncs (every second) and edits
  // ask for deliveries meanwhile.
  lagging.lagMs = 3000;
  await api.request('POST', path, { body: { apiVersion: Site.apiVersion, kind: 'Site', metadata: { name: 'site' }, spec: { version: 1 } } });
  const readyAt = async (version: number) =>
    waitFor(`Site Ready at version ${version}`, async () => {
      const o = await api.request<{ status?: { childVersion?: number; conditions?: { type: string; status: string }[] } }>('GET', `${path}/site`);
      return (o.status?.childVersion === version && o.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) || undefined;
    }, { timeoutMs: 60_000 });
  await readyAt(1);
  for (let version = 2; version <= 5; version++) {
    await api.request('PATCH', `${path}/site`, { body: { spec: { version } }, contentType: 'application/merge-patch+json' });
    await sleep(1500);
  }
  await readyAt(5);
  await sleep(2000);

  assert.deepEqual(streamErrors, [], "the test's own watches ran throughout");
  assert.ok(pages.length >= 2 && statuses.length >= 5, `the test's watches saw the page (${pages.length} versions) and the Site (${statuses.length} versions)`);
  // The page was made once: one token, ever.
  assert.equal(tokens.size, 1, `the page got ${tokens.size} different tokens: a reconcile applied it from a snapshot without its own first write`);
  // The page never went back to an older version.
  for (let i = 1; i < pages.length; i++) assert.ok(pages[i]! >= pages[i - 1]!, `the page went back from version ${pages[i - 1]} to ${pages[i]}: a reconcile applied from a stale snapshot (${pages.join(', ')})`);
  // The status never reported an older page than it had before.
  const reported = statuses.map((s) => s.childVersion).filter((v): v is number => v !== undefined);
  for (let i = 1; i < reported.length; i++) assert.ok(reported[i]! >= reported[i - 1]!, `status.childVersion regressed from ${reported[i - 1]} to ${reported[i]}: a reconcile decided on a snapshot older than its own writes (${reported.join(', ')})`);
  // Ready never flapped: at one observed generation it went from False to True at most once, and never back.
  const byGeneration = new Map<number, string[]>();
  for (const s of statuses) if (s.observedGeneration !== undefined && s.ready) byGeneration.set(s.observedGeneration, [...(byGeneration.get(s.observedGeneration) ?? []), s.ready]);
  for (const [generation, seq] of byGeneration) {
    const changes = seq.filter((r, i) => i > 0 && r !== seq[i - 1]);
    assert.ok(changes.length <= 1 && !(changes.length === 1 && changes[0] === 'False'), `Ready flapped at generation ${generation}: ${seq.join(' → ')}`);
  }
  // The bridge held deliveries back for the lagging watch, and said so.
  const metrics = await bridge.metrics.registry.metrics();
  const skips = Number(/^kfn_bridge_stale_snapshot_skips_total\{[^}]*\} (\d+)/m.exec(metrics)?.[1] ?? 0);
  tc.diagnostic(`pages seen: ${pages.join(', ')}; status.childVersion: ${reported.join(', ')}; deliveries held for the lagging watch: ${skips}`);
  assert.ok(skips > 0, 'kfn_bridge_stale_snapshot_skips_total counts the deliveries that waited for the watch');
});
