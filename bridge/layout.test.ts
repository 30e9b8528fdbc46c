import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';
import { LayoutGate, layoutLeaseNames } from './layout.ts';

const flush = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};

interface Lease {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec: { holderIdentity?: string; renewTime?: string; leaseDurationSeconds?: number };
}

/** Leases in one namespace, as the apiserver keeps them: GET, LIST, POST and PUT with resourceVersion checks. */
function leaseStore(clock: FakeClock) {
  const leases = new Map<string, Lease>();
  let rv = 0;
  const api = {
    async request(method: string, path: string, options: { body?: Lease } = {}) {
      const name = path.match(/\/leases\/([^/]+)$/)?.[1];
      if (method === 'GET' && !name) return { items: [...leases.values()].map((l) => structuredClone(l)) };
      if (method === 'GET') {
        const l = leases.get(name!);
        if (!l) throw new ApiError(404, 'not found');
        return structuredClone(l);
      }
      const body = options.body!;
      if (method === 'POST' && leases.has(body.metadata.name)) throw new ApiError(409, 'exists');
      if (method === 'PUT' && body.metadata.resourceVersion !== leases.get(name!)?.metadata.resourceVersion) throw new ApiError(409, 'conflict');
      const stored = { ...structuredClone(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      leases.set(stored.metadata.name, stored);
      return structuredClone(stored);
    },
  } as unknown as KubeApi;
  const microTime = (wall: number) => new Date(wall).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
  return {
    api,
    /** A replica holding (and renewing) the Lease `name` now, by its wall clock (default this one's). */
    hold: (name: string, holder: string, wall = clock.wall()) => leases.set(name, { metadata: { name, resourceVersion: String(++rv) }, spec: { holderIdentity: holder, renewTime: microTime(wall), leaseDurationSeconds: 15 } }),
    /** A replica letting the Lease `name` go, with `note` for the next holder. */
    release: (name: string, note?: string) => leases.set(name, { metadata: { name, resourceVersion: String(++rv), annotations: note ? { 'kfn.dev/held': note } : {} }, spec: { renewTime: microTime(clock.wall()), leaseDurationSeconds: 1 } }),
    /** The Lease `name` deleted (by hand, or by an undeploy), whoever holds it. */
    remove: (name: string) => leases.delete(name),
    record: () => leases.get('bridge-layout')?.spec.holderIdentity,
  };
}

const gate = (store: ReturnType<typeof leaseStore>, clock: FakeClock, shards: number) =>
  new LayoutGate({ api: store.api, namespace: 'ns', leaseName: 'bridge', shards, clock, pollMs: 1000, handOverAnnotation: 'kfn.dev/held' });

async function advance(clock: FakeClock, ms: number) {
  for (let t = 0; t < ms; t += 500) {
    clock.advance(500);
    await flush();
  }
}

test('each layout has Leases of its own: <lease> for a leader, <lease>-<i>-of-<N> for shards', () => {
  assert.deepEqual(layoutLeaseNames('bridge', 1), ['bridge']);
  assert.deepEqual(layoutLeaseNames('bridge', 3), ['bridge-0-of-3', 'bridge-1-of-3', 'bridge-2-of-3']);
});

test('a rollout from 2 shards to 3: the new layout stands by until every Lease of the old one is let go, then is recorded and admitted with what they held', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  const two = gate(store, clock, 2);
  await two.claim();
  assert.equal(store.record(), 'shards=2', 'the first layout is recorded at once');
  store.hold('bridge-0-of-2', 'old-0');
  store.hold('bridge-1-of-2', 'old-1');

  const three = gate(store, clock, 3);
  let claimed = false;
  void three.claim().then(() => (claimed = true));
  await advance(clock, 10_000);
  for (const name of ['bridge-0-of-2', 'bridge-1-of-2']) store.hold(name, name.replace('bridge-', 'old-').replace(/-of-2$/, '')); // renewed
  await advance(clock, 10_000);
  assert.equal(claimed, false, 'stands by while the old layout renews its Leases');
  assert.equal(store.record(), 'shards=2');

  store.release('bridge-0-of-2', '{"widgets":{"ns/slow":20000}}');
  store.release('bridge-1-of-2');
  await advance(clock, 2000);
  assert.equal(claimed, true, 'recorded once the old Leases are let go');
  assert.equal(store.record(), 'shards=3');
  assert.equal(await two.current(), false, 'a replica of the old layout sees it at its next renewal');

  const takeovers = await three.admit();
  assert.deepEqual(takeovers, [{ from: 'released', note: '{"widgets":{"ns/slow":20000}}' }], 'what the old layout handed over');
});

test('two layouts waiting for a third to go: the one recorded first keeps the record while its replicas take their Leases, and the other takes it only if they never do', async () => {
  for (const takeLeases of [true, false]) {
    const clock = new FakeClock();
    const store = leaseStore(clock);
    await gate(store, clock, 2).claim();
    store.hold('bridge-0-of-2', 'old-0');
    const three = gate(store, clock, 3);
    const leader = gate(store, clock, 1);
    const claimed: number[] = [];
    void three.claim().then(() => claimed.push(3));
    await advance(clock, 500); // their looks half a poll apart
    void leader.claim().then(() => claimed.push(1));
    await advance(clock, 5000);
    store.hold('bridge-0-of-2', 'old-0'); // renewed
    await advance(clock, 1000);
    store.release('bridge-0-of-2');
    while (claimed.length === 0) await advance(clock, 500);
    const first = claimed[0]!;
    const other = first === 3 ? 1 : 3;
    assert.equal(store.record(), `shards=${first}`);
    // Its replicas take their Leases a moment after the record: the other layout, looking in
    // between, sees none of them live, yet must not write itself over a record just written.
    await advance(clock, 3000);
    assert.equal(store.record(), `shards=${first}`, 'a record just written by another layout is not overwritten');
    if (takeLeases) {
      for (let i = 0; i < 10; i++) {
        for (const name of layoutLeaseNames('bridge', first)) store.hold(name, `${name}-holder`);
        await advance(clock, 2000);
      }
      assert.deepEqual(claimed, [first], `the layout of ${other} stands by while the recorded one's Leases are renewed`);
    } else {
      // Replicas that recorded their layout and stopped before taking a Lease: replaced after a duration.
      await advance(clock, 8000);
      assert.deepEqual(claimed, [first], 'the record is given a whole duration');
      await advance(clock, 6000);
      assert.deepEqual(claimed, [first, other], 'a layout that took no Lease within a duration of its record is replaced');
      assert.equal(store.record(), `shards=${other}`);
    }
  }
});

test('admit: refused when the record names another layout; waits while another layout\'s Lease is live, and a Lease nobody renews counts as expired after its duration', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  const leader = gate(store, clock, 1);
  await leader.claim();
  const sharded = gate(store, clock, 2);
  assert.equal(await sharded.admit(), undefined, 'the record names the leader layout: a sharded replica that took a Lease lets it go');

  // A leader Lease taken in the instant of a change (the race bridge/layout.ts closes): the
  // recorded layout's replica waits until it is let go or expires.
  store.hold('bridge-0-of-2', 'racer');
  let admitted: unknown;
  void leader.admit().then((t) => (admitted = t));
  await advance(clock, 10_000);
  assert.equal(admitted, undefined, 'waits while the other Lease may be renewed');
  await advance(clock, 7000);
  assert.deepEqual(admitted, [{ from: 'expired', holder: 'racer' }], 'admitted once it went a whole duration unrenewed; its holder may have left deliveries running');
});

test('Leases of earlier versions (<lease>-<i>) count as another layout; one whose renewTime is an hour old is still waited for a duration: its age by another machine\'s wall clock is not trusted', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  store.hold('bridge-0', 'legacy');
  store.hold('unrelated', 'someone');
  const three = gate(store, clock, 3);
  let claimed = false;
  void three.claim().then(() => (claimed = true));
  await advance(clock, 5000);
  assert.equal(claimed, false, 'a live Lease of the earlier layout is waited for');
  await advance(clock, 12_000);
  assert.equal(claimed, true);

  const fresh = leaseStore(clock);
  fresh.hold('bridge-1-of-2', 'long-gone', clock.wall() - 3_600_000); // last renewed an hour ago, or by a clock an hour behind
  const leader = gate(fresh, clock, 1);
  let recorded = false;
  void leader.claim().then(() => (recorded = true));
  await advance(clock, 14_000);
  assert.equal(recorded, false, 'waited for until it has gone a duration unchanged, as this replica saw it');
  await advance(clock, 3000);
  assert.equal(fresh.record(), 'shards=1');
  assert.deepEqual(await leader.admit(), [{ from: 'expired', holder: 'long-gone' }], 'its holder may have left deliveries running: they are held');
});

test('a Lease is judged by what this replica saw change, on its own clock: renewed by a replica whose wall clock is 20 min behind or ahead, it is never taken over; left unrenewed for longer than its duration, it is', async () => {
  for (const skew of [-20 * 60_000, 20 * 60_000]) {
    const clock = new FakeClock();
    const store = leaseStore(clock);
    await gate(store, clock, 2).claim();
    /** The renewing replica's wall clock. */
    const theirs = () => clock.wall() + skew;
    store.hold('bridge-0-of-2', 'old-0', theirs());
    const three = gate(store, clock, 3);
    let claimed = false;
    void three.claim().then(() => (claimed = true));
    for (let i = 0; i < 30; i++) {
      await advance(clock, 2000);
      store.hold('bridge-0-of-2', 'old-0', theirs()); // renewed every 2 s, as the election does
    }
    assert.equal(claimed, false, `a live Lease renewed by a clock ${skew / 60_000} min off is waited for`);
    assert.equal(store.record(), 'shards=2');
    await advance(clock, 14_000);
    assert.equal(claimed, false, `not yet a whole duration unrenewed (clock ${skew / 60_000} min off)`);
    await advance(clock, 3000);
    assert.equal(claimed, true, `taken over once unrenewed for longer than its duration (clock ${skew / 60_000} min off)`);
    assert.deepEqual(await three.admit(), [{ from: 'expired', holder: 'old-0' }]);
  }
});

test('a deleted Lease is not taken for free: it counts as live until a whole duration has passed since this replica found it gone, then as expired from its last holder', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  await gate(store, clock, 2).claim();
  store.hold('bridge-0-of-2', 'old-0');
  const three = gate(store, clock, 3);
  let claimed = false;
  void three.claim().then(() => (claimed = true));
  await advance(clock, 6000);
  store.hold('bridge-0-of-2', 'old-0'); // renewed, and seen so at the next look
  await advance(clock, 1000);
  // Deleted by hand: its holder's last renewal was accepted before, so it may deliver until its
  // renew deadline; this replica last saw it renewed no later than now.
  store.remove('bridge-0-of-2');
  await advance(clock, 14_000);
  assert.equal(claimed, false, 'not taken over before a whole duration since it was last seen renewed');
  await advance(clock, 4000);
  assert.equal(claimed, true, 'taken over once gone for a whole duration');
  assert.deepEqual(await three.admit(), [{ from: 'expired', holder: 'old-0' }], 'from the holder last seen: what it may have left running is held');
});

test('an apiserver away (a restart) is waited for: claim and admit retry, they do not give up', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  let down = true;
  const flaky = {
    request: (...args: Parameters<KubeApi['request']>) => (down ? Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:16443')) : store.api.request(...args)),
  } as unknown as KubeApi;
  const g = new LayoutGate({ api: flaky, namespace: 'ns', leaseName: 'bridge', shards: 1, clock, pollMs: 1000 });
  let claimed: boolean | Error = false;
  void g.claim().then(() => (claimed = true), (err: Error) => (claimed = err));
  await advance(clock, 5000);
  assert.equal(claimed, false, 'still waiting, not failed');
  down = false;
  await advance(clock, 2000);
  assert.equal(claimed, true);
  down = true;
  let admitted: unknown = 'pending';
  void g.admit().then((t) => (admitted = t), (err: Error) => (admitted = err));
  await advance(clock, 3000);
  assert.equal(admitted, 'pending');
  down = false;
  await advance(clock, 2000);
  assert.deepEqual(admitted, []);
});

test('watch: told once when another layout is recorded; an apiserver away decides nothing', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  let down = false;
  const flaky = { request: (...args: Parameters<KubeApi['request']>) => (down ? Promise.reject(new Error('connection refused')) : store.api.request(...args)) } as unknown as KubeApi;
  const mine = new LayoutGate({ api: flaky, namespace: 'ns', leaseName: 'bridge', shards: 2, clock, pollMs: 1000, checkMs: 1000 });
  await mine.claim();
  let replaced = 0;
  const watching = mine.watch(() => replaced++);
  down = true;
  await advance(clock, 3000);
  assert.equal(replaced, 0, 'unreachable: not replaced');
  down = false;
  await advance(clock, 3000);
  assert.equal(replaced, 0, 'still this layout');
  const three = gate(store, clock, 3);
  await three.claim(); // nothing of layout 2 is live here: recorded at once
  await advance(clock, 2000);
  await watching;
  assert.equal(replaced, 1);
});

test('a replica that delivers looks at the record at every poll for a Lease duration, then every 10 s: once its Lease has been renewed that long only a hand edit changes the record', async () => {
  const clock = new FakeClock();
  const store = leaseStore(clock);
  let reads = 0;
  const counting = { request: (...args: Parameters<KubeApi['request']>) => (args[0] === 'GET' && reads++, store.api.request(...args)) } as unknown as KubeApi;
  const leader = new LayoutGate({ api: counting, namespace: 'ns', leaseName: 'bridge', shards: 1, clock });
  await leader.claim();
  const aborted = new AbortController();
  let replaced = 0;
  const watching = leader.watch(() => replaced++, aborted.signal);
  reads = 0;
  await advance(clock, 15_000);
  assert.ok(reads >= 6 && reads <= 8, `${reads} reads of the record in the first 15 s: every poll, while another layout may still have missed this one's Lease`);
  reads = 0;
  await advance(clock, 60_000);
  assert.ok(reads >= 5 && reads <= 7, `${reads} reads of the record in the next minute`);
  // The record changed by hand (no replica of another layout could while the Lease is renewed).
  const path = '/apis/coordination.k8s.io/v1/namespaces/ns/leases/bridge-layout';
  const record = await store.api.request<Lease>('GET', path);
  await store.api.request('PUT', path, { body: { ...record, spec: { holderIdentity: 'shards=3' } } });
  await advance(clock, 10_000);
  aborted.abort();
  await watching;
  assert.equal(replaced, 1, 'a record changed by hand is still seen');
});
