// The chart of a `bench:compare` run: one PNG with a panel per part (P1–P6), each contender a
// bar, kfn in blue. Drawn here on a plain pixel buffer with a small built-in font and written as
// a PNG by hand (zlib and a CRC are all a PNG needs), so that it needs no browser, no native
// module and no system font on a fresh machine.
//
//   node test/bench/chart.ts .kfn/bench/compare-<time>.json [out.png]   # redraw a saved run
import { readFileSync, writeFileSync } from 'node:fs';
import { crc32, deflateSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';

type Rgb = readonly [number, number, number];

const colours = {
  kfn: [37, 99, 235],
  'controller-runtime': [234, 88, 12],
  ApiServerSource: [22, 163, 74],
  floor: [120, 120, 120],
  'bare Hono': [147, 51, 234],
  text: [30, 30, 30],
  faint: [150, 150, 150],
  background: [255, 255, 255],
  rule: [225, 225, 225],
} satisfies Record<string, Rgb>;

// 5×7 glyphs, a row a string ('#' set), drawn for this chart. Lower case is drawn as upper case.
export const glyphs: Record<string, string> = {
  A: '.###.#...##...#######...##...##...#', B: '####.#...##...#####.#...##...#####.', C: '.###.#...##....#....#....#...#.###.',
  D: '####.#...##...##...##...##...#####.', E: '######....#....####.#....#....#####', F: '######....#....####.#....#....#....',
  G: '.###.#...##....#.####...##...#.####', H: '#...##...##...#######...##...##...#', I: '.###...#....#....#....#....#...###.',
  J: '..###...#....#....#....#.#..#..##..', K: '#...##..#.#.#..##...#.#..#..#.#...#', L: '#....#....#....#....#....#....#####',
  M: '#...###.###.#.##.#.##...##...##...#', N: '#...##...###..##.#.##..###...##...#', O: '.###.#...##...##...##...##...#.###.',
  P: '####.#...##...#####.#....#....#....', Q: '.###.#...##...##...##.#.##..#..##.#', R: '####.#...##...#####.#.#..#..#.#...#',
  S: '.#####....#.....###.....#....#####.', T: '#####..#....#....#....#....#....#..', U: '#...##...##...##...##...##...#.###.',
  V: '#...##...##...##...##...#.#.#...#..', W: '#...##...##...##.#.##.#.##.#.#.#.#.', X: '#...##...#.#.#...#...#.#.#...##...#',
  Y: '#...##...#.#.#...#....#....#....#..', Z: '#####....#...#...#...#...#....#####',
  0: '.###.#...##..###.#.###..##...#.###.', 1: '..#...##....#....#....#....#...###.', 2: '.###.#...#....#...#...#...#...#####',
  3: '#####...#...#.....#.....##...#.###.', 4: '...#...##..#.#.#..#.#####...#....#.', 5: '######....####.....#....##...#.###.',
  6: '..##..#...#....####.#...##...#.###.', 7: '#####....#...#...#...#....#....#...', 8: '.###.#...##...#.###.#...##...#.###.',
  9: '.###.#...##...#.####....#...#..##..',
  ' ': '...................................', '.': '..........................##...##..', ',': '.....................##....#...#...',
  '/': '.........#...#...#...#...#.........', '(': '...#...#...#....#....#.....#.....#.', ')': '.#.....#.....#....#....#...#...#...',
  '-': '...............#####...............', ':': '......##...##.........##...##......', '%': '##...##..#...#...#...#...#..##...##',
  '×': '..........#...#.#.#...#...#.#.#...#', '>': '.#.....#.....#.....#...#...#...#...', '<': '...#...#...#...#.....#.....#.....#.',
  '=': '..........#####.....#####..........', '≤': '...#...#...#.....#.....#......#####', '+': '......#....#..#####..#....#........',
  '[': '.###..#....#....#....#....#....###.', ']': '.###....#....#....#....#....#..###.', '#': '.#.#.#####.#.#..#.#.#####.#.#......',
  ';': '......##...##........##....#...#...',
  '?': '.###.#...#....#...#...#.........#..', "'": '..#....#...#.......................',
};
const glyphW = 5;
const glyphH = 7;

/** An RGB pixel buffer with rectangles and text. */
class Canvas {
  readonly width: number;
  readonly height: number;
  readonly pixels: Uint8Array;

  constructor(width: number, height: number, background: Rgb) {
    this.width = width;
    this.height = height;
    this.pixels = new Uint8Array(width * height * 3);
    this.rect(0, 0, width, height, background);
  }

  rect(x: number, y: number, w: number, h: number, [r, g, b]: Rgb): void {
    const x0 = Math.max(0, Math.round(x));
    const y0 = Math.max(0, Math.round(y));
    const x1 = Math.min(this.width, Math.round(x + w));
    const y1 = Math.min(this.height, Math.round(y + h));
    for (let yy = y0; yy < y1; yy++) {
      for (let xx = x0; xx < x1; xx++) {
        const i = (yy * this.width + xx) * 3;
        this.pixels[i] = r;
        this.pixels[i + 1] = g;
        this.pixels[i + 2] = b;
      }
    }
  }

  /** Draws `text` with its top left at (x, y), each font pixel `scale`×`scale`; returns its width. */
  text(x: number, y: number, text: string, colour: Rgb, scale = 2): number {
    let cx = x;
    for (const ch of text) {
      const glyph = glyphs[ch] ?? glyphs[ch.toUpperCase()] ?? glyphs['?']!;
      for (let row = 0; row < glyphH; row++) {
        for (let col = 0; col < glyphW; col++) {
          if (glyph[row * glyphW + col] === '#') this.rect(cx + col * scale, y + row * scale, scale, scale, colour);
        }
      }
      cx += (glyphW + 1) * scale;
    }
    return cx - x;
  }

  static textWidth(text: string, scale = 2): number {
    return [...text].length * (glyphW + 1) * scale;
  }

  /** The PNG file: 8-bit RGB, each row unfiltered, one zlib stream. */
  png(): Buffer {
    const raw = Buffer.alloc((this.width * 3 + 1) * this.height);
    for (let y = 0; y < this.height; y++) {
      raw[y * (this.width * 3 + 1)] = 0; // filter: none
      raw.set(this.pixels.subarray(y * this.width * 3, (y + 1) * this.width * 3), y * (this.width * 3 + 1) + 1);
    }
    const chunk = (type: string, data: Buffer) => {
      const head = Buffer.alloc(8);
      head.writeUInt32BE(data.length, 0);
      head.write(type, 4, 'latin1');
      const crc = Buffer.alloc(4);
      crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
      return Buffer.concat([head, data, crc]);
    };
    const header = Buffer.alloc(13);
    header.writeUInt32BE(this.width, 0);
    header.writeUInt32BE(this.height, 4);
    header[8] = 8; // bits per channel
    header[9] = 2; // RGB
    return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
  }
}

export interface Bar {
  label: string;
  value: number;
  /** What is written after the bar (default: the value). */
  text?: string;
  contender: keyof typeof colours;
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
export function drawPanels(title: string, subtitle: string, panels: Panel[]): Buffer {
  const rows = panels.reduce((n, p) => n + p.bars.length + 2, 0);
  const height = margin * 2 + 60 + rows * rowHeight + panels.length * 10;
  const c = new Canvas(width, height, colours.background);
  c.text(margin, margin, title, colours.text, 3);
  c.text(margin, margin + 30, subtitle, colours.faint, 2);
  let y = margin + 70;
  for (const panel of panels) {
    c.rect(margin, y - 6, width - 2 * margin, 1, colours.rule);
    c.text(margin, y, panel.title, colours.text, 2);
    y += rowHeight + 4;
    const bars = panel.bars.filter((b): b is Bar => 'value' in b);
    const max = Math.max(...bars.map((b) => b.value), 1e-9);
    // Labels in a column as wide as the longest; the bars take what the longest value text leaves.
    const labelWidth = Math.max(...bars.map((b) => Canvas.textWidth(b.label))) + 20;
    const room = width - margin * 2 - labelWidth - Math.max(...bars.map((b) => Canvas.textWidth(b.text ?? String(b.value)))) - 20;
    for (const bar of panel.bars) {
      if ('gap' in bar) {
        c.text(margin + 10, y + 2, bar.gap, colours.faint, 2);
        y += rowHeight;
        continue;
      }
      c.text(margin + 10, y + 2, bar.label, colours.text, 2);
      const length = Math.max(bar.value > 0 ? 2 : 0, (bar.value / max) * room);
      c.rect(margin + labelWidth, y, length, barHeight, colours[bar.contender]);
      c.text(margin + labelWidth + length + 8, y + 2, bar.text ?? String(bar.value), colours.text, 2);
      y += rowHeight;
    }
    y += rowHeight + 10;
  }
  return c.png();
}

const fixed = (n: number, digits = 1) => n.toFixed(digits);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? 0;

/** The panels of a `bench:compare` result (its JSON), for the parts it measured. */
export function comparePanels(results: Record<string, unknown>): Panel[] {
  const panels: Panel[] = [];
  const conv = results.convergence as { contender: string; concurrency: number; seconds: number; readsPerObject: number; idle?: { reads: number; writes: number } }[] | undefined;
  const who = (contender: string): Bar['contender'] => (contender === 'floor' ? 'floor' : contender === 'kfn' ? 'kfn' : 'controller-runtime');
  if (conv?.length) {
    const floor = conv[0]!.seconds;
    panels.push({
      title: `P1 convergence: ${results.objects} MyWebs created -> all Ready (seconds; shorter is better)`,
      bars: conv.map((r) => ({ label: r.contender === 'floor' ? 'floor (16 writers)' : `${r.contender} ×${r.concurrency}`, value: r.seconds, text: `${fixed(r.seconds)} s  ${fixed(r.seconds / floor, 2)}× floor`, contender: who(r.contender) })),
    });
    const idle = conv.filter((r) => r.idle);
    if (idle.length) {
      panels.push({
        title: 'P3 idle: API requests in one resync period of kfn (fewer is better)',
        bars: idle.map((r) => ({ label: `${r.contender} ×${r.concurrency}`, value: r.idle!.reads + r.idle!.writes, text: `${r.idle!.reads} reads, ${r.idle!.writes} writes`, contender: who(r.contender) })),
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
  const cold = results.coldStart as { kfn: number[]; hono: number[]; operator: number[] } | undefined;
  if (cold) {
    const [k, h, o] = [median(cold.kfn), median(cold.hono), median(cold.operator)];
    panels.push({
      title: 'P5 cold start: process start -> first reconcile answered (ms, median)',
      bars: [
        { label: 'kfn function', value: k, text: `${fixed(k, 0)} ms  ${fixed(k / h, 2)}× Hono`, contender: 'kfn' },
        { label: 'bare Hono', value: h, text: `${fixed(h, 0)} ms`, contender: 'bare Hono' },
        { label: 'Go operator', value: o, text: `${fixed(o, 0)} ms`, contender: 'controller-runtime' },
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
  return panels;
}

/** The PNG chart of a `bench:compare` result. */
export function compareChart(results: Record<string, unknown>): Buffer {
  return drawPanels('kfn beside its peers', `${String(results.date ?? '').slice(0, 16)}  ${String(results.machine ?? '')}`, comparePanels(results));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [input, output] = process.argv.slice(2);
  if (!input) {
    console.error('usage: node test/bench/chart.ts <compare-….json> [out.png]');
    process.exit(2);
  }
  const out = output ?? input.replace(/\.json$/, '') + '.png';
  writeFileSync(out, compareChart(JSON.parse(readFileSync(input, 'utf8')) as Record<string, unknown>));
  console.error(`wrote ${out}`);
}
