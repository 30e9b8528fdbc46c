// The SDK's runtime on the real apiserver, driven by signed events sent straight to the
// function (no bridge): finalizers, pruning, errors that name the object and the step,
// and no writes when nothing changed.
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { authenticate } from '../../core/authentication.ts';
import { encodeReconcileEvent, type ObservedKind, type ObservedObject, type ReconcileReason } from '../../core/event.ts';
import { child, ConfigMap, createApp, defineKind, defineReconciler, Deployment, HorizontalPodAutoscaler, t, Terminal, type Kind, type KindRef } from '../../functions/sdk/index.ts';
import { applyObject, type Exchange } from '../../kube/api.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import type { InvocationRecord } from '../../functions/sdk/record.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

type Answer = { result?: string; changes?: { action: string; ref: { name: string; kind: string } }[]; error?: string };

/** Sends the function a signed reconcile event for `kind` `ns/name`, as the bridge would. */
async function deliverTo(app: ReturnType<typeof createApp>, api: ReturnType<typeof kubeApi>, kind: { apiVersion: string; kind: string; plural: string }, ns: string, name: string, reason: ReconcileReason = 'updated', attempt = 1, deadline?: number): Promise<{ status: number; body: Answer }> {
  const obj = await api.request<{ metadata: { uid: string; resourceVersion: string } }>('GET', `/apis/${kind.apiVersion}/namespaces/${ns}/${kind.plural}/${name}`).catch(() => undefined);
  const { headers, body } = authenticate(
    encodeReconcileEvent({ reconciler: kind.plural, primary: { apiVersion: kind.apiVersion, kind: kind.kind, namespace: ns, name, uid: obj?.metadata.uid, resourceVersion: obj?.metadata.resourceVersion }, reason, observedAt: Date.now() }, attempt, 'kfn://test', deadline).message,
    { kind: 'hmac', secret: 's' },
  );
  const res = await app.request('/', { method: 'POST', headers, body });
  return { status: res.status, body: (await res.json()) as Answer };
}

/** Installs a kind's CRD for one test, waits until it is served, removes it afterwards. */
async function installKind(t: TestContext, api: ReturnType<typeof kubeApi>, kind: Kind): Promise<void> {
  await applyObject(api, crdOf(kind) as never, 'kfn-test');
  t.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${kind.plural}.${kind.group}`).catch(() => undefined));
  await waitFor(`the ${kind.kind} CRD to be served`, () => api.resource(kind.apiVersion, kind.kind));
}

describe('SDK runtime', () => {
  test('finalizer, children, pruning, errors and idle reconciles', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk');
    const group = `${uniqueName('sdk')}.kfn.test`;
    const Gizmo = defineKind({ group, version: 'v1', kind: 'Gizmo', spec: t.Object({ parts: t.Integer({ minimum: 0 }), fail: t.Optional(t.Boolean()) }), status: t.Object({ built: t.Optional(t.Integer()) }) });
    await installKind(t2, api, Gizmo);
    const finalized: string[] = [];
    const fn = defineReconciler({
      for: Gizmo,
      owns: [ConfigMap],
      reconcile(g) {
        if (g.spec.fail) throw new Error('the gizmo refuses');
        const parts = Array.from({ length: g.spec.parts }, (_, i) => child(ConfigMap, { metadata: { name: `${g.metadata.name}-part-${i}` }, data: { index: String(i) } }));
        return { children: parts, status: { built: g.spec.parts } };
      },
      finalize(g) {
        finalized.push(g.metadata.name);
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Gizmo.apiVersion}/namespaces/${ns}/gizmos`;
    const deliver = (name: string, reason: ReconcileReason = 'updated') => deliverTo(app, api, Gizmo, ns, name, reason);
    const parts = async () => (await api.request<{ items: { metadata: { name: string } }[] }>('GET', `/api/v1/namespaces/${ns}/configmaps`, { query: { labelSelector: 'kfn.dev/reconciler=gizmos' } })).items.map((c) => c.metadata.name).sort();

    await api.request('POST', path, { body: { apiVersion: Gizmo.apiVersion, kind: 'Gizmo', metadata: { name: 'g' }, spec: { parts: 3 } } });
    const first = await deliver('g', 'created');
    assert.equal(first.status, 200);
    assert.deepEqual(first.body.changes!.map((c) => c.action), ['finalizer', 'applied', 'applied', 'applied', 'status']);
    assert.deepEqual(await parts(), ['g-part-0', 'g-part-1', 'g-part-2']);
    const live = await api.request<{ metadata: { finalizers: string[] }; status: { built: number; observedGeneration: number; conditions: { type: string; status: string }[] } }>('GET', `${path}/g`);
    assert.deepEqual(live.metadata.finalizers, ['kfn.dev/gizmos']);
    assert.equal(live.status.built, 3);
    assert.equal(live.status.observedGeneration, 1);
    assert.equal(live.status.conditions[0]!.status, 'True');

    const idle = await deliver('g', 'resync');
    assert.deepEqual(idle.body.changes, [], 'nothing changed: no writes');

    await api.request('PATCH', `${path}/g`, { body: { spec: { parts: 1 } }, contentType: 'application/merge-patch+json' });
    const shrunk = await deliver('g');
    assert.deepEqual(shrunk.body.changes!.filter((c) => c.action === 'pruned').map((c) => c.ref.name).sort(), ['g-part-1', 'g-part-2']);
    assert.deepEqual(await parts(), ['g-part-0']);

    await api.request('PATCH', `${path}/g`, { body: { spec: { fail: true } }, contentType: 'application/merge-patch+json' });
    const failed = await deliver('g');
    assert.equal(failed.status, 500);
    assert.match(failed.body.error!, new RegExp(`reconcile for Gizmo ${ns}/g failed: the gizmo refuses`));

    await api.request('DELETE', `${path}/g`);
    const deleting = await deliver('g', 'updated');
    assert.deepEqual(deleting.body.changes!.map((c) => c.action), ['finalizer']);
    assert.deepEqual(finalized, ['g']);
    await waitFor('the Gizmo to be gone once its finalizer is removed', async () => api.request('GET', `${path}/g`).then(() => undefined, () => true));
    const gone = await deliver('g', 'deleted');
    assert.deepEqual(gone.body, { result: 'done', changes: [] }, 'a gone object needs nothing');
  });

  test("the function's writes ask for the written object's metadata only (what it reports), not the whole object back", async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-meta');
    const group = `${uniqueName('sdkmeta')}.kfn.test`;
    const Widget = defineKind({ group, version: 'v1', kind: 'Widget', spec: t.Object({ size: t.Integer() }), status: t.Object({ size: t.Optional(t.Integer()) }) });
    await installKind(t2, api, Widget);
    const fn = defineReconciler({
      for: Widget,
      owns: [ConfigMap],
      reconcile: (w) => ({ children: [child(ConfigMap, { metadata: { name: `${w.metadata.name}-page` }, data: { big: 'x'.repeat(50_000) } })], status: { size: w.spec.size } }),
    });
    const writes: Exchange[] = [];
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api: api.withTap({ request: (e) => void (e.method !== 'GET' && writes.push(e)) }), log: pino({ level: 'silent' }) });
    await api.request('POST', `/apis/${Widget.apiVersion}/namespaces/${ns}/widgets`, { body: { apiVersion: Widget.apiVersion, kind: 'Widget', metadata: { name: 'w' }, spec: { size: 3 } } });
    const answer = await deliverTo(app, api, Widget, ns, 'w', 'created');
    assert.deepEqual(answer.body.changes!.map((c) => `${c.action} ${c.ref.kind} ${c.ref.name}`), ['applied ConfigMap w-page', 'status Widget w']);
    const applies = writes.filter((w) => w.contentType === 'application/apply-patch+yaml');
    assert.equal(applies.length, 2, 'the child and the status');
    for (const w of applies) {
      assert.equal((w.response as { kind?: string }).kind, 'PartialObjectMetadata', `${w.path} answered with ${(w.response as { kind?: string }).kind}`);
      assert.ok(JSON.stringify(w.response).length < 5_000, `${w.path}: ${JSON.stringify(w.response).length} bytes back`);
    }
    const cm = await api.request<{ data: { big: string } }>('GET', `/api/v1/namespaces/${ns}/configmaps/w-page`);
    assert.equal(cm.data.big.length, 50_000, 'the write itself is whole');
  });

  test('a finalizer the SDK did not add (a restore, exported YAML, GitOps) is removed all the same, with others\' kept; so with skip-finalizer', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-restored');
    const group = `${uniqueName('restored')}.kfn.test`;
    const Vault = defineKind({ group, version: 'v1', kind: 'Vault', spec: t.Object({ size: t.Integer() }), status: t.Object({}) });
    await installKind(t2, api, Vault);
    const finalized: string[] = [];
    const fn = defineReconciler({ for: Vault, reconcile: () => ({}), finalize: (v) => void finalized.push(v.metadata.name) });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Vault.apiVersion}/namespaces/${ns}/vaults`;
    // Created with kfn's finalizer already in the manifest, by another field manager, beside someone else's.
    const restored = (name: string, annotations?: Record<string, string>) =>
      api.request('POST', path, { query: { fieldManager: 'velero' }, body: { apiVersion: Vault.apiVersion, kind: 'Vault', metadata: { name, finalizers: ['kfn.dev/vaults', 'example.com/keep'], annotations }, spec: { size: 1 } } });
    const finalizers = async (name: string) => (await api.request<{ metadata: { finalizers?: string[] } }>('GET', `${path}/${name}`)).metadata.finalizers;
    for (const [name, annotations] of [['restored', undefined], ['skipped', { 'kfn.dev/skip-finalizer': 'true' }]] as const) {
      await restored(name, annotations);
      assert.equal((await deliverTo(app, api, Vault, ns, name, 'created')).status, 200);
      await api.request('DELETE', `${path}/${name}`);
      const answer = await deliverTo(app, api, Vault, ns, name, 'updated');
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.deepEqual(await finalizers(name), ['example.com/keep'], `${name}: kfn's finalizer removed, the other kept`);
      await api.request('PATCH', `${path}/${name}`, { body: { metadata: { finalizers: null } }, contentType: 'application/merge-patch+json' });
      await waitFor(`${name} to be gone`, () => api.request('GET', `${path}/${name}`).then(() => false, () => true));
    }
    assert.deepEqual(finalized, ['restored'], 'finalize ran for the restored object, not for the skipped one');
  });

  test('ctx.list returns every object, fetched a page at a time', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'pages');
    const group = `${uniqueName('pages')}.kfn.test`;
    const Tally = defineKind({ group, version: 'v1', kind: 'Tally', spec: t.Object({}), status: t.Object({ counted: t.Optional(t.Array(t.String())) }) });
    await installKind(t2, api, Tally);
    const fn = defineReconciler({
      for: Tally,
      uses: [{ kind: ConfigMap, verbs: ['list'] }],
      async reconcile(tally, ctx) {
        const maps = await ctx.list(ConfigMap, { namespace: tally.metadata.namespace, labelSelector: 'tally=yes', pageSize: 2 });
        return { status: { counted: maps.map((m) => m.metadata.name).sort() } };
      },
    });
    for (let i = 0; i < 5; i++) await api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `m${i}`, labels: { tally: 'yes' } } } });
    await api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'other', labels: { tally: 'no' } } } });
    await api.request('POST', `/apis/${Tally.apiVersion}/namespaces/${ns}/tallies`, { body: { apiVersion: Tally.apiVersion, kind: 'Tally', metadata: { name: 'all' }, spec: {} } });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const answer = await deliverTo(app, api, Tally, ns, 'all', 'created');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const live = await api.request<{ status: { counted: string[] } }>('GET', `/apis/${Tally.apiVersion}/namespaces/${ns}/tallies/all`);
    assert.deepEqual(live.status.counted, ['m0', 'm1', 'm2', 'm3', 'm4'], 'three pages of at most two, all of them');
  });

  test('children are known by group and kind, not version; no children returned prunes nothing; a kind not in owns is an error', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-keys');
    const group = `${uniqueName('keys')}.kfn.test`;
    const Scaler = defineKind({ group, version: 'v1', kind: 'Scaler', spec: t.Object({ mode: t.String() }), status: t.Object({}) });
    await installKind(t2, api, Scaler);
    const fn = defineReconciler({
      for: Scaler,
      // Untyped on purpose (a KindRef list): it returns a kind it does not own, and an HPA at
      // another version than owns names — what the type check would otherwise refuse.
      owns: [ConfigMap, HorizontalPodAutoscaler] as KindRef[], // autoscaling/v2
      reconcile(s) {
        if (s.spec.mode === 'status-only') return { status: {} };
        if (s.spec.mode === 'stray') return { children: [{ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'stray' }, stringData: { a: 'b' } }] };
        return {
          children: [
            { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cfg' }, data: { a: 'b' } },
            // Returned at autoscaling/v1 while owns names v2: the same object either way.
            { apiVersion: 'autoscaling/v1', kind: 'HorizontalPodAutoscaler', metadata: { name: 'hpa' }, spec: { scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'x' }, minReplicas: 1, maxReplicas: 3 } },
          ],
        };
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Scaler.apiVersion}/namespaces/${ns}/scalers`;
    const deliver = () => deliverTo(app, api, Scaler, ns, 's');
    const hpaUid = () => api.request<{ metadata: { uid: string } }>('GET', `/apis/autoscaling/v2/namespaces/${ns}/horizontalpodautoscalers/hpa`).then((h) => h.metadata.uid);

    await api.request('POST', path, { body: { apiVersion: Scaler.apiVersion, kind: 'Scaler', metadata: { name: 's' }, spec: { mode: 'both' } } });
    assert.equal((await deliver()).status, 200);
    const uid = await hpaUid();
    for (let i = 0; i < 2; i++) {
      const again = await deliver();
      assert.deepEqual(again.body.changes!.filter((c) => c.action === 'pruned'), [], 'the v1-returned HPA is not pruned as a stranger');
    }
    assert.equal(await hpaUid(), uid, 'never deleted and recreated');

    await api.request('PATCH', `${path}/s`, { body: { spec: { mode: 'status-only' } }, contentType: 'application/merge-patch+json' });
    const statusOnly = await deliver();
    assert.equal(statusOnly.status, 200);
    assert.deepEqual(statusOnly.body.changes!.filter((c) => c.action === 'pruned'), [], 'a result without children prunes nothing');
    await api.request('GET', `/api/v1/namespaces/${ns}/configmaps/cfg`);

    await api.request('PATCH', `${path}/s`, { body: { spec: { mode: 'stray' } }, contentType: 'application/merge-patch+json' });
    const stray = await deliver();
    assert.equal(stray.status, 500);
    assert.match(stray.body.error!, /Secret \(v1\) is not in the reconciler's owns/);
  });
  test("a field dropped from a child's desired state is removed from the live child; equal quantities make no write", async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-drop');
    const group = `${uniqueName('drop')}.kfn.test`;
    const Shape = defineKind({ group, version: 'v1', kind: 'Shape', spec: t.Object({ trimmed: t.Boolean() }), status: t.Object({ note: t.Optional(t.String()) }) });
    await installKind(t2, api, Shape);
    const fn = defineReconciler({
      for: Shape,
      owns: [ConfigMap, Deployment],
      reconcile(s) {
        const full = !s.spec.trimmed;
        const labels = { app: 'shape', ...(full ? { tier: 'extra' } : {}) };
        return {
          children: [
            { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'shape', labels, ...(full ? { annotations: { note: 'x' } } : {}) }, data: { a: '1', ...(full ? { b: '2' } : {}) } },
            {
              apiVersion: 'apps/v1',
              kind: 'Deployment',
              metadata: { name: 'shape', labels },
              spec: {
                replicas: 0,
                selector: { matchLabels: { app: 'shape' } },
                template: {
                  metadata: { labels: { app: 'shape' } },
                  spec: {
                    containers: [
                      {
                        name: 'main',
                        image: 'kfn.local/busybox:test',
                        env: [{ name: 'KEEP', value: '1' }, ...(full ? [{ name: 'DROP', value: '2' }] : [])],
                        // 0.5 and 1024Mi are stored as 500m and 1Gi: equal by value, no write.
                        resources: full ? { limits: { cpu: '0.5', memory: '1024Mi' }, requests: { cpu: '0.25' } } : { requests: { cpu: '0.25' } },
                      },
                    ],
                  },
                },
              },
            },
          ],
          status: full ? { note: 'full' } : {},
        };
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Shape.apiVersion}/namespaces/${ns}/shapes`;
    const deliver = async () => {
      const out = await deliverTo(app, api, Shape, ns, 's');
      assert.equal(out.status, 200, out.body.error);
      return out.body.changes!.map((c) => `${c.action} ${c.ref.kind}`);
    };
    type Live = { metadata: { labels?: Record<string, string>; annotations?: Record<string, string> }; data?: Record<string, string>; spec?: { template: { spec: { containers: { env?: { name: string }[]; resources?: { limits?: Record<string, string> } }[] } } } };
    const cm = () => api.request<Live>('GET', `/api/v1/namespaces/${ns}/configmaps/shape`);
    const deploy = () => api.request<Live>('GET', `/apis/apps/v1/namespaces/${ns}/deployments/shape`);

    await api.request('POST', path, { body: { apiVersion: Shape.apiVersion, kind: 'Shape', metadata: { name: 's' }, spec: { trimmed: false } } });
    assert.deepEqual(await deliver(), ['applied ConfigMap', 'applied Deployment', 'status Shape']);
    assert.deepEqual((await deploy()).spec!.template.spec.containers[0]!.resources!.limits, { cpu: '500m', memory: '1Gi' });
    assert.deepEqual(await deliver(), [], 'idle: quantities equal by value and unchanged fields make no write');

    await api.request('PATCH', `${path}/s`, { body: { spec: { trimmed: true } }, contentType: 'application/merge-patch+json' });
    assert.deepEqual(await deliver(), ['applied ConfigMap', 'applied Deployment', 'status Shape'], 'dropping fields is a change');
    const c = await cm();
    assert.equal(c.metadata.labels!.tier, undefined, 'the dropped label is gone');
    assert.equal(c.metadata.annotations?.note, undefined, 'the dropped annotation is gone');
    assert.deepEqual(c.data, { a: '1' }, 'the dropped key is gone');
    const d = await deploy();
    const container = d.spec!.template.spec.containers[0]!;
    assert.deepEqual(container.env!.map((e) => e.name), ['KEEP'], 'the dropped env var is gone');
    assert.equal(container.resources!.limits, undefined, 'the dropped limits are gone');
    assert.equal(d.metadata.labels!.tier, undefined);
    const shape = await api.request<{ status: { note?: string } }>('GET', `${path}/s`);
    assert.equal(shape.status.note, undefined, 'a dropped status field is gone');
    assert.deepEqual(await deliver(), [], 'idle again after the trim');
  });
  test('a failing finalize is retried until finalizeTimeoutSeconds after its first failure, whatever the attempt; writes are preconditioned on the uid', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-final');
    const group = `${uniqueName('final')}.kfn.test`;
    const Doomed = defineKind({ group, version: 'v1', kind: 'Doomed', spec: t.Object({ mode: t.Optional(t.String()) }), status: t.Object({}) });
    await installKind(t2, api, Doomed);
    const path = `/apis/${Doomed.apiVersion}/namespaces/${ns}/doomeds`;
    let clock = Date.now();
    const fn = defineReconciler({
      for: Doomed,
      owns: [ConfigMap],
      async reconcile(d, ctx) {
        if (d.spec.mode === 'race') {
          // Someone deletes the child and makes a new one of the same name between the list and the prune.
          await ctx.api.request('DELETE', `/api/v1/namespaces/${ns}/configmaps/racy`);
          await ctx.api.request('POST', `/api/v1/namespaces/${ns}/configmaps`, { body: { metadata: { name: 'racy', labels: { 'kfn.dev/owner-uid': d.metadata.uid! } }, data: { by: 'someone else' } } });
          return { children: [] };
        }
        return { children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'racy' }, data: {} }] };
      },
      async finalize(d, ctx) {
        if (d.spec.mode === 'vanish') {
          // The object goes while it is finalized (someone removed the finalizers by hand).
          await ctx.api.request('PATCH', `${path}/${d.metadata.name}`, { body: { metadata: { finalizers: null } }, contentType: 'application/merge-patch+json' });
          return;
        }
        throw new Error('the backend is down');
      },
      finalizeTimeoutSeconds: 120,
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }), now: () => new Date(clock) });
    const deliver = (name: string, attempt: number) => deliverTo(app, api, Doomed, ns, name, 'updated', attempt);
    const warnings = async (name: string) => (await api.request<{ items: { reason: string; message: string; count: number }[] }>('GET', `/api/v1/namespaces/${ns}/events`, { query: { fieldSelector: `involvedObject.name=${name}` } })).items;

    await api.request('POST', path, { body: { apiVersion: Doomed.apiVersion, kind: 'Doomed', metadata: { name: 'd' }, spec: {} } });
    assert.equal((await deliver('d', 1)).status, 200);
    await api.request('DELETE', `${path}/d`);
    const deleting = await api.request<{ metadata: { deletionTimestamp: string } }>('GET', `${path}/d`);
    clock = Date.parse(deleting.metadata.deletionTimestamp) + 5_000;
    // An object that was retrying long before its deletion: attempt 50 does not give up.
    const failed = await deliver('d', 50);
    assert.equal(failed.status, 500);
    assert.match(failed.body.error!, /finalize for Doomed .*\/d failed: the backend is down/);
    assert.equal((await deliver('d', 51)).status, 500);
    const pending = await api.request<{ metadata: { finalizers?: string[] } }>('GET', `${path}/d`);
    assert.deepEqual(pending.metadata.finalizers, ['kfn.dev/doomeds'], 'still held by its finalizer');
    const failedEvent = (await warnings('d')).find((e) => e.reason === 'FinalizeFailed');
    assert.ok(failedEvent, 'a FinalizeFailed Warning Event says why the object stays');
    assert.match(failedEvent.message, /cleanup failed: the backend is down; retried until .*kfn\.dev\/skip-finalizer/);
    assert.equal(failedEvent.count, 2, 'the same failure twice is one Event counted twice');

    const noted = await api.request<{ metadata: { annotations?: Record<string, string> } }>('GET', `${path}/d`);
    assert.equal(noted.metadata.annotations?.['kfn.dev/finalize-failing-since'], new Date(Date.parse(deleting.metadata.deletionTimestamp) + 5_000).toISOString(), 'the first failure is noted on the object');
    clock = Date.parse(deleting.metadata.deletionTimestamp) + 5_000 + 121_000;
    const gaveUp = await deliver('d', 1);
    assert.equal(gaveUp.status, 200);
    assert.deepEqual(gaveUp.body.changes!.map((c) => c.action), ['finalizer']);
    const event = (await warnings('d')).find((e) => e.reason === 'FinalizerGaveUp');
    assert.match(event?.message ?? '', /cleanup kept failing for 121s since its first failure \(finalizeTimeoutSeconds 120\), last: the backend is down/);
    await waitFor('the Doomed to be gone', async () => api.request('GET', `${path}/d`).then(() => undefined, () => true));

    // The finalizer's removal names the uid: an object that went meanwhile is not created again.
    clock = Date.now();
    await api.request('POST', path, { body: { apiVersion: Doomed.apiVersion, kind: 'Doomed', metadata: { name: 'v' }, spec: { mode: 'vanish' } } });
    assert.equal((await deliver('v', 1)).status, 200);
    await api.request('DELETE', `${path}/v`);
    const vanished = await deliver('v', 1);
    assert.equal(vanished.status, 200, vanished.body.error);
    await sleep(500);
    assert.equal(await api.request('GET', `${path}/v`).then(() => 'exists', () => 'gone'), 'gone', 'not recreated by the finalizer removal');

    // Prune names the uid it listed: a new child that took the name is not deleted.
    await api.request('POST', path, { body: { apiVersion: Doomed.apiVersion, kind: 'Doomed', metadata: { name: 'r' }, spec: {} } });
    assert.equal((await deliver('r', 1)).status, 200);
    await api.request('PATCH', `${path}/r`, { body: { spec: { mode: 'race' } }, contentType: 'application/merge-patch+json' });
    assert.equal((await deliver('r', 1)).status, 200);
    const racy = await api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${ns}/configmaps/racy`);
    assert.deepEqual(racy.data, { by: 'someone else' }, 'the newcomer survives the prune of its namesake');
  });
  test('the delivery deadline stops a reconcile: nothing is written after it, requests in flight are aborted', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-deadline');
    const group = `${uniqueName('late')}.kfn.test`;
    const Late = defineKind({ group, version: 'v1', kind: 'Late', spec: t.Object({ workMs: t.Integer() }), status: t.Object({}) });
    await installKind(t2, api, Late);
    let sawAbort = false;
    const fn = defineReconciler({
      for: Late,
      owns: [ConfigMap],
      async reconcile(l, ctx) {
        await sleep(l.spec.workMs); // slow work that ignores the deadline
        ctx.signal.addEventListener('abort', () => (sawAbort = true));
        if (ctx.signal.aborted) sawAbort = true;
        return { children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'late-out' }, data: {} }] };
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Late.apiVersion}/namespaces/${ns}/lates`;
    await api.request('POST', path, { body: { apiVersion: Late.apiVersion, kind: 'Late', metadata: { name: 'l' }, spec: { workMs: 600 } } });
    const late = await deliverTo(app, api, Late, ns, 'l', 'created', 1, Date.now() + 300);
    assert.equal(late.status, 500);
    assert.match(late.body.error!, /applying ConfigMap .*late-out for Late .*\/l failed: the time the delivery gave this reconcile \(\d+ ms from receipt\) ran out/);
    assert.ok(sawAbort, 'ctx.signal is aborted at the deadline');
    const out = await api.request('GET', `/api/v1/namespaces/${ns}/configmaps/late-out`).then(() => 'written', () => 'not written');
    assert.equal(out, 'not written', 'no write after the deadline');
    const inTime = await deliverTo(app, api, Late, ns, 'l', 'created', 1, Date.now() + 10_000);
    assert.equal(inTime.status, 200, inTime.body.error);
    await api.request('GET', `/api/v1/namespaces/${ns}/configmaps/late-out`);
  });

  test('children the apiserver refuses: Ready=False names the first in full and the others; the record marks each refused child', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk');
    const Panel = defineKind({ group: `${uniqueName('sdk')}.kfn.test`, version: 'v1', kind: 'Panel', spec: t.Object({ tag: t.String() }), status: t.Object({}) });
    await installKind(t2, api, Panel);
    const fn = defineReconciler({
      for: Panel,
      owns: [ConfigMap],
      reconcile: (p) => ({
        // A label value may hold 63 characters: the tag goes into two of the three children's labels.
        children: ['a', 'b', 'c'].map((n) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${p.metadata.name}-${n}`, labels: (n === 'b' ? {} : { tag: p.spec.tag }) as Record<string, string> }, data: {} })),
      }),
    });
    const records: InvocationRecord[] = [];
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }), record: (r) => records.push(r) });
    await api.request('POST', `/apis/${Panel.apiVersion}/namespaces/${ns}/panels`, { body: { apiVersion: Panel.apiVersion, kind: 'Panel', metadata: { name: 'p' }, spec: { tag: 'x'.repeat(64) } } });
    const out = await deliverTo(app, api, Panel, ns, 'p', 'created');
    assert.equal(out.body.result, 'requeue');
    const live = await api.request<{ status: { conditions: { type: string; status: string; reason: string; message: string }[] } }>('GET', `/apis/${Panel.apiVersion}/namespaces/${ns}/panels/p`);
    const ready = live.status.conditions.find((c) => c.type === 'Ready')!;
    assert.equal(ready.status, 'False');
    assert.equal(ready.reason, 'Invalid');
    assert.match(ready.message, new RegExp(`^ConfigMap ${ns}/p-a: .*must be no more than 63 (bytes|characters) \\(also refused: ConfigMap ${ns}/p-c\\)$`));
    const r = records[0]!;
    assert.deepEqual(
      r.children.map((c) => [c.ref.name, c.refused?.status]),
      [['p-a', 422], ['p-b', undefined], ['p-c', 422]],
    );
    assert.match(r.children[0]!.refused!.message, /metadata\.labels: Invalid value/);
    await api.request('GET', `/api/v1/namespaces/${ns}/configmaps/p-b`);
  });

  test('a Terminal error is not retried: Ready=False with its reason at the generation, a Warning Event on the object', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk');
    const Batch = defineKind({ group: `${uniqueName('sdk')}.kfn.test`, version: 'v1', kind: 'Batch', spec: t.Object({ size: t.Integer() }), status: t.Object({}) });
    await installKind(t2, api, Batch);
    const fn = defineReconciler({
      for: Batch,
      reconcile: (b) => {
        if (b.spec.size % 2) throw new Terminal(`spec.size: must be even, not ${b.spec.size}`, { reason: 'InvalidSize' });
        return {};
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    await api.request('POST', `/apis/${Batch.apiVersion}/namespaces/${ns}/${Batch.plural}`, { body: { apiVersion: Batch.apiVersion, kind: 'Batch', metadata: { name: 'b' }, spec: { size: 3 } } });
    const out = await deliverTo(app, api, Batch, ns, 'b', 'created');
    assert.equal(out.status, 200, 'an answer, not a failure: the bridge does not retry');
    assert.equal(out.body.result, 'done');
    const live = await api.request<{ status: { conditions: { type: string; status: string; reason: string; message: string; observedGeneration: number }[] } }>('GET', `/apis/${Batch.apiVersion}/namespaces/${ns}/${Batch.plural}/b`);
    const ready = live.status.conditions.find((c) => c.type === 'Ready')!;
    assert.deepEqual([ready.status, ready.reason, ready.message, ready.observedGeneration], ['False', 'InvalidSize', 'spec.size: must be even, not 3', 1]);
    const events = await api.request<{ items: { type: string; reason: string; message: string; involvedObject: { name: string } }[] }>('GET', `/api/v1/namespaces/${ns}/events`);
    assert.ok(events.items.some((e) => e.type === 'Warning' && e.reason === 'InvalidSize' && e.involvedObject.name === 'b'), JSON.stringify(events.items.map((e) => e.reason)));
  });

  test('a contract-2 event that names its kinds\' resources: a new process reconciles, children written, without a discovery request; the next event, naming none, asks (nothing learned outlives its event)', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk');
    const Shelf = defineKind({ group: `${uniqueName('sdk')}.kfn.test`, version: 'v1', kind: 'Shelf', spec: t.Object({ books: t.Integer() }), status: t.Object({}) });
    await installKind(t2, api, Shelf);
    const fn = defineReconciler({
      for: Shelf,
      owns: [ConfigMap, Deployment],
      reconcile: (s) => ({ children: [child(ConfigMap, { metadata: { name: `${s.metadata.name}-books` }, data: { books: String(s.spec.books) } })] }),
    });
    const path = `/apis/${Shelf.apiVersion}/namespaces/${ns}/${Shelf.plural}`;
    // A function process just started: its own client, nothing discovered yet.
    const requests: Exchange[] = [];
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api: kubeApi(cluster.kc).withTap({ request: (e) => void requests.push(e) }), log: pino({ level: 'silent' }) });
    const deliver = async (name: string, kinds: ObservedKind[]) => {
      const primary = await api.request<ObservedObject>('POST', path, { body: { apiVersion: Shelf.apiVersion, kind: 'Shelf', metadata: { name }, spec: { books: 3 } } });
      const from = requests.length;
      const ref = { apiVersion: Shelf.apiVersion, kind: 'Shelf', namespace: ns, name, uid: primary.metadata.uid, resourceVersion: primary.metadata.resourceVersion };
      const observed = { primary, kinds, children: [] };
      const { headers, body } = authenticate(encodeReconcileEvent({ reconciler: Shelf.plural, primary: ref, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000, observed, 30_000).message, { kind: 'hmac', secret: 's' });
      const res = await app.request('/', { method: 'POST', headers, body });
      assert.equal(res.status, 200, await res.clone().text());
      await api.request('GET', `/api/v1/namespaces/${ns}/configmaps/${name}-books`);
      return requests.slice(from).map((e) => `${e.method} ${e.path}`);
    };
    const configMaps = { apiVersion: 'v1', kind: 'ConfigMap', resourceVersion: '1' };
    const deployments = { apiVersion: 'apps/v1', kind: 'Deployment', resourceVersion: '1' };

    const named = await deliver('named', [{ ...configMaps, plural: 'configmaps', namespaced: true }, { ...deployments, plural: 'deployments', namespaced: true }]);
    assert.deepEqual(named.filter((r) => r.startsWith('GET')), [], `no discovery (nor any read): ${named.join(', ')}`);
    assert.ok(named.some((r) => r.startsWith(`PATCH /api/v1/namespaces/${ns}/configmaps/named-books`)), named.join(', '));

    // The next event, from a bridge that does not name them: the function asks discovery itself.
    const unnamed = await deliver('unnamed', [configMaps, deployments]);
    assert.ok(unnamed.includes('GET /api/v1'), `discovery of v1 asked: ${unnamed.join(', ')}`);
  });
});
