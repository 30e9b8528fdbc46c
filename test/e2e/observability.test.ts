// The chart's dashboard and alerts against a real Prometheus (built from its Go module): it
// scrapes a bridge and the MyWeb function running as in production while MyWebs are created and
// edited; every query of every panel of charts/kfn/monitoring/kfn-dashboard.json returns data,
// every rule of kfn-alerts.yaml loads and evaluates, and KfnSinkFailing fires when the sink is
// broken and clears once it is mended. The rules are the shipped ones with their windows and
// waits cut to seconds (a test cannot wait 5 minutes); the dashboard's $__rate_interval is 30 s.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { parse, stringify } from 'yaml';
import { ensurePrometheus } from '../../cluster/prometheus.ts';
import { nodePorts } from '../support/ports.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { waitFor } from '../../core/clock.ts';
import { testCluster } from '../support/cluster.ts';
import { freePort } from '../support/bridge.ts';
import { functionStack, stackReport } from '../support/functions.ts';
import { startPrometheus, type Sample } from '../support/prometheus.ts';

const monitoring = join(repoRoot, 'charts', 'kfn', 'monitoring');

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string; legendFormat?: string }[];
}

/** The shipped rules with every range window, every `for` and KfnSinkFailing's 5 minutes cut to what a test can wait for. */
function testRules(text: string): string {
  const cut = text.replace(/\[\d+m\]/g, '[20s]').replace(/^(\s+)for: \d+m$/gm, '$1for: 0s').replace('(time() - kfn_bridge_last_answer_timestamp_seconds) > 300', '(time() - kfn_bridge_last_answer_timestamp_seconds) > 3');
  assert.ok(cut.includes('(time() - kfn_bridge_last_answer_timestamp_seconds) > 3\n'), "KfnSinkFailing's wait cut");
  return cut;
}

/** A panel's query as Grafana sends it: every Reconciler, a 30 s rate window. */
function asSent(expr: string): string {
  return expr.replaceAll('$__rate_interval', '30s').replaceAll('$controller', '.*');
}

const shown = (samples: Sample[]) =>
  samples
    .slice(0, 4)
    .map((s) => `${Object.entries(s.metric).filter(([k]) => !['job', 'instance'].includes(k)).map(([k, v]) => `${k}=${v}`).join(',') || '{}'} ${Number(s.value[1]).toPrecision(3)}`)
    .join('; ');

test('Prometheus scrapes the bridge and a function: every dashboard panel has data, every alert rule evaluates, and KfnSinkFailing fires while the sink is broken and clears once it is mended', async (t) => {
  const cluster = await testCluster();
  const prometheus = await ensurePrometheus({ log: (line) => t.diagnostic(line) });
  const s = await functionStack(t, cluster, 'myweb');
  const configFile = join(s.dir, 'bridge.yaml');
  const reconciler = parse(readFileSync(configFile, 'utf8')) as { metadata: { name: string }; spec: { sink: { uri: string } } };
  const rulesFile = join(s.dir, 'kfn-alerts.yaml');
  writeFileSync(rulesFile, testRules(readFileSync(join(monitoring, 'kfn-alerts.yaml'), 'utf8')));
  const prom = await startPrometheus(t, prometheus, join(s.dir, 'prometheus'), {
    jobs: [
      { job: 'kfn-bridge', targets: [new URL(s.bridge.metricsUrl).host] },
      { job: 'kfn-functions', targets: [new URL(reconciler.spec.sink.uri).host] },
    ],
    ruleFiles: [rulesFile],
  });
  const report = () => `${stackReport(s)}\nprometheus log: ${readFileSync(prom.log, 'utf8').trimEnd().split('\n').slice(-5).join('\n')}`;
  let targets: Awaited<ReturnType<typeof prom.targets>> = [];
  await waitFor('both targets scraped', async () => (targets = await prom.targets()).length === 2 && targets.every((x) => x.health === 'up'), { timeoutMs: 60_000, context: () => JSON.stringify(targets) });

  // Work for the panels: MyWebs created, one edited (a new generation to become Ready for).
  const kubectl = (...args: string[]) => promisify(execFile)(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, '-n', s.ns, ...args]);
  const nextPort = nodePorts('e2e/observability');
  const web = (name: string, port: number, html: string) => ({ apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: port, pageContentHtml: html } });
  for (const name of ['one', 'two', 'three']) await s.api.request('POST', s.objects, { body: web(name, await nextPort(s.api), `<p>${name}</p>`) });
  await kubectl('wait', '--for=condition=Ready', 'myweb/one', 'myweb/two', 'myweb/three', '--timeout=120s').catch((err) => assert.fail(`${err}\n${report()}`));
  await s.api.request('PATCH', `${s.objects}/one`, { body: { spec: { pageContentHtml: '<p>one, edited</p>' } }, contentType: 'application/merge-patch+json' });

  // Every query of every panel, as Grafana would send it, returns samples.
  const dashboard = JSON.parse(readFileSync(join(monitoring, 'kfn-dashboard.json'), 'utf8')) as { panels: Panel[] };
  const queries = dashboard.panels.flatMap((p) => (p.targets ?? []).map((q) => ({ panel: p.title, expr: asSent(q.expr) })));
  assert.ok(queries.length >= 20, `the dashboard has its panels (${queries.length} queries)`);
  for (const q of queries) {
    const samples = await waitFor(`data for "${q.panel}": ${q.expr}`, async () => {
      const result = await prom.query(q.expr);
      return result.length ? result : undefined;
    }, { timeoutMs: 90_000, intervalMs: 1000, context: report });
    t.diagnostic(`${q.panel} | ${q.expr} → ${shown(samples)}`);
  }

  // Every alert rule loads and evaluates (health ok); none fires while all is well.
  let seen: Awaited<ReturnType<typeof prom.rules>> = [];
  const rules = await waitFor('every rule evaluated', async () => {
    seen = await prom.rules();
    return seen.length && seen.every((r) => r.health === 'ok') ? seen : undefined;
  }, { timeoutMs: 30_000, context: () => JSON.stringify(seen.filter((r) => r.health !== 'ok')) });
  const shipped = (parse(readFileSync(join(monitoring, 'kfn-alerts.yaml'), 'utf8')) as { groups: { rules: { alert: string }[] }[] }).groups.flatMap((g) => g.rules.map((r) => r.alert));
  assert.deepEqual(rules.map((r) => r.name).sort(), [...shipped].sort());
  const firing = async (name: string) => (await prom.rules()).find((r) => r.name === name)?.alerts?.filter((a) => a.state === 'firing') ?? [];
  assert.deepEqual(await firing('KfnSinkFailing'), [], 'the sink works');

  // The sink breaks: the Reconciler now points at a closed port, and an edit needs a delivery.
  const closed = `http://127.0.0.1:${await freePort()}/`;
  writeFileSync(configFile, stringify({ ...reconciler, spec: { ...reconciler.spec, sink: { ...reconciler.spec.sink, uri: closed } } }));
  const broke = Date.now();
  await s.api.request('PATCH', `${s.objects}/two`, { body: { spec: { pageContentHtml: '<p>two, edited while the sink is down</p>' } }, contentType: 'application/merge-patch+json' });
  const alerts = await waitFor('KfnSinkFailing to fire', async () => {
    const a = await firing('KfnSinkFailing');
    return a.length ? a : undefined;
  }, { timeoutMs: 90_000, intervalMs: 1000, context: report });
  t.diagnostic(`KfnSinkFailing fired ${Date.now() - broke} ms after the sink broke: ${JSON.stringify(alerts.map((a) => a.labels))}`);
  assert.deepEqual(alerts.map((a) => a.labels.controller), [reconciler.metadata.name]);
  const failures = await prom.query(`sum by (reason) (kfn_bridge_sink_failures_total{controller="${reconciler.metadata.name}"}) > 0`);
  assert.deepEqual(failures.map((f) => f.metric.reason), ['connection'], 'counted as failed connections');

  // Mended: the Reconciler points at the function again; the alert clears.
  writeFileSync(configFile, stringify(reconciler));
  const mended = Date.now();
  await waitFor('KfnSinkFailing to clear', async () => (await firing('KfnSinkFailing')).length === 0, { timeoutMs: 90_000, intervalMs: 1000, context: report });
  t.diagnostic(`KfnSinkFailing cleared ${Date.now() - mended} ms after the sink was mended`);
  await kubectl('wait', '--for=jsonpath={.status.conditions[?(@.type=="Ready")].status}=True', 'myweb/two', '--timeout=60s');
});
