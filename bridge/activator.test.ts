// Scale to zero driven by the bridge, on a fake clock and a stand-in for one Deployment: held keys
// are released once a pod is ready, idle goes back to zero, queue depth scales out, a start that
// does not come is said, and nothing runs at rest.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Activator, reachMaxMs, startReportMs, type ScaleTarget } from './activator.ts';
import { FakeClock, type Clock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';

const quiet = { info() {}, warn() {}, error() {} };
const target: ScaleTarget = { namespace: 'fns', name: 'kfn-fn-web', idleSeconds: 90, maxReplicas: 3, keysPerReplica: 10 };

/** One Deployment: `replicas` as scaled, and a pod that becomes ready `startMs` after a scale from zero (never, with Infinity). */
function deployment(clock: FakeClock, o: { replicas: number; startMs?: number; missing?: boolean }) {
  const state = { replicas: o.replicas, readySince: o.replicas > 0 ? clock.now() : Infinity, reads: 0, scales: [] as number[] };
  const api = {
    async request(method: string, path: string, options: { body?: { spec: { replicas: number } } } = {}) {
      if (o.missing) throw new ApiError(404, 'deployments.apps "kfn-fn-web" not found');
      if (method === 'GET' && path === '/apis/apps/v1/namespaces/fns/deployments/kfn-fn-web') {
        state.reads++;
        const ready = state.replicas > 0 && clock.now() >= state.readySince ? state.replicas : 0;
        return { spec: { replicas: state.replicas }, status: { readyReplicas: ready, conditions: [{ type: 'Available', status: ready ? 'True' : 'False', reason: 'MinimumReplicasUnavailable', message: 'Deployment does not have minimum availability.' }] } };
      }
      if (method === 'PATCH' && path === '/apis/apps/v1/namespaces/fns/deployments/kfn-fn-web/scale') {
        const replicas = options.body!.spec.replicas;
        if (state.replicas === 0 && replicas > 0) state.readySince = clock.now() + (o.startMs ?? 1000);
        state.replicas = replicas;
        state.scales.push(replicas);
        return {};
      }
      throw new Error(`unexpected ${method} ${path}`);
    },
  } as unknown as KubeApi;
  return { api, state };
}

/** Lets the activator's awaited requests run. */
const settle = () => new Promise((r) => setImmediate(r));

/** Moves the clock in steps, letting what each step wakes run. */
async function advance(clock: FakeClock, ms: number, step = 100) {
  for (let t = 0; t < ms; t += step) {
    clock.advance(Math.min(step, ms - t));
    await settle();
    await settle();
  }
}

test('at zero, a key is held while the Deployment is scaled to one and its pod starts, then released once; the next goes straight through', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 0, startMs: 1200 });
  const activator = new Activator(target, api, clock, quiet);
  let released = 0;
  assert.equal(activator.admit('k1', () => released++, 1), false, 'held: no pod is ready');
  assert.equal(activator.admit('k2', () => released++, 2), false, 'a second key is held too');
  await advance(clock, 1000);
  assert.deepEqual(state.scales, [1], 'scaled from zero once, whatever number of keys waits');
  assert.equal(released, 0, 'not before the pod is ready');
  await advance(clock, 400);
  assert.equal(released, 2, 'every held key released once the pod is ready');
  assert.equal(activator.admit('k3', () => assert.fail('not held'), 1), true, 'up: delivered at once');
  assert.equal(activator.stats.wakes, 1);
});

test('idle for idleSeconds with nothing in flight: scaled to zero; a delivery in flight or a recent one keeps it up', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 1 });
  const activator = new Activator(target, api, clock, quiet);
  // Found running at start: up after one look, then idle from there.
  activator.admit('k4', () => {}, 1);
  await advance(clock, 200);
  assert.equal(activator.admit('k5', () => assert.fail('not held'), 1), true);
  activator.started();
  await advance(clock, 120_000, 1000);
  assert.deepEqual(state.scales, [], 'not while a delivery is in flight');
  activator.finished(false);
  await advance(clock, 60_000, 1000);
  assert.deepEqual(state.scales, [], 'not within the idle window after the last answer');
  await advance(clock, 31_000, 1000);
  assert.deepEqual(state.scales, [0], 'scaled to zero once idle for the window');
  // The next key wakes it again.
  let released = 0;
  assert.equal(activator.admit('k6', () => released++, 1), false);
  await advance(clock, 1500);
  assert.equal(released, 1);
  assert.deepEqual(state.scales, [0, 1]);
});

test('a standby (a bridge that delivers nothing yet) never scales the function to zero: the leader may be using it; once it delivers, the idle window starts then', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 1 });
  let delivering = false;
  const activator = new Activator(target, api, clock, quiet, undefined, () => delivering);
  await advance(clock, 600_000, 10_000);
  assert.deepEqual(state.scales, [], 'up all the while it stands by');
  delivering = true;
  await advance(clock, 80_000, 1000);
  assert.deepEqual(state.scales, [], 'not within the idle window after it began to deliver');
  await advance(clock, 110_000, 1000);
  assert.deepEqual(state.scales, [0], 'scaled to zero once idle for a window while delivering');
  activator.stop();
});

test('at rest nothing runs: at zero no timer is set and the Deployment is not read; while up, one timer for the idle window', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 1 });
  const timers: number[] = [];
  const counting: Clock = { now: () => clock.now(), wall: () => clock.wall(), setTimer: (fn, ms) => (timers.push(ms), clock.setTimer(fn, ms)) };
  const activator = new Activator(target, api, counting, quiet);
  await advance(clock, 91_000, 1000);
  assert.deepEqual(state.scales, [0]);
  const [reads, set] = [state.reads, timers.length];
  await advance(clock, 3_600_000, 60_000);
  assert.equal(state.reads, reads, 'not read at rest');
  assert.equal(timers.length, set, 'no timer at rest');
  assert.ok(set <= 2, `timers while idling up: ${set}`);
  activator.stop();
});

test('many keys at once scale out by queue depth, up to maxReplicas', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 1 });
  const activator = new Activator(target, api, clock, quiet);
  activator.admit('k7', () => {}, 1);
  await advance(clock, 200);
  assert.equal(activator.admit('k8', () => {}, 25), true);
  await settle();
  assert.deepEqual(state.scales, [3], '25 keys at 10 per replica: 3');
  assert.equal(activator.admit('k9', () => {}, 500), true);
  await settle();
  assert.deepEqual(state.scales, [3], 'never past maxReplicas');
});

test('a start that does not come is said (with the Deployment\'s conditions) while the wake goes on; a pod ready at last releases the keys and clears it', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 0, startMs: Infinity });
  const activator = new Activator(target, api, clock, quiet);
  const problems: (string | undefined)[] = [];
  activator.report((p) => problems.push(p));
  let released = 0;
  activator.admit('k10', () => released++, 1);
  await advance(clock, startReportMs + 2000, 500);
  assert.equal(released, 0);
  assert.match(problems.at(-1) ?? '', /scaled Deployment fns\/kfn-fn-web from zero for a delivery, but no pod of it has been ready for \d+ s \(its conditions: Available=False \(MinimumReplicasUnavailable: Deployment does not have minimum availability\.\)\); deliveries wait for it/);
  state.readySince = clock.now();
  await advance(clock, 1500, 500);
  assert.equal(released, 1);
  assert.equal(problems.at(-1), undefined, 'cleared once a pod is ready');
});

test('a Deployment that does not exist is said at once', async () => {
  const clock = new FakeClock();
  const { api } = deployment(clock, { replicas: 0, missing: true });
  const activator = new Activator(target, api, clock, quiet);
  const problems: (string | undefined)[] = [];
  activator.report((p) => problems.push(p));
  activator.admit('k11', () => {}, 1);
  await advance(clock, 200);
  assert.match(problems[0] ?? '', /Deployment fns\/kfn-fn-web, which its spec.sink.scaleToZero names, does not exist/);
  activator.stop();
});

test('a sink that cannot be reached (its pod gone) is looked at again before the next delivery', async () => {
  const clock = new FakeClock();
  const { api, state } = deployment(clock, { replicas: 1 });
  const activator = new Activator(target, api, clock, quiet);
  activator.admit('k12', () => {}, 1);
  await advance(clock, 200);
  activator.started();
  // Someone scaled it to zero behind the bridge's back.
  state.replicas = 0;
  activator.finished(true);
  let released = 0;
  assert.equal(activator.admit('k13', () => released++, 1), false, 'held until it is looked at');
  await advance(clock, 1500);
  assert.equal(released, 1);
  assert.deepEqual(state.scales, [1]);
});

test('a pod ready but its Service not yet reachable (the proxy rules lag the endpoints): held keys wait for the sink to answer a connection, not for a backoff; a sink never reachable is released after reachMaxMs', async () => {
  const clock = new FakeClock();
  const { api } = deployment(clock, { replicas: 0, startMs: 1000 });
  let reachableFrom = Infinity;
  let probes = 0;
  const activator = new Activator(target, api, clock, quiet, async () => (probes++, clock.now() >= reachableFrom));
  let released = 0;
  activator.admit('k1', () => released++, 1);
  await advance(clock, 1500);
  assert.equal(released, 0, 'the pod is ready, but a connection to the sink is refused: still held');
  assert.ok(probes > 0, 'the sink was tried');
  reachableFrom = clock.now() + 700;
  await advance(clock, 600);
  assert.equal(released, 0);
  await advance(clock, 300);
  assert.equal(released, 1, 'released once the sink answers a connection');

  const never = deployment(clock, { replicas: 0, startMs: 1000 });
  const stuck = new Activator({ ...target, name: 'kfn-fn-web' }, never.api, clock, quiet, async () => false);
  let freed = 0;
  stuck.admit('k2', () => freed++, 1);
  await advance(clock, 1000 + reachMaxMs - 500);
  assert.equal(freed, 0);
  await advance(clock, 1000);
  assert.equal(freed, 1, 'after reachMaxMs the key goes to the delivery, whose retries take it from there');
  activator.stop();
  stuck.stop();
});
