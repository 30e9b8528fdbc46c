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
  const now = () => new Date(clock.wall()).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
  return {
    api,
    /** A replica holding (and renewing) the Lease `name` now; `note` on a let-go one. */
    hold: (name: string, holder: string) => leases.set(name, { metadata: { name, resourceVersion: String(++rv) }, spec: { holderIdentity: holder, renewTime: now(), leaseDurationSeconds: 15 } }),
    release: (name: string, note?: string) => leases.set(name, { metadata: { name, resourceVersion: String(++rv), annotations: note ? { 'kfn.dev/held': note } : {} }, spec: { renewTime: now(), leaseDurationSeconds: 1 } }),
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

test('Leases of earlier versions (<lease>-<i>) count as another layout; one unrenewed for longer than any clock skew explains is not waited for', async () => {
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
  clock.stepWall(-3_600_000);
  fresh.hold('bridge-1-of-2', 'long-gone'); // last renewed an hour ago, by the wall clock
  clock.stepWall(3_600_000);
  const leader = gate(fresh, clock, 1);
  await leader.claim();
  assert.equal(fresh.record(), 'shards=1', 'recorded without waiting');
  assert.deepEqual(await leader.admit(), [], 'and nothing to hold from it');
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
