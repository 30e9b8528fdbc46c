import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Journal } from '../core/journal.ts';
import { BridgeMetrics } from './metrics.ts';

test("the journal's failed writes and dropped lines are exported as counters", async () => {
  const metrics = new BridgeMetrics({ defaultMetrics: false });
  const journal = new Journal('/dev/full', { maxQueuedLines: 2, onProblem: () => {} });
  metrics.trackJournal(journal);
  const value = async (name: string) => Number((await metrics.registry.getSingleMetricAsString(name)).match(new RegExp(`^${name} (\\d+)$`, 'm'))?.[1]);
  for (let i = 0; i < 3; i++) journal.append({ time: '', id: `${i}`, reconciler: 'r', key: 'k', reason: 'resync', attempt: 1, primary: { apiVersion: 'v1', kind: 'ConfigMap', name: 'c' }, observedAt: '', sink: '', outcome: 'done', durationMs: 0 });
  await journal.flush();
  assert.equal(await value('kfn_bridge_journal_dropped_lines_total'), 1, 'three lines into a queue of two');
  assert.equal(await value('kfn_bridge_journal_failures_total'), 1, 'one write of two lines, to a full device');
  await metrics.registry.metrics();
  assert.equal(await value('kfn_bridge_journal_failures_total'), 1, 'a scrape counts each failure once');
});

test("the watches are counted by kind and state when scraped, with the records they keep; a state no watch is in any more is gone from the next scrape", async () => {
  const metrics = new BridgeMetrics({ defaultMetrics: false });
  let states: { kind: string; state: 'synced' | 'listing' | 'failing'; records: number }[] = [
    { kind: 'MyWeb', state: 'synced', records: 10 },
    { kind: 'Deployment', state: 'synced', records: 4 },
    { kind: 'Deployment', state: 'synced', records: 3 },
    { kind: 'Service', state: 'failing', records: 0 },
  ];
  metrics.trackWatches(() => states);
  const lines = async (name = 'kfn_bridge_watches') => (await metrics.registry.getSingleMetricAsString(name)).split('\n').filter((l) => !l.startsWith('#')).sort();
  assert.deepEqual(await lines(), ['kfn_bridge_watches{kind="Deployment",state="synced"} 2', 'kfn_bridge_watches{kind="MyWeb",state="synced"} 1', 'kfn_bridge_watches{kind="Service",state="failing"} 1']);
  assert.deepEqual(await lines('kfn_bridge_watch_records'), ['kfn_bridge_watch_records{kind="Deployment"} 7', 'kfn_bridge_watch_records{kind="MyWeb"} 10', 'kfn_bridge_watch_records{kind="Service"} 0']);
  states = [{ kind: 'Service', state: 'synced', records: 2 }];
  assert.deepEqual(await lines(), ['kfn_bridge_watches{kind="Service",state="synced"} 1']);
  assert.deepEqual(await lines('kfn_bridge_watch_records'), ['kfn_bridge_watch_records{kind="Service"} 2']);
});

test("a function's clock skew is a gauge per Reconciler, at 0 from its start, and refusals for it a sink failure reason", async () => {
  const metrics = new BridgeMetrics({ defaultMetrics: false });
  metrics.controllerStarted('web', 0);
  const lines = async (name: string) => (await metrics.registry.getSingleMetricAsString(name)).split('\n').filter((l) => !l.startsWith('#'));
  assert.deepEqual(await lines('kfn_bridge_clock_skew_seconds'), ['kfn_bridge_clock_skew_seconds{controller="web"} 0']);
  metrics.clockSkew.set({ controller: 'web' }, -75.2);
  assert.deepEqual(await lines('kfn_bridge_clock_skew_seconds'), ['kfn_bridge_clock_skew_seconds{controller="web"} -75.2']);
  assert.ok((await lines('kfn_bridge_sink_failures_total')).includes('kfn_bridge_sink_failures_total{controller="web",reason="clock_skew"} 0'));
});
