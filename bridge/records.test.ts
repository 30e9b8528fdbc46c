import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { redact } from '../core/journal.ts';
import { ownerUidLabel } from '../core/names.ts';
import type { KubeObject } from '../kube/api.ts';
import { keptKey, Projection } from './records.ts';

const owner = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', name: 'site', uid: 'u-site', controller: true, blockOwnerDeletion: true };

/** An object as a watch line brings it: parsed from JSON, without apiVersion and kind when listed. */
function listed(i: number, child: boolean): KubeObject {
  const ownerUid = randomUUID();
  const metadata = child
    ? { labels: { [ownerUidLabel]: ownerUid }, ownerReferences: [{ ...owner, name: `web-${i}`, uid: ownerUid }] }
    : { generation: 1, labels: { tier: 'web' } };
  return JSON.parse(JSON.stringify({ metadata: { name: `web-${i}`, namespace: 'scale', uid: randomUUID(), resourceVersion: String(100_000 + i), creationTimestamp: '2026-01-01T00:00:00Z', annotations: { note: 'x' }, ...metadata }, data: { page: '<h1>hi</h1>' } }));
}

test('a compact record reads as the object it keeps of, and JSON and the journal see it nested as the apiserver sends it', () => {
  const projection = new Projection({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', undefined);
  const obj = projection.normalise(listed(7, true));
  const record = projection.kept(obj, 'scale/web-7');
  const m = obj.metadata;
  const nested = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'web-7', namespace: 'scale', uid: m.uid, resourceVersion: '100007', labels: m.labels, ownerReferences: [{ apiVersion: owner.apiVersion, kind: owner.kind, name: 'web-7', uid: m.labels![ownerUidLabel], controller: true }] },
  };
  assert.equal(record.apiVersion, 'v1');
  assert.equal(record.kind, 'ConfigMap');
  assert.equal(record.metadata.name, 'web-7', 'the name, cut from the key');
  assert.equal(record.metadata.namespace, 'scale');
  assert.deepEqual(record.metadata.ownerReferences, nested.metadata.ownerReferences);
  assert.equal(record.metadata.annotations, undefined, 'annotations are not kept');
  assert.equal(record.data, undefined, 'nor the data');
  assert.equal(keptKey(record), 'scale/web-7');
  assert.deepEqual(JSON.parse(JSON.stringify(record)), nested, 'JSON (an event, a snapshot) carries the nested form');
  assert.deepEqual(JSON.parse(JSON.stringify(redact(record))), nested, 'so does a journal entry');
  const cluster = new Projection({ apiVersion: 'v1', kind: 'Namespace' }, 'metadata', undefined);
  assert.equal(cluster.kept(cluster.normalise({ metadata: { name: 'scale', uid: 'u' } }), 'scale').metadata.name, 'scale', "a cluster-scoped object's name is its key");
});

test("a record gives back the resourceVersion it was given, exactly, whether it keeps it as a number or as the text", () => {
  const projection = new Projection({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', undefined);
  for (const resourceVersion of ['1', '123456789', '1234567890', '99999999999999999999', '007', '0', '12a', '', ' 5', '5.0', '1e3']) {
    const kept = projection.kept(projection.normalise({ metadata: { name: 'a', namespace: 'ns', resourceVersion } }), 'ns/a');
    assert.equal(kept.metadata.resourceVersion, resourceVersion);
    assert.equal(JSON.parse(JSON.stringify(kept)).metadata.resourceVersion, resourceVersion);
  }
  assert.equal(projection.kept(projection.normalise({ metadata: { name: 'a', namespace: 'ns' } }), 'ns/a').metadata.resourceVersion, undefined);
});

test("one watch's records never mix up two kinds, whatever their names hold: an owner kind with a dot is not another kind's", () => {
  const projection = new Projection({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', undefined);
  const ownedBy = (name: string, ref: { apiVersion: string; kind: string }) => projection.kept(projection.normalise({ metadata: { name, namespace: 'ns', ownerReferences: [{ ...ref, name: 'site', uid: `u-${name}`, controller: true }] } }), `ns/${name}`);
  const forged = ownedBy('forged', { apiVersion: 'k8s-summit.org/v1', kind: 'MyWeb.operator' });
  const real = ownedBy('real', { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' });
  assert.deepEqual(forged.metadata.ownerReferences?.map((r) => [r.apiVersion, r.kind]), [['k8s-summit.org/v1', 'MyWeb.operator']]);
  assert.deepEqual(real.metadata.ownerReferences?.map((r) => [r.apiVersion, r.kind]), [['operator.k8s-summit.org/v1', 'MyWeb']]);
});

test("what a record keeps for itself is no field of the object: spread, keys and JSON see none of it, and a Secret's type is not a kind", () => {
  const projection = new Projection({ apiVersion: 'v1', kind: 'Secret' }, 'metadata', undefined);
  const kept = projection.kept(projection.normalise(listed(1, true)), 'scale/web-1');
  assert.equal(kept.type, undefined);
  assert.deepEqual(Object.keys(kept).sort(), ['deletionTimestamp', 'generation', 'labels', 'namespace', 'uid']);
  assert.deepEqual(Object.keys(JSON.parse(JSON.stringify(kept))).sort(), ['apiVersion', 'kind', 'metadata']);
});

test('a watch keeping some fields keeps them beside the record, nested', () => {
  const projection = new Projection({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', ['data', 'metadata.annotations']);
  const obj = projection.normalise(listed(3, false));
  const kept = projection.kept(obj, 'scale/web-3');
  assert.deepEqual(kept.data, { page: '<h1>hi</h1>' });
  assert.deepEqual(kept.metadata.annotations, { note: 'x' });
  assert.equal(kept.metadata.name, 'web-3');
  assert.equal(keptKey(kept), 'scale/web-3');
});

test('a compact record costs a primary at most 320 bytes of heap and a child at most 400, its strings and store entry counted (nested, 385 and 557; flat with the resourceVersion as a string, 304–325 and 404)', () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const n = 20_000;
  const perRecord = (child: boolean) => {
    const projection = new Projection({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', undefined);
    const store = new Map<string, KubeObject>();
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < n; i++) {
      const obj = projection.normalise(listed(i, child));
      const key = ['scale', obj.metadata.name].join('/');
      store.set(key, projection.kept(obj, key));
    }
    gc();
    const bytes = (process.memoryUsage().heapUsed - before) / n;
    assert.equal(store.size, n);
    return bytes;
  };
  const primary = perRecord(false);
  const child = perRecord(true);
  assert.ok(primary <= 320, `${primary.toFixed(0)} bytes a primary`);
  assert.ok(child <= 400, `${child.toFixed(0)} bytes a child`);
});
