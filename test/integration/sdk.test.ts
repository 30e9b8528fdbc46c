// The SDK's runtime on the real apiserver, driven by signed events sent straight to the
// function (no bridge): finalizers, pruning, errors that name the object and the step,
// and no writes when nothing changed.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { authenticate, reconcileEvent, type ReconcileReason } from '../../bridge/contract.ts';
import { ConfigMap, createApp, defineKind, defineReconciler, HorizontalPodAutoscaler, t } from '../../functions/sdk/index.ts';
import { applyObject } from '../../bridge/kubeapi.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import { kubeApi, testCluster, testNamespace, uniqueName, waitFor } from '../support/cluster.ts';

describe('SDK runtime', () => {
  test('finalizer, children, pruning, errors and idle reconciles', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk');
    const group = `${uniqueName('sdk')}.kfn.test`;
    const Gizmo = defineKind({ group, version: 'v1', kind: 'Gizmo', spec: t.Object({ parts: t.Integer({ minimum: 0 }), fail: t.Optional(t.Boolean()) }), status: t.Object({ built: t.Optional(t.Integer()) }) });
    await applyObject(api, crdOf(Gizmo) as never, 'kfn-test');
    t2.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.${group}`).catch(() => undefined));
    await waitFor('the Gizmo CRD to be served', () => api.resource(Gizmo.apiVersion, 'Gizmo'));
    const finalized: string[] = [];
    const fn = defineReconciler({
      for: Gizmo,
      owns: [ConfigMap],
      reconcile(g) {
        if (g.spec.fail) throw new Error('the gizmo refuses');
        const parts = Array.from({ length: g.spec.parts }, (_, i) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${g.metadata.name}-part-${i}` }, data: { index: String(i) } }));
        return { children: parts, status: { built: g.spec.parts } };
      },
      finalize(g) {
        finalized.push(g.metadata.name);
      },
    });
    const app = createApp(fn, { credentials: { kind: 'hmac', secret: 's' }, api, log: pino({ level: 'silent' }) });
    const path = `/apis/${Gizmo.apiVersion}/namespaces/${ns}/gizmos`;
    const deliver = async (name: string, reason: ReconcileReason = 'updated') => {
      const obj = await api.request<{ metadata: { uid: string; resourceVersion: string; generation: number } }>('GET', `${path}/${name}`).catch(() => undefined);
      const { headers, body } = authenticate(
        reconcileEvent({ reconciler: 'gizmos', primary: { apiVersion: Gizmo.apiVersion, kind: 'Gizmo', namespace: ns, name, uid: obj?.metadata.uid, resourceVersion: obj?.metadata.resourceVersion }, reason, observedAt: Date.now() }, 1, 'kfn://test').message,
        { kind: 'hmac', secret: 's' },
      );
      const res = await app.request('/', { method: 'POST', headers, body });
      return { status: res.status, body: (await res.json()) as { result?: string; changes?: { action: string; ref: { name: string } }[]; error?: string } };
    };
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

  test('children are known by group and kind, not version; no children returned prunes nothing; a kind not in owns is an error', async (t2) => {
    const cluster = await testCluster();
    const api = kubeApi(cluster.kc);
    const ns = await testNamespace(t2, cluster, 'sdk-keys');
    const group = `${uniqueName('keys')}.kfn.test`;
    const Scaler = defineKind({ group, version: 'v1', kind: 'Scaler', spec: t.Object({ mode: t.String() }), status: t.Object({}) });
    await applyObject(api, crdOf(Scaler) as never, 'kfn-test');
    t2.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/scalers.${group}`).catch(() => undefined));
    await waitFor('the Scaler CRD to be served', () => api.resource(Scaler.apiVersion, 'Scaler'));
    const fn = defineReconciler({
      for: Scaler,
      owns: [ConfigMap, HorizontalPodAutoscaler], // autoscaling/v2
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
    const deliver = async () => {
      const obj = await api.request<{ metadata: { uid: string; resourceVersion: string } }>('GET', `${path}/s`);
      const { headers, body } = authenticate(
        reconcileEvent({ reconciler: 'scalers', primary: { apiVersion: Scaler.apiVersion, kind: 'Scaler', namespace: ns, name: 's', uid: obj.metadata.uid, resourceVersion: obj.metadata.resourceVersion }, reason: 'updated', observedAt: Date.now() }, 1, 'kfn://test').message,
        { kind: 'hmac', secret: 's' },
      );
      const res = await app.request('/', { method: 'POST', headers, body });
      return { status: res.status, body: (await res.json()) as { changes?: { action: string; ref: { name: string } }[]; error?: string } };
    };
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
});
