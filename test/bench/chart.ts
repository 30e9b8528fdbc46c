// The chart of a `bench:compare` run: one SVG with a panel per part (P1–P8), each contender a
// bar, kfn in blue. SVG is text: no browser, native module or font is needed to write it, and
// any browser or the repository's web view draws it.
//
//   node test/bench/chart.ts .kfn/bench/compare-<time>.json [out.svg]   # redraw a saved run
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ScaleResult } from './scale.ts';
import type { ThroughputResult } from './scale-throughput.ts';

const colours = {
  kfn: '#2563eb',
  'controller-runtime': '#ea580c',
  ApiServerSource: '#16a34a',
  floor: '#787878',
  'bare Hono': '#9333ea',
  text: '#1e1e1e',
  faint: '#969696',
  background: '#ffffff',
  rule: '#e1e1e1',
};

/** A monospace character's width at the chart's font size (13 px): enough to lay the columns out. */
const charWidth = 7.8;
const textWidth = (text: string) => [...text].length * charWidth;
const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** SVG elements, appended in drawing order. */
class Svg {
  private readonly parts: string[] = [];

  rect(x: number, y: number, w: number, h: number, fill: string): void {
    this.parts.push(`<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${w.toFixed(1)}" height="${h}" fill="${fill}"/>`);
  }

  /** `text` with its top left at (x, y). */
  text(x: number, y: number, text: string, fill: string, size = 13): void {
    this.parts.push(`<text x="${x.toFixed(1)}" y="${(y + size).toFixed(1)}" font-size="${size}" fill="${fill}">${escape(text)}</text>`);
  }

  document(width: number, height: number): string {
    return [
      `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace">`,
      `<rect width="100%" height="100%" fill="${colours.background}"/>`,
      ...this.parts,
      '</svg>',
      '',
    ].join('\n');
  }
}

export interface Bar {
  label: string;
  value: number;
  /** What is written after the bar (default: the value). */
  text?: string;
  contender: 'kfn' | 'controller-runtime' | 'ApiServerSource' | 'floor' | 'bare Hono';
}

export interface Panel {
  title: string;
  /** Bars (drawn to the panel's largest value) and, between them, group headings. */
  bars: (Bar | { gap: string })[];
}

const width = 1100;
const margin = 20;
const rowHeight = 24;
const barHeight = 16;

/** Draws the panels one under the other; every bar of a panel on the same scale. */
export function drawPanels(title: string, subtitle: string, panels: Panel[]): string {
  const rows = panels.reduce((n, p) => n + p.bars.length + 2, 0);
  const height = margin * 2 + 60 + rows * rowHeight + panels.length * 10;
  const c = new Svg();
  c.text(margin, margin, title, colours.text, 20);
  c.text(margin, margin + 30, subtitle, colours.faint);
  let y = margin + 70;
  for (const panel of panels) {
    c.rect(margin, y - 6, width - 2 * margin, 1, colours.rule);
    c.text(margin, y, panel.title, colours.text, 14);
    y += rowHeight + 4;
    const bars = panel.bars.filter((b): b is Bar => 'value' in b);
    const max = Math.max(...bars.map((b) => b.value), 1e-9);
    // Labels in a column as wide as the longest; the bars take what the longest value text leaves.
    const labelWidth = Math.max(...bars.map((b) => textWidth(b.label))) + 20;
    const room = width - margin * 2 - labelWidth - Math.max(...bars.map((b) => textWidth(b.text ?? String(b.value)))) - 20;
    for (const bar of panel.bars) {
      if ('gap' in bar) {
        c.text(margin + 10, y, bar.gap, colours.faint);
        y += rowHeight;
        continue;
      }
      c.text(margin + 10, y, bar.label, colours.text);
      const length = Math.max(bar.value > 0 ? 2 : 0, (bar.value / max) * room);
      c.rect(margin + labelWidth, y, length, barHeight, colours[bar.contender]);
      c.text(margin + labelWidth + length + 8, y, bar.text ?? String(bar.value), colours.text);
      y += rowHeight;
    }
    y += rowHeight + 10;
  }
  return c.document(width, height);
}

const fixed = (n: number, digits = 1) => n.toFixed(digits);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? 0;

/** P5 on Lambda: a new environment → its first invocation answered, kfn beside a bare handler and bare Hono. */
function lambdaBars(l: { kfn: number[]; bare: number[]; hono: number[] }): Panel['bars'] {
  const [k, b, h] = [median(l.kfn), median(l.bare), median(l.hono)];
  return [
    { gap: 'on Lambda (new environment -> first invocation answered)' },
    { label: '  kfn function', value: k, text: `${fixed(k, 0)} ms  ${fixed(k / h, 2)}× bare Hono, ${fixed(k / b, 2)}× bare handler`, contender: 'kfn' },
    { label: '  bare handler', value: b, text: `${fixed(b, 0)} ms`, contender: 'bare Hono' },
    { label: '  bare Hono', value: h, text: `${fixed(h, 0)} ms`, contender: 'bare Hono' },
  ];
}

/** The panels of a `bench:compare` result (its JSON), for the parts it measured. */
export function comparePanels(results: Record<string, unknown>): Panel[] {
  const panels: Panel[] = [];
  const conv = results.convergence as { contender: string; concurrency: number; seconds: number; readsPerObject: number; idle?: { reads: number; writes: number }; reconcile?: { p50Ms: number; meanMs: number } }[] | undefined;
  // Concurrency 0 is a contender on its defaults (kfn's adaptive limit).
  const labelOf = (r: { contender: string; concurrency: number }) => (r.contender === 'floor' ? 'floor (16 writers)' : r.concurrency ? `${r.contender} ×${r.concurrency}` : `${r.contender} defaults`);
  const who = (contender: string): Bar['contender'] => (contender === 'floor' ? 'floor' : contender === 'kfn' ? 'kfn' : 'controller-runtime');
  if (conv?.length) {
    const floor = conv[0]!.seconds;
    panels.push({
      title: `P1 convergence: ${results.objects} MyWebs created -> all Ready (seconds; shorter is better)`,
      bars: conv.map((r) => ({ label: labelOf(r), value: r.seconds, text: `${fixed(r.seconds)} s  ${fixed(r.seconds / floor, 2)}× floor`, contender: who(r.contender) })),
    });
    // Each kfn row with a controller-runtime row at the same concurrency, that row beside it.
    const timed = conv.filter((r) => r.reconcile && r.concurrency);
    const pairs = [...new Set(timed.map((r) => r.concurrency))].flatMap((c) => {
      const cr = timed.find((r) => r.contender === 'controller-runtime' && r.concurrency === c);
      const kfn = timed.find((r) => r.contender === 'kfn' && r.concurrency === c);
      return cr && kfn ? [[cr, kfn] as const] : [];
    });
    if (pairs.length) {
      panels.push({
        title: 'Reconcile time over P1: kfn delivery -> answer, controller-runtime Reconcile (ms, p50; shorter is better)',
        bars: pairs.flatMap(([cr, kfn]) => [
          { gap: `×${cr.concurrency}` },
          { label: '  controller-runtime', value: cr.reconcile!.p50Ms, text: `${fixed(cr.reconcile!.p50Ms)} ms p50  (mean ${fixed(cr.reconcile!.meanMs)})`, contender: 'controller-runtime' as const },
          { label: '  kfn', value: kfn.reconcile!.p50Ms, text: `${fixed(kfn.reconcile!.p50Ms)} ms p50  ${fixed(kfn.reconcile!.p50Ms / cr.reconcile!.p50Ms, 2)}× c-r  (mean ${fixed(kfn.reconcile!.meanMs)})`, contender: 'kfn' as const },
        ]),
      });
    }
    const idle = conv.filter((r) => r.idle);
    if (idle.length) {
      panels.push({
        title: 'P3 idle: API requests in one resync period of kfn (fewer is better)',
        bars: idle.map((r) => ({ label: labelOf(r), value: r.idle!.reads + r.idle!.writes, text: `${r.idle!.reads} reads, ${r.idle!.writes} writes`, contender: who(r.contender) })),
      });
    }
  }
  const lat = results.latency as { rows: { rate: string; achieved: number; watchers: Record<string, { p99: number }> }[] } | undefined;
  if (lat?.rows.length) {
    const bars: Panel['bars'] = [];
    for (const r of lat.rows) {
      const watch = r.watchers.watch!.p99;
      bars.push({ gap: `${r.rate}/s (${fixed(r.achieved, 0)} achieved)` });
      bars.push({ label: '  bare watch', value: watch, text: `${fixed(watch)} ms`, contender: 'floor' });
      bars.push({ label: '  kfn bridge', value: r.watchers.kfn!.p99, text: `${fixed(r.watchers.kfn!.p99)} ms  ${fixed(r.watchers.kfn!.p99 / watch, 2)}× watch`, contender: 'kfn' });
      bars.push({ label: '  ApiServerSource', value: r.watchers.adapter!.p99, text: `${fixed(r.watchers.adapter!.p99)} ms  ${fixed(r.watchers.adapter!.p99 / watch, 2)}× watch`, contender: 'ApiServerSource' });
    }
    panels.push({ title: 'P2 write -> arrival, p99 (ms; shorter is better)', bars });
  }
  const mem = results.memory as { objects: number; kfn: number; kfnHeapAfterGc: number; cr: number; adapter: number }[] | undefined;
  if (mem?.length) {
    const bars: Panel['bars'] = [];
    for (const r of mem) {
      bars.push({ gap: `${r.objects.toLocaleString('en')} objects` });
      bars.push({ label: '  kfn bridge', value: r.kfn, text: `${fixed(r.kfn, 0)} MiB (heap after GC ${fixed(r.kfnHeapAfterGc)})  ${fixed(r.kfn / r.cr, 2)}× c-r`, contender: 'kfn' });
      bars.push({ label: '  controller-runtime', value: r.cr, text: `${fixed(r.cr, 0)} MiB`, contender: 'controller-runtime' });
      bars.push({ label: '  ApiServerSource', value: r.adapter, text: `${fixed(r.adapter, 0)} MiB`, contender: 'ApiServerSource' });
    }
    panels.push({ title: 'P4 resident memory (MiB; smaller is better)', bars });
  }
  const snap = results.snapshotMemory as { webs: number; children: number; v1Rss: number; v2Rss: number; cr: number } | undefined;
  if (snap) {
    panels.push({
      title: `P4 with snapshots: ${snap.webs.toLocaleString('en')} MyWebs and their ${snap.children.toLocaleString('en')} children (MiB; smaller is better)`,
      bars: [
        { label: 'kfn bridge, contract 1', value: snap.v1Rss, text: `${fixed(snap.v1Rss, 0)} MiB  ${fixed(snap.v1Rss / snap.cr, 2)}× c-r`, contender: 'kfn' },
        { label: 'kfn bridge, contract 2', value: snap.v2Rss, text: `${fixed(snap.v2Rss, 0)} MiB  ${fixed(snap.v2Rss / snap.cr, 2)}× c-r`, contender: 'kfn' },
        { label: 'controller-runtime', value: snap.cr, text: `${fixed(snap.cr, 0)} MiB`, contender: 'controller-runtime' },
      ],
    });
  }
  const scale = results.scale as ScaleResult | undefined;
  if (scale?.sizes.length) {
    // Heap per watched object (KiB), as scale.ts's kibPerObject: not imported, to keep this file free of the bench's modules.
    const kibPerObject = (mib: number, objects: number) => (mib * 1024) / objects;
    const bars: Panel['bars'] = [];
    for (const s of scale.sizes) {
      const heap = kibPerObject(s.kfn.heapMiB, s.objects);
      bars.push({ gap: `${s.webs.toLocaleString('en')} MyWebs and their ${s.webs.toLocaleString('en')} ConfigMaps` });
      bars.push({ label: '  kfn bridge', value: s.kfn.rssMiB, text: `${fixed(s.kfn.rssMiB, 0)} MiB (heap ${fixed(heap, 2)} KiB/object)  ${fixed(s.kfn.rssMiB / s.crDefault.rssMiB, 2)}× c-r, ${fixed(s.kfn.rssMiB / s.crMetadata.rssMiB, 2)}× metadata-only`, contender: 'kfn' });
      bars.push({ label: '  controller-runtime', value: s.crDefault.rssMiB, text: `${fixed(s.crDefault.rssMiB, 0)} MiB`, contender: 'controller-runtime' });
      bars.push({ label: '  c-r, metadata-only', value: s.crMetadata.rssMiB, text: `${fixed(s.crMetadata.rssMiB, 0)} MiB`, contender: 'controller-runtime' });
    }
    for (const run of scale.sharded ?? []) {
      bars.push({ gap: `--shards ${run.shards} at ${run.webs.toLocaleString('en')} MyWebs (each replica keeps its shard's records)` });
      run.replicas.forEach((r, i) => bars.push({ label: `  kfn replica ${i} of ${run.shards}`, value: r.rssMiB, text: `${fixed(r.rssMiB, 0)} MiB (heap ${fixed(kibPerObject(r.heapMiB, run.objects), 2)} KiB/object)`, contender: 'kfn' }));
    }
    panels.push({ title: 'P8 at cluster scale: resident memory by size (MiB; smaller is better)', bars });
  }
  const throughput = results.scaleThroughput as ThroughputResult | undefined;
  if (throughput?.rounds.length) {
    const bars: Panel['bars'] = [];
    for (const round of ['start', 'changed'] as const) {
      bars.push({ gap: round === 'start' ? 'changed before the start: spawn -> all converged' : 'changed while running: first write -> all converged' });
      const one = throughput.rounds.find((r) => r.contender === 'kfn ×1');
      for (const r of throughput.rounds) {
        const s = round === 'start' ? r.startS : r.changedS;
        const eff = one && r.contender.startsWith('kfn') && r.shards > 1 ? `  efficiency ${fixed((round === 'start' ? one.startS : one.changedS) / (r.shards * s), 2)}` : '';
        bars.push({ label: `  ${r.contender}`, value: s, text: `${fixed(s, 1)} s${eff}`, contender: r.contender.startsWith('kfn') ? 'kfn' : 'controller-runtime' });
      }
    }
    panels.push({ title: `P8 throughput by shards: ${throughput.webs.toLocaleString('en')} MyWebs changed at once (s; smaller is better)`, bars });
  }
  const cold = results.coldStart as { kfn: number[]; kfnContract1?: number[]; hono: number[]; operator: number[]; lambda?: { kfn: number[]; bare: number[]; hono: number[] } } | undefined;
  if (cold) {
    const [k, h, o] = [median(cold.kfn), median(cold.hono), median(cold.operator)];
    const v1 = cold.kfnContract1?.length ? median(cold.kfnContract1) : undefined;
    panels.push({
      title: 'P5 cold start: process start -> first reconcile answered (ms, median)',
      bars: [
        { label: 'kfn function', value: k, text: `${fixed(k, 0)} ms  ${fixed(k / h, 2)}× Hono`, contender: 'kfn' },
        ...(v1 !== undefined ? [{ label: '  contract-1 event', value: v1, text: `${fixed(v1, 0)} ms  ${fixed(v1 / h, 2)}× Hono`, contender: 'kfn' as const }] : []),
        { label: 'bare Hono', value: h, text: `${fixed(h, 0)} ms`, contender: 'bare Hono' },
        { label: 'Go operator', value: o, text: `${fixed(o, 0)} ms`, contender: 'controller-runtime' },
        ...(cold.lambda ? lambdaBars(cold.lambda) : []),
      ],
    });
  }
  const knative = results.knativeColdStart as { kfn: number[]; hono: number[] } | undefined;
  if (knative) {
    const [k, h] = [median(knative.kfn), median(knative.hono)];
    panels.push({
      title: 'P5 on Knative: scale from zero -> first answer (ms, median)',
      bars: [
        { label: 'kfn function', value: k, text: `${fixed(k, 0)} ms  ${fixed(k / h, 2)}× bare Hono`, contender: 'kfn' },
        { label: 'bare Hono', value: h, text: `${fixed(h, 0)} ms`, contender: 'bare Hono' },
      ],
    });
  }
  const rel = results.relists as { objects: number; changed: number; after410: Record<string, number>; missed: Record<string, number> } | undefined;
  if (rel) {
    panels.push({
      title: `P6 relists: ${rel.changed} of ${rel.objects} objects changed while cut off, then 410 Gone`,
      bars: [
        { label: 'kfn bridge: delivered', value: rel.after410.kfn!, text: `${rel.after410.kfn}  (never delivered: ${rel.missed.kfn})`, contender: 'kfn' },
        { label: 'ApiServerSource: delivered', value: rel.after410.adapter!, text: `${rel.after410.adapter}  (never delivered: ${rel.missed.adapter})`, contender: 'ApiServerSource' },
      ],
    });
  }
  const cpu = results.cpu as { bridge: { perDeliveryMs: number }; function: { perDeliveryMs: number }; rounds?: { contender: string; perReconcileMs: Record<string, number> }[] } | undefined;
  if (cpu?.rounds?.length) {
    // Process CPU per reconcile, the Go operator beside kfn's rounds.
    const sum = (r: { perReconcileMs: Record<string, number> }) => Object.values(r.perReconcileMs).reduce((a, b) => a + b, 0);
    const cr = cpu.rounds.find((r) => r.contender.startsWith('controller-runtime'));
    panels.push({
      title: 'CPU per reconcile, ×1 convergence, process CPU (ms; less is better)',
      bars: cpu.rounds.map((r) => ({
        label: r.contender.replace(/^kfn ×1, function /, 'kfn, fn ').slice(0, 30),
        value: sum(r),
        text: `${fixed(sum(r), 2)} ms${cr && r !== cr ? `  ${fixed(sum(r) / sum(cr), 2)}× c-r` : ''}`,
        contender: r.contender.startsWith('kfn') ? 'kfn' : 'controller-runtime',
      })),
    });
  }
  if (cpu) {
    // No peer measures this: the bar beside kfn's is the issue's goal (bridge and function together).
    const [b, f, goal] = [cpu.bridge.perDeliveryMs, cpu.function.perDeliveryMs, 3];
    panels.push({
      title: 'CPU per delivery during a kfn ×1 convergence, bridge and function together (ms; less is better)',
      bars: [
        { label: 'kfn', value: b + f, text: `${fixed(b + f, 2)} ms (bridge ${fixed(b, 2)}, function ${fixed(f, 2)})  ${fixed((b + f) / goal, 2)}× the goal`, contender: 'kfn' },
        { label: 'goal', value: goal, text: `${fixed(goal, 2)} ms`, contender: 'floor' },
      ],
    });
  }
  const fleet = results.fleet as { side: string; memoryMiB: number; cpuPerMinute: number; pods: number }[] | undefined;
  if (fleet?.length) {
    // The ratio is to the twelve controller-runtime operators, when this run measured them.
    const peer = fleet.find((f) => f.side === 'controller-runtime ×12 operators');
    panels.push({
      title: 'P7 the fleet at rest: twelve operators, memory (MiB; smaller is better), CPU per idle minute',
      bars: fleet.map((f) => ({ label: f.side.slice(0, 30), value: f.memoryMiB, text: `${fixed(f.memoryMiB, 0)} MiB  ${peer ? `${fixed(f.memoryMiB / peer.memoryMiB, 2)}×  ` : ''}${fixed(f.cpuPerMinute, 2)} CPU s  ${fixed(f.pods)} pods`, contender: f.side.startsWith('kfn') ? 'kfn' : 'controller-runtime' })),
    });
  }
  return panels;
}

/** The SVG chart of a `bench:compare` result. */
export function compareChart(results: Record<string, unknown>): string {
  return drawPanels('kfn beside its peers', `${String(results.date ?? '').slice(0, 16)}  ${String(results.machine ?? '')}`, comparePanels(results));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [input, output] = process.argv.slice(2);
  if (!input) {
    console.error('usage: node test/bench/chart.ts <compare-….json> [out.svg]');
    process.exit(2);
  }
  const out = output ?? input.replace(/\.json$/, '') + '.svg';
  writeFileSync(out, compareChart(JSON.parse(readFileSync(input, 'utf8')) as Record<string, unknown>));
  console.error(`wrote ${out}`);
}
