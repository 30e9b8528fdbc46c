// The histogram arithmetic behind bench:compare's reconcile-cost figure: both contenders' reconcile
// times go through the same buckets and the same interpolation.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { histogramOf, histogramQuantile, parseHistogram, profilePlaces, sumMetric } from './common.ts';

test('a quantile is interpolated inside its bucket, as histogram_quantile does', () => {
  // 10 values at 7 ms (bucket 5–10 ms), 10 at 30 ms (bucket 25–50 ms).
  const h = histogramOf([...Array(10).fill(0.007), ...Array(10).fill(0.03)]);
  assert.equal(h.count, 20);
  assert.ok(Math.abs(h.sum - 0.37) < 1e-9);
  assert.ok(Math.abs(histogramQuantile(h, 0.5) - 0.01) < 1e-9, 'the 10th of 20 is the top of the 5–10 ms bucket');
  assert.ok(Math.abs(histogramQuantile(h, 0.75) - 0.0375) < 1e-9, 'the 15th is half-way through the 25–50 ms bucket');
  assert.ok(Number.isNaN(histogramQuantile(histogramOf([]), 0.5)));
});

test('a histogram is read from a Prometheus exposition, summed over its label sets', () => {
  const text = [
    '# TYPE controller_runtime_reconcile_time_seconds histogram',
    'controller_runtime_reconcile_time_seconds_bucket{controller="a",le="0.005"} 1',
    'controller_runtime_reconcile_time_seconds_bucket{controller="a",le="0.01"} 3',
    'controller_runtime_reconcile_time_seconds_bucket{controller="a",le="+Inf"} 4',
    'controller_runtime_reconcile_time_seconds_sum{controller="a"} 0.5',
    'controller_runtime_reconcile_time_seconds_count{controller="a"} 4',
    'controller_runtime_reconcile_time_seconds_bucket{controller="b",le="0.005"} 0',
    'controller_runtime_reconcile_time_seconds_bucket{controller="b",le="0.01"} 0',
    'controller_runtime_reconcile_time_seconds_bucket{controller="b",le="+Inf"} 2',
    'controller_runtime_reconcile_time_seconds_sum{controller="b"} 1',
    'controller_runtime_reconcile_time_seconds_count{controller="b"} 2',
    'controller_runtime_reconcile_errors_total{controller="a"} 7',
  ].join('\n');
  const h = parseHistogram(text, 'controller_runtime_reconcile_time_seconds');
  assert.deepEqual(h, { buckets: [{ le: 0.005, count: 1 }, { le: 0.01, count: 3 }, { le: Infinity, count: 6 }], sum: 1.5, count: 6 });
  assert.ok(Math.abs(histogramQuantile(h, 0.5) - 0.01) < 1e-9);
});

test("a CPU profile's self time, by package, repository file, Node module or V8's own work; idle left out", () => {
  const frame = (id: number, functionName: string, url: string) => ({ id, callFrame: { functionName, url } });
  const profile = {
    nodes: [frame(1, '(root)', ''), frame(2, '(idle)', ''), frame(3, 'parse', 'file:///repo/node_modules/yaml/dist/index.js'), frame(4, 'reconcile', 'file:///repo/functions/sdk/runtime.ts'), frame(5, 'write', 'node:internal/streams/writable'), frame(6, '(garbage collector)', '')],
    samples: [2, 3, 4, 4, 5, 6, 2],
    timeDeltas: [5000, 1000, 2000, 2000, 500, 1500, 9000],
  };
  const { busyMs, places } = profilePlaces(profile, '/repo');
  assert.equal(busyMs, 7);
  assert.deepEqual(places, [
    { where: 'functions/sdk/runtime.ts', ms: 4 },
    { where: '(garbage collector)', ms: 1.5 },
    { where: 'yaml', ms: 1 },
    { where: 'node:streams/writable', ms: 0.5 },
  ]);
});

test('sumMetric adds the samples of the lines it is given, never a comment', () => {
  const text = ['# HELP apiserver_request_total Counter', 'apiserver_request_total{code="200",resource="mywebs",verb="LIST"} 3', 'apiserver_request_total{code="200",resource="configmaps",verb="LIST"} 4.5', 'apiserver_request_total{code="200",resource="mywebs",verb="GET"} 100'].join('\n');
  assert.equal(sumMetric(text, (l) => l.includes('verb="LIST"')), 7.5);
  assert.equal(sumMetric(text, (l) => l.includes('apiserver_request_total')), 107.5);
});
