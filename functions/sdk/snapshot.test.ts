// Contract 2 on the function's side: fields not carried are refused by name, and a desired child
// needs no write only when the bridge vouches for it and the labels kfn sets are on it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { desiredHash, guarded, Snapshot } from './snapshot.ts';
import { namedResources } from './runtime.ts';
import type { ObservedState } from '../../core/event.ts';

describe('a child cut to its declared fields', () => {
  const dep = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'site' }, spec: { selector: { matchLabels: { a: 'b' } } }, status: { availableReplicas: 1 } };

  test('reads what is carried, and undefined for a carried field that is absent', () => {
    const g = guarded(structuredClone(dep), ['status', 'spec.selector', 'metadata.annotations'], 'Deployment ns/site');
    assert.equal(g.status.availableReplicas, 1);
    assert.deepEqual(g.spec.selector.matchLabels, { a: 'b' });
    assert.equal((g.status as Record<string, unknown>).conditions, undefined);
    assert.equal(JSON.stringify(g), JSON.stringify(dep), 'serialises as the object');
  });

  test('refuses a field that is not carried, naming it and the declaration to change', () => {
    const g = guarded(structuredClone(dep), ['status', 'spec.selector'], 'Deployment ns/site') as unknown as { spec: { template?: unknown }; data?: unknown };
    assert.throws(() => g.spec.template, /Deployment ns\/site: spec\.template is not in the event, which carries only metadata, status, spec\.selector of this kind \(observe in defineReconciler/);
    assert.throws(() => g.data, /data is not in the event/);
  });

  test('no fields declared: the object as it is', () => {
    const whole = structuredClone(dep);
    assert.equal(guarded(whole, undefined, 'x'), whole);
  });
});

describe('whether a desired child needs a write', () => {
  const desired = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'page', namespace: 'ns', labels: { app: 'site' } }, data: { a: '1' } };
  const hash = desiredHash(desired);
  const live = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'page', namespace: 'ns', labels: { app: 'site', extra: 'x' } } };
  const state = (applied?: Record<string, string>): ObservedState => ({ primary: { apiVersion: 'v1', kind: 'X', metadata: { name: 'p' } }, kinds: [{ apiVersion: 'v1', kind: 'ConfigMap', resourceVersion: '5', fields: [] }], children: [live], ...(applied ? { applied } : {}) });

  test('not when the bridge vouches for the same hash and kfn\'s labels are there', () => {
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': hash })).unchanged(desired, hash, live), true);
  });

  test('when the hash differs (the function wants something else), the bridge cannot vouch, a label kfn sets is gone, or the child is missing', () => {
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': 'other' })).unchanged(desired, hash, live), false);
    assert.equal(new Snapshot(state()).unchanged(desired, hash, live), false);
    const relabelled = { ...live, metadata: { ...live.metadata, labels: { extra: 'x' } } };
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': hash })).unchanged(desired, hash, relabelled), false);
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': hash })).unchanged(desired, hash, undefined), false);
  });

  test('annotations kfn sets count only where the kind carries them', () => {
    const annotated = { ...desired, metadata: { ...desired.metadata, annotations: { note: 'n' } } };
    const h = desiredHash(annotated);
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': h })).unchanged(annotated, h, live), false, 'not carried: cannot tell');
    const carried = { ...live, metadata: { ...live.metadata, annotations: { note: 'n' } } };
    assert.equal(new Snapshot(state({ '/ConfigMap/ns/page': h })).unchanged(annotated, h, carried), true);
  });

  test('the hash follows every field of the desired child', () => {
    assert.notEqual(desiredHash({ ...desired, data: { a: '2' } }), hash);
    assert.equal(desiredHash(structuredClone(desired)), hash);
  });
});

describe('an invocation record of a contract-2 event', () => {
  test('holds the observed state with Secret data hashed, as reads are', async () => {
    const { Recorder } = await import('./record.ts');
    const { encodeReconcileEvent, parseReconcileRequest } = await import('../../core/event.ts');
    const secret = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'db', namespace: 'ns', ownerReferences: [{ uid: 'p1', controller: true }] }, data: { password: Buffer.from('hunter2').toString('base64') } };
    const observed: ObservedState = { primary: { apiVersion: 'example.com/v1', kind: 'Db', metadata: { name: 'db', namespace: 'ns', uid: 'p1' } }, kinds: [{ apiVersion: 'v1', kind: 'Secret', resourceVersion: '9' }], children: [secret] };
    const { message } = encodeReconcileEvent({ reconciler: 'dbs', primary: { apiVersion: 'example.com/v1', kind: 'Db', namespace: 'ns', name: 'db' }, reason: 'resync', observedAt: Date.now() }, 1, 'kfn://test', undefined, observed);
    const received = parseReconcileRequest(message.headers, message.body, { kind: 'none' });
    const recorder = new Recorder({ name: 'dbs', for: { apiVersion: 'example.com/v1', kind: 'Db' }, owns: [{ apiVersion: 'v1', kind: 'Secret' }] }, received, new Date());
    const record = recorder.finish({ result: { result: 'done', changes: [] } });
    const text = JSON.stringify(record);
    assert.ok(!text.includes(secret.data.password), 'the Secret data is not in the record');
    assert.match(JSON.stringify(record.event.data.observed!.children[0]), /redacted:hmac:/);
    assert.ok(record.redacted.some((r) => r.includes('observed state')));
    assert.deepEqual(received.data.observed!.children[0]!.data, secret.data, 'the function itself gets the data');
  });
});

describe("a child only in its owner's namespace", () => {
  test('a child the event carries from another namespace, naming the primary as its controller, is not taken as its child', () => {
    const owner = [{ apiVersion: 'example.com/v1', kind: 'Web', name: 'site', uid: 'w1', controller: true }];
    const real = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'team-a', uid: 's1', ownerReferences: owner } };
    const forged = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'attacker', uid: 's2', ownerReferences: owner } };
    const state: ObservedState = {
      primary: { apiVersion: 'example.com/v1', kind: 'Web', metadata: { name: 'site', namespace: 'team-a', uid: 'w1' } },
      kinds: [{ apiVersion: 'v1', kind: 'Secret', resourceVersion: '5' }],
      children: [forged, real],
    };
    assert.deepEqual(new Snapshot(state).children({ apiVersion: 'v1', kind: 'Secret' }, 'w1').map((c) => c.metadata.uid), ['s1']);
  });
});

describe('the resources an event names for its kinds', () => {
  test('only those of kinds the reconciler owns, each with its plural and scope; a kind that names none is looked up', () => {
    const named = namedResources(
      [
        { apiVersion: 'v1', kind: 'ConfigMap', resourceVersion: '1', plural: 'configmaps', namespaced: true },
        { apiVersion: 'apps/v1', kind: 'Deployment', resourceVersion: '1' },
        // Not owned: a signed event still cannot send this reconcile's reads of Secrets elsewhere.
        { apiVersion: 'v1', kind: 'Secret', resourceVersion: '1', plural: 'configmaps', namespaced: true },
      ],
      [{ apiVersion: 'v1', kind: 'ConfigMap' }, { apiVersion: 'apps/v1', kind: 'Deployment' }],
    );
    assert.deepEqual([...named], [['v1/ConfigMap', { apiVersion: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true, verbs: [] }]]);
  });
});
