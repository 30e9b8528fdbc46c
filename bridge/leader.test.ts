import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';
import { LeaderElector } from './leader.ts';

const flush = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};

/**
 * A Lease store standing in for the apiserver's transport (the election's timing is the logic
 * under test): GET/POST/PUT with resourceVersion checks, and a switch that makes every request
 * hang — a frozen connection — until its signal aborts it.
 */
function leaseStore() {
  let lease: { metadata: Record<string, unknown>; spec: Record<string, unknown> } | undefined;
  let rv = 0;
  const state = { frozen: false, failing: false, requests: 0, methods: [] as string[] };
  const request = (signal: AbortSignal | undefined) => async (method: string, _path: string, options: { body?: { metadata: { resourceVersion?: string }; spec: Record<string, unknown> } } = {}) => {
    state.requests++;
    state.methods.push(method);
    if (state.failing) throw new Error('connection refused');
    if (state.frozen) {
      return new Promise((_resolve, reject) => {
        if (!signal) return; // no deadline: hangs forever
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    }
    if (method === 'GET') {
      if (!lease) throw new ApiError(404, 'not found');
      return structuredClone(lease);
    }
    if (method === 'POST' || method === 'PUT') {
      if (method === 'PUT' && options.body!.metadata.resourceVersion !== String(rv)) throw new ApiError(409, 'conflict');
      lease = { metadata: { ...options.body!.metadata, resourceVersion: String(++rv) }, spec: options.body!.spec };
      return structuredClone(lease);
    }
    throw new Error(`unexpected ${method}`);
  };
  const api = (signal?: AbortSignal): KubeApi => ({ request: request(signal), withSignal: (s: AbortSignal) => api(s) }) as unknown as KubeApi;
  return {
    api: api(),
    state,
    lease: () => lease,
    holder: () => lease?.spec.holderIdentity,
    steal: (who: string) => lease && ((lease.spec.holderIdentity = who), (lease.metadata.resourceVersion = String(++rv))),
    /** The Lease deleted (by hand, or by an undeploy), whoever holds it. */
    remove: () => ((lease = undefined), ++rv),
  };
}

async function leading(clock: FakeClock, store: ReturnType<typeof leaseStore>) {
  const lost: { at: number; why: string }[] = [];
  const elector = new LeaderElector({ api: store.api, namespace: 'ns', name: 'bridge', identity: 'a', clock });
  let led = false;
  void elector.run(() => void (led = true), (why) => lost.push({ at: clock.now(), why }));
  await flush();
  assert.equal(led, true);
  return { elector, lost };
}

async function advance(clock: FakeClock, ms: number, step = 100) {
  for (let t = 0; t < ms; t += step) {
    clock.advance(step);
    await flush();
  }
}

describe('LeaderElector', () => {
  test('renews every retry period while the apiserver answers', async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    const { lost } = await leading(clock, store);
    await advance(clock, 60_000);
    assert.deepEqual(lost, []);
    const count = (m: string) => store.state.methods.filter((x) => x === m).length;
    assert.ok(count('PUT') >= 27, `${count('PUT')} renewals in 60 s: one every 2 s`);
    // As client-go since 1.24: while its last write stands, a renewal is that write's successor
    // (its resourceVersion makes it fail if anyone wrote since); no read before each.
    assert.ok(count('GET') <= 1, `${count('GET')} reads of the Lease while renewing`);
  });

  test('a renewal that finds the Lease written by someone else reads it again before deciding', async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    const { lost } = await leading(clock, store);
    await advance(clock, 3_000);
    // Someone touched the Lease (an annotation, say) without taking it: the optimistic write
    // fails, the leader reads the Lease, sees itself still the holder, and renews.
    store.steal('a');
    const before = store.state.methods.length;
    await advance(clock, 2_500);
    assert.deepEqual(lost, []);
    assert.deepEqual(store.state.methods.slice(before), ['PUT', 'GET', 'PUT']);
    assert.equal(store.holder(), 'a');
  });

  test('a renewal still in flight when stop() lets the Lease go does not take it back', async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    let hold: (() => void) | undefined;
    let gate = false;
    const gated = (api: KubeApi): KubeApi =>
      ({
        request: async (method: string, path: string, options?: unknown) => {
          if (gate && method === 'PUT') {
            gate = false;
            await new Promise<void>((resolve) => (hold = resolve));
          }
          return api.request(method as 'PUT', path, options as never);
        },
        withSignal: (signal: AbortSignal) => gated(api.withSignal(signal)),
      }) as unknown as KubeApi;
    const elector = new LeaderElector({ api: gated(store.api), namespace: 'ns', name: 'bridge', identity: 'a', clock });
    void elector.run(() => undefined, () => undefined);
    await flush();
    gate = true;
    await advance(clock, 2_500); // the next renewal's write is on its way
    assert.ok(hold, 'a renewal is in flight');
    await elector.stop();
    assert.equal(store.holder(), undefined, 'let go');
    hold!();
    await flush();
    assert.equal(store.holder(), undefined, 'not taken back by the renewal that was in flight');
  });

  test("the machine's time set back an hour or forward a day: the leader keeps renewing on time; the Lease shows wall time", async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    const { lost } = await leading(clock, store);
    const renewTime = () => Date.parse((store.lease()!.spec.renewTime as string).replace(/(\.\d{3})\d*Z$/, '$1Z'));
    clock.stepWall(-3_600_000);
    const puts = () => store.state.methods.filter((m) => m === 'PUT').length;
    const before = puts();
    await advance(clock, 10_000);
    assert.deepEqual(lost, [], 'no step-down');
    assert.ok(puts() - before >= 4, `renewed every 2 s meanwhile (${puts() - before} renewals)`);
    assert.ok(Math.abs(renewTime() - clock.wall()) <= 2_000, 'renewTime is the wall time, an hour behind');
    clock.stepWall(86_400_000);
    await advance(clock, 10_000);
    assert.deepEqual(lost, []);
    assert.ok(Math.abs(renewTime() - clock.wall()) <= 2_000, 'renewTime follows the wall time forward');
  });

  test('a renewal stuck on a frozen connection ends at the renew deadline: the leader steps down before the lease can be taken', async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    const { lost, elector } = await leading(clock, store);
    await advance(clock, 4_000);
    const lastSent = clock.now() - (clock.now() % 2_000); // the last renewal went out on a 2 s tick
    store.state.frozen = true;
    await advance(clock, 20_000);
    assert.equal(lost.length, 1, 'lost once');
    assert.match(lost[0]!.why, /could not renew lease ns\/bridge within 10000 ms \(no answer from the apiserver within \d+ ms\)/);
    const steppedDownAfter = lost[0]!.at - lastSent;
    assert.ok(steppedDownAfter <= 10_000, `stepped down ${steppedDownAfter} ms after the last renewal was sent (renew deadline 10 s)`);
    assert.ok(steppedDownAfter < 15_000, 'before a standby may take the lease (15 s after it saw the last renewal)');
    assert.equal(elector.isLeader, false);
  });

  test('failing renewals step down by the deadline, not a retry period later; another holder at once', async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    const { lost } = await leading(clock, store);
    await advance(clock, 3_000);
    const lastSent = 2_000 + (clock.now() - 3_000);
    store.state.failing = true;
    await advance(clock, 20_000);
    assert.equal(lost.length, 1);
    assert.match(lost[0]!.why, /connection refused/);
    assert.ok(lost[0]!.at - lastSent <= 10_000, `stepped down ${lost[0]!.at - lastSent} ms after the last renewal`);

    const other = leaseStore();
    const second = await leading(clock, other);
    await advance(clock, 1_000);
    other.steal('b');
    await advance(clock, 2_000);
    assert.equal(second.lost.length, 1);
    assert.match(second.lost[0]!.why, /another candidate holds the lease/);
  });

  test('with acquireAfter, a candidate watches the lease from the start but takes it only after that time', async () => {
    const clock = new FakeClock(0);
    const store = leaseStore();
    const holder = new LeaderElector({ api: store.api, namespace: 'ns', name: 'bridge', identity: 'holder', clock });
    assert.equal(await holder.tryAcquireOrRenew(), true);
    const late = new LeaderElector({ api: store.api, namespace: 'ns', name: 'bridge', identity: 'late', clock, acquireAfter: 20_000 });
    assert.equal(await late.tryAcquireOrRenew(), false, 'held');
    clock.advance(16_000); // the holder died at 0: its lease expired at 15 s, as the candidate saw it from 0
    assert.equal(await late.tryAcquireOrRenew(), false, 'expired, but not its turn before 20 s');
    assert.equal(store.holder(), 'holder');
    clock.advance(4_000);
    assert.equal(await late.tryAcquireOrRenew(), true, 'its turn: taken at once, no new 15 s wait');
    assert.equal(store.holder(), 'late');
    const fresh = leaseStore();
    const early = new LeaderElector({ api: fresh.api, namespace: 'ns', name: 'bridge', identity: 'early', clock, acquireAfter: clock.now() + 1000 });
    assert.equal(await early.tryAcquireOrRenew(), false, 'a Lease nobody created is not created before its time either');
    assert.equal(fresh.holder(), undefined);
  });

  test('the new holder learns how it took the Lease: new, handed over with a note (which it removes), or expired', async () => {
    const clock = new FakeClock(0);
    const store = leaseStore();
    const candidate = (identity: string, note = '') =>
      new LeaderElector({ api: store.api, namespace: 'ns', name: 'bridge', identity, clock, handOverAnnotation: 'kfn.dev/held', handOver: () => note });
    const takeovers: unknown[] = [];
    const run = async (elector: LeaderElector) => {
      void elector.run((takeover) => void takeovers.push(takeover), () => {});
      await flush();
    };

    const a = candidate('a', '{"widgets":{"ns/w":5000}}');
    await run(a);
    assert.deepEqual(takeovers.at(-1), { from: 'nobody' });
    await a.stop(true);
    assert.equal((store.lease()!.metadata.annotations as Record<string, string>)['kfn.dev/held'], '{"widgets":{"ns/w":5000}}', 'the note, written on release');

    const b = candidate('b');
    await run(b);
    assert.deepEqual(takeovers.at(-1), { from: 'released', note: '{"widgets":{"ns/w":5000}}' });
    assert.equal((store.lease()!.metadata.annotations as Record<string, string> | undefined)?.['kfn.dev/held'], undefined, 'taken: the note is gone');

    // b dies without a word; c takes the Lease once it has expired.
    await b.stop(false);
    const c = candidate('c');
    await run(c);
    assert.equal(takeovers.length, 2, 'c waits while b\'s Lease is fresh');
    await advance(clock, 20_000, 1000);
    assert.deepEqual(takeovers.at(-1), { from: 'expired', holder: 'b' });
    await c.stop(false);

    // A process of c's own identity (its container restarted) is not c: what c left may run.
    const again = candidate('c');
    await run(again);
    assert.deepEqual(takeovers.at(-1), { from: 'expired', holder: 'c' });
  });

  test('a Lease deleted while held is not taken for free: a standby that saw it held waits a whole duration from when it found it gone, then takes it over as expired from that holder', async () => {
    const clock = new FakeClock(0);
    const store = leaseStore();
    // The leader is cut off from the apiserver the moment its Lease is deleted: it leads on
    // until its renew deadline, unaware.
    let cut = false;
    const cutOff = (api: KubeApi): KubeApi =>
      ({
        request: (...args: Parameters<KubeApi['request']>) => (cut ? Promise.reject(new Error('connection refused')) : api.request(...args)),
        withSignal: (signal: AbortSignal) => cutOff(api.withSignal(signal)),
      }) as unknown as KubeApi;
    const a = new LeaderElector({ api: cutOff(store.api), namespace: 'ns', name: 'bridge', identity: 'a', clock });
    let aLostAt: number | undefined;
    void a.run(() => {}, () => (aLostAt = clock.now()));
    await flush();
    const b = new LeaderElector({ api: store.api, namespace: 'ns', name: 'bridge', identity: 'b', clock, random: () => 0 });
    let bLed: { at: number; takeover: unknown } | undefined;
    void b.run((takeover) => void (bLed = { at: clock.now(), takeover }), () => {});
    await advance(clock, 5_000);
    assert.equal(b.isLeader, false, 'a standby while the leader renews');
    const deletedAt = clock.now();
    cut = true;
    store.remove();
    await advance(clock, 30_000);
    assert.ok(aLostAt !== undefined, 'the cut-off leader stepped down');
    assert.ok(bLed, 'the standby took the Lease in the end');
    assert.ok(bLed.at >= aLostAt, `the standby led from ${bLed.at} ms while the old leader led until ${aLostAt} ms`);
    assert.ok(bLed.at - deletedAt >= 15_000, `led ${bLed.at - deletedAt} ms after the Lease it last saw held was deleted: not before a whole duration`);
    assert.deepEqual(bLed.takeover, { from: 'expired', holder: 'a' }, 'what the holder last seen may have left running is held');
  });

  test("a standby judges the Lease's age from when its answer arrived, as client-go does: a slow first read cannot let it take over while the leader may still lead", async () => {
    const clock = new FakeClock();
    const store = leaseStore();
    /** A client of the store whose requests first wait for `before` (a slow answer, a partition). */
    const client = (before: (method: string, signal?: AbortSignal) => Promise<void> | void) => {
      const make = (signal?: AbortSignal): KubeApi =>
        ({
          request: async (method: string, path: string, options?: object) => {
            await before(method, signal);
            return (signal ? store.api.withSignal(signal) : store.api).request(method as Parameters<KubeApi["request"]>[0], path, options);
          },
          withSignal: (s: AbortSignal) => make(s),
        }) as unknown as KubeApi;
      return make();
    };
    let partitioned = false;
    const hang = (signal?: AbortSignal) => new Promise<void>((_resolve, reject) => signal?.addEventListener('abort', () => reject(signal.reason), { once: true }));
    const a = new LeaderElector({ api: client((_m, signal) => (partitioned ? hang(signal) : undefined)), namespace: 'ns', name: 'bridge', identity: 'a', clock });
    let aLostAt: number | undefined;
    void a.run(() => {}, () => (aLostAt = clock.now()));
    await flush();
    assert.equal(a.isLeader, true);
    await advance(clock, 500);
    // The standby's first read is answered 9.4 s after it was sent, with the Lease as the leader
    // renewed it meanwhile (at 8 s); right after, the leader is cut off from the apiserver.
    let slow = true;
    const b = new LeaderElector({
      api: client(async (method) => {
        if (method !== 'GET' || !slow) return;
        slow = false;
        await new Promise<void>((resolve) => clock.setTimer(() => resolve(), 9400));
        partitioned = true;
      }),
      namespace: 'ns',
      name: 'bridge',
      identity: 'b',
      clock,
      random: () => 0,
    });
    let bLedAt: number | undefined;
    void b.run(() => void (bLedAt = clock.now()), () => {});
    await advance(clock, 40_000);
    assert.ok(aLostAt !== undefined, 'the cut-off leader stepped down');
    assert.ok(bLedAt !== undefined, 'the standby took the Lease in the end');
    assert.ok(bLedAt >= aLostAt, `the standby led from ${bLedAt} ms while the old leader led until ${aLostAt} ms`);
  });
});
