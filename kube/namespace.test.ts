// namespaceReady against an apiserver held in memory, on a fake clock: a namespace being deleted
// is waited for (said once) and created again; one that never goes fails after the bound with
// what holds it; one that is there is left alone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import type { Connection } from './connection.ts';
import { ApiError, KubeApi, type Method, type RequestOptions } from './api.ts';
import { namespaceReady } from './namespace.ts';

interface Namespace {
  metadata: { name: string; deletionTimestamp?: string };
  status?: { phase: string; conditions?: { type: string; status: string; message: string }[] };
}

/** An apiserver that knows namespaces only, and records each request. */
class FakeNamespaces extends KubeApi {
  readonly namespaces = new Map<string, Namespace>();
  readonly requests: string[] = [];

  constructor() {
    super({ server: 'https://apiserver.invalid', source: 'a fake apiserver' } as Connection);
  }

  override async request<T>(method: Method, path: string, options: RequestOptions = {}): Promise<T> {
    this.requests.push(`${method} ${path}`);
    const name = decodeURIComponent(path.replace(/^\/api\/v1\/namespaces\//, ''));
    if (method === 'GET') {
      const ns = this.namespaces.get(name);
      if (!ns) throw new ApiError(404, `namespaces "${name}" not found`, 'NotFound');
      return structuredClone(ns) as T;
    }
    if (method === 'PATCH' && options.contentType === 'application/apply-patch+yaml') {
      // Applying a namespace that is being deleted changes nothing: it stays terminating.
      if (!this.namespaces.has(name)) this.namespaces.set(name, { metadata: { name }, status: { phase: 'Active' } });
      return structuredClone(this.namespaces.get(name)) as T;
    }
    throw new Error(`the fake apiserver does not answer ${method} ${path}`);
  }

  terminate(name: string, conditions?: NonNullable<Namespace['status']>['conditions']): void {
    this.namespaces.set(name, { metadata: { name, deletionTimestamp: '2026-01-01T00:00:00Z' }, status: { phase: 'Terminating', conditions } });
  }
}

/** Lets pending promises run, then moves the clock on: one poll round of the wait. */
async function tick(clock: FakeClock, ms: number): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  clock.advance(ms);
}

test('a namespace being deleted is waited for, said once, and created again once it is gone', async () => {
  const clock = new FakeClock();
  const api = new FakeNamespaces();
  api.terminate('kfn-system');
  const said: string[] = [];
  let done = false;
  const ready = namespaceReady(api, 'kfn-system', { fieldManager: 'kfn-test', clock, say: (l) => said.push(l) }).then(() => (done = true));

  for (let i = 0; i < 20; i++) await tick(clock, 500); // 10 s of "still terminating"
  assert.equal(done, false, 'it does not go on while the namespace is being deleted');
  assert.ok(!api.requests.some((r) => r.startsWith('PATCH')), 'nothing is applied into a namespace being deleted');
  assert.equal(said.length, 1, `said once, not every poll: ${JSON.stringify(said)}`);
  assert.match(said[0]!, /Namespace kfn-system is being deleted .*waiting for it to go \(up to 120 s\)/);

  api.namespaces.delete('kfn-system'); // the namespace controller finished
  for (let i = 0; i < 3 && !done; i++) await tick(clock, 500);
  await ready;
  assert.equal(api.namespaces.get('kfn-system')?.status?.phase, 'Active', 'created again');
  assert.equal(api.requests.at(-1), 'PATCH /api/v1/namespaces/kfn-system');
});

test('a namespace that stays terminating fails after the bound, naming what holds it and what to do', async () => {
  const clock = new FakeClock();
  const api = new FakeNamespaces();
  api.terminate('kfn-system', [{ type: 'NamespaceFinalizersRemaining', status: 'True', message: 'Some content in the namespace has finalizers remaining: kfn.dev/cleanup in 1 resource instances' }]);
  const started = clock.now();
  let failure: Error | undefined;
  const ready = namespaceReady(api, 'kfn-system', { fieldManager: 'kfn-test', clock }).catch((err: Error) => (failure = err));
  while (!failure && clock.now() - started <= 130_000) await tick(clock, 500);
  await ready;
  assert.ok(failure, 'it gives up');
  assert.ok(clock.now() - started >= 120_000 && clock.now() - started <= 121_000, `after 2 minutes, not ${clock.now() - started} ms`);
  assert.match(failure.message, /^Namespace kfn-system is still being deleted after 120 s \(NamespaceFinalizersRemaining: .*kfn\.dev\/cleanup.*\)/);
  assert.match(failure.message, /kubectl get namespace kfn-system -o yaml.*then run this again/);
  assert.ok(!api.requests.some((r) => r.startsWith('PATCH')), 'nothing applied');
});

test('an existing namespace is left as it is; a missing one is created at once, without a word', async () => {
  const api = new FakeNamespaces();
  const said: string[] = [];
  api.namespaces.set('there', { metadata: { name: 'there' }, status: { phase: 'Active' } });
  await namespaceReady(api, 'there', { fieldManager: 'kfn-test', clock: new FakeClock(), say: (l) => said.push(l) });
  assert.deepEqual(api.requests, ['GET /api/v1/namespaces/there']);
  await namespaceReady(api, 'new', { fieldManager: 'kfn-test', clock: new FakeClock(), say: (l) => said.push(l) });
  assert.deepEqual(api.requests.slice(1), ['GET /api/v1/namespaces/new', 'PATCH /api/v1/namespaces/new']);
  assert.ok(api.namespaces.has('new'));
  assert.deepEqual(said, []);
});
