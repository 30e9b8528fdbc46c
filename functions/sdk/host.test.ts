// A shared host without a cluster: each delivery reaches the function its path names, under that
// function's key alone; the functions share one Kubernetes client; what cannot share a plain
// HTTP port is refused.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import pino from 'pino';
import { authenticate, type Credentials } from '../../core/authentication.ts';
import { encodeReconcileEvent, type Observation } from '../../core/event.ts';
import type { KubeApi } from '../../kube/api.ts';
import MyAppFunction from '../myapp/index.ts';
import PodSetFunction from '../podset/index.ts';
import { createHostApp, hostCredentialsFromEnv, sharedHostProblem } from './host.ts';
import { defineKind, defineReconciler, t } from './index.ts';
import { memoryApi } from './testing.ts';

const silent = pino({ level: 'silent' });
const Alpha = defineKind({ group: 'host.kfn.test', version: 'v1', kind: 'Alpha', spec: t.Object({}), status: t.Object({ by: t.Optional(t.String()) }) });
const Beta = defineKind({ group: 'host.kfn.test', version: 'v1', kind: 'Beta', spec: t.Object({}), status: t.Object({ by: t.Optional(t.String()) }) });
const ran: string[] = [];
const alpha = defineReconciler({ name: 'alpha', for: Alpha, reconcile: (o) => (ran.push(`alpha ${o.metadata.name}`), { status: { by: 'alpha' } }) });
const beta = defineReconciler({ name: 'beta', for: Beta, reconcile: (o) => (ran.push(`beta ${o.metadata.name}`), { status: { by: 'beta' } }) });
const keys: Record<string, Credentials> = { alpha: { kind: 'hmac', secret: 'key-of-alpha' }, beta: { kind: 'hmac', secret: 'key-of-beta' } };

const a = { apiVersion: Alpha.apiVersion, kind: 'Alpha', metadata: { name: 'a', namespace: 'demo', uid: 'uid-a' }, spec: {} };
const b = { apiVersion: Beta.apiVersion, kind: 'Beta', metadata: { name: 'b', namespace: 'demo', uid: 'uid-b' }, spec: {} };
/** One apiserver in memory that holds both kinds: the host's functions share one client. */
const world = () => memoryApi(defineReconciler({ name: 'world', for: Alpha, uses: [{ kind: Beta, verbs: ['get', 'patch'] }], reconcile: () => ({}) }), { object: a, existing: [b] });

let sent = 0;
/** A delivery for `object`'s Reconciler, signed with `key`: a new event each time (the host takes each event id once). */
function delivery(object: typeof a, reconciler: string, key: Credentials) {
  const observation: Observation = { reconciler, primary: { apiVersion: object.apiVersion, kind: object.kind, namespace: 'demo', name: object.metadata.name, uid: object.metadata.uid, resourceVersion: '1', generation: 1 }, reason: 'created', observedAt: Date.now() + sent++ };
  const { headers, body } = authenticate(encodeReconcileEvent(observation, 1, 'kfn://test', Date.now() + 30_000).message, key);
  return { method: 'POST', headers, body };
}
const errorOf = async (res: Response) => ((await res.json()) as { error: string }).error;

describe('a shared host', () => {
  test('routes each delivery to the function its path names, and the functions share one Kubernetes client', async () => {
    ran.length = 0;
    let connections = 0;
    const api = world();
    const host = createHostApp([alpha, beta], { credentials: (name) => keys[name]!, log: silent, record: false, connect: (): KubeApi => (connections++, api) });
    const toAlpha = await host.request('/alpha/', delivery(a, 'alpha', keys.alpha!));
    assert.equal(toAlpha.status, 200, await toAlpha.clone().text());
    const toBeta = await host.request('/beta/', delivery(b, 'beta', keys.beta!));
    assert.equal(toBeta.status, 200, await toBeta.clone().text());
    assert.equal((await host.request('/alpha', delivery(a, 'alpha', keys.alpha!))).status, 200, 'the path without its last slash is the same function');
    assert.deepEqual(ran, ['alpha a', 'beta b', 'alpha a']);
    assert.equal(connections, 1, 'one client for every function of the host');
    assert.equal((await host.request('/healthz')).status, 200, 'one /healthz for the process');
  });

  test("a delivery signed with one function's key is refused on another's path", async () => {
    ran.length = 0;
    const host = createHostApp([alpha, beta], { credentials: (name) => keys[name]!, log: silent, record: false, api: world() });
    const crossed = await host.request('/beta/', delivery(b, 'beta', keys.alpha!));
    assert.equal(crossed.status, 401);
    assert.match(await errorOf(crossed), /bad signature: the request was not signed with this function's secret/);
    const elsewhere = await host.request('/beta/', delivery(a, 'alpha', keys.alpha!));
    assert.equal(elsewhere.status, 401, "alpha's own delivery, sent to beta's path");
    const wrongKind = await host.request('/beta/', delivery(a, 'alpha', keys.beta!));
    assert.equal(wrongKind.status, 400);
    assert.match(await errorOf(wrongKind), /this function reconciles host\.kfn\.test\/v1 Beta, not host\.kfn\.test\/v1 Alpha/);
    assert.deepEqual(ran, [], 'no function ran');
    const nowhere = await host.request('/gamma/', delivery(a, 'alpha', keys.alpha!));
    assert.equal(nowhere.status, 404);
    assert.match(await errorOf(nowhere), /this host serves \/alpha\/, \/beta\/; nothing at \/gamma\//);
  });

  test('refuses functions that need a TLS listener of their own, and a function named twice', () => {
    assert.throws(() => createHostApp([PodSetFunction, MyAppFunction], { credentials: (name) => keys[name]!, log: silent }), /myapp \(default\) needs a TLS listener of its own, which a shared host \(one plain HTTP port for every function\) does not give: deploy it on its own/);
    const vault = defineReconciler({ name: 'vault', for: Beta, deliveryTls: true, reconcile: () => ({}) });
    assert.match(sharedHostProblem([alpha, vault, MyAppFunction]) ?? '', /^vault \(deliveryTls\), myapp \(default\) need a TLS listener of their own/);
    assert.match(sharedHostProblem([alpha, alpha]) ?? '', /alpha named more than once/);
    assert.match(sharedHostProblem([]) ?? '', /at least one function/);
    assert.equal(sharedHostProblem([alpha, beta, PodSetFunction]), undefined);
  });
});

describe("a shared host's keys", () => {
  test('one file per function in KFN_AUTH_SECRET_DIR, named by the function; one key for all is refused', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'kfn-host-keys-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'alpha'), 'key-of-alpha');
    writeFileSync(join(dir, 'beta'), 'key-of-beta');
    const credentials = hostCredentialsFromEnv({ KFN_AUTH_SECRET_DIR: dir });
    const host = createHostApp([alpha, beta], { credentials, log: silent, record: false, api: world() });
    assert.equal((await host.request('/alpha/', delivery(a, 'alpha', keys.alpha!))).status, 200);
    assert.equal((await host.request('/alpha/', delivery(a, 'alpha', keys.beta!))).status, 401);
    assert.throws(() => createHostApp([alpha, defineReconciler({ name: 'gamma', for: Beta, reconcile: () => ({}) })], { credentials, log: silent }), /cannot read the auth key from \S+gamma \(KFN_AUTH_SECRET_DIR\)/);
    assert.throws(() => hostCredentialsFromEnv({ KFN_AUTH_SECRET: 'one-for-all' }), /no authentication configured for the shared host: set KFN_AUTH_SECRET_DIR/);
    assert.deepEqual(hostCredentialsFromEnv({ KFN_INSECURE: '1' })('alpha'), { kind: 'none' });
  });
});
