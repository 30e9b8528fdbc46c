// The chart's alert rules and dashboard (charts/kfn/monitoring) against the metrics kfn exports:
// every metric a rule or a panel queries is one the bridge (bridge/metrics.ts) or a function
// (functions/sdk/metrics.ts) registers, so no alert waits on a series that never comes. A rule
// on a metric nobody exports evaluates to nothing and so never fires, and Prometheus says nothing
// about it: only a check like this one notices.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { BridgeMetrics } from '../../bridge/metrics.ts';
import { FunctionMetrics } from '../../functions/sdk/metrics.ts';

const monitoring = join(import.meta.dirname, '..', '..', 'charts', 'kfn', 'monitoring');

/** Words of PromQL that are not metric names: operators and modifiers. */
const keywords = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool', 'inf', 'nan', 'atan2']);

/**
 * The metric names a PromQL expression reads (Grafana's variables allowed): every identifier
 * that is not a function called, a keyword, a label in a matcher or a grouping, or a string.
 */
export function metricNames(expr: string): string[] {
  const text = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ') // strings
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ') // Grafana variables ($__rate_interval, ${datasource})
    .replace(/label_values\(\s*([^,()]+?)\s*,\s*\w+\s*\)/g, ' $1 ') // label_values(metric, label)
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  const names = new Set<string>();
  for (const m of text.matchAll(/(?<![\w.])[a-zA-Z_:][\w:]*/g)) {
    const called = /^\s*\(/.test(text.slice(m.index + m[0].length));
    if (!called && !keywords.has(m[0].toLowerCase())) names.add(m[0]);
  }
  return [...names];
}

/** Each query of the rule file, by alert. */
function ruleQueries(): { where: string; expr: string }[] {
  const file = parse(readFileSync(join(monitoring, 'kfn-alerts.yaml'), 'utf8')) as { groups: { rules: { alert?: string; record?: string; expr: string }[] }[] };
  return file.groups.flatMap((g) => g.rules.map((r) => ({ where: `kfn-alerts.yaml ${r.alert ?? r.record}`, expr: String(r.expr) })));
}

interface Panel {
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

/** Each query of the dashboard: its panels' (rows' too), its query variables', its annotations'. */
function dashboardQueries(): { where: string; expr: string }[] {
  const d = JSON.parse(readFileSync(join(monitoring, 'kfn-dashboard.json'), 'utf8')) as {
    panels: Panel[];
    templating?: { list: { name: string; type: string; query?: string | { query?: string } }[] };
    annotations?: { list?: { name?: string; expr?: string }[] };
  };
  const out: { where: string; expr: string }[] = [];
  const walk = (panels: Panel[]) => {
    for (const p of panels) {
      for (const t of p.targets ?? []) if (t.expr) out.push({ where: `kfn-dashboard.json panel "${p.title}"`, expr: t.expr });
      walk(p.panels ?? []);
    }
  };
  walk(d.panels);
  for (const v of d.templating?.list ?? []) {
    const query = typeof v.query === 'string' ? v.query : v.query?.query;
    if (v.type === 'query' && query) out.push({ where: `kfn-dashboard.json variable ${v.name}`, expr: query });
  }
  for (const a of d.annotations?.list ?? []) if (a.expr) out.push({ where: `kfn-dashboard.json annotation ${a.name}`, expr: a.expr });
  return out;
}

/** The series names a registry of type `type` named `name` exposes (a histogram's _bucket, _sum and _count). */
function seriesOf(name: string, type: string): string[] {
  return type === 'histogram' || type === 'summary' ? [name, `${name}_bucket`, `${name}_sum`, `${name}_count`] : [name];
}

/** What the bridge exports, as the chart and manifests/ run it. */
async function bridgeSeries(): Promise<Set<string>> {
  const metrics = new BridgeMetrics();
  const exported = await metrics.registry.getMetricsAsJSON();
  return new Set(exported.flatMap((m) => seriesOf(m.name, String(m.type))));
}

/** What a function process exports (its exposition names every metric with a TYPE line, series or not). */
function functionSeries(): Set<string> {
  const text = new FunctionMetrics().text();
  return new Set([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap((m) => seriesOf(m[1]!, m[2]!)));
}

test('PromQL: the metric names of an expression, without functions, labels, keywords or variables', () => {
  assert.deepEqual(
    metricNames('histogram_quantile(0.99, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{controller=~"$controller", x="a b"}[$__rate_interval]) and on (instance) kfn_bridge_info)) > 10'),
    ['controller_runtime_reconcile_time_seconds_bucket', 'kfn_bridge_info'],
  );
  assert.deepEqual(metricNames('a_total > b_seconds and (time() - c_timestamp_seconds) > 300 unless d offset 5m'), ['a_total', 'b_seconds', 'c_timestamp_seconds', 'd']);
  assert.deepEqual(metricNames('label_values(kfn_bridge_concurrency_limit, controller)'), ['kfn_bridge_concurrency_limit']);
  assert.deepEqual(metricNames('(process_resident_memory_bytes and on (instance) kfn_bridge_info) > 400 * 1024 * 1e3'), ['process_resident_memory_bytes', 'kfn_bridge_info']);
});

test('every metric the alert rules and the dashboard query is exported by the bridge or by a function', async () => {
  const queries = [...ruleQueries(), ...dashboardQueries()];
  assert.ok(queries.length >= 30, `found only ${queries.length} queries: is the extraction right?`);
  const exported = new Set([...(await bridgeSeries()), ...functionSeries()]);
  const missing = queries.flatMap((q) => metricNames(q.expr).filter((n) => !exported.has(n)).map((n) => `${q.where}: ${n}`));
  assert.deepEqual(missing, [], 'queries of metrics that neither the bridge nor a function exports');
});

test('the journal\'s metrics are exported before anything fails, so its alert has a series from the start', async () => {
  const exported = await bridgeSeries();
  for (const name of ['kfn_bridge_journal_failures_total', 'kfn_bridge_journal_dropped_lines_total']) assert.ok(exported.has(name), `${name} is exported by a new bridge`);
});
