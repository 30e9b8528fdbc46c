// The bridge's per-Reconciler logic on a fake clock and a fake apiserver transport, delivering
// over real HTTP to a stand-in function: what it keeps between attempts and what a resync may
// change.
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { answerDone, startReceiver } from '../test/support/receiver.ts';
import { Bridge, type BridgeOptions } from './bridge.ts';
import { FakeClock } from '../core/clock.ts';
import { parseReconciler } from './config.ts';
import { FakeApiServer, until } from '../test/support/fake-apiserver.ts';
import { BridgeMetrics } from './metrics.ts';
import type { Journal, JournalEntry } from '../core/journal.ts';
import type { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { traceInMemory } from '../test/support/tracing.ts';
import { undecidedGraceMs } from './identity.ts';
import { ApiError } from '../kube/api.ts';

const quiet = { info() {}, warn() {}, error() {} };

async function setup(t: TestContext, spec: Record<string, unknown> = {}, options: Partial<BridgeOptions> = {}) {
  const server = new FakeApiServer();
  const clock = new FakeClock(Date.now());
  const receiver = await startReceiver(t, { kind: 'none' });
  const bridge = new Bridge({ api: server.api(), log: quiet, clock, watcher: { backoffMs: [1, 2] }, ...options });
  t.after(() => bridge.stop(1000));
  const config = parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: receiver.url }, ...spec } });
  assert.deepEqual([...(await bridge.setReconcilers([config])).keys()], []);
  await until('the first list', () => (bridge.ready ? true : undefined));
  return { server, clock, receiver, bridge };
}

/**
 * setup() with the queue's adds counted, and `changeQueued`: changes an object and waits until
 * the bridge has queued the change (for a change that must arrive while a delivery runs).
 */
async function setupCountingAdds(t: TestContext, spec: Record<string, unknown>) {
  const metrics = new BridgeMetrics();
  const f = await setup(t, spec, { metrics });
  const adds = async () => Number((await metrics.registry.getSingleMetricAsString('workqueue_adds_total')).match(/name="widgets"\} (\d+)/)?.[1] ?? 0);
  const changeQueued = async (name: string, extra: Parameters<FakeApiServer['put']>[1]) => {
    const before = await adds();
    f.server.put(name, extra);
    await until('the change queued', async () => ((await adds()) > before ? true : undefined));
  };
  return { ...f, changeQueued };
}

/**
 * The Reconciler's queue at rest: nothing ready, nothing being delivered (every answer has been
 * handled). What it still holds for later is in `delayed`, on the fake clock.
 */
const atRest = (bridge: Bridge) =>
  until('the queue at rest', () => {
    const q = bridge.runtime('widgets')!.queue;
    return q.length === 0 && q.inFlight === 0 ? q : undefined;
  });

/** White-box: the requeues a Reconciler keeps behind newer changes (bridge/controller.ts). */
const keptRequeues = (bridge: Bridge) => (bridge.runtime('widgets') as unknown as { requeues: Map<string, unknown> }).requeues.size;

describe('Bridge on a fake clock', () => {
  test("a function whose clock is wrong is retried, not dropped: the Reconciler says ClockSkew with the skew, and is Running again once the clock is right", async (t) => {
    const metrics = new BridgeMetrics();
    const problems: (string | undefined)[] = [];
    const { server, clock, receiver, bridge } = await setup(t, {}, { metrics, onProblem: (_, source, p) => source === 'clock' && problems.push(p) });
    const warnings: string[] = [];
    (bridge as unknown as { recordWarning: (o: unknown, reason: string) => Promise<void> }).recordWarning = async (_o, reason) => void warnings.push(reason);
    let skewMs: number | undefined = 120_000;
    receiver.answer = (d, res) => (skewMs === undefined ? answerDone(d, res) : void res.writeHead(400, { 'kfn-time': new Date(Date.now() + skewMs).toISOString(), 'content-type': 'application/json' }).end('{"error":"…","reason":"ClockSkew"}'));
    const skew = async () => Number((await metrics.registry.getSingleMetricAsString('kfn_bridge_clock_skew_seconds')).match(/controller="widgets"\} (-?[\d.e+]+)/)?.[1]);
    server.put('w');
    server.put('v');
    await until('both refused', () => (receiver.of('w')[0] && receiver.of('v')[0] ? true : undefined));
    await atRest(bridge);
    assert.equal(problems.length, 1, 'said once, for both objects');
    assert.match(problems[0] ?? '', /clock is 120 s ahead of the bridge's/);
    assert.ok(Math.abs((await skew()) - 120) < 2);
    assert.deepEqual(warnings, [], 'no ReconcileRejected: not a verdict on the objects');
    clock.advance(10);
    await until('retried', () => receiver.of('w')[1]);
    await atRest(bridge);
    assert.equal(problems.length, 1, 'retried, still skewed: nothing new to say');
    skewMs = undefined; // the clock set right
    clock.advance(60_000);
    await until('delivered again', () => receiver.of('w').length >= 3 && receiver.of('v').length >= 3 ? true : undefined);
    await atRest(bridge);
    assert.deepEqual(problems.slice(1), [undefined], 'cleared once');
    assert.equal(await skew(), 0);
  });

  test('a deleted object\'s tombstone is kept until its deleted delivery succeeds', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t);
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    let fail = true;
    receiver.answer = (d, res) => (d.reason === 'deleted' && fail ? void res.writeHead(500).end('not now') : answerDone(d, res));
    server.remove('w');
    await until('the first deleted delivery', () => receiver.of('w').find((d) => d.reason === 'deleted'));
    assert.equal((await atRest(bridge)).delayed, 1, 'the failed delivery waits out its backoff');
    fail = false;
    clock.advance(10); // the 5 ms backoff
    const retry = await until('the retried deleted delivery', () => receiver.of('w').filter((d) => d.reason === 'deleted')[1]);
    assert.equal(retry.attempt, 2);
    assert.equal(retry.received.data.primary.uid, 'uid-w', 'the retry still names the object it deletes');
    assert.equal((await atRest(bridge)).delayed, 0, 'once it succeeded the tombstone is gone: nothing is left to deliver');
    clock.advance(60_000);
    await atRest(bridge);
    assert.equal(receiver.of('w').filter((d) => d.reason === 'deleted').length, 2);
  });

  test('contract 2: what a deleted object\'s next delivery would have waited for goes with it, even when the function refuses its deleted event; a new object of its name is not held back', async (t) => {
    const { server, receiver, bridge } = await setup(t, { contract: 2 });
    // The function says it wrote the Widget at a version the watch will not reach for a long
    // time, and refuses the deleted event (a 4xx: no answer replaces what it said before).
    receiver.answer = (d, res) => {
      if (d.reason === 'deleted') return void res.writeHead(400).end('no');
      const ref = { apiVersion: 'example.com/v1', kind: 'Widget', namespace: 'ns', name: 'w', resourceVersion: '999999' };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'done', changes: [{ action: 'status', ref }] }));
    };
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    server.remove('w');
    await until('the deleted delivery', () => receiver.of('w').find((d) => d.reason === 'deleted'));
    await atRest(bridge);
    server.put('w');
    const created = await until('the new object\'s delivery, at once', () => receiver.of('w').filter((d) => d.reason === 'created')[1]);
    assert.ok(created.received.data.observed, 'with its observed state');
  });

  test('a resync never overrides a real reason waiting to be delivered', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t, { resyncPeriodSeconds: 10, backoff: { baseDelayMs: 30_000, maxDelayMs: 30_000 } });
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    await atRest(bridge);
    // An update fails; while it waits out a 30 s backoff, the object's resync comes due.
    receiver.answer = (d, res) => (d.reason === 'updated' && d.attempt === 1 ? void res.writeHead(500).end('busy') : answerDone(d, res));
    server.put('w', { generation: 2 });
    await until('the failed update', () => receiver.of('w').find((d) => d.reason === 'updated'));
    await atRest(bridge);
    clock.advance(10_000); // the resync period
    assert.equal((await atRest(bridge)).delayed, 1, 'the resync joined the waiting update instead of delivering');
    clock.advance(20_000); // the backoff ends
    const next = await until('the next delivery', () => receiver.of('w')[2]);
    assert.equal(next.reason, 'updated', 'still the update, not a resync');
    assert.equal(next.attempt, 2);
    assert.equal(receiver.of('w').filter((d) => d.reason === 'resync').length, 0);
  });

  test('a requeue answer does not take the reason of a change seen while it was being delivered; its own delivery still follows its backoff', async (t) => {
    const { server, clock, receiver, bridge, changeQueued } = await setupCountingAdds(t, { resyncPeriodSeconds: 0, backoff: { baseDelayMs: 30_000, maxDelayMs: 30_000 } });
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    await atRest(bridge);
    // The function answers one update with a plain requeue; while it is answering, the object
    // changes again (generation 3), and the watch queues that change.
    receiver.answer = async (d, res) => {
      if (d.reason === 'updated' && d.attempt === 1 && d.received.data.primary.generation === 2) {
        await changeQueued('w', { generation: 3 });
        return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'requeue' }));
      }
      answerDone(d, res);
    };
    server.put('w', { generation: 2 });
    const change = await until('the change seen during the delivery, delivered at once', () => receiver.of('w')[2]);
    assert.equal(change.reason, 'updated', 'delivered as the change it is, not as the requeue');
    assert.equal(change.received.data.primary.generation, 3);
    assert.equal((await atRest(bridge)).delayed, 1, 'the requeue still waits out its backoff');
    clock.advance(30_000);
    const requeued = await until('the requeue, after its backoff', () => receiver.of('w')[3]);
    assert.equal(requeued.reason, 'requeue');
    await atRest(bridge);
    assert.equal(receiver.of('w').length, 4);
    assert.equal(keptRequeues(bridge), 0, 'nothing kept once delivered');
  });

  test('a requeue kept behind a newer change is dropped when that change is answered with a requeue of its own, or the object is deleted', async (t) => {
    const { server, clock, receiver, bridge, changeQueued } = await setupCountingAdds(t, { resyncPeriodSeconds: 0, backoff: { baseDelayMs: 30_000, maxDelayMs: 30_000 } });
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    await atRest(bridge);
    // Both updates answer requeue; while the first is answered, the second change is queued.
    receiver.answer = async (d, res) => {
      if (d.reason === 'updated' && d.received.data.primary.generation === 2) {
        await changeQueued('w', { generation: 3 });
      }
      if (d.reason === 'updated') return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'requeue' }));
      answerDone(d, res);
    };
    server.put('w', { generation: 2 });
    await until('the change delivered', () => receiver.of('w').find((d) => d.reason === 'updated' && d.received.data.primary.generation === 3));
    await atRest(bridge);
    assert.equal(keptRequeues(bridge), 0, 'the newer requeue is the one pending; the older is not kept');
    clock.advance(60_000);
    await atRest(bridge);
    assert.deepEqual(receiver.of('w').map((d) => d.reason), ['created', 'updated', 'updated', 'requeue'], 'one requeue delivery');
    server.remove('w');
    await until('deleted delivered', () => receiver.of('w').find((d) => d.reason === 'deleted'));
    await atRest(bridge);
    assert.equal(keptRequeues(bridge), 0);
  });

  test('Reconcilers that join a watch while its first list is being applied are told of every object it lists', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 7; i++) server.put(`w${i}`);
    const receiver = await startReceiver(t, { kind: 'none' });
    // Pages of 2: the list is applied over four pages, and both Reconcilers share its watch.
    const bridge = new Bridge({ api: server.api(), log: quiet, clock: new FakeClock(Date.now()), watcher: { backoffMs: [1, 2], pageSize: 2 } });
    t.after(() => bridge.stop(1000));
    const configs = ['first', 'second'].map((name) => parseReconciler({ metadata: { name }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: `${receiver.url}${name}` } } }));
    assert.deepEqual([...(await bridge.setReconcilers(configs)).keys()], []);
    for (const name of ['first', 'second']) {
      const names = await until(`every Widget delivered to ${name}`, () => {
        const seen = new Set(receiver.deliveries.filter((d) => d.path === `/${name}`).map((d) => d.name));
        return seen.size === 7 ? seen : undefined;
      });
      assert.equal(names.size, 7);
    }
  });
});

describe('answers checked against the contract before they count', () => {
  const bodies: [string, string][] = [
    ['a body that is not JSON', 'all good'],
    ['a body cut at 1 MiB', `{"result":"done","changes":[],"message":"${'x'.repeat(1 << 20)}"}`],
    ['changes: [null]', '{"result":"done","changes":[null]}'],
    ['stale: 7', '{"result":"done","changes":[],"stale":7}'],
    ['children: [{}]', '{"result":"done","changes":[],"children":[{}]}'],
    ['an unknown result', '{"result":"fine","changes":[]}'],
  ];
  for (const [what, body] of bodies) {
    test(`${what} is a failed delivery: retried with backoff, counted, journalled; the key is not stuck`, async (t) => {
      const metrics = new BridgeMetrics();
      const journal = { entries: [] as JournalEntry[], append(e: JournalEntry) { this.entries.push(e); } };
      const { server, clock, receiver, bridge } = await setup(t, { contract: 2 }, { metrics, journal: journal as unknown as Journal });
      let bad = true;
      receiver.answer = (d, res) => (bad ? void res.writeHead(200, { 'content-type': 'application/json' }).end(body) : answerDone(d, res));
      server.put('w');
      await until('the first delivery', () => receiver.of('w')[0]);
      const rest = await atRest(bridge);
      assert.equal(rest.delayed, 1, 'the failed delivery waits out its backoff');
      const entry = await until('the journal line', () => journal.entries[0]);
      assert.equal(entry.outcome, 'retry');
      assert.match(entry.why ?? '', /invalid answer/);
      const counted = (await metrics.registry.getSingleMetricAsString('kfn_bridge_invalid_answers_total')).match(/controller="widgets"\} (\d+)/);
      assert.equal(counted?.[1], '1');
      bad = false;
      clock.advance(10); // the 5 ms backoff
      const retry = await until('the retried delivery', () => receiver.of('w')[1]);
      assert.equal(retry.attempt, 2);
      assert.equal(retry.id, receiver.of('w')[0]!.id, 'the same observation, the same event id');
      assert.equal((await atRest(bridge)).delayed, 0);
    });
  }
});

describe('read-your-writes across changes of the Reconciler', () => {
  test('a Reconciler edit keeps what the next delivery of each object waits for: no delivery on a snapshot older than its last writes', async (t) => {
    const { server, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    // The function says it wrote the Widget at a version the watch has not reached yet.
    const ahead = String(Number(server.currentVersion) + 5);
    receiver.answer = (d, res) => {
      const ref = { apiVersion: 'example.com/v1', kind: 'Widget', namespace: 'ns', name: 'w', resourceVersion: ahead };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'done', changes: d.reason === 'created' ? [{ action: 'status', ref }] : [] }));
    };
    server.put('w');
    await until('created delivered', () => receiver.of('w')[0]);
    await atRest(bridge);
    // An edit (a new timeout), then a change the watch sees at a version still short of the write.
    const config = parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: receiver.url }, contract: 2, resyncPeriodSeconds: 0, timeoutSeconds: 45 } });
    await bridge.setReconcilers([config]);
    server.put('w', { generation: 2 });
    await atRest(bridge);
    assert.equal(receiver.of('w').length, 1, 'the update waits for the watch to reach the write, as before the edit');
    while (Number(server.currentVersion) < Number(ahead)) server.put('other');
    server.put('w', { generation: 3 });
    await until('the delivery once the watch has seen the write', () => receiver.of('w')[1]);
  });
});

describe('read-your-writes after a failed answer', () => {
  test('the writes a failed answer reports are waited for: its retry is not built on a snapshot that lacks them', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    const ahead = String(Number(server.currentVersion) + 5);
    // The function applied a child at a version the watch has not reached, then failed.
    receiver.answer = (d, res) => {
      if (d.attempt > 1) return answerDone(d, res);
      const ref = { apiVersion: 'example.com/v1', kind: 'Widget', namespace: 'ns', name: 'w', resourceVersion: ahead };
      res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'writing the status failed', changes: [{ action: 'status', ref }] }));
    };
    server.put('w');
    await until('the failed delivery', () => receiver.of('w')[0]);
    await atRest(bridge);
    clock.advance(10); // the backoff
    await atRest(bridge);
    assert.equal(receiver.of('w').length, 1, 'the retry waits for the watch to reach the write');
    while (Number(server.currentVersion) < Number(ahead) - 1) server.put('other');
    server.put('w'); // the write itself, as the watch sees it
    const retry = await until('the retry once the watch has seen the write', () => receiver.of('w')[1]);
    assert.equal(retry.attempt, 2);
  });
});

describe('a delivery waiting for its writes is woken by the watch', () => {
  test('the watch seeing the write delivers the waiting object at once: no polling, no time passes', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    const ahead = String(Number(server.currentVersion) + 3);
    receiver.answer = (d, res) => {
      const ref = { apiVersion: 'example.com/v1', kind: 'Widget', namespace: 'ns', name: 'w', resourceVersion: ahead };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'done', changes: d.reason === 'created' ? [{ action: 'status', ref }] : [] }));
    };
    server.put('w', { generation: 1 });
    await until('created delivered', () => receiver.of('w')[0]);
    await atRest(bridge);
    server.put('w', { generation: 2 }); // seen before the write: waits
    await atRest(bridge);
    assert.equal(receiver.of('w').length, 1);
    const timers = clock.pendingTimers();
    server.put('w', { generation: 2 }); // the write itself (a status change): the watch has it now
    const update = await until('the update, woken by the watch', () => receiver.of('w')[1]);
    assert.equal(update.reason, 'updated');
    assert.ok(clock.pendingTimers() <= timers, 'delivered without a timer firing');
    await atRest(bridge);
    clock.advance(60_000);
    await atRest(bridge);
    assert.deepEqual(receiver.of('w').map((d) => d.reason), ['created', 'updated'], 'and the wait\'s own timer, cancelled, delivers nothing more');
  });
});

describe('deliveries held until the identity is first reviewed', () => {
  test('an object seen before the first review is delivered with its own reason once allowed, not as a resync', async (t) => {
    const server = new FakeApiServer();
    const clock = new FakeClock(Date.now());
    const receiver = await startReceiver(t, { kind: 'none' });
    const api = server.api();
    const plain = api.request.bind(api);
    let allow!: () => void;
    const reviewed = new Promise<void>((resolve) => (allow = resolve));
    (api as { request: unknown }).request = async (method: string, path: string, options?: object) => {
      if (path.includes('/serviceaccounts/')) return { metadata: { name: 'fn', namespace: 'ns', annotations: { 'kfn.dev/identity-for': 'widgets' } } };
      if (path.includes('subjectaccessreviews')) return reviewed.then(() => ({ status: { allowed: true } }));
      return plain(method as never, path, options);
    };
    server.put('w');
    const bridge = new Bridge({ api, log: quiet, clock, watcher: { backoffMs: [1, 2] }, requireIdentity: true });
    t.after(() => bridge.stop(1000));
    const config = parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: receiver.url }, serviceAccount: { name: 'fn', namespace: 'ns' } } });
    await bridge.setReconcilers([config]);
    await until('the first list', () => (bridge.ready ? true : undefined));
    await atRest(bridge);
    assert.equal(receiver.deliveries.length, 0, 'nothing before the review');
    allow();
    const first = await until('the delivery once allowed', () => receiver.of('w')[0]);
    assert.equal(first.reason, 'created');
  });
});

describe('only deliveries held back for their writes are woken by the watch', () => {
  const json = (res: import('node:http').ServerResponse, body: unknown) => void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const ref = (name: string, rv: string) => ({ apiVersion: 'example.com/v1', kind: 'Widget', namespace: 'ns', name, resourceVersion: rv });

  test('the watch seeing a done delivery\'s own status write delivers nothing more', async (t) => {
    const { server, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    receiver.answer = (d, res) => json(res, { result: 'done', changes: d.reason === 'created' ? [{ action: 'status', ref: ref('w', String(Number(server.currentVersion) + 1)) }] : [] });
    server.put('w', { generation: 1 });
    await until('created', () => receiver.of('w')[0]);
    await atRest(bridge);
    server.put('w', { generation: 1 }); // the status write, as the watch sees it: queued at once if at all
    await atRest(bridge);
    assert.deepEqual(receiver.of('w').map((d) => d.reason), ['created']);
  });

  test('nor does it cut a requeueAfterSeconds short', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    receiver.answer = (d, res) => json(res, d.reason === 'created' ? { result: 'requeue', requeueAfterSeconds: 60, changes: [{ action: 'status', ref: ref('w', String(Number(server.currentVersion) + 1)) }] } : { result: 'done', changes: [] });
    server.put('w', { generation: 1 });
    await until('created', () => receiver.of('w')[0]);
    await atRest(bridge);
    server.put('w', { generation: 1 });
    await atRest(bridge);
    assert.deepEqual(receiver.of('w').map((d) => d.reason), ['created'], 'not before its 60 s');
    clock.advance(60_000);
    await until('the requeue after 60 s', () => receiver.of('w')[1]);
  });

  test('a delivery still waiting after one of its writes was seen is delivered at the end of its longest wait, not stuck', async (t) => {
    const { server, clock, receiver, bridge } = await setup(t, { contract: 2, resyncPeriodSeconds: 0 });
    let other = '';
    receiver.answer = (d, res) => {
      if (d.reason !== 'created') return json(res, { result: 'done', changes: [] });
      const now = Number(server.currentVersion);
      other = String(now + 10);
      json(res, { result: 'done', changes: [{ action: 'status', ref: ref('w', String(now + 2)) }, { action: 'applied', ref: ref('x', other) }] });
    };
    server.put('w', { generation: 1 });
    await until('created', () => receiver.of('w')[0]);
    await atRest(bridge);
    server.put('w', { generation: 2 }); // an update, before the writes were seen: it waits
    await atRest(bridge);
    server.put('w', { generation: 2 }); // the write on w is seen; the one on x is not
    await atRest(bridge);
    assert.deepEqual(receiver.of('w').map((d) => d.reason), ['created']);
    clock.advance(10_000); // the longest wait
    const update = await until('the update, at the end of its longest wait', () => receiver.of('w')[1]);
    assert.equal(update.reason, 'updated');
  });
});

describe('a watch replaced by one that keeps more', () => {
  test('what was deleted while it was replaced is delivered as deleted to the Reconcilers that knew it', async (t) => {
    const server = new FakeApiServer();
    const clock = new FakeClock(Date.now());
    const receiver = await startReceiver(t, { kind: 'none' });
    const bridge = new Bridge({ api: server.api(), log: quiet, clock, watcher: { backoffMs: [1, 2] } });
    t.after(() => bridge.stop(1000));
    const spec = (uri: string, contract: number) => ({ for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri }, contract, resyncPeriodSeconds: 0 });
    const first = parseReconciler({ metadata: { name: 'widgets' }, spec: spec(`${receiver.url}first`, 1) });
    server.put('kept', { generation: 1 });
    server.put('gone', { generation: 1 });
    await bridge.setReconcilers([first]);
    await until('both created', () => (receiver.deliveries.filter((d) => d.path === '/first').length === 2 ? true : undefined));
    await atRest(bridge);
    // A second Reconciler needs the whole objects (contract 2): the metadata watch is replaced.
    // An object deleted unseen meanwhile (no event reaches the stopped watch) must not be lost.
    server.remove('gone', 'ns', true);
    const second = parseReconciler({ metadata: { name: 'snapshots' }, spec: spec(`${receiver.url}second`, 2) });
    await bridge.setReconcilers([first, second]);
    const deleted = await until('the deletion delivered to the first Reconciler', () => receiver.deliveries.find((d) => d.path === '/first' && d.name === 'gone' && d.reason === 'deleted'));
    assert.ok(deleted);
    await until('the second Reconciler told of the object that is there', () => receiver.deliveries.find((d) => d.path === '/second' && d.name === 'kept'));
    await atRest(bridge);
    assert.equal(bridge.runtime('snapshots')!.queue.length, 0);
    assert.equal(receiver.deliveries.some((d) => d.path === '/second' && d.name === 'gone'), false, 'and not of the one that is gone, which it never knew');
  });
});

/**
 * A bridge whose one Reconciler, `widgets`, names an identity: `verdict` answers each of the
 * review's requests (true allowed, false refused; a throw, no answer). Its identity problems are
 * collected as the Reconciler's status would say them.
 */
async function identitySetup(t: TestContext, verdict: () => boolean, options: Partial<BridgeOptions> = {}) {
  const server = new FakeApiServer();
  const clock = new FakeClock(Date.now());
  const receiver = await startReceiver(t, { kind: 'none' });
  const api = server.api();
  const plain = api.request.bind(api);
  const seen = { reviews: 0, problem: undefined as string | undefined };
  (api as { request: unknown }).request = async (method: string, path: string, o?: object) => {
    if (!path.includes('/serviceaccounts/') && !path.includes('subjectaccessreviews')) return plain(method as never, path, o);
    seen.reviews++;
    const allowed = verdict();
    return path.includes('/serviceaccounts/') ? { metadata: { name: 'fn', namespace: 'ns', annotations: { 'kfn.dev/identity-for': 'widgets' } } } : { status: { allowed } };
  };
  const bridge = new Bridge({ api, log: quiet, clock, watcher: { backoffMs: [1, 2] }, requireIdentity: true, onProblem: (_, source, p) => source === 'identity' && (seen.problem = p), ...options });
  t.after(() => bridge.stop(1000));
  const start = () => bridge.setReconcilers([parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: receiver.url }, serviceAccount: { name: 'fn', namespace: 'ns' } } })]);
  return { server, clock, receiver, bridge, seen, start };
}

/** Moves the fake clock a second at a time (letting what each second wakes run) until `done`, or `ms` have passed. */
async function stepUntil(clock: FakeClock, ms: number, done: () => boolean): Promise<void> {
  for (let waited = 0; waited <= ms && !done(); waited += 1000) {
    clock.advance(1000);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('deliveries held while the identity is refused', () => {
  test('refused at first (the binding not seen yet), allowed at the next review: the object comes with its own reason', async (t) => {
    let allowed = false;
    const { server, clock, receiver, bridge, seen, start } = await identitySetup(t, () => allowed);
    server.put('w');
    await start();
    await until('the refusal', () => seen.problem);
    await atRest(bridge);
    assert.equal(receiver.deliveries.length, 0, 'nothing while refused');
    // A Reconciler that may not be delivered for watches nothing: nothing of its kinds is held.
    assert.deepEqual(bridge.watchList(), []);
    allowed = true;
    clock.advance(1000); // the next review, a second after a refusal
    const first = await until('the delivery once allowed', () => receiver.of('w')[0]);
    assert.equal(first.reason, 'created');
  });

  test('refused after it was allowed: its watches are let go, and what they held with them; allowed again, it watches and delivers again', async (t) => {
    let allowed = true;
    const { server, clock, receiver, bridge, start } = await identitySetup(t, () => allowed, { identityRecheckMs: 1000 });
    for (let i = 0; i < 20; i++) server.put(`w${i}`);
    await start();
    await until('every object delivered', () => (receiver.deliveries.length >= 20 ? true : undefined));
    assert.equal(bridge.watchList()[0]?.objects, 20);
    allowed = false;
    clock.advance(1000);
    await until('its watch let go', () => (bridge.watchList().length === 0 ? true : undefined));
    const delivered = receiver.deliveries.length;
    server.put('while-refused');
    clock.advance(60_000);
    await atRest(bridge);
    assert.equal(receiver.deliveries.length, delivered, 'nothing delivered while refused');
    allowed = true;
    clock.advance(1000);
    await until('the object made while refused, delivered once allowed again', () => receiver.of('while-refused')[0]);
  });
});

describe('a review that cannot decide', () => {
  test('the last verdict stands for a grace period, then deliveries are held and said to be, until a review decides again', async (t) => {
    let failing = false;
    const { server, clock, receiver, bridge, seen, start } = await identitySetup(
      t,
      () => {
        if (failing) throw new ApiError(503, 'the apiserver is shutting down');
        return true;
      },
      { identityRecheckMs: 1000 },
    );
    await start();
    server.put('before');
    await until('the first delivery', () => receiver.of('before')[0]);
    failing = true;
    // The next review (every second here) fails.
    clock.advance(1000);
    await until('the failed review', () => (seen.reviews > 2 ? true : undefined));
    server.put('in-grace');
    await until('delivered within the grace period', () => receiver.of('in-grace')[0]);
    // Retried at 1, 2, 4 … s; once the grace has passed, the next failure holds deliveries.
    await stepUntil(clock, undecidedGraceMs + 16_000, () => seen.problem !== undefined);
    assert.match(seen.problem ?? '', /could not be reviewed for \d+ s \(.*shutting down\): deliveries are held until they can be/);
    server.put('held');
    await atRest(bridge);
    assert.equal(receiver.of('held').length, 0, 'nothing delivered while no review can decide');
    failing = false;
    await stepUntil(clock, 5000, () => seen.problem === undefined);
    assert.equal(seen.problem, undefined, 'a verdict again clears the problem');
    await until('the held object delivered once a review decides', () => receiver.of('held')[0]);
  });
});

describe('a delivery is timed from when it is sent', () => {
  test('a sink lookup slower than the grace does not eat into the hold: the key is held for the whole time the function is told it has, from when it is sent', async (t) => {
    const server = new FakeApiServer();
    const clock = new FakeClock(Date.now());
    const receiver = await startReceiver(t, { kind: 'none' });
    const api = server.api();
    const plain = api.request.bind(api);
    let lookups = 0;
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    (api as { request: unknown }).request = async (method: string, path: string, options?: object) => {
      if (path.endsWith('/fn-sink')) {
        lookups++;
        await gate;
        return { status: { url: receiver.url, conditions: [{ type: 'Ready', status: 'True' }] } };
      }
      return plain(method as never, path, options);
    };
    // Answered only at the end: the hold is looked at while the delivery is in flight.
    const waiting: (() => void)[] = [];
    const answer = () => waiting.splice(0).forEach((f) => f());
    receiver.answer = (d, res) => new Promise<void>((r) => waiting.push(() => (answerDone(d, res), r())));
    server.put('w');
    const bridge = new Bridge({ api, log: quiet, clock, watcher: { backoffMs: [1, 2] }, requireIdentity: false });
    t.after(() => (answer(), release(), bridge.stop(1000)));
    await bridge.setReconcilers([parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { ref: { apiVersion: 'example.com/v1', kind: 'Widget', name: 'fn-sink', namespace: 'ns' } }, timeoutSeconds: 30 } })]);
    await until('the sink looked up', () => (lookups > 0 ? true : undefined));
    // The lookup takes 5 s, longer than the 2 s grace the hold adds to the timeout.
    clock.advance(5000);
    release();
    await until('the delivery', () => receiver.of('w')[0]);
    const sentAt = clock.now();
    const held = bridge.holds.until('widgets', 'ns/w', 30_000);
    assert.ok(held !== undefined && held >= sentAt + 30_000, `held until ${held === undefined ? 'never' : held - sentAt} ms after it was sent; the function was told it has 30000 ms`);
    answer();
  });
});

describe('a sink the bridge scales to zero', () => {
  test('at zero, a change wakes the Deployment; the key is delivered once, in order, once a pod is ready; idle, it goes back to zero; a start that does not come shows on the Reconciler', async (t) => {
    const server = new FakeApiServer();
    const clock = new FakeClock(Date.now());
    const receiver = await startReceiver(t, { kind: 'none' });
    const api = server.api();
    const plain = api.request.bind(api);
    const deployment = { replicas: 0, readyAt: Infinity, startMs: 1500, scales: [] as number[] };
    (api as { request: unknown }).request = async (method: string, path: string, options?: { body?: { spec: { replicas: number } } }) => {
      if (path === '/apis/apps/v1/namespaces/fns/deployments/kfn-fn-widgets') {
        return { spec: { replicas: deployment.replicas }, status: { readyReplicas: deployment.replicas && clock.now() >= deployment.readyAt ? deployment.replicas : 0 } };
      }
      if (path === '/apis/apps/v1/namespaces/fns/deployments/kfn-fn-widgets/scale') {
        if (deployment.replicas === 0 && options!.body!.spec.replicas > 0) deployment.readyAt = clock.now() + deployment.startMs;
        deployment.replicas = options!.body!.spec.replicas;
        deployment.scales.push(deployment.replicas);
        return {};
      }
      return plain(method as never, path, options);
    };
    const problems: (string | undefined)[] = [];
    const bridge = new Bridge({ api, log: quiet, clock, watcher: { backoffMs: [1, 2] }, requireIdentity: false, sinkReachable: async () => true, onProblem: (_, source, p) => source === 'activator' && problems.push(p) });
    t.after(() => bridge.stop(1000));
    // No resync (0): one falling in the idle window, at a time the schedule spreads, would keep it up.
    const spec = { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, resyncPeriodSeconds: 0, sink: { uri: receiver.url, scaleToZero: { deployment: { namespace: 'fns', name: 'kfn-fn-widgets' }, idleSeconds: 60 } } };
    await bridge.setReconcilers([parseReconciler({ metadata: { name: 'widgets' }, spec })]);
    await until('the first list', () => (bridge.ready ? true : undefined));
    const step = async (ms: number) => {
      for (let i = 0; i < ms; i += 100) {
        clock.advance(100);
        await new Promise((r) => setImmediate(r));
      }
    };
    server.put('w');
    await step(1000);
    assert.deepEqual(deployment.scales, [1], 'woken from zero by the change');
    assert.equal(receiver.of('w').length, 0, 'held while the pod starts');
    server.put('w', { labels: { edited: 'yes' } });
    await step(1000);
    const delivered = await until('delivered once a pod is ready', () => receiver.of('w')[0]);
    await atRest(bridge);
    assert.equal(receiver.of('w').length, 1, 'the two changes while held: one delivery, of the newest');
    assert.equal(delivered.reason, 'updated');
    // Not before the idle window; after it, back to zero (stepped until then, the scale-down's
    // own requests given their turns: a fixed count of steps raced them).
    await step(59_000);
    assert.deepEqual(deployment.scales, [1], 'up within the idle window');
    await stepUntil(clock, 10_000, () => deployment.scales.length > 1);
    assert.deepEqual(deployment.scales, [1, 0], 'back to zero after the idle window');
    // A start that does not come: said on the Reconciler, and the key still waits.
    deployment.startMs = Infinity;
    server.put('v');
    await step(65_000);
    assert.match(problems.at(-1) ?? '', /no pod of it has been ready for \d+ s/);
    assert.equal(receiver.of('v').length, 0);
    deployment.readyAt = clock.now();
    await step(2000);
    await until('delivered once the pod is ready at last', () => receiver.of('v')[0]);
    assert.equal(problems.at(-1), undefined, 'and the problem cleared');
  });
});

describe('traces of observations that are never delivered still end', () => {
  /** Every receive span has its queued span ended: none runs on in the exporter's absence. */
  const unended = (exported: InMemorySpanExporter) => {
    const spans = exported.getFinishedSpans();
    const ended = new Set(spans.filter((s) => s.name.startsWith('queued ')).map((s) => s.parentSpanContext?.spanId));
    return spans.filter((s) => s.name.startsWith('receive ') && !ended.has(s.spanContext().spanId)).map((s) => String(s.attributes['kfn.object.name']));
  };

  test('a child event for a primary that does not exist', async (t) => {
    const exported = traceInMemory(t);
    // Widgets own Widgets here (the fake serves one kind): the child names an owner never created.
    const { server, receiver, bridge } = await setup(t, { owns: [{ apiVersion: 'example.com/v1', kind: 'Widget' }] });
    server.put('child', { labels: { 'app.kubernetes.io/managed-by': 'kfn' }, ownerReferences: [{ apiVersion: 'example.com/v1', kind: 'Widget', name: 'ghost', uid: 'uid-ghost', controller: true }] });
    await until('the child delivered as a primary of its own', () => receiver.of('child')[0]);
    await atRest(bridge);
    const receives = exported.getFinishedSpans().filter((s) => s.name === 'receive Widget');
    assert.ok(receives.length >= 2, 'one receive span as a primary, one as a child of the ghost');
    assert.deepEqual(unended(exported), []);
  });

  test('objects still waiting when the controller stops', async (t) => {
    const exported = traceInMemory(t);
    const { server, receiver, bridge } = await setup(t, { maxConcurrentReconciles: 1 });
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    receiver.answer = async (d, res) => {
      if (d.name === 'first') await held;
      answerDone(d, res);
    };
    server.put('first');
    await until('the first delivery in flight', () => receiver.of('first')[0]);
    server.put('second');
    await until('the second observed', () => exported.getFinishedSpans().find((s) => s.attributes['kfn.object.name'] === 'second'));
    const stopped = bridge.stop(5000);
    release();
    await stopped;
    assert.equal(receiver.of('second').length, 0, 'never delivered');
    assert.deepEqual(unended(exported), []);
  });

  test("another shard's objects start no trace", async (t) => {
    const exported = traceInMemory(t);
    const { server, receiver } = await setup(t, {}, { owns: (key) => key !== 'ns/theirs' });
    server.put('theirs');
    server.put('mine');
    await until('mine delivered', () => receiver.of('mine')[0]);
    assert.deepEqual(exported.getFinishedSpans().filter((s) => s.attributes['kfn.object.name'] === 'theirs').map((s) => s.name), []);
    assert.equal(receiver.of('theirs').length, 0);
  });
});
