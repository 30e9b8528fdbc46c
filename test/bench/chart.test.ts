// The benchmark's chart: the panels it draws from a `bench:compare` result, and the SVG it
// writes (its bars in the contenders' colours, to scale, its text escaped).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { comparePanels, compareChart, type Bar } from './chart.ts';

const result = {
  date: '2026-11-22T10:00:00.000Z',
  machine: '2 × test CPU',
  objects: 1000,
  convergence: [
    { contender: 'floor', concurrency: 16, seconds: 50, writesPerObject: 4, readsPerObject: 0 },
    { contender: 'controller-runtime', concurrency: 1, seconds: 60, writesPerObject: 5, readsPerObject: 0, idle: { seconds: 30, writes: 0, reads: 1 } },
    { contender: 'kfn', concurrency: 1, seconds: 200, writesPerObject: 5, readsPerObject: 8, idle: { seconds: 30, writes: 0, reads: 4000 } },
  ],
  memory: [{ objects: 10000, kfn: 130, kfnHeapAfterGc: 20, cr: 65, adapter: 80 }],
};

/** The bars an SVG chart draws: every rect of the given fill, by its width. */
const barWidths = (svg: string, fill: string) => [...svg.matchAll(new RegExp(`<rect x="[\\d.]+" y="[\\d.]+" width="([\\d.]+)" height="16" fill="${fill}"/>`, 'g'))].map((m) => Number(m[1]));

test('the chart has a panel for each part measured, one bar per contender, to scale', () => {
  const panels = comparePanels(result);
  assert.deepEqual(panels.map((p) => p.title.split(':')[0]), ['P1 convergence', 'P3 idle', 'P4 resident memory (MiB; smaller is better)']);
  const p1 = panels[0]!.bars as Bar[];
  assert.deepEqual(p1.map((b) => [b.contender, b.value]), [['floor', 50], ['controller-runtime', 60], ['kfn', 200]]);
  assert.match(p1[2]!.text!, /4\.00× floor/);
  const p4 = panels[2]!.bars.filter((b): b is Bar => 'value' in b);
  assert.deepEqual(p4.map((b) => b.value), [130, 65, 80]);
  assert.match(p4[0]!.text!, /2\.00× c-r/);
});

test('the chart is an SVG document with the contenders\' bars in their colours, longest for the largest value, and its text escaped', () => {
  const svg = compareChart({ ...result, machine: '2 × <test> CPU & co' });
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" width="1100" height="(\d+)"/);
  assert.ok(Number(svg.match(/height="(\d+)"/)![1]) > 200);
  assert.equal(svg.trimEnd().endsWith('</svg>'), true);
  const kfn = barWidths(svg, '#2563eb');
  const cr = barWidths(svg, '#ea580c');
  assert.deepEqual([kfn.length, cr.length], [3, 3], 'one bar each in P1, P3 and P4');
  for (const i of [0, 1, 2]) assert.ok(kfn[i]! > cr[i]!, 'kfn took longer, read more and used more memory here: its bars are the longer ones');
  assert.equal(barWidths(svg, '#16a34a').length, 1, 'ApiServerSource in P4');
  assert.match(svg, /2 × &lt;test&gt; CPU &amp; co/);
});

test('the fleet at rest is a panel of its own: memory to scale, each side beside the twelve controller-runtime operators', () => {
  const fleet = [
    { side: 'controller-runtime ×12 operators', memoryMiB: 400, cpuPerMinute: 0.24, pods: 12 },
    { side: 'kfn on Knative', memoryMiB: 200, cpuPerMinute: 2, pods: 9.5 },
  ];
  const panel = comparePanels({ ...result, fleet }).at(-1)!;
  assert.match(panel.title, /^P7 the fleet at rest/);
  const bars = panel.bars as Bar[];
  assert.deepEqual(bars.map((b) => [b.contender, b.value]), [['controller-runtime', 400], ['kfn', 200]]);
  assert.match(bars[1]!.text!, /200 MiB {2}0\.50× {2}2\.00 CPU s {2}9\.5 pods/);
});

test('P5 shows the Lambda cold starts beside a bare handler and bare Hono, when the run measured them', () => {
  const coldStart = { kfn: [200], hono: [100], operator: [240] };
  const without = comparePanels({ ...result, coldStart }).find((p) => p.title.startsWith('P5'))!;
  assert.equal(without.bars.length, 3);
  const panel = comparePanels({ ...result, coldStart: { ...coldStart, lambda: { kfn: [300, 330, 320], bare: [150, 160, 170], hono: [180, 190, 200] } } }).find((p) => p.title.startsWith('P5'))!;
  const lambda = panel.bars.slice(3);
  assert.match((lambda[0] as { gap: string }).gap, /on Lambda/);
  assert.deepEqual((lambda.slice(1) as Bar[]).map((b) => [b.label.trim(), b.value]), [['kfn function', 320], ['bare handler', 160], ['bare Hono', 190]]);
  assert.match((lambda[1] as Bar).text!, /320 ms {2}1\.68× bare Hono, 2\.00× bare handler/);
});

test('P5 on Knative is a panel of its own: kfn beside bare Hono, both from zero', () => {
  const panel = comparePanels({ ...result, knativeColdStart: { kfn: [1100, 1000, 1200], hono: [900, 800, 1000] } }).find((p) => p.title.startsWith('P5 on Knative'))!;
  assert.deepEqual((panel.bars as Bar[]).map((b) => [b.contender, b.value]), [['kfn', 1100], ['bare Hono', 900]]);
  assert.match((panel.bars[0] as Bar).text!, /1100 ms {2}1\.22× bare Hono/);
});

test('reconcile time over P1, P4 with snapshots and the CPU per delivery are panels too, each beside its peer or goal', () => {
  const convergence = [
    ...result.convergence,
    { contender: 'controller-runtime', concurrency: 4, seconds: 40, writesPerObject: 5, readsPerObject: 0, reconcile: { count: 2000, p50Ms: 20, meanMs: 50 } },
    { contender: 'kfn', concurrency: 4, seconds: 44, writesPerObject: 5, readsPerObject: 0, reconcile: { count: 1800, p50Ms: 30, meanMs: 55 } },
  ];
  const snapshotMemory = { webs: 100, children: 300, emptyRss: 70, emptyHeap: 12, v1Rss: 120, v1Heap: 38, v2Rss: 150, v2Heap: 55, cr: 300 };
  const cpu = { deliveries: 2000, bridge: { perDeliveryMs: 4, busyMs: 8000, places: [], file: 'b' }, function: { perDeliveryMs: 5, busyMs: 10000, places: [], file: 'f' } };
  const panels = comparePanels({ ...result, convergence, snapshotMemory, cpu });
  const reconcile = panels.find((p) => p.title.startsWith('Reconcile time'))!;
  assert.deepEqual((reconcile.bars.filter((b) => 'value' in b) as Bar[]).map((b) => [b.contender, b.value]), [['controller-runtime', 20], ['kfn', 30]]);
  assert.match((reconcile.bars.find((b) => 'value' in b && b.contender === 'kfn') as Bar).text!, /30\.0 ms p50 {2}1\.50× c-r/);
  const snap = panels.find((p) => p.title.startsWith('P4 with snapshots'))!;
  assert.deepEqual((snap.bars as Bar[]).map((b) => [b.contender, b.value]), [['kfn', 120], ['kfn', 150], ['controller-runtime', 300]]);
  assert.match((snap.bars[1] as Bar).text!, /150 MiB {2}0\.50× c-r/);
  const perDelivery = panels.find((p) => p.title.startsWith('CPU per delivery'))!;
  assert.deepEqual((perDelivery.bars as Bar[]).map((b) => [b.contender, b.value]), [['kfn', 9], ['floor', 3]]);
  assert.match((perDelivery.bars[0] as Bar).text!, /9\.00 ms \(bridge 4\.00, function 5\.00\) {2}3\.00× the goal/);
});

test('P8 at cluster scale is a panel: a group per size, kfn beside both controller-runtime caches, then the shards', () => {
  const start = (rssMiB: number) => ({ rssMiB, readyS: 1, apiserverAtStartMiB: 500, apiserverPeakMiB: 800 });
  const scale = {
    sizes: [{ webs: 10000, objects: 20000, kfn: { ...start(100), heapMiB: 20 }, crDefault: start(200), crMetadata: start(50) }],
    sharded: [{ shards: 2, webs: 10000, objects: 20000, replicas: [{ rssMiB: 60, heapMiB: 10 }, { rssMiB: 61, heapMiB: 11 }] }],
  };
  const panel = comparePanels({ ...result, scale }).find((p) => p.title.startsWith('P8'))!;
  assert.deepEqual(panel.bars.filter((b) => 'gap' in b).length, 2);
  assert.deepEqual((panel.bars.filter((b) => 'value' in b) as Bar[]).map((b) => [b.contender, b.value]), [['kfn', 100], ['controller-runtime', 200], ['controller-runtime', 50], ['kfn', 60], ['kfn', 61]]);
  assert.match((panel.bars[1] as Bar).text!, /100 MiB \(heap 1\.02 KiB\/object\) {2}0\.50× c-r, 2\.00× metadata-only/);
});
