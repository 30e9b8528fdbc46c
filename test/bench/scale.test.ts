// P8's option and its lines of the table: sizes in rising order, per-object figures over the
// MyWebs and their ConfigMaps, ratios to both controller-runtime caches, the shards beside one replica.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseScaleSizes, scaleTable, type ScaleResult, type StartFigures } from './scale.ts';

test('--scale-objects takes MyWeb counts in rising order, and nothing else', () => {
  assert.deepEqual(parseScaleSizes('10000,40000,100000'), [10000, 40000, 100000]);
  assert.deepEqual(parseScaleSizes('250000'), [250000]);
  for (const bad of ['', '0', '10k', '1000,1000', '40000,10000', '1.5', '-3']) assert.throws(() => parseScaleSizes(bad), /--scale-objects takes whole numbers of MyWebs in rising order/, bad);
});

const start = (rssMiB: number, readyS: number, apiserverPeakMiB: number): StartFigures => ({ rssMiB, readyS, apiserverAtStartMiB: 500, apiserverPeakMiB });

test('the table: a row per size with heap per watched object and the ratios, the growth per object, the shards beside one replica', () => {
  const result: ScaleResult = {
    sizes: [
      { webs: 10000, objects: 20000, kfn: { ...start(100, 3, 800), heapMiB: 20 }, crDefault: start(200, 2, 900), crMetadata: start(50, 1.5, 700) },
      { webs: 20000, objects: 40000, kfn: { ...start(150, 6, 1000), heapMiB: 40 }, crDefault: start(300, 4, 1200), crMetadata: start(75, 3, 850) },
    ],
    shards: { webs: 20000, objects: 40000, replicas: [{ rssMiB: 149, heapMiB: 40 }, { rssMiB: 152, heapMiB: 41 }] },
    error: 'the apiserver went away',
  };
  const lines = scaleTable(result);
  const row = lines.find((l) => l.trimStart().startsWith('10000'))!;
  assert.deepEqual(row.trim().split(/\s+/), ['10000', '100', '1.02', '3.0', '800', '200', '2.0', '900', '50', '1.5', '700', '0.50×', '2.00×']);
  assert.match(lines.find((l) => l.includes('per additional object'))!, /kfn RSS 2\.56 \(heap 1\.02\), c-r 5\.12, c-r metadata-only 1\.28; apiserver peak with kfn 10\.24, c-r 15\.36, c-r metadata-only 7\.68/);
  assert.match(lines.find((l) => l.includes('--shards 2'))!, /one replica 150 MiB \(heap 1\.02 KiB\/object\); replica 0 of 2 149 MiB \(heap 1\.02 KiB\/object\), replica 1 of 2 152 MiB \(heap 1\.05 KiB\/object\)/);
  assert.equal(lines.at(-1), '  P8 stopped: the apiserver went away');
});

test('one size: no growth line; no shards measured: no shards line', () => {
  const lines = scaleTable({ sizes: [{ webs: 10000, objects: 20000, kfn: { ...start(100, 3, 800), heapMiB: 20 }, crDefault: start(200, 2, 900), crMetadata: start(50, 1.5, 700) }] });
  assert.equal(lines.some((l) => l.includes('per additional object') || l.includes('--shards')), false);
});
