// Bridges as separate processes: leader election, SIGKILL, takeover, restart — and in every
// case each object's latest state reaches the function.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { logTail, perBridgeConfig, spawnBridge, widgetSetup, type BridgeProcess } from '../support/bridge.ts';
import { answerDone } from '../support/receiver.ts';
import { testCluster, kubeApi } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { startFaultProxy } from '../support/proxy.ts';
import { shardOf } from '../../bridge/shards.ts';

/** The Widget records a bridge process keeps (kfn_bridge_watch_records), read from its metrics. */
async function widgetRecords(bridge: BridgeProcess): Promise<number | undefined> {
  const text = await fetch(bridge.metricsUrl, { signal: AbortSignal.timeout(2000) }).then((r) => r.text(), () => '');
  const m = text.match(/^kfn_bridge_watch_records\{kind="Widget"\} (\d+)/m);
  return m ? Number(m[1]) : undefined;
}

describe('bridge processes', { concurrency: true }, () => {
  test('two bridges: one delivers; SIGKILL it and the other takes over without losing a change', async (t) => {
    const cluster = await testCluster();
    // A leader killed says nothing of what it had in flight: the next waits the timeout out.
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 5 } });
    const args = [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${f.configFile}`, '--leader-elect', `--lease-namespace=${f.ns}`, '--lease-name=bridge'];
    const a = await spawnBridge(t, f.dir, 'a', args);
    await waitFor('bridge a to lead', async () => (await a.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    const b = await spawnBridge(t, f.dir, 'b', args);
    await waitFor('bridge b to stand by', async () => (await b.leaderStatus()) === 0 || undefined, { timeoutMs: 30_000 });

    await f.createWidget('w1');
    await waitFor('w1 to be delivered', async () => f.receiver.of('w1')[0]);
    await waitFor('b to stay standby', async () => (await b.leaderStatus()) === 0 || undefined);
    assert.equal(f.receiver.deliveries.length, 1, 'only the leader delivers');

    a.kill('SIGKILL');
    const killedAt = Date.now();
    // Changes during the gap, while no bridge delivers.
    await f.patchWidget('w1', { spec: { size: 2 } });
    await f.createWidget('w2');
    await waitFor('b to deliver the changes made during the gap', async () => {
      const w1 = f.receiver.of('w1').find((d) => d.generation === 2);
      const w2 = f.receiver.of('w2')[0];
      return w1 && w2 ? { w1, w2 } : undefined;
    }, { timeoutMs: 45_000 });
    const takeover = Math.min(...f.receiver.deliveries.filter((d) => d.receivedAt > killedAt).map((d) => d.receivedAt)) - killedAt;
    // b takes the Lease 15 s after it saw the last renewal (a renewed every 2 s, b looks every
    // 2–2.4 s), then holds timeoutSeconds 5 + 2 s for what a may have left running: 20 s at the
    // least, about 27 s at the most, plus what a loaded machine adds to b's requests and delivery.
    assert.ok(takeover <= 35_000, `took over in ${takeover} ms (lease 15 s, retry 2 s, then timeoutSeconds 5 + 2 s for what the killed leader may have left running)`);
    assert.ok(takeover >= 15_000 - 2_000 + 7_000 - 1000, `nothing delivered before the killed leader's deliveries could have ended (${takeover} ms)`);
    assert.equal(await b.leaderStatus(), 1);
    t.diagnostic(`takeover after SIGKILL: ${(takeover / 1000).toFixed(1)} s`);
  });

  test('a warm standby keeps every record while it stands by, delivering nothing; SIGKILL the leader and it delivers from them, the changes made in the gap too', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 5 } });
    const configOf = perBridgeConfig(f);
    const names = Array.from({ length: 20 }, (_, i) => `w${i}`);
    for (const n of names) await f.createWidget(n);
    const args = (who: string) => [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${configOf(who)}`, '--leader-elect', '--warm-standby', `--lease-namespace=${f.ns}`, '--lease-name=bridge'];
    const a = await spawnBridge(t, f.dir, 'a', args('a'));
    await waitFor('bridge a to lead', async () => (await a.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    const b = await spawnBridge(t, f.dir, 'b', args('b'));
    await waitFor('bridge b, standing by, to keep every Widget\'s record', async () => ((await b.leaderStatus()) === 0 && (await widgetRecords(b)) === names.length) || undefined, { timeoutMs: 30_000 });
    await waitFor('every Widget delivered by a', async () => names.every((n) => f.receiver.of(n).length) || undefined, { timeoutMs: 30_000 });
    await f.patchWidget('w0', { spec: { size: 2 } });
    await waitFor('w0\'s change delivered', async () => f.receiver.of('w0').find((d) => d.generation === 2));
    assert.deepEqual([...new Set(f.receiver.deliveries.map((d) => d.path))], ['/a'], 'only the leader delivers; the warm standby watches');

    a.kill('SIGKILL');
    // Changes during the gap, while no bridge delivers: the standby's watches see them, its records keep them.
    await f.patchWidget('w1', { spec: { size: 2 } });
    await f.createWidget('late');
    await waitFor('b to deliver the changes made during the gap', async () => (f.receiver.of('w1').some((d) => d.generation === 2 && d.path === '/b') && f.receiver.of('late').some((d) => d.path === '/b')) || undefined, { timeoutMs: 45_000 });
    assert.equal(await b.leaderStatus(), 1);
    // Taking the Lease queued every key it keeps (low priority): each is delivered by b once more.
    await waitFor('b to deliver every Widget', async () => names.every((n) => f.receiver.of(n).some((d) => d.path === '/b')) || undefined, { timeoutMs: 30_000 });
    assert.equal(f.receiver.of('w1').filter((d) => d.generation === 2 && d.path === '/b').length, 1, 'w1\'s change delivered once by b');
  });

  test('a leader SIGTERMed during a long reconcile hands its hold over: the new leader serves other objects at once, that one only after it ends', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 30 } });
    let slowEnded = 0;
    f.receiver.answer = async (d, res) => {
      if (d.name === 'slow' && d.generation === 1) {
        await sleep(12_000); // the function keeps at it after the bridge that sent it has gone
        slowEnded = Date.now();
      }
      answerDone(d, res);
    };
    const args = [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${f.configFile}`, '--leader-elect', `--lease-namespace=${f.ns}`, '--lease-name=bridge', '--shutdown-timeout=1'];
    const a = await spawnBridge(t, f.dir, 'a', args);
    await waitFor('bridge a to lead', async () => (await a.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    const b = await spawnBridge(t, f.dir, 'b', args);
    await waitFor('bridge b to stand by', async () => (await b.leaderStatus()) === 0 || undefined, { timeoutMs: 30_000 });
    await f.createWidget('slow');
    await waitFor('the slow delivery to start', async () => f.receiver.of('slow')[0]);

    a.kill('SIGTERM');
    const stoppedAt = Date.now();
    await waitFor('b to take the Lease a let go', async () => (await b.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    // As the kubelet does when the pod's grace period is over: a is killed if it still runs.
    const killer = setTimeout(() => a.kill('SIGKILL'), 3000);
    t.after(() => clearTimeout(killer));
    await f.patchWidget('slow', { spec: { size: 2 } });
    await f.createWidget('other');
    const other = await waitFor('b to deliver the other object', async () => f.receiver.of('other')[0], { timeoutMs: 20_000 });
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two reconciles of one object at once');
    assert.ok(other.receivedAt < stoppedAt + 10_000, `b delivered another object ${other.receivedAt - stoppedAt} ms after a stopped, while the slow reconcile ran`);
    const next = await waitFor('b to deliver the change to the slow object', async () => f.receiver.of('slow').find((d) => d.generation === 2), { timeoutMs: 60_000 });
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two reconciles of one object at once');
    assert.equal(await a.exited, 0, 'a stopped by itself once --shutdown-timeout was over');
    assert.ok(next.receivedAt >= slowEnded, `the slow object again ${next.receivedAt - slowEnded} ms after its reconcile ended`);
    t.diagnostic(`hand-over: other object ${((other.receivedAt - stoppedAt) / 1000).toFixed(1)} s after SIGTERM; the held one ${((next.receivedAt - slowEnded) / 1000).toFixed(1)} s after its reconcile ended (its deadline was ${((f.receiver.of('slow')[0]!.received.deadline!.getTime() - slowEnded) / 1000).toFixed(1)} s later)`);
  });

  test('a bridge that loses its lease exits at once', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster);
    const c = await spawnBridge(t, f.dir, 'c', [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${f.configFile}`, '--leader-elect', `--lease-namespace=${f.ns}`, '--lease-name=bridge']);
    await waitFor('bridge c to lead', async () => (await c.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    // Another holder takes the lease (as an operator or a partitioned peer might).
    const api = kubeApi(cluster.kc);
    const path = `/apis/coordination.k8s.io/v1/namespaces/${f.ns}/leases/bridge`;
    const lease = await api.request<{ spec: Record<string, unknown> }>('GET', path);
    await api.request('PUT', path, { body: { ...lease, spec: { ...lease.spec, holderIdentity: 'someone-else', renewTime: new Date().toISOString().replace('Z', '000Z') } } });
    const stolenAt = Date.now();
    const code = await Promise.race([c.exited, new Promise<'running'>((r) => setTimeout(() => r('running'), 15_000))]);
    assert.equal(code, 1, 'exited with status 1');
    assert.ok(Date.now() - stolenAt < 5_000, 'within one renew period');
  });

  test('a leader whose apiserver connection freezes steps down before the standby takes over: never two bridges delivering', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 5 } });
    // Each bridge delivers to its own path of the one receiver, so deliveries say who sent them.
    const configOf = perBridgeConfig(f);
    // Every delivery asks to be requeued in 1 s, so the leader keeps delivering without the apiserver.
    f.receiver.answer = (_d, res) => void res.writeHead(200).end(JSON.stringify({ result: 'done', requeueAfterSeconds: 1, changes: [] }));
    const proxy = await startFaultProxy(cluster.state.ports.apiserver);
    t.after(() => proxy.close());
    const proxied = join(f.dir, 'proxied.kubeconfig');
    writeFileSync(proxied, proxy.kubeConfig(cluster.kc).exportConfig());
    const lease = [`--leader-elect`, `--lease-namespace=${f.ns}`, '--lease-name=bridge'];
    const a = await spawnBridge(t, f.dir, 'a', [`--kubeconfig=${proxied}`, `--config=${configOf('a')}`, ...lease]);
    await waitFor('bridge a to lead', async () => (await a.leaderStatus()) === 1 || undefined, { timeoutMs: 30_000 });
    const b = await spawnBridge(t, f.dir, 'b', [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${configOf('b')}`, ...lease]);
    await waitFor('bridge b to stand by', async () => (await b.leaderStatus()) === 0 || undefined, { timeoutMs: 30_000 });
    await f.createWidget('w');
    await waitFor('a to deliver w twice', async () => (f.receiver.of('w').filter((d) => d.path === '/a').length >= 2 ? true : undefined));

    proxy.freeze(); // a's connections stay open and silent: its lease renewal hangs
    const frozenAt = Date.now();
    const fromB = await waitFor('b to take over and deliver', async () => f.receiver.of('w').find((d) => d.path === '/b'), { timeoutMs: 45_000 });
    const lastFromA = Math.max(...f.receiver.of('w').filter((d) => d.path === '/a').map((d) => d.receivedAt));
    assert.ok(lastFromA < fromB.receivedAt, `a delivered last at +${lastFromA - frozenAt} ms, b first at +${fromB.receivedAt - frozenAt} ms: no overlap`);
    assert.equal(await Promise.race([a.exited, new Promise<'running'>((r) => setTimeout(() => r('running'), 1000))]), 1, 'a exited on losing its lease');
    t.diagnostic(`frozen leader stepped down; standby delivered ${((fromB.receivedAt - frozenAt) / 1000).toFixed(1)} s after the freeze, ${((fromB.receivedAt - lastFromA) / 1000).toFixed(1)} s after the old leader's last delivery`);
  });

  test('a bridge killed and restarted delivers the latest state of every object', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster);
    const args = [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${f.configFile}`];
    const first = await spawnBridge(t, f.dir, 'first', args);
    for (const name of ['r1', 'r2', 'r3']) await f.createWidget(name);
    await waitFor('the three creates', async () => ['r1', 'r2', 'r3'].every((n) => f.receiver.of(n).length > 0) || undefined, { timeoutMs: 30_000 });
    first.kill('SIGKILL');
    await first.exited;
    await f.patchWidget('r1', { spec: { size: 5 } });
    await f.deleteWidget('r2');
    await f.createWidget('r4');
    await spawnBridge(t, f.dir, 'second', args);
    await waitFor('the latest state of each object', async () => {
      const r1 = f.receiver.of('r1').find((d) => d.generation === 2);
      const r4 = f.receiver.of('r4')[0];
      const r3 = f.receiver.of('r3').length >= 2; // re-delivered by the new bridge's initial list
      return r1 && r4 && r3 ? true : undefined;
    }, { timeoutMs: 30_000 });
  });
  test('three sharded bridges: each delivers its own shard; SIGKILL one and its shard is taken over, nothing lost, never two at once', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 5 } });
    // Each replica delivers to its own path of the one receiver, so deliveries say who sent them.
    const configOf = perBridgeConfig(f);
    // Every delivery takes 50 ms, so two replicas delivering one object at once would overlap.
    f.receiver.answer = async (_d, res) => {
      await new Promise((r) => setTimeout(r, 50));
      res.writeHead(200).end(JSON.stringify({ result: 'done', changes: [] }));
    };
    const key = (name: string) => shardOf(`${f.ns}/${name}`, 3);
    const names = Array.from({ length: 30 }, (_, i) => `s${i}`);
    for (const name of names) await f.createWidget(name);
    const replicas: BridgeProcess[] = [];
    for (const i of [0, 1, 2]) {
      replicas.push(await spawnBridge(t, f.dir, `r${i}`, [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${configOf(`r${i}`)}`, '--leader-elect', '--shards=3', `--shard=${i}`, `--lease-namespace=${f.ns}`, '--lease-name=bridge']));
    }
    // On a timeout: which objects are missing, by shard, and what each replica logged last.
    const context = (pending: () => string[]) => () =>
      [`not delivered: ${pending().map((n) => `${n} (shard ${key(n)})`).join(', ')}`, ...replicas.map((r, i) => `r${i}:\n${logTail(r, 15)}`)].join('\n');
    await waitFor('every object delivered', async () => names.every((n) => f.receiver.of(n).length > 0) || undefined, { timeoutMs: 60_000, context: context(() => names.filter((n) => !f.receiver.of(n).length)) });
    for (const n of names) {
      const from = new Set(f.receiver.of(n).map((d) => d.path));
      assert.deepEqual([...from], [`/r${key(n)}`], `${n} (shard ${key(n)}) delivered by its shard's replica alone`);
    }
    // Each replica keeps the records of its own shard alone.
    const inShard = (i: number) => names.filter((n) => key(n) === i).length;
    for (const i of [0, 1, 2]) assert.equal(await widgetRecords(replicas[i]!), inShard(i), `replica ${i} keeps the records of shard ${i} alone`);

    replicas[1]!.kill('SIGKILL');
    const killedAt = Date.now();
    // Changes in every shard while shard 1 has no replica.
    const changed = names.slice(0, 12);
    for (const n of changed) await f.patchWidget(n, { spec: { size: 2 } });
    await waitFor('every change delivered, shard 1 by another replica', async () => changed.every((n) => f.receiver.of(n).some((d) => d.generation === 2)) || undefined, { timeoutMs: 60_000, context: context(() => changed.filter((n) => !f.receiver.of(n).some((d) => d.generation === 2))) });
    const takers = new Set<string>();
    for (const n of changed.filter((n) => key(n) === 1)) {
      const d = f.receiver.of(n).find((x) => x.generation === 2)!;
      assert.notEqual(d.path, '/r1', `${n}: the killed replica delivered nothing after its death`);
      takers.add(d.path.slice(2));
      t.diagnostic(`${n} (shard 1) delivered by ${d.path.slice(1)} ${((d.receivedAt - killedAt) / 1000).toFixed(1)} s after the kill`);
    }
    // The replica that took shard 1 over listed its records in, beside its own.
    assert.equal(takers.size, 1, 'one replica took shard 1 over');
    const taker = Number([...takers][0]);
    const both = inShard(taker) + inShard(1);
    await waitFor(`replica ${taker} keeping shard ${taker}'s records and shard 1's (${both})`, async () => (await widgetRecords(replicas[taker]!)) === both || undefined, { timeoutMs: 10_000 });
    // Never two deliveries of one object at once (each takes 50 ms).
    for (const n of names) {
      const times = f.receiver.of(n).map((d) => d.receivedAt).sort((a, b) => a - b);
      for (let i = 1; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= 45, `${n}: deliveries ${times[i]! - times[i - 1]!} ms apart`);
    }
  });

  test('a rollout from 2 shards to 3, with a leader-elected replica beside: one layout delivers at a time, the new one once the old has gone', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { spec: { timeoutSeconds: 5 } });
    const configOf = perBridgeConfig(f);
    f.receiver.answer = async (_d, res) => {
      await sleep(50); // two layouts delivering one object at once would overlap
      res.writeHead(200).end(JSON.stringify({ result: 'done', changes: [] }));
    };
    const names = Array.from({ length: 20 }, (_, i) => `l${i}`);
    for (const name of names) await f.createWidget(name);
    const replica = (who: string, ...flags: string[]) =>
      spawnBridge(t, f.dir, who, [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${configOf(who)}`, '--leader-elect', `--lease-namespace=${f.ns}`, '--lease-name=bridge', '--shutdown-timeout=1', ...flags]);
    const old = [await replica('old0', '--shards=2', '--shard=0'), await replica('old1', '--shards=2', '--shard=1')];
    await waitFor('every object delivered by the 2-shard layout', async () => names.every((n) => f.receiver.of(n).length > 0) || undefined, { timeoutMs: 60_000 });

    const newer = [await replica('new0', '--shards=3', '--shard=0'), await replica('new1', '--shards=3', '--shard=1'), await replica('new2', '--shards=3', '--shard=2'), await replica('leader')];
    await sleep(5000); // time for the newcomers to take Leases if they (wrongly) could
    for (const n of names) await f.patchWidget(n, { spec: { size: 2 } });
    await waitFor('the changes delivered', async () => names.every((n) => f.receiver.of(n).some((d) => d.generation === 2)) || undefined, { timeoutMs: 60_000 });
    const during = new Set(f.receiver.deliveries.filter((d) => d.generation === 2).map((d) => d.path));
    assert.deepEqual([...during].sort(), ['/old0', '/old1'], 'while the old layout runs, it alone delivers');

    for (const o of old) {
      o.kill('SIGTERM');
      await o.exited;
    }
    const goneAt = Date.now();
    for (const n of names) await f.patchWidget(n, { spec: { size: 3 } });
    await waitFor('the changes after the rollout delivered', async () => names.every((n) => f.receiver.of(n).some((d) => d.generation === 3)) || undefined, { timeoutMs: 90_000 });
    const after = new Set(f.receiver.deliveries.filter((d) => d.generation === 3).map((d) => d.path));
    const layout = after.has('/leader') ? ['/leader'] : ['/new0', '/new1', '/new2'].filter((p) => after.has(p));
    assert.deepEqual([...after].sort(), layout, `one layout delivers after the rollout (${[...after].join(', ')})`);
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two deliveries of one object at once');
    const first = Math.min(...f.receiver.deliveries.filter((d) => d.generation === 3).map((d) => d.receivedAt));
    t.diagnostic(`after the old layout's last replica stopped, ${layout.join(', ')} delivered ${((first - goneAt) / 1000).toFixed(1)} s later`);
    for (const r of newer) r.kill('SIGKILL');
  });
});
