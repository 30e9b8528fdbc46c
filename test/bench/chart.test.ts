// The benchmark's chart: the panels it draws from a `bench:compare` result, and a PNG that is
// one (checksums, size, pixels of the contenders' colours where bars are drawn).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crc32, inflateSync } from 'node:zlib';
import { comparePanels, compareChart, glyphs, type Bar } from './chart.ts';

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

function decodePng(png: Buffer): { width: number; height: number; rgb: Buffer } {
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  let at = 8;
  let width = 0;
  let height = 0;
  const data: Buffer[] = [];
  while (at < png.length) {
    const length = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const body = png.subarray(at + 8, at + 8 + length);
    assert.equal(png.readUInt32BE(at + 8 + length), crc32(png.subarray(at + 4, at + 8 + length)), `CRC of ${type}`);
    if (type === 'IHDR') [width, height] = [body.readUInt32BE(0), body.readUInt32BE(4)];
    if (type === 'IDAT') data.push(body);
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(data));
  assert.equal(raw.length, (width * 3 + 1) * height, 'one filter byte and three bytes a pixel on every row');
  const rgb = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++) raw.copy(rgb, y * width * 3, y * (width * 3 + 1) + 1, (y + 1) * (width * 3 + 1));
  return { width, height, rgb };
}

const count = (rgb: Buffer, [r, g, b]: number[]) => {
  let n = 0;
  for (let i = 0; i < rgb.length; i += 3) if (rgb[i] === r && rgb[i + 1] === g && rgb[i + 2] === b) n++;
  return n;
};

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

test('the chart is a valid PNG with the contenders\' bars in their colours, longest for the largest value', () => {
  const { width, height, rgb } = decodePng(compareChart(result));
  assert.equal(width, 1100);
  assert.ok(height > 200);
  const kfn = count(rgb, [37, 99, 235]);
  const cr = count(rgb, [234, 88, 12]);
  assert.ok(kfn > 0 && cr > 0, 'both drawn');
  assert.ok(kfn > cr, 'kfn took longer and used more memory here: its bars are the longer ones');
  assert.equal(count(rgb, [22, 163, 74]) > 0, true, 'ApiServerSource in P4');
});

test('every glyph of the chart\'s font is 5×7', () => {
  for (const [ch, glyph] of Object.entries(glyphs)) assert.match(glyph, /^[.#]{35}$/, `glyph ${JSON.stringify(ch)}`);
});
