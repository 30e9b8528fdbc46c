// The fleet at rest is read from the kubelet's resource metrics: what one look holds, and what a
// series of looks says of each part (pods coming and going, as Knative's do).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { JournalEntry } from '../../core/journal.ts';
import { beyond, deliveriesIn, describeCounts, lastAnswer, figuresOf, functionsUpIn, kfnPartOf, knativeServiceOf, parseResourceMetrics, type Look, type Part } from './fleet.ts';

test('a look holds each pod\'s working set and CPU, by namespace/pod, and nothing of containers or the node', () => {
  const look = parseResourceMetrics(
    [
      '# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds',
      'container_memory_working_set_bytes{container="bridge",namespace="kfn-system",pod="kfn-bridge-1"} 9e+07 1764100000000',
      'node_memory_working_set_bytes 1e+09 1764100000000',
      'pod_cpu_usage_seconds_total{namespace="kfn-system",pod="kfn-bridge-1"} 12.5 1764100000000',
      'pod_memory_working_set_bytes{namespace="kfn-system",pod="kfn-bridge-1"} 1.048576e+08 1764100000000',
      'pod_memory_working_set_bytes{namespace="knative-serving",pod="activator-x"} 2097152 1764100000000',
    ].join('\n'),
  );
  assert.deepEqual([...look], [
    ['kfn-system/kfn-bridge-1', { memory: 104857600, cpu: 12.5 }],
    ['knative-serving/activator-x', { memory: 2097152, cpu: 0 }],
  ]);
});

test('over a series of looks: memory and pods are means, CPU is each pod\'s last less its first (a pod born in the period from zero), at zero the share of looks with none up', () => {
  const MiB = 2 ** 20;
  const look = (pods: Record<string, [number, number]>): Look => new Map(Object.entries(pods).map(([k, [memory, cpu]]) => [k, { memory: memory * MiB, cpu }]));
  const looks = [
    look({ 'sys/kfn-bridge-a': [50, 10], 'other/nginx': [5, 1] }),
    look({ 'sys/kfn-bridge-a': [52, 10.5], 'sys/kfn-fn-myweb-1': [40, 0.3] }),
    look({ 'sys/kfn-bridge-a': [54, 11], 'sys/kfn-fn-myweb-1': [42, 0.5] }),
    look({ 'sys/kfn-bridge-a': [54, 11.5] }),
  ];
  const partOf = (key: string): Part | undefined => (!key.startsWith('sys/') ? undefined : key.includes('bridge') ? 'bridge' : 'functions');
  const parts = figuresOf(looks, partOf, 120);
  assert.deepEqual(parts.get('bridge'), { memoryMiB: 52.5, cpuPerMinute: 0.75, pods: 1, atZero: 0 });
  const fns = parts.get('functions')!;
  assert.equal(fns.memoryMiB, 20.5);
  assert.equal(fns.pods, 0.5);
  assert.equal(fns.cpuPerMinute, 0.25, 'the function pod came up during the period: all its 0.5 s count');
  assert.equal(fns.atZero, 0.5, 'no function pod in the first and last looks');
  assert.equal(parts.size, 2, 'pods of no part are left out');
});

test("a kfn side counts Knative's and the ingress's pods only when its functions run on Knative (they stay installed after the Knative side)", () => {
  const keys = ['kfn-system/kfn-bridge-1', 'kfn-system/kfn-fn-myweb-2', 'kfn-system/kfn-host-fleet-3', 'knative-serving/activator-4', 'kfn-ingress/traefik-5', 'kfn-bench-fleet-samples/web-6'];
  assert.deepEqual(keys.map(kfnPartOf('deployment')), ['bridge', 'functions', 'host', undefined, undefined, undefined]);
  assert.deepEqual(keys.map(kfnPartOf('host')), ['bridge', 'functions', 'host', undefined, undefined, undefined]);
  assert.deepEqual(keys.map(kfnPartOf('knative')), ['bridge', 'functions', 'host', 'knative', 'ingress', undefined]);
});

test('what woke the fleet: each Knative function\'s share of looks with a pod up, and the deliveries of the idle period by reconciler and reason', () => {
  assert.equal(knativeServiceOf('kfn-fn-myweb-00001-deployment-5d8f7c9b4-x2x7q'), 'kfn-fn-myweb');
  assert.equal(knativeServiceOf('kfn-bridge-6c9d4f7b8-abcde'), undefined);
  const look = (...pods: string[]): Look => new Map(pods.map((p) => [`kfn-system/${p}`, { memory: 1, cpu: 0 }]));
  const partOf = kfnPartOf('knative');
  const up = functionsUpIn([look('kfn-bridge-a-1'), look('kfn-bridge-a-1', 'kfn-fn-myweb-00001-deployment-a-1', 'kfn-fn-myweb-00001-deployment-a-2'), look('kfn-fn-podset-00002-deployment-b-1'), look()], partOf);
  assert.deepEqual(up, { 'kfn-fn-myweb': 0.25, 'kfn-fn-podset': 0.25 }, 'two pods of one function in one look count once');

  const entry = (time: string, reconciler: string, reason: JournalEntry['reason'], durationMs = 5) => ({ time, reconciler, reason, durationMs }) as JournalEntry;
  const entries = [
    entry('2026-11-27T01:00:00.000Z', 'myweb', 'resync'),
    entry('2026-11-27T01:01:02.000Z', 'myweb', 'created', 3000), // sent while settling, answered after a cold start
    entry('2026-11-27T01:02:00.000Z', 'myweb', 'resync'),
    entry('2026-11-27T01:03:00.000Z', 'podset', 'child'),
    entry('2026-11-27T01:04:00.000Z', 'myweb', 'resync', 1000), // sent within, answered after the end
    entry('2026-11-27T01:04:01.000Z', 'myweb', 'resync'),
  ];
  const counts = deliveriesIn(entries, Date.parse('2026-11-27T01:01:00.000Z'), Date.parse('2026-11-27T01:04:00.000Z'));
  assert.deepEqual(counts, { 'myweb resync': 2, 'podset child': 1 }, 'only the deliveries sent in the idle period');
  assert.equal(describeCounts(counts), '3 (myweb resync 2, podset child 1)');
  assert.equal(describeCounts({}), 'none');
  assert.equal(lastAnswer([...entries].reverse()), Date.parse('2026-11-27T01:04:01.000Z'), 'the latest answer, whatever the order');
  assert.equal(lastAnswer([]), 0);
});

test('what kfn adds beyond the platform: the side less its Knative and ingress parts, whichever it has', () => {
  const part = (memoryMiB: number, cpuPerMinute: number) => ({ memoryMiB, cpuPerMinute, pods: 1, atZero: 0 });
  const side = { side: 'kfn on Knative', memoryMiB: 150, cpuPerMinute: 1.2, pods: 8, marginalMiB: 0, parts: { bridge: part(48, 0.2), knative: part(80, 0.8), ingress: part(22, 0.2) } };
  const added = beyond(side, ['knative', 'ingress']);
  assert.deepEqual([added.memoryMiB, added.cpuPerMinute.toFixed(2)], [48, '0.20']);
  assert.equal(beyond({ ...side, parts: { bridge: part(48, 0.2), knative: part(80, 0.8) } }, ['knative', 'ingress']).memoryMiB, 70);
});
