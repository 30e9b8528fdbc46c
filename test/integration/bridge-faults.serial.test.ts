// The bridge through cluster-wide faults (serial: run alone): a kube-apiserver restart in the
// middle of a stream of changes, and etcd compaction forcing 410 Gone while changes are made.
// In every case the function ends up having seen every object's latest state.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { bridgeFixture, type BridgeFixture } from '../support/bridge.ts';
import { compactEtcd } from '../../cluster/etcd.ts';
import { restartApiserver, testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { startFaultProxy } from '../support/proxy.ts';

/** Waits until the receiver has seen, for each widget, its generation `want[name]`. */
function latestDelivered(f: BridgeFixture, want: Record<string, number>, timeoutMs = 60_000) {
  return waitFor('every widget\'s latest generation to be delivered', async () => {
    const missing = Object.entries(want).filter(([name, gen]) => !f.receiver.of(name).some((d) => d.generation === gen));
    if (missing.length) throw new Error(`not yet delivered: ${missing.map(([n, g]) => `${n}@${g}`).join(', ')}`);
    return true;
  }, { timeoutMs });
}

test('a kube-apiserver restart while changes stream in loses none of them', async (t) => {
  const cluster = await testCluster();
  const f = await bridgeFixture(t, cluster);
  const names = ['a', 'b', 'c', 'd'];
  for (const n of names) await f.createWidget(n);
  await latestDelivered(f, Object.fromEntries(names.map((n) => [n, 1])));
  const restart = restartApiserver();
  // Keep writing while the apiserver goes away and comes back; writes that fail are retried.
  const want: Record<string, number> = {};
  for (let gen = 2; gen <= 4; gen++) {
    for (const n of names) {
      await waitFor(`write ${n}@${gen}`, async () => (await f.patchWidget(n, { spec: { size: gen } }), true), { timeoutMs: 60_000 });
      want[n] = gen;
    }
    await sleep(300);
  }
  await restart;
  await latestDelivered(f, want);
});

test('etcd compaction while the bridge is cut off: 410 Gone, relist, nothing lost', async (t) => {
  const cluster = await testCluster();
  // The bridge reaches the apiserver through a proxy the test can cut.
  const proxy = await startFaultProxy(cluster.state.ports.apiserver);
  t.after(() => proxy.close());
  const dir = mkdtempSync(join(tmpdir(), 'kfn-cut-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'proxied.kubeconfig');
  writeFileSync(kubeconfig, proxy.kubeConfig(cluster.kc).exportConfig());
  const f = await bridgeFixture(t, cluster, { bridge: { kubeconfig } });
  for (const n of ['x', 'y', 'z']) await f.createWidget(n);
  await latestDelivered(f, { x: 1, y: 1, z: 1 });

  proxy.cut();
  await f.patchWidget('x', { spec: { size: 2 } });
  await f.deleteWidget('y');
  await f.createWidget('w');
  // Make the bridge's last resourceVersion unservable, as after a long outage.
  await compactEtcd();
  await restartApiserver();
  await f.patchWidget('z', { spec: { size: 2 } });
  proxy.restore();

  await latestDelivered(f, { x: 2, z: 2, w: 1 });
  await waitFor('y\'s deletion (inferred on relist) to be delivered', async () => f.receiver.of('y').find((d) => d.reason === 'deleted'));
  const metrics = await fetch(`http://${f.running.address}/metrics`).then((r) => r.text());
  const relists = Number(metrics.match(/kfn_bridge_watch_relists_total\{kind="Widget"\} (\d+)/)?.[1] ?? 0);
  assert.ok(relists >= 1, `the Widget watch relisted after 410 Gone (relists: ${relists})`);
});
