// The cluster's Reconcilers as a source, on a fake clock: one that cannot start is tried again
// after retrySeconds, and once every one has started nothing is left to wake the bridge.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Bridge } from './bridge.ts';
import { FakeClock } from '../core/clock.ts';
import { reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import type { KubeApi } from '../kube/api.ts';
import { until } from '../test/support/fake-apiserver.ts';
import { ClusterReconcilers, retrySeconds } from './reconcilers.ts';

const quiet = { info() {}, warn() {}, error() {} };

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
    connection: { reset() {}, server: 'https://fake', headers: () => ({}) },
    resource: async () => ({ apiVersion: reconcilerApiVersion, kind: reconcilerKind, plural: reconcilerPlural, namespaced: false, verbs: ['list', 'watch'] }),
    request: async (method: string) => (method === 'GET' ? { metadata: { resourceVersion: '1' }, items: [structuredClone(reconciler)] } : (writes++, {})),
    stream: (_path: string, options: { signal?: AbortSignal; onOpen?: () => void }) =>
      new Promise<void>((resolve) => {
        options.onOpen?.();
        options.signal?.addEventListener('abort', () => resolve(), { once: true });
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
