// The cluster's Reconcilers as a source, on a fake clock: one that cannot start is tried again
// after retrySeconds, and once every one has started nothing is left to wake the bridge.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Bridge } from './bridge.ts';
import type { Logger } from './log.ts';
import { FakeClock } from '../core/clock.ts';
import { reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { ApiError, type KubeApi, type ResourceInfo } from '../kube/api.ts';
import { until } from '../test/support/fake-apiserver.ts';
import { ClusterReconcilers, discoveryTimeoutMs, retrySeconds } from './reconcilers.ts';

const quiet = { info() {}, warn() {}, error() {} };

const reconcilerResource: ResourceInfo = { apiVersion: reconcilerApiVersion, kind: reconcilerKind, plural: reconcilerPlural, namespaced: false, verbs: ['list', 'watch'] };

/** An apiserver that serves one Reconciler, takes (and counts) status writes and holds its watch open. */
function reconcilerApi(): { api: KubeApi; statusWrites: () => number } {
  let writes = 0;
  const reconciler = {
    apiVersion: reconcilerApiVersion,
    kind: reconcilerKind,
    metadata: { name: 'widgets', uid: 'uid-widgets', resourceVersion: '1', generation: 1 },
    spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: 'http://127.0.0.1:1/' } },
  };
  const api = {
    connection: { reset() {}, server: 'https://fake', source: 'context "test" in kubeconfig', headers: () => ({}) },
    resource: async () => reconcilerResource,
    withSignal: () => api,
    request: async (method: string) => (method === 'GET' ? { metadata: { resourceVersion: '1' }, items: [structuredClone(reconciler)] } : (writes++, {})),
    // A streaming list sends the Reconciler and the bookmark that ends its initial events.
    stream: (_path: string, options: { signal?: AbortSignal; onOpen?: () => void; query?: Record<string, unknown> }, onLine: (line: unknown) => void) =>
      new Promise<void>((resolve) => {
        options.onOpen?.();
        options.signal?.addEventListener('abort', () => resolve(), { once: true });
        if (options.query?.sendInitialEvents !== 'true') return;
        onLine({ type: 'ADDED', object: structuredClone(reconciler) });
        onLine({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '1', annotations: { 'k8s.io/initial-events-end': 'true' } } } });
      }),
  } as unknown as KubeApi;
  return { api, statusWrites: () => writes };
}

test('a Reconciler that cannot start is tried again after retrySeconds on the bridge\'s clock; once every one has started, no timer is left', async () => {
  const clock = new FakeClock();
  let served = false;
  let applies = 0;
  // The Bridge as the source uses it: its clock, and the Reconcilers it could not start.
  const bridge = {
    clock,
    setReconcilers: async () => {
      applies++;
      return served ? new Map() : new Map([['widgets', new Error('the server could not find the requested resource')]]);
    },
  } as unknown as Bridge;
  const api = reconcilerApi();
  const source = new ClusterReconcilers(bridge, api.api, quiet);
  await source.start();
  // The Reconcilers' own watch runs on the system clock: the fake one holds the retry alone.
  await until('the retry set after the first apply', () => (clock.pendingTimers() === 1 ? true : undefined));
  assert.equal(applies, 1);
  clock.advance(retrySeconds * 1000 - 1);
  assert.equal(clock.pendingTimers(), 1, 'not tried again before retrySeconds');
  served = true;
  clock.advance(1);
  await until('the retry, its status written', () => (applies === 2 && api.statusWrites() === 2 ? true : undefined));
  await new Promise((r) => setImmediate(r)); // the rest of the apply, after its last write
  assert.equal(clock.pendingTimers(), 0, 'every Reconciler started: no timer at rest');
  await source.stop();
});

/** A log that keeps its lines: the message and the fields' error. */
function keptLog(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const keep = (fields: Record<string, unknown>, msg: string) => void lines.push(`${msg}: ${String(fields.error ?? '')}`);
  return { log: { info: keep, warn: keep, error: keep }, lines };
}

/**
 * The same apiserver, whose discovery answers the Reconciler kind with `answers` in turn (a
 * function per attempt, given the attempt's signal), then as it should.
 */
function discoveryFailing(answers: ((signal?: AbortSignal) => Promise<ResourceInfo>)[]): KubeApi {
  const api = reconcilerApi().api as unknown as Record<string, unknown>;
  let signal: AbortSignal | undefined;
  api.withSignal = (s: AbortSignal) => ((signal = s), api);
  api.resource = () => (answers.shift() ?? (async () => reconcilerResource))(signal);
  return api as unknown as KubeApi;
}

const bridgeOn = (clock: FakeClock) => ({ clock, setReconcilers: async () => new Map() }) as unknown as Bridge;
const refused = () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), { code: 'ECONNREFUSED' }));

test('a server that refuses the connection: each attempt logged with the server and what to check, tried again every retrySeconds, not loaded until it lists', async () => {
  const clock = new FakeClock();
  const { log, lines } = keptLog();
  const source = new ClusterReconcilers(bridgeOn(clock), discoveryFailing([refused, refused]), log);
  let started = false;
  const starting = source.start().then(() => (started = true));
  await until('the first attempt logged', () => (lines.length === 1 ? true : undefined));
  assert.equal(lines[0], `cannot list Reconcilers; trying again in ${retrySeconds} s: the server refused the connection (context "test" in kubeconfig, server https://fake): check that the cluster is running and that the server address is right`);
  assert.equal(source.loaded, false, 'not ready while it cannot list');
  clock.advance(retrySeconds * 1000);
  await until('the second attempt logged', () => (lines.length === 2 ? true : undefined));
  assert.equal(started, false);
  clock.advance(retrySeconds * 1000);
  await starting;
  await until('the Reconcilers applied', () => (source.loaded ? true : undefined));
  assert.ok(!lines.join('\n').includes('Install'), 'a server that does not answer is no missing CRD');
  await source.stop();
});

test('a server that takes the connection and never answers: the attempt ends after discoveryTimeoutMs and says so', async () => {
  const clock = new FakeClock();
  const { log, lines } = keptLog();
  const silent = (signal?: AbortSignal) => new Promise<ResourceInfo>((_, fail) => signal?.addEventListener('abort', () => fail(signal.reason), { once: true }));
  const source = new ClusterReconcilers(bridgeOn(clock), discoveryFailing([silent]), log);
  const starting = source.start();
  await until('the attempt under way', () => (clock.pendingTimers() === 1 ? true : undefined));
  clock.advance(discoveryTimeoutMs);
  await until('the attempt logged', () => (lines.length === 1 ? true : undefined));
  assert.match(lines[0]!, new RegExp(`the server did not answer within ${discoveryTimeoutMs / 1000} s \\(context "test" in kubeconfig, server https://fake\\)`));
  clock.advance(retrySeconds * 1000);
  await starting;
  await source.stop();
});

test('only a 404 for the Reconciler kind says its CRD is missing, with the command the bridge was given to install it', async () => {
  const clock = new FakeClock();
  const { log, lines } = keptLog();
  const missing = () => Promise.reject(new ApiError(404, `the API server does not serve ${reconcilerApiVersion} (is its CRD installed?)`, 'NotFound'));
  const source = new ClusterReconcilers(bridgeOn(clock), discoveryFailing([missing]), log, { installCrd: 'install it with kubectl apply -f node_modules/kfn/lib/manifests/crds/' });
  const starting = source.start();
  await until('the attempt logged', () => (lines.length === 1 ? true : undefined));
  assert.match(lines[0]!, /the Reconciler CRD is not installed \(context "test" in kubeconfig, server https:\/\/fake\): install it with kubectl apply -f node_modules\/kfn\/lib\/manifests\/crds\/, or run the bridge with --config <file>/);
  clock.advance(retrySeconds * 1000);
  await starting;
  await source.stop();
});

test('stopped while it waits to try again: start returns, nothing left running', async () => {
  const clock = new FakeClock();
  const source = new ClusterReconcilers(bridgeOn(clock), discoveryFailing([refused]), quiet);
  const starting = source.start();
  await until('waiting to try again', () => (clock.pendingTimers() === 1 ? true : undefined));
  await source.stop();
  await starting;
  assert.equal(source.loaded, false);
  assert.equal(clock.pendingTimers(), 0);
});

test('a standby writes no Reconciler status, not even a problem; once it delivers, it writes its view', async () => {
  const clock = new FakeClock();
  const api = reconcilerApi();
  let standby = true;
  const source = new ClusterReconcilers(bridgeOn(clock), api.api, quiet, { writesStatus: () => !standby });
  await source.start();
  await until('the Reconcilers applied', () => (source.loaded ? true : undefined));
  source.onProblem('widgets', 'watch example.com/v1/Widget', 'forbidden');
  await new Promise((r) => setImmediate(r));
  assert.equal(api.statusWrites(), 0, 'nothing written while standing by');
  standby = false;
  source.nowDelivering();
  await until('its view written once it delivers', () => (api.statusWrites() === 1 ? true : undefined));
  await source.stop();
});
