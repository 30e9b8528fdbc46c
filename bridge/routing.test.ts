import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseReconciler, type ReconcilerConfig } from './config.ts';
import type { KubeObject } from '../kube/api.ts';
import { needs, primaryChanged, ReferenceIndex, route, SelectorIndex, selectorMatches } from './routing.ts';
import { changeDigest, recordOf } from './records.ts';
import { ownerUidLabel } from '../core/names.ts';

const config: ReconcilerConfig = parseReconciler({
  apiVersion: 'kfn.dev/v1alpha1',
  kind: 'Reconciler',
  metadata: { name: 'myweb' },
  spec: {
    for: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' },
    owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }, { apiVersion: 'apps/v1', kind: 'Deployment' }],
    watches: [
      { apiVersion: 'v1', kind: 'Secret', mapping: { label: 'myweb.example/name' } },
      { apiVersion: 'v1', kind: 'Pod', mapping: { selectorField: 'spec.selector' } },
      { apiVersion: 'cert.example.com/v1', kind: 'Issuer', mapping: { referenceField: 'spec.issuerRef.name' } },
      { apiVersion: 'v1', kind: 'ConfigMap', mapping: { referenceField: 'spec.pages.configMap' } },
    ],
    sink: { uri: 'http://127.0.0.1:8080/' },
  },
});

function obj(kind: string, apiVersion: string, name: string, meta: Partial<KubeObject['metadata']> = {}, rest: Record<string, unknown> = {}): KubeObject {
  return { apiVersion, kind, metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: '1', ...meta }, ...rest };
}
const web = (name: string, meta: Partial<KubeObject['metadata']> = {}, rest: Record<string, unknown> = {}) => obj('MyWeb', 'operator.k8s-summit.org/v1', name, meta, rest);
const kinds = {
  web: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' },
  cm: { apiVersion: 'v1', kind: 'ConfigMap' },
  secret: { apiVersion: 'v1', kind: 'Secret' },
  pod: { apiVersion: 'v1', kind: 'Pod' },
  issuer: { apiVersion: 'cert.example.com/v1', kind: 'Issuer' },
};
const live = { initial: false, primaryNamespaced: true };

describe('route: the primary', () => {
  test('create, delete, and updates that change what a reconcile reads', () => {
    assert.deepEqual(route(config, kinds.web, { type: 'apply', object: web('a') }, live), [{ key: 'ns/a', reason: 'created', priority: 'high' }]);
    assert.deepEqual(route(config, kinds.web, { type: 'apply', object: web('a'), old: web('a') }, { initial: true, primaryNamespaced: true }), []);
    assert.deepEqual(route(config, kinds.web, { type: 'delete', object: web('a'), inferred: true }, live), [{ key: 'ns/a', reason: 'deleted', priority: 'high' }]);
    const spec = route(config, kinds.web, { type: 'apply', object: web('a', { generation: 2, resourceVersion: '2' }), old: web('a', { generation: 1 }) }, live);
    assert.deepEqual(spec, [{ key: 'ns/a', reason: 'updated', priority: 'high' }]);
  });

  test('the initial list is low-priority work', () => {
    assert.deepEqual(route(config, kinds.web, { type: 'apply', object: web('a') }, { initial: true, primaryNamespaced: true }), [{ key: 'ns/a', reason: 'created', priority: 'low' }]);
  });

  test('status-only updates do not trigger; labels, annotations, finalizers and deletion do', () => {
    const base = web('a', { generation: 3 }, { status: { ready: false } });
    const statusOnly = web('a', { generation: 3, resourceVersion: '9' }, { status: { ready: true } });
    assert.equal(primaryChanged(base, statusOnly), false);
    assert.deepEqual(route(config, kinds.web, { type: 'apply', object: statusOnly, old: base }, live), []);
    for (const meta of [{ labels: { a: 'b' } }, { annotations: { a: 'b' } }, { finalizers: ['f'] }, { deletionTimestamp: '2026-01-01T00:00:00Z' }]) {
      assert.equal(primaryChanged(base, web('a', { generation: 3, ...meta })), true, JSON.stringify(meta));
    }
  });

  test('the same verdicts against the compact record a metadata watch keeps (no annotations or finalizers in it)', () => {
    const base = web('a', { generation: 3, labels: { tier: 'web' }, annotations: { note: 'x'.repeat(500) }, finalizers: ['f'] }, { status: { ready: false } });
    const kept = recordOf(base, kinds.web);
    assert.equal(kept.metadata.annotations, undefined, 'annotations are not kept');
    assert.equal(kept.metadata.finalizers, undefined, 'finalizers are not kept');
    assert.deepEqual(kept.metadata.labels, { tier: 'web' }, 'labels are: mappings read them');
    const same = { labels: { tier: 'web' }, annotations: { note: 'x'.repeat(500) }, finalizers: ['f'] };
    assert.equal(primaryChanged(kept, web('a', { generation: 3, resourceVersion: '9', ...same }, { status: { ready: true } })), false, 'a status-only write');
    for (const meta of [{ labels: { tier: 'db' } }, { annotations: { note: 'y' } }, { finalizers: [] }, { deletionTimestamp: '2026-01-01T00:00:00Z' }, { generation: 4 }]) {
      assert.equal(primaryChanged(kept, web('a', { generation: 3, ...same, ...meta })), true, JSON.stringify(meta));
    }
    assert.equal(route(config, kinds.web, { type: 'apply', object: web('a', { generation: 3, ...same, annotations: { note: 'y' } }), old: kept }, live)[0]?.reason, 'updated');
  });

  test("a compact record's digest of labels, annotations and finalizers is the object's, all 48 bits of it", () => {
    for (let i = 0; i < 200; i++) {
      const o = web('a', { labels: { n: String(i) }, ...(i % 2 ? { annotations: { note: 'x'.repeat(i) } } : {}), ...(i % 3 ? {} : { finalizers: [`f${i}`] }) });
      assert.equal(changeDigest(recordOf(o, kinds.web)), changeDigest(o), JSON.stringify(o.metadata));
    }
    assert.equal(changeDigest(recordOf(web('bare'), kinds.web)), 0, 'nothing to digest');
  });

  test('a compact record keeps what routing reads of a child: its controller owner, not the other references', () => {
    const owners = [
      { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', name: 'site', uid: 'u1', controller: true },
      { apiVersion: 'v1', kind: 'ConfigMap', name: 'other', uid: 'u2' },
    ];
    const child = recordOf(obj('ConfigMap', 'v1', 'site-page', { ownerReferences: owners, creationTimestamp: '2026-01-01T00:00:00Z' }), kinds.cm);
    assert.deepEqual(child.metadata.ownerReferences, [owners[0]]);
    assert.equal(child.metadata.creationTimestamp, undefined);
    assert.deepEqual(route(config, kinds.cm, { type: 'delete', object: child, inferred: true }, live).map((e) => [e.key, e.reason]), [['ns/site', 'child']]);
    // A child kfn made names its owner in a label too (one string kept for both): both stay as they were.
    const labelled = recordOf(obj('ConfigMap', 'v1', 'site-page', { ownerReferences: owners, labels: { [ownerUidLabel]: 'u1', other: 'u1' } }), kinds.cm);
    assert.deepEqual(labelled.metadata.ownerReferences, [owners[0]]);
    assert.deepEqual(labelled.metadata.labels, { [ownerUidLabel]: 'u1', other: 'u1' });
    const otherOwner = recordOf(obj('ConfigMap', 'v1', 'site-page', { ownerReferences: owners, labels: { [ownerUidLabel]: 'u9' } }), kinds.cm);
    assert.equal(otherOwner.metadata.ownerReferences?.[0]?.uid, 'u1', "the owner reference's uid, not a label's that names another");
  });
});

describe('route: owned children', () => {
  const owner = (name: string, kind = 'MyWeb', apiVersion = 'operator.k8s-summit.org/v1', controller = true) => ({ apiVersion, kind, name, uid: `uid-${name}`, controller });

  test('a child enqueues its controller owner, with the child as trigger', () => {
    const child = obj('ConfigMap', 'v1', 'page', { ownerReferences: [owner('site')] });
    const got = route(config, kinds.cm, { type: 'apply', object: child }, live);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.key, 'ns/site');
    assert.equal(got[0]!.reason, 'child');
    assert.equal(got[0]!.trigger?.name, 'page');
  });

  test('a change of owner enqueues the old and the new owner', () => {
    const before = obj('ConfigMap', 'v1', 'page', { ownerReferences: [owner('old')] });
    const after = obj('ConfigMap', 'v1', 'page', { ownerReferences: [owner('new')], resourceVersion: '2' });
    assert.deepEqual(route(config, kinds.cm, { type: 'apply', object: after, old: before }, live).map((e) => e.key).sort(), ['ns/new', 'ns/old']);
  });

  test('non-controller owners and owners of other kinds are ignored; deletes of children count', () => {
    const child = obj('ConfigMap', 'v1', 'page', { ownerReferences: [owner('x', 'MyWeb', 'operator.k8s-summit.org/v1', false), owner('y', 'Other', 'other.io/v1')] });
    assert.deepEqual(route(config, kinds.cm, { type: 'apply', object: child }, live), []);
    const owned = obj('ConfigMap', 'v1', 'page', { ownerReferences: [owner('site', 'MyWeb', 'operator.k8s-summit.org/v2')] });
    assert.equal(route(config, kinds.cm, { type: 'delete', object: owned, inferred: false }, live)[0]?.key, 'ns/site', 'any version of the owner group counts');
  });
});

describe('route: a cluster-scoped primary', () => {
  const nsConfig = parseReconciler({
    apiVersion: 'kfn.dev/v1alpha1',
    kind: 'Reconciler',
    metadata: { name: 'ns-setup' },
    spec: {
      for: { apiVersion: 'v1', kind: 'Namespace' },
      owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
      watches: [{ apiVersion: 'v1', kind: 'Secret', mapping: { label: 'setup/namespace' } }],
      namespaces: ['team-a'],
      sink: { uri: 'http://127.0.0.1:8080/' },
    },
  });
  const clusterScoped = { initial: false, primaryNamespaced: false };
  const namespace = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team-a', uid: 'uid-team-a', resourceVersion: '1' } };

  test('its own events and its namespaced children map to the same key: the name alone', () => {
    assert.deepEqual(route(nsConfig, { apiVersion: 'v1', kind: 'Namespace' }, { type: 'apply', object: namespace }, clusterScoped).map((e) => e.key), ['team-a']);
    const child = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'defaults', namespace: 'team-a', uid: 'u', resourceVersion: '1', ownerReferences: [{ apiVersion: 'v1', kind: 'Namespace', name: 'team-a', uid: 'uid-team-a', controller: true }] } };
    assert.deepEqual(route(nsConfig, kinds.cm, { type: 'apply', object: child }, clusterScoped).map((e) => [e.key, e.reason]), [['team-a', 'child']]);
    const secret = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'elsewhere', uid: 'u2', resourceVersion: '1', labels: { 'setup/namespace': 'team-a' } } };
    assert.deepEqual(route(nsConfig, kinds.secret, { type: 'apply', object: secret }, clusterScoped).map((e) => [e.key, e.reason]), [['team-a', 'mapped']]);
  });
});

describe('route: watched kinds', () => {
  test('label mapping: the label names the primary', () => {
    const s = obj('Secret', 'v1', 'creds', { labels: { 'myweb.example/name': 'site' } });
    assert.deepEqual(route(config, kinds.secret, { type: 'apply', object: s }, live).map((e) => [e.key, e.reason]), [['ns/site', 'mapped']]);
  });

  test('selector mapping: every primary whose selector matches the object (before or after)', () => {
    const primaries = [
      web('tool-a', {}, { spec: { selector: { matchLabels: { app: 'x' } } } }),
      web('tool-b', {}, { spec: { selector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['y'] }] } } }),
      web('tool-c', { namespace: 'other' }, { spec: { selector: {} } }),
      web('tool-d', {}, {}),
    ];
    const pod = obj('Pod', 'v1', 'p', { labels: { app: 'x' } });
    const index = new SelectorIndex('spec.selector');
    for (const p of primaries) index.set(`${p.metadata.namespace}/${p.metadata.name}`, p);
    const ctx = { initial: false, selectors: (field: string) => (field === 'spec.selector' ? index : undefined), primaryNamespaced: true };
    assert.deepEqual(route(config, kinds.pod, { type: 'apply', object: pod }, ctx).map((e) => e.key), ['ns/tool-a']);
    const relabelled = obj('Pod', 'v1', 'p', { labels: { app: 'y' }, resourceVersion: '2' });
    assert.deepEqual(route(config, kinds.pod, { type: 'apply', object: relabelled, old: pod }, ctx).map((e) => e.key).sort(), ['ns/tool-a', 'ns/tool-b']);
  });

  test('the selector index looks at the few selectors that can match, and agrees with checking every one', () => {
    const index = new SelectorIndex('spec.selector');
    const primaries: KubeObject[] = [];
    for (let i = 0; i < 10_000; i++) {
      const selector = i % 1000 === 0 ? { matchExpressions: [{ key: 'app', operator: 'In', values: [`app-${i}`] }] } : i % 1000 === 1 ? {} : { matchLabels: { app: `app-${i}`, tier: i % 2 ? 'web' : 'db' } };
      const p = web(`p${i}`, {}, { spec: { selector } });
      primaries.push(p);
      index.set(`ns/p${i}`, p);
    }
    for (const labels of [{ app: 'app-42', tier: 'db' }, { app: 'app-43', tier: 'db' }, { app: 'app-2000' }, { other: 'x' }, {}] as Record<string, string>[]) {
      const expected = primaries.filter((p) => selectorMatches((p.spec as { selector: unknown }).selector, labels)).map((p) => `ns/${p.metadata.name}`).sort();
      assert.deepEqual(index.matching(labels, 'ns').sort(), expected, JSON.stringify(labels));
      assert.ok(index.lastChecked <= 25, `${index.lastChecked} of 10,000 selectors checked for ${JSON.stringify(labels)}`);
    }
    assert.deepEqual(index.matching({ app: 'app-42', tier: 'db' }, 'elsewhere'), [], 'another namespace');
    index.set('ns/p42', web('p42', {}, { spec: { selector: { matchLabels: { app: 'moved' } } } }));
    assert.deepEqual(index.matching({ app: 'app-42', tier: 'db' }, 'ns').includes('ns/p42'), false, 'a changed selector is re-filed');
    index.delete('ns/p43');
    assert.equal(index.matching({ app: 'app-43', tier: 'web' }, 'ns').includes('ns/p43'), false);
    assert.equal(index.size, 9_999);
  });

  test('selectorMatches follows Kubernetes semantics', () => {
    assert.equal(selectorMatches({}, { a: 'b' }), true, 'empty selector matches everything');
    assert.equal(selectorMatches(undefined, { a: 'b' }), false, 'no selector matches nothing');
    assert.equal(selectorMatches({ a: 'b' }, { a: 'b', c: 'd' }), true, 'plain map is matchLabels');
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['b'] }] }, { a: 'b' }), false);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'Exists' }] }, {}), false);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'DoesNotExist' }] }, {}), true);
    assert.equal(selectorMatches({ matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] }, { a: '2' }), false);
  });

  test('a namespace list limits which primaries are enqueued', () => {
    const limited = { ...config, namespaces: ['team-a'] };
    assert.deepEqual(route(limited, kinds.web, { type: 'apply', object: web('a') }, live), []);
    assert.equal(route(limited, kinds.web, { type: 'apply', object: web('a', { namespace: 'team-a' }) }, live).length, 1);
  });
});

describe('route: watched objects named by a field of the primary (referenceField)', () => {
  const issuer = (name: string, namespace?: string) => obj('Issuer', 'cert.example.com/v1', name, namespace === undefined ? {} : { namespace });
  const indexOf = (field: string, primaries: KubeObject[]) => {
    const index = new ReferenceIndex(field);
    for (const p of primaries) index.set(`${p.metadata.namespace}/${p.metadata.name}`, p);
    return index;
  };

  test('a watched object enqueues the primaries whose field names it, in its namespace, with it as trigger', () => {
    const index = indexOf('spec.issuerRef.name', [
      web('a', {}, { spec: { issuerRef: { name: 'ca' } } }),
      web('b', {}, { spec: { issuerRef: { name: 'ca' } } }),
      web('c', {}, { spec: { issuerRef: { name: 'other' } } }),
      web('d', { namespace: 'elsewhere' }, { spec: { issuerRef: { name: 'ca' } } }),
      web('e', {}, { spec: {} }),
    ]);
    const ctx = { ...live, references: (field: string) => (field === 'spec.issuerRef.name' ? index : undefined) };
    const got = route(config, kinds.issuer, { type: 'apply', object: issuer('ca') }, ctx);
    assert.deepEqual(got.map((e) => e.key).sort(), ['ns/a', 'ns/b']);
    assert.ok(got.every((e) => e.reason === 'mapped' && e.trigger?.kind === 'Issuer' && e.trigger.name === 'ca'));
    assert.deepEqual(route(config, kinds.issuer, { type: 'delete', object: issuer('ca'), inferred: false }, ctx).map((e) => e.key).sort(), ['ns/a', 'ns/b'], 'a delete counts');
    assert.deepEqual(route(config, kinds.issuer, { type: 'apply', object: issuer('nobody') }, ctx), []);
  });

  test('a cluster-scoped watched object enqueues the primaries naming it in every namespace', () => {
    const index = indexOf('spec.issuerRef.name', [web('a', {}, { spec: { issuerRef: { name: 'ca' } } }), web('d', { namespace: 'elsewhere' }, { spec: { issuerRef: { name: 'ca' } } })]);
    assert.deepEqual(index.naming('ca', undefined).sort(), ['elsewhere/d', 'ns/a']);
    assert.deepEqual(index.naming('ca', 'ns'), ['ns/a']);
  });

  test('a path through a list names every item; a changed or deleted primary is re-filed', () => {
    const index = indexOf('spec.pages.configMap', [web('site', {}, { spec: { pages: [{ configMap: 'home' }, { configMap: 'about' }, { other: 1 }] } })]);
    assert.deepEqual(index.naming('home', 'ns'), ['ns/site']);
    assert.deepEqual(index.naming('about', 'ns'), ['ns/site']);
    index.set('ns/site', web('site', {}, { spec: { pages: [{ configMap: 'home' }] } }));
    assert.deepEqual(index.naming('about', 'ns'), [], 'no longer named');
    assert.deepEqual(index.naming('home', 'ns'), ['ns/site']);
    index.delete('ns/site');
    assert.deepEqual(index.naming('home', 'ns'), []);
    assert.equal(index.size, 0);
  });

  test('the index finds the primaries naming an object without looking at the others', () => {
    const index = new ReferenceIndex('spec.issuerRef.name');
    for (let i = 0; i < 10_000; i++) index.set(`ns/p${i}`, web(`p${i}`, {}, { spec: { issuerRef: { name: `ca-${i % 100}` } } }));
    assert.equal(index.naming('ca-7', 'ns').length, 100);
    assert.equal(index.lastChecked, 100, 'only the primaries filed under that name are looked at');
  });
});


describe('needs: what a sharded replica keeps records of', () => {
  const sharded = parseReconciler({
    metadata: { name: 'myweb' },
    spec: {
      for: kinds.web,
      owns: [kinds.cm],
      watches: [
        { ...kinds.secret, mapping: { label: 'myweb.example/name' } },
        { ...kinds.pod, mapping: { selectorField: 'spec.selector' } },
      ],
      namespaces: ['ns', 'other'],
      sink: { uri: 'http://127.0.0.1:8080/' },
    },
  });
  // This replica keeps the records of the primary ns/kept alone.
  const keeps = (key: string) => key === 'ns/kept' || key === 'elsewhere/kept';
  const owned = (owner: string) => ({ ownerReferences: [{ ...kinds.web, name: owner, uid: `uid-${owner}`, controller: true }] });

  test('a primary is kept when its key is, and only in the namespaces the Reconciler serves', () => {
    assert.equal(needs(sharded, kinds.web, web('kept'), keeps, true), true);
    assert.equal(needs(sharded, kinds.web, web('other'), keeps, true), false);
    assert.equal(needs(sharded, kinds.web, web('kept', { namespace: 'elsewhere' }), keeps, true), false, 'a namespace it does not serve');
  });

  test('a child is kept when its controller owner is; a reference that is not the controller does not count', () => {
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'page', owned('kept')), keeps, true), true);
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'page', owned('other')), keeps, true), false);
    const notController = { ownerReferences: [{ ...kinds.web, name: 'kept', uid: 'uid-kept' }] };
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'page', notController), keeps, true), false);
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'loose'), keeps, true), false, 'no owner at all');
  });

  test('a label-mapped object is kept when its label names a kept primary; a selector-mapped one always', () => {
    assert.equal(needs(sharded, kinds.secret, obj('Secret', 'v1', 's', { labels: { 'myweb.example/name': 'kept' } }), keeps, true), true);
    assert.equal(needs(sharded, kinds.secret, obj('Secret', 'v1', 's', { labels: { 'myweb.example/name': 'other' } }), keeps, true), false);
    assert.equal(needs(sharded, kinds.pod, obj('Pod', 'v1', 'p'), keeps, true), true, 'which primaries select it depends on theirs, not on it');
  });

  test('a child of a cluster-scoped primary names it by name alone', () => {
    const byName = (key: string) => key === 'kept';
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'page', owned('kept')), byName, false), true);
    assert.equal(needs(sharded, kinds.cm, obj('ConfigMap', 'v1', 'page', owned('kept')), byName, true), false);
  });
});
