// Contract 2's bookkeeping in the bridge, on fake watches: what an event carries, and that a key
// waits until the watches have seen its last reconcile's writes.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseReconciler } from './config.ts';
import { compareResourceVersions, maxSnapshotWaitMs, Snapshots, unseenBaselineMs } from './snapshot.ts';
import type { Watcher } from './watcher.ts';
import type { KindRef } from '../core/objects.ts';
import type { KubeObject } from '../kube/api.ts';

const Web: KindRef = { apiVersion: 'example.com/v1', kind: 'Web' };
const Deployment: KindRef = { apiVersion: 'apps/v1', kind: 'Deployment' };
const ConfigMap: KindRef = { apiVersion: 'v1', kind: 'ConfigMap' };

const config = parseReconciler({
  metadata: { name: 'webs' },
  spec: { for: Web, contract: 2, owns: [{ ...ConfigMap, fields: [] }, { ...Deployment, fields: ['status', 'spec.selector'] }], sink: { uri: 'http://127.0.0.1:1' } },
});

/** A watch as Snapshots reads it: its store, how far it has come, whether it has listed. */
function fakeWatch(objects: KubeObject[], resourceVersion: string, hasSynced = true): Watcher {
  const store = new Map(objects.map((o) => [`${o.metadata.namespace}/${o.metadata.name}`, o]));
  const kind = objects[0]?.kind ?? '';
  return { store, resourceVersion, hasSynced, failing: false, namespace: undefined, resource: { apiVersion: objects[0]?.apiVersion, kind, plural: `${kind.toLowerCase()}s`, namespaced: true, verbs: [] } } as unknown as Watcher;
}

const web: KubeObject = { apiVersion: Web.apiVersion, kind: Web.kind, metadata: { name: 'site', namespace: 'ns', uid: 'w1', resourceVersion: '100', generation: 1 }, spec: { page: 'hi' } };
const owner = (uid: string) => [{ apiVersion: Web.apiVersion, kind: Web.kind, name: 'site', uid, controller: true }];
const deployment = (rv: string, generation: number, ownerUid = 'w1'): KubeObject => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'site', namespace: 'ns', uid: 'd1', resourceVersion: rv, generation, ownerReferences: owner(ownerUid) },
  spec: { replicas: 1, selector: { matchLabels: { app: 'site' } }, template: {} },
  status: { availableReplicas: 1 },
});
const page: KubeObject = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'site-page', namespace: 'ns', uid: 'c1', resourceVersion: '102', ownerReferences: owner('w1') } };

function setUp(dep = deployment('101', 1)) {
  const snapshots = new Snapshots(config);
  const watches = { web: fakeWatch([web], '102'), dep: fakeWatch([dep], '102'), cm: fakeWatch([page], '102') };
  snapshots.onEvent(Deployment, { type: 'apply', object: dep, key: 'ns/site' });
  snapshots.onEvent(ConfigMap, { type: 'apply', object: page, key: 'ns/site-page' });
  const watchesOf = (k: KindRef) => (k.kind === 'Web' ? [watches.web] : k.kind === 'Deployment' ? [watches.dep] : [watches.cm]);
  return { snapshots, watches, watchesOf };
}

describe('the observed state a delivery carries', () => {
  test('the primary whole, and each owned kind\'s children of that primary, cut to the declared fields', () => {
    const { snapshots, watchesOf } = setUp();
    const observed = snapshots.observed(web, watchesOf)!;
    assert.equal(observed.primary, web);
    assert.deepEqual(observed.kinds.map((k) => [k.kind, k.resourceVersion, k.fields]), [['ConfigMap', '102', []], ['Deployment', '102', ['status', 'spec.selector']]]);
    // Each kind's resource as the bridge's discovery found it: the function need not ask.
    assert.deepEqual(observed.kinds.map((k) => [k.plural, k.namespaced]), [['configmaps', true], ['deployments', true]]);
    const dep = observed.children.find((c) => c.kind === 'Deployment')!;
    assert.deepEqual(dep.spec, { selector: { matchLabels: { app: 'site' } } }, 'spec.selector alone of the spec');
    assert.deepEqual(dep.status, { availableReplicas: 1 });
    assert.equal(observed.children.find((c) => c.kind === 'ConfigMap')!.metadata.name, 'site-page');
    assert.equal(observed.applied, undefined, 'nothing vouched for before an answer said what was applied');
  });

  test('a watch failing after its first sync is not vouched for: its kind is left out (the function lists it); the primary\'s, and nothing is carried', () => {
    const { snapshots, watches, watchesOf } = setUp();
    (watches.dep as { failing: boolean }).failing = true;
    const observed = snapshots.observed(web, watchesOf)!;
    assert.deepEqual(observed.kinds.map((k) => k.kind), ['ConfigMap'], 'the Deployments left out while their watch fails');
    assert.equal(observed.children.some((c) => c.kind === 'Deployment'), false);
    (watches.dep as { failing: boolean }).failing = false;
    (watches.web as { failing: boolean }).failing = true;
    assert.equal(snapshots.observed(web, watchesOf), undefined, 'the primary itself may be stale');
  });

  test('after a take-over, nothing is vouched for until every watch has reached the cluster\'s version at the take-over', () => {
    const { snapshots, watches, watchesOf } = setUp();
    snapshots.fencePending();
    assert.equal(snapshots.observed(web, watchesOf), undefined, 'nothing vouched for while the fence is being read');
    snapshots.fenceAt('150');
    assert.equal(snapshots.observed(web, watchesOf), undefined, 'the watches (at 102) may not have seen what the previous holder wrote');
    for (const w of Object.values(watches)) (w as { resourceVersion: string }).resourceVersion = '150';
    assert.ok(snapshots.observed(web, watchesOf), 'carried again once all have reached it');
    for (const w of Object.values(watches)) (w as { resourceVersion: string }).resourceVersion = '120';
    assert.ok(snapshots.observed(web, watchesOf), 'the fence, once passed, is forgotten');
  });

  test("a child is a child only in its owner's namespace: one forged in another namespace, with a controller reference to the primary, is neither carried nor vouched for", () => {
    const { snapshots, watches, watchesOf } = setUp();
    const forged: KubeObject = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'site-page', namespace: 'attacker', uid: 'evil', resourceVersion: '103', ownerReferences: owner('w1') }, data: { page: 'forged' } };
    watches.cm.store.set('attacker/site-page', forged);
    snapshots.onEvent(ConfigMap, { type: 'apply', object: forged, key: 'attacker/site-page' });
    snapshots.noteAnswer('ns/site', { result: 'done', changes: [], children: [{ ref: { ...ConfigMap, namespace: 'attacker', name: 'site-page', resourceVersion: '103' }, hash: 'h' }] }, 0);
    const observed = snapshots.observed(web, watchesOf)!;
    assert.deepEqual(observed.children.filter((c) => c.kind === 'ConfigMap').map((c) => `${c.metadata.namespace}/${c.metadata.uid}`), ['ns/c1']);
    assert.equal(observed.applied, undefined, 'nothing vouched for in another namespace');
  });

  test('a child another object controls is not carried; nor a kind whose watch has not listed yet', () => {
    const { snapshots, watches, watchesOf } = setUp(deployment('101', 1, 'someone-else'));
    (watches.cm as unknown as { hasSynced: boolean }).hasSynced = false;
    const observed = snapshots.observed(web, watchesOf)!;
    assert.deepEqual(observed.kinds.map((k) => k.kind), ['Deployment']);
    assert.deepEqual(observed.children, []);
  });

  test('a child is vouched as applied while its resourceVersion or, for a kind with one, its generation is unchanged', () => {
    const { snapshots, watches, watchesOf } = setUp();
    snapshots.noteAnswer('ns/site', { result: 'done', changes: [], children: [{ ref: { ...Deployment, namespace: 'ns', name: 'site', resourceVersion: '101', generation: 1 }, hash: 'h1' }, { ref: { ...ConfigMap, namespace: 'ns', name: 'site-page', resourceVersion: '102' }, hash: 'h2' }] }, 0);
    assert.deepEqual(snapshots.observed(web, watchesOf)!.applied, { 'apps/Deployment/ns/site': 'h1', '/ConfigMap/ns/site-page': 'h2' });
    // The deployment controller writes its status: a new resourceVersion, the same generation.
    watches.dep.store.set('ns/site', deployment('105', 1));
    // Someone edits the ConfigMap: it has no generation, so a new resourceVersion is a change.
    watches.cm.store.set('ns/site-page', { ...page, metadata: { ...page.metadata, resourceVersion: '106' } });
    assert.deepEqual(snapshots.observed(web, watchesOf)!.applied, { 'apps/Deployment/ns/site': 'h1' });
    // Someone edits the Deployment's spec: a new generation.
    watches.dep.store.set('ns/site', deployment('107', 2));
    assert.equal(snapshots.observed(web, watchesOf)!.applied, undefined);
  });
});

describe('read-your-writes', () => {
  test('a key waits until the watches have reached the versions its last reconcile wrote', () => {
    const { snapshots, watches, watchesOf } = setUp();
    snapshots.noteAnswer('ns/site', { result: 'done', changes: [{ action: 'applied', ref: { ...Deployment, namespace: 'ns', name: 'site', resourceVersion: '110' } }, { action: 'status', ref: { ...Web, namespace: 'ns', name: 'site', resourceVersion: '111' } }] }, 0);
    assert.deepEqual(snapshots.readiness('ns/site', watchesOf, 5), { kind: 'wait', first: true, since: 0 });
    assert.deepEqual(snapshots.readiness('ns/site', watchesOf, 6), { kind: 'wait', first: false, since: 0 }, 'counted once');
    (watches.dep as unknown as { resourceVersion: string }).resourceVersion = '110';
    assert.equal(snapshots.readiness('ns/site', watchesOf, 7).kind, 'wait', 'the status write is not seen yet');
    // The primary's watch holds a newer object (its version past the write) though its own position lags.
    watches.web.store.set('ns/site', { ...web, metadata: { ...web.metadata, resourceVersion: '111' } });
    assert.deepEqual(snapshots.readiness('ns/site', watchesOf, 8), { kind: 'ready' });
    assert.deepEqual(snapshots.readiness('ns/site', watchesOf, 9), { kind: 'ready' }, 'and stays so');
  });

  test('a pruned child: until its watch no longer holds it; a stale snapshot: until a newer version is held', () => {
    const { snapshots, watches, watchesOf } = setUp();
    snapshots.noteAnswer('ns/site', { result: 'requeue', changes: [{ action: 'pruned', ref: { ...ConfigMap, namespace: 'ns', name: 'site-page', uid: 'c1' } }], stale: [{ ...Web, namespace: 'ns', name: 'site', resourceVersion: '100' }] }, 0);
    assert.equal(snapshots.readiness('ns/site', watchesOf, 1).kind, 'wait');
    watches.cm.store.delete('ns/site-page');
    assert.equal(snapshots.readiness('ns/site', watchesOf, 2).kind, 'wait', 'the primary is still the stale version');
    watches.web.store.set('ns/site', { ...web, metadata: { ...web.metadata, resourceVersion: '120' } });
    assert.equal(snapshots.readiness('ns/site', watchesOf, 3).kind, 'ready');
  });

  test('a watch that lags too long: the delivery goes without that kind, and without the primary when it is the primary\'s', () => {
    const { snapshots, watchesOf } = setUp();
    snapshots.noteAnswer('ns/site', { result: 'done', changes: [{ action: 'applied', ref: { ...Deployment, namespace: 'ns', name: 'site', resourceVersion: '130' } }] }, 0);
    assert.equal(snapshots.readiness('ns/site', watchesOf, maxSnapshotWaitMs - 1).kind, 'wait');
    const late = snapshots.readiness('ns/site', watchesOf, maxSnapshotWaitMs);
    assert.equal(late.kind, 'lagging');
    const lagging = late.kind === 'lagging' ? late.kinds : new Set<string>();
    assert.deepEqual([...lagging], ['apps/Deployment']);
    assert.deepEqual(snapshots.observed(web, watchesOf, lagging)!.kinds.map((k) => k.kind), ['ConfigMap'], 'the function lists Deployments itself');
    assert.equal(snapshots.observed(web, watchesOf, new Set(['example.com/Web'])), undefined, 'a lagging primary: no snapshot at all');
  });

  test('resourceVersions compare as Kubernetes 1.35 defines them; others only for equality', () => {
    assert.ok(compareResourceVersions('99', '100')! < 0);
    assert.ok(compareResourceVersions('100', '99')! > 0);
    assert.equal(compareResourceVersions('42', '42'), 0);
    assert.equal(compareResourceVersions('abc', 'abd'), undefined);
    assert.equal(compareResourceVersions('abc', 'abc'), 0);
  });
});

describe('bookkeeping of children the bridge never saw go', () => {
  test('a baseline of a child no watch holds is released after unseenBaselineMs; one a watch holds is kept', () => {
    const { snapshots, watches, watchesOf } = setUp();
    const ref = (name: string, uid: string) => ({ ...Deployment, namespace: 'ns', name, uid, resourceVersion: '103', generation: 1 });
    snapshots.noteAnswer('ns/site', { result: 'done', changes: [], children: [{ ref: ref('site', 'd1'), hash: 'h1' }, { ref: ref('gone-before-seen', 'd9'), hash: 'h9' }] }, 0);
    assert.equal(snapshots.held().baselines, 2);
    assert.deepEqual(snapshots.sweep(watchesOf, unseenBaselineMs - 1), { baselines: 0, children: 0 }, 'a child just applied may not be seen yet');
    (watches.dep as { failing: boolean }).failing = true;
    assert.deepEqual(snapshots.sweep(watchesOf, unseenBaselineMs), { baselines: 0, children: 0 }, 'a failing watch proves nothing gone');
    (watches.dep as { failing: boolean }).failing = false;
    assert.deepEqual(snapshots.sweep(watchesOf, unseenBaselineMs), { baselines: 1, children: 0 });
    assert.equal(snapshots.held().baselines, 1, 'the held child keeps its baseline');
  });

  test('an owner-index entry of a child no watch holds (its deletion never seen as one) is released', () => {
    const { snapshots, watches, watchesOf } = setUp();
    assert.equal(snapshots.held().children, 2);
    watches.dep.store.delete('ns/site');
    assert.deepEqual(snapshots.sweep(watchesOf, 1), { baselines: 0, children: 1 });
    assert.equal(snapshots.held().children, 1);
    assert.deepEqual(snapshots.observed(web, watchesOf)!.children.map((c) => c.kind), ['ConfigMap']);
  });
});
