// P8's option and its lines of the table: sizes in rising order, per-object figures over the
// MyWebs and their ConfigMaps, ratios to both controller-runtime caches, the shards beside one replica.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseScaleSizes, scaleTable, type ScaleResult, type StartFigures } from './scale.ts';
import { namespacesTable } from './scale-namespaces.ts';
import { throughputTable } from './scale-throughput.ts';

test('--scale-objects takes MyWeb counts in rising order, and nothing else', () => {
  assert.deepEqual(parseScaleSizes('10000,40000,100000'), [10000, 40000, 100000]);
  assert.deepEqual(parseScaleSizes('250000'), [250000]);
  assert.deepEqual(parseScaleSizes('none'), [], 'the namespaces case alone');
  for (const bad of ['', '0', '10k', '1000,1000', '40000,10000', '1.5', '-3']) assert.throws(() => parseScaleSizes(bad), /--scale-objects takes whole numbers of MyWebs in rising order/, bad);
});

const start = (rssMiB: number, readyS: number, apiserverPeakMiB: number): StartFigures => ({ rssMiB, readyS, apiserverAtStartMiB: 500, apiserverPeakMiB });

test('the table: a row per size with heap per watched object and the ratios, the growth per object, the shards beside one replica and their take-overs', () => {
  const result: ScaleResult = {
    sizes: [
      { webs: 10000, objects: 20000, kfn: { ...start(100, 3, 800), listedS: 4.25, heapMiB: 20 }, crDefault: start(200, 2, 900), crMetadata: start(50, 1.5, 700) },
      {
        webs: 20000,
        objects: 40000,
        kfn: { ...start(150, 6, 1000), heapMiB: 40 },
        crDefault: start(300, 4, 1200),
        crMetadata: start(75, 3, 850),
        lists: [
          { mode: 'paginated', objects: 40000, seconds: 2.04, heapBeforeMiB: 100, heapPeakMiB: 180 },
          { mode: 'streaming', objects: 40000, seconds: 1.5, heapBeforeMiB: 110, heapPeakMiB: 130.4, error: undefined },
          { mode: 'streaming', objects: 0, seconds: 0, heapBeforeMiB: 110, heapPeakMiB: 110, error: 'not served' },
        ],
      },
    ],
    sharded: [
      { shards: 2, webs: 20000, objects: 40000, replicas: [{ rssMiB: 100, heapMiB: 20 }, { rssMiB: 104, heapMiB: 21 }], takeover: { keys: 10000, firstS: 16.25, allS: 31.5, rssAfterMiB: 149 } },
      { shards: 4, webs: 20000, objects: 40000, replicas: [{ rssMiB: 75, heapMiB: 10 }, { rssMiB: 75, heapMiB: 10 }, { rssMiB: 75, heapMiB: 10 }, { rssMiB: 75, heapMiB: 10 }] },
    ],
    leaderTakeover: { webs: 20000, keys: 20000, firstS: 15.9, allS: 40.04, rssAfterMiB: 151 },
    warmTakeover: { webs: 20000, keys: 20000, firstS: 15.2, allS: 21.5, rssAfterMiB: 160, standbyRssMiB: 148, changed: 100, lost: 0, lists: 0 },
    error: 'the apiserver went away',
  };
  const lines = scaleTable(result);
  const row = lines.find((l) => l.trimStart().startsWith('10000'))!;
  assert.deepEqual(row.trim().split(/\s+/), ['10000', '100', '1.02', '3.0', '4.3', '800', '200', '2.0', '900', '50', '1.5', '700', '0.50×', '2.00×']);
  assert.match(lines.find((l) => l.includes('per additional object'))!, /kfn RSS 2\.56 \(heap 1\.02\), c-r 5\.12, c-r metadata-only 1\.28; apiserver peak with kfn 10\.24, c-r 15\.36, c-r metadata-only 7\.68/);
  assert.match(lines.find((l) => l.includes('--shards 2'))!, /one replica alone 150 MiB \(heap 1\.02 KiB\/object\); replica 0 100 MiB \(heap 0\.51 KiB\/object\), replica 1 104 MiB \(heap 0\.54 KiB\/object\); mean 0\.68× one replica's/);
  assert.match(lines.find((l) => l.includes('replica 1 killed'))!, /first of its keys delivered after 16\.3 s, all 10000 after 31\.5 s; replica 0 then 149 MiB/);
  assert.match(lines.find((l) => l.includes('--shards 4'))!, /replica 3 75 MiB \(heap 0\.26 KiB\/object\); mean 0\.50× one replica's/);
  assert.match(lines.find((l) => l.includes('leader killed'))!, /at 20000 \(its standby lists on taking the Lease\): the standby's first of its keys delivered after 15\.9 s, all 20000 after 40\.0 s; the standby 151 MiB after/);
  assert.match(lines.find((l) => l.includes('a warm standby'))!, /its first of its keys delivered after 15\.2 s, all 20000 after 21\.5 s, 0 list requests \(100 changed in the gap, 0 of them not delivered after\); 148 MiB while standing by, 160 MiB after/);
  assert.equal(lines.find((l) => l.includes('list modes')), '  list modes at 20000 (a bare client, 40000 objects; the apiserver\'s Go heap in use): paginated 2.0 s, heap +80 MiB (to 180); streaming 1.5 s, heap +20 MiB (to 130); streaming: not served');
  assert.equal(lines.at(-1), '  P8 stopped: the apiserver went away');
});

test('one size: no growth line; no shards measured: no shards line', () => {
  const lines = scaleTable({ sizes: [{ webs: 10000, objects: 20000, kfn: { ...start(100, 3, 800), heapMiB: 20 }, crDefault: start(200, 2, 900), crMetadata: start(50, 1.5, 700) }] });
  assert.equal(lines.some((l) => l.includes('per additional object') || l.includes('--shards')), false);
});

test('a run of the warm standby alone (--scale-steps warm): its line, without the sizes\' header', () => {
  const warm = { webs: 250000, keys: 250000, firstS: 50.2, allS: 90.4, rssAfterMiB: 320, standbyRssMiB: 300, lists: 0, changed: 100, lost: 0 };
  const lines = scaleTable({ sizes: [], warmTakeover: warm });
  assert.equal(lines.some((l) => l.includes('kfn RSS')), false, 'no sizes, no header');
  assert.match(lines.join('\n'), /leader killed at 250000, a warm standby .*all 250000 after 90\.4 s, 0 list requests \(100 changed in the gap, 0 of them not delivered after\); 300 MiB while standing by, 320 MiB after/);
});

test('the namespaces table: a row per contender with its requests, 429s, time to delivering and memory', () => {
  const lines = namespacesTable({ namespaces: 1000, rows: [{ contender: 'kfn, naming the 1000', lists: 1, watches: 1, throttled: 0, deliveringS: 1.25, rssMiB: 80.4 }, { contender: 'ApiServerSource, naming the 1000', lists: 1000, watches: 1003, throttled: 12, deliveringS: 41, rssMiB: 120 }] });
  assert.match(lines[1]!, /1000 namespaces with a MyWeb each/);
  assert.deepEqual(lines[3]!.trim().split(/\s{2,}/), ['kfn, naming the 1000', '1', '1', '0', '1.3', '80']);
  assert.deepEqual(lines[4]!.trim().split(/\s{2,}/), ['ApiServerSource, naming the 1000', '1000', '1003', '12', '41.0', '120']);
});

test('the throughput table: each contender\'s two rounds, the scaling efficiency beside one shard, the ratios to controller-runtime and the cores by process', () => {
  const cpu = (apiserver: number) => ({ apiserver, etcd: 10, bridges: 5 });
  const lines = throughputTable({
    webs: 10000,
    rounds: [
      { contender: 'kfn ×1', shards: 1, startS: 70, changedS: 80, writesS: 25, cpuS: cpu(80) },
      { contender: 'kfn ×2', shards: 2, startS: 50, changedS: 80, writesS: 26, cpuS: cpu(60) },
      { contender: 'controller-runtime', shards: 1, startS: 35, changedS: 40, writesS: 24, cpuS: { apiserver: 40, operator: 4 } },
    ],
  });
  assert.deepEqual(lines.find((l) => l.trimStart().startsWith('kfn ×2 '))!.trim().split(/\s{2,}/), ['kfn ×2', '50.0', '80.0', '26.0', '0.70 / 0.50']);
  assert.match(lines.find((l) => l.includes('kfn ×1 / controller-runtime'))!, /start 2\.00×, changed 2\.00×/);
  assert.match(lines.find((l) => l.trimStart().startsWith('kfn ×2') && l.includes('cores'))!, /apiserver 0\.75, etcd 0\.13, bridges 0\.06 cores/);
  assert.match(lines.find((l) => l.trimStart().startsWith('controller-runtime') && l.includes('cores'))!, /apiserver 1\.00, operator 0\.10 cores/);
});
