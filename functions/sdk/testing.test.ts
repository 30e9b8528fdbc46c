// The in-memory test harness itself: the runtime's whole path — finalizer, children, prune,
// reads of other objects, Events, errors, finalize on deletion — with no cluster.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigMap, Deployment, Namespace, Secret, child, Terminal, defineKind, defineReconciler, quantity, t, type Reconciler } from './index.ts';
import { checkSamples, labelSelectorMatches, memoryApi, testReconcile } from './testing.ts';
import { writesOf } from './runtime.ts';

const Gizmo = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Gizmo', spec: t.Object({ parts: t.Integer(), fail: t.Optional(t.Boolean()) }), status: t.Object({ built: t.Optional(t.Integer()), secretKeys: t.Optional(t.Integer()) }) });
const finalized: string[] = [];
const gizmos = defineReconciler({
  for: Gizmo,
  owns: [ConfigMap],
  uses: [{ kind: Secret, verbs: ['get', 'list'] }],
  async reconcile(g, ctx) {
    if (g.spec.fail) throw new Error('the gizmo refuses');
    if (g.spec.parts > 10) throw new Terminal('spec.parts: at most 10 parts', { reason: 'TooManyParts' });
    const secrets = await ctx.list(Secret, { namespace: g.metadata.namespace, labelSelector: 'gizmo in (yes),!ignored' });
    const parts = Array.from({ length: g.spec.parts }, (_, i) => child(ConfigMap, { metadata: { name: `${g.metadata.name}-part-${i}` }, data: { index: String(i) } }));
    await ctx.event('Normal', 'Built', `${g.spec.parts} parts`);
    return { children: parts, status: { built: g.spec.parts, secretKeys: secrets.length } };
  },
  finalize(g) {
    finalized.push(g.metadata.name);
  },
}) as unknown as Reconciler;

const gizmo = (parts: number, extra: Record<string, unknown> = {}) => ({ metadata: { name: 'g', namespace: 'shop', ...extra }, spec: { parts } });

describe('testReconcile', () => {
  test('children are applied at once, cluster-scoped ones first: one child\'s failure does not keep the others from being sent', async () => {
    const Site = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Site', scope: 'Cluster', spec: t.Object({}), status: t.Object({}) });
    const sites = defineReconciler({
      for: Site,
      owns: [ConfigMap, Namespace],
      reconcile: () => ({
        children: [
          child(ConfigMap, { metadata: { name: 'a', namespace: 'site-home' }, data: {} }),
          child(ConfigMap, { metadata: { name: 'b', namespace: 'site-home' }, data: {} }),
          child(Namespace, { metadata: { name: 'site-home' } }),
        ],
        status: {},
      }),
    });
    const tried: string[] = [];
    const out = await testReconcile(sites, {
      object: { metadata: { name: 's' }, spec: {} },
      refuse: (w) => {
        if (w.method !== 'PATCH' || (!w.path.includes('/configmaps/') && !w.path.includes('/namespaces/site-home'))) return undefined;
        tried.push(w.path.split('/').at(-1)!);
        return w.path.endsWith('/configmaps/a') ? { status: 500, message: 'etcd is slow' } : undefined;
      },
    });
    assert.equal(tried[0], 'site-home', 'the Namespace first, though the function returned it last');
    assert.deepEqual(tried.slice(1).sort(), ['a', 'b'], 'b was sent though a failed: both went at once');
    assert.match(String(out.error?.message), /applying ConfigMap site-home\/a/);
  });

  test('a child the primary cannot own (another namespace; cluster-scoped under a namespaced primary) is refused: Ready=False names it and why; the others are applied', async () => {
    const Shop = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Shop', spec: t.Object({}), status: t.Object({}) });
    const shops = defineReconciler({
      for: Shop,
      owns: [ConfigMap, Namespace],
      reconcile: () => ({
        children: [child(ConfigMap, { metadata: { name: 'here' }, data: {} }), child(ConfigMap, { metadata: { name: 'there', namespace: 'elsewhere' }, data: {} }), child(Namespace, { metadata: { name: 'shop-home' } })],
        status: {},
      }),
    });
    const out = await testReconcile(shops, { object: { metadata: { name: 's', namespace: 'shop' }, spec: {} } });
    assert.equal(out.error, undefined);
    const ready = out.status?.conditions?.find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'False');
    assert.equal(ready?.reason, 'ChildNotOwnable');
    assert.match(ready!.message, /ConfigMap elsewhere\/there: in namespace elsewhere, not shop .*an owner reference cannot cross namespaces/);
    assert.match(ready!.message, /also refused: Namespace shop-home/);
    assert.ok(out.get(ConfigMap, 'here', 'shop'), 'the ownable child is applied');
    assert.equal(out.get(ConfigMap, 'there', 'elsewhere'), undefined, 'the others are not made');
    assert.equal(out.get(Namespace, 'shop-home'), undefined);
  });

  test('ctx.get and ctx.list of what the function does not declare fail as its RBAC would, saying what to declare', async () => {
    const Shelf = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Shelf', spec: t.Object({}), status: t.Object({}) });
    const reading = (declare: Partial<Parameters<typeof defineReconciler>[0]>, read: (ctx: Parameters<Parameters<typeof defineReconciler>[0]['reconcile']>[1]) => Promise<unknown>) =>
      testReconcile(defineReconciler({ for: Shelf, ...declare, async reconcile(_s, ctx) { await read(ctx); return {}; } }), { object: { metadata: { name: 's', namespace: 'shop' }, spec: {} } });
    const watchesSecret = { watches: [{ ...Secret, mapping: { referenceField: 'spec.secretName' } }] };
    assert.equal((await reading(watchesSecret, (ctx) => ctx.get(Secret, 'x'))).error, undefined, 'a watched kind is read by name');
    const listed = await reading(watchesSecret, (ctx) => ctx.list(Secret));
    assert.match(listed.error?.message ?? '', /does not declare that it may list Secret objects .*add `list: true` to its watch of Secret/);
    assert.equal((await reading({ watches: [{ ...Secret, mapping: { referenceField: 'spec.secretName' }, list: true }] }, (ctx) => ctx.list(Secret))).error, undefined);
    const undeclared = await reading({}, (ctx) => ctx.get(Secret, 'x'));
    assert.match(undeclared.error?.message ?? '', /ctx\.get\(v1 Secret\): \w+ does not declare that it may get Secret objects .*add \{ kind: Secret, verbs: \['get'\] \} to its `uses`/);
    // Rights limited to named objects (RBAC resourceNames): those names only.
    const named = { uses: [{ kind: Secret, verbs: ['get' as const], names: ['shelf-settings'] }] };
    assert.equal((await reading(named, (ctx) => ctx.get(Secret, 'shelf-settings'))).error, undefined, 'the named object is read');
    const other = await reading(named, (ctx) => ctx.get(Secret, 'payroll'));
    assert.match(other.error?.message ?? '', /ctx\.get\(v1 Secret, payroll\): \w+ declares that it may get only the Secret objects named shelf-settings, so its RBAC in a cluster refuses payroll/);
    assert.match((await reading(named, (ctx) => ctx.list(Secret))).error?.message ?? '', /does not declare that it may list Secret objects/);
  });

  test('rights limited to names are refused where RBAC cannot limit them: list, watch, create', () => {
    const Shelf = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Shelf', spec: t.Object({}), status: t.Object({}) });
    assert.throws(() => defineReconciler({ name: 'shelves', for: Shelf, uses: [{ kind: Secret, verbs: ['get', 'list'], names: ['a'] }], reconcile: () => ({}) }), /shelves: uses of Secret limits list to names, which RBAC cannot do .*declare list in a separate entry without names/);
    assert.throws(() => defineReconciler({ name: 'shelves', for: Shelf, uses: [{ kind: Secret, verbs: ['create'], names: ['a'] }], reconcile: () => ({}) }), /limits create to names/);
    assert.throws(() => defineReconciler({ name: 'shelves', for: Shelf, uses: [{ kind: Secret, verbs: ['get'], names: [] }], reconcile: () => ({}) }), /`names: \[\]`, which allows no object/);
  });

  test('lists come a page at a time, as from the apiserver, and ctx.list gathers every page', async () => {
    const Counter = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Counter', spec: t.Object({}), status: t.Object({ seen: t.Optional(t.Array(t.String())) }) });
    const counter = defineReconciler({
      for: Counter,
      uses: [{ kind: Secret, verbs: ['list'] }],
      async reconcile(c, ctx) {
        return { status: { seen: (await ctx.list(Secret, { namespace: c.metadata.namespace, pageSize: 1 })).map((s) => s.metadata.name) } };
      },
    });
    const existing = ['a', 'b', 'c'].map((name) => ({ apiVersion: 'v1', kind: 'Secret', metadata: { name } }));
    const out = await testReconcile(counter, { object: { metadata: { name: 'n', namespace: 'shop' }, spec: {} }, existing });
    assert.equal(out.error, undefined);
    assert.deepEqual(out.status?.seen, ['a', 'b', 'c']);
    assert.equal(out.reads.filter((r) => r.path.endsWith('/secrets')).length, 3, 'one read per page');
  });

  test('children with owner and labels, the finalizer, status with observedGeneration, an Event, reads of other objects', async () => {
    const out = await testReconcile(gizmos, {
      object: gizmo(2, { generation: 4 }),
      existing: [
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'a', labels: { gizmo: 'yes' } } },
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'b', labels: { gizmo: 'yes', ignored: '' } } },
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'c', namespace: 'elsewhere', labels: { gizmo: 'yes' } } },
      ],
    });
    assert.equal(out.error, undefined);
    assert.deepEqual(out.children.map((c) => [c.metadata.name, c.metadata.namespace, c.metadata.labels!['kfn.dev/owner-uid']]), [
      ['g-part-0', 'shop', 'uid-of-g'],
      ['g-part-1', 'shop', 'uid-of-g'],
    ]);
    assert.deepEqual(out.status, { built: 2, secretKeys: 1, observedGeneration: 4, conditions: [out.ready] });
    assert.equal(out.ready?.status, 'True');
    assert.deepEqual(out.events, [{ type: 'Normal', reason: 'Built', message: '2 parts' }]);
    assert.deepEqual(out.get<{ metadata: { finalizers: string[] } }>(Gizmo, 'g')?.metadata.finalizers, [gizmos.finalizer]);
    assert.ok(out.get(ConfigMap, 'g-part-1'), 'applied into the in-memory cluster');
  });

  test('a child no longer returned is pruned; one of another owner is left alone', async () => {
    const part = (n: number) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `g-part-${n}` }, data: { index: String(n) } });
    const foreign = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'g-part-9', labels: { 'kfn.dev/owner-uid': 'someone-else' } } };
    const out = await testReconcile(gizmos, { object: gizmo(1, { finalizers: [gizmos.finalizer] }), children: [part(0), part(1)], existing: [foreign] });
    assert.deepEqual(out.pruned, [{ apiVersion: 'v1', kind: 'ConfigMap', namespace: 'shop', name: 'g-part-1' }]);
    assert.equal(out.get(ConfigMap, 'g-part-1'), undefined);
    assert.ok(out.get(ConfigMap, 'g-part-9'));
  });

  test('a thrown error is the outcome, with the object and the step named', async () => {
    const out = await testReconcile(gizmos, { object: { ...gizmo(1), spec: { parts: 1, fail: true } } });
    assert.match(out.error!.message, /Gizmo shop\/g/);
    assert.match(String((out.error as Error & { cause?: Error }).cause?.message ?? out.error!.message), /the gizmo refuses/);
    assert.equal(out.result, undefined);
  });

  test('a Terminal error: no retry, Ready=False with its reason and message, a Warning Event; children and other status kept', async () => {
    const part = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'g-part-0' }, data: { index: '0' } };
    const out = await testReconcile(gizmos, { object: { ...gizmo(11, { finalizers: [gizmos.finalizer], generation: 3 }), status: { built: 1, conditions: [] } }, children: [part] });
    assert.equal(out.error, undefined, 'not an error the bridge would retry');
    assert.equal(out.result?.result, 'done');
    assert.match(out.result!.message!, /spec\.parts: at most 10 parts/);
    assert.deepEqual([out.ready?.status, out.ready?.reason, out.ready?.message, out.ready?.observedGeneration], ['False', 'TooManyParts', 'spec.parts: at most 10 parts', 3]);
    assert.equal(out.status?.built, 1, 'the status the function wrote before is kept');
    assert.deepEqual(out.events.map((e) => [e.type, e.reason, e.message]), [['Warning', 'TooManyParts', 'spec.parts: at most 10 parts']]);
    assert.deepEqual(out.pruned, [], 'no children returned: none pruned');
    assert.ok(out.get(ConfigMap, 'g-part-0'));
  });

  test('an object being deleted: finalize runs, the finalizer goes, and with it the object', async () => {
    finalized.length = 0;
    const deleting = gizmo(1, { finalizers: [gizmos.finalizer], deletionTimestamp: '2026-01-01T00:00:00Z' });
    const out = await testReconcile(gizmos, { object: deleting, reason: 'deleted', now: new Date('2026-01-01T00:00:05Z') });
    assert.equal(out.error, undefined);
    assert.deepEqual(finalized, ['g']);
    assert.equal(out.get(Gizmo, 'g'), undefined, 'no finalizer left: the apiserver lets it go');
  });

  test('a reconcile that fails after some writes says what it wrote (the 500\'s changes): the bridge waits for them before the retry', async () => {
    const out = await testReconcile(gizmos, {
      object: gizmo(2),
      refuse: (w) => (w.method === 'PATCH' && w.path.endsWith('/status') ? { status: 500, message: 'etcd is slow' } : undefined),
    });
    assert.match(String(out.error?.message), /etcd is slow/);
    const written = writesOf(out.error);
    assert.deepEqual(written.filter((c) => c.action === 'applied').map((c) => c.ref.name).sort(), ['g-part-0', 'g-part-1']);
    assert.ok(written.every((c) => c.ref.resourceVersion), 'each with the version the apiserver answered');
    assert.deepEqual(writesOf(new Error('nothing written')), []);
  });

  test("a webhook's refusal of the finalizer's removal is said as such at once, not taken for a changed finalizer list and read again", async () => {
    finalized.length = 0;
    const deleting = gizmo(1, { finalizers: [gizmos.finalizer], deletionTimestamp: '2026-01-01T00:00:00Z' });
    let patches = 0;
    let reads = 0;
    const out = await testReconcile(gizmos, {
      object: deleting,
      reason: 'deleted',
      now: new Date('2026-01-01T00:00:05Z'),
      refuse: (w) => {
        if (w.method === 'PATCH' && Array.isArray(w.body)) patches++;
        return w.method === 'PATCH' && Array.isArray(w.body) ? { status: 422, message: 'admission webhook "validate.gizmos.test.kfn.dev" denied the request: spec.parts: must be even' } : undefined;
      },
    });
    reads = out.reads.filter((r) => r.path.endsWith('/gizmos/g')).length;
    assert.equal(patches, 1, 'one attempt: a refusal is no conflict');
    assert.ok(reads <= 1, `not read again (${reads} reads)`);
    assert.match(String(out.error?.message), /admission webhook "validate\.gizmos\.test\.kfn\.dev" denied the request/);
  });

  test('a finalize first tried long after deletion (deliveries were held up) that fails is retried, not given up: finalizeTimeoutSeconds runs from its first failure', async () => {
    const flaky = defineReconciler({
      for: Gizmo,
      reconcile: () => ({ status: {} }),
      finalize() {
        throw new Error('the backend is down');
      },
      finalizeTimeoutSeconds: 120,
    }) as unknown as Reconciler;
    const at = (time: string) => ({ reason: 'deleted' as const, now: new Date(`2026-01-01T${time}Z`) });
    // Deleted at midnight; the first delivery comes ten minutes later, past the timeout.
    const first = await testReconcile(flaky, { object: gizmo(1, { finalizers: [flaky.finalizer], deletionTimestamp: '2026-01-01T00:00:00Z' }), ...at('00:10:00') });
    assert.match(String(first.error?.message), /the backend is down/, 'a first failure is retried');
    const marked = first.get(Gizmo, 'g')!;
    assert.deepEqual(marked.metadata.finalizers, [flaky.finalizer], 'still held by its finalizer');
    assert.equal(marked.metadata.annotations?.['kfn.dev/finalize-failing-since'], '2026-01-01T00:10:00.000Z', 'the first failure is noted on the object');
    const second = await testReconcile(flaky, { object: marked, ...at('00:11:00') });
    assert.match(String(second.error?.message), /the backend is down/, 'a minute into its failures: retried');
    assert.equal(second.get(Gizmo, 'g')!.metadata.annotations?.['kfn.dev/finalize-failing-since'], '2026-01-01T00:10:00.000Z', 'the first failure keeps its time');
    const third = await testReconcile(flaky, { object: second.get(Gizmo, 'g')!, ...at('00:12:01') });
    assert.equal(third.error, undefined);
    assert.match(third.events.find((e) => e.reason === 'FinalizerGaveUp')?.message ?? '', /cleanup kept failing for 121s since its first failure \(finalizeTimeoutSeconds 120\), last: the backend is down/);
    assert.equal(third.get(Gizmo, 'g'), undefined, 'given up after 121 s of failures: the object goes');
  });
});

test('label selectors as strings', () => {
  const labels = { app: 'web', tier: 'front' };
  assert.ok(labelSelectorMatches('app=web,tier==front', labels));
  assert.ok(labelSelectorMatches('app!=db', labels));
  assert.ok(labelSelectorMatches('app in (web, api),!missing', labels));
  assert.ok(!labelSelectorMatches('tier notin (front)', labels));
  assert.ok(!labelSelectorMatches('missing', labels));
  assert.ok(labelSelectorMatches(undefined, labels));
});

// Typed by the kind: these lines are type-checked by `npm run typecheck`, so an outcome that
// loses the kind's type (an untyped object back) fails there, and the runtime assertions here.
test('out.child and out.get are typed by the kind given: a Deployment for Deployment', async () => {
  const sites = defineReconciler({
    for: Gizmo,
    owns: [Deployment],
    reconcile: (g) => ({
      children: [child(Deployment, { metadata: { name: 'site' }, spec: { replicas: g.spec.parts, selector: { matchLabels: { app: 'site' } }, template: { metadata: { labels: { app: 'site' } }, spec: { containers: [{ name: 'web', image: 'nginx' }] } } } })],
    }),
  }) as unknown as Reconciler;
  const out = await testReconcile(sites, { object: gizmo(2) });
  const replicas: number | undefined = out.child(Deployment, 'site')?.spec?.replicas;
  assert.equal(replicas, 2);
  const image: string | undefined = out.child(Deployment, 'site')?.spec?.template.spec?.containers[0]?.image;
  assert.equal(image, 'nginx');
  // @ts-expect-error a Deployment's spec has no `replica`: a misspelled field does not compile
  assert.equal(out.child(Deployment, 'site')?.spec?.replica, undefined);
  const parts: number | undefined = out.get(Gizmo, 'g', 'shop')?.spec.parts;
  assert.equal(parts, 2);
  // A type of the test's own still works, as before.
  assert.equal(out.child<{ spec: { replicas: number } }>(Deployment, 'site')?.spec.replicas, 2);
  assert.equal(out.child(ConfigMap, 'site'), undefined);
});

describe('checkSamples', () => {
  const Shop = defineKind({
    group: 'test.kfn.dev',
    version: 'v1',
    kind: 'Shop',
    spec: t.Object({
      owner: t.String({ minLength: 1 }),
      tier: t.Union([t.Literal('small'), t.Literal('large')], { default: 'small' }),
      memory: t.Optional(quantity()),
      shelves: t.Optional(t.Array(t.Object({ name: t.String(), slots: t.Integer({ minimum: 1 }) }))),
    }),
    status: t.Object({}),
  });
  const sample = (spec: string, head = 'apiVersion: test.kfn.dev/v1\nkind: Shop\nmetadata:\n  name: corner\n') => `${head}spec:\n${spec}`;

  test('samples that fit the schema (defaults applied first, as the apiserver does) have no problems; other kinds are left alone', () => {
    assert.deepEqual(checkSamples(Shop, sample('  owner: ann\n  memory: 1Gi\n')), []);
    assert.deepEqual(checkSamples(Shop, `${sample('  owner: ann\n  memory: 2\n')}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: key\nstringData:\n  any: thing\n`), []);
  });

  test('each problem names the sample and the field', () => {
    assert.deepEqual(checkSamples(Shop, sample('  owner: ""\n  tier: huge\n  memory: true\n  shelves:\n    - name: top\n      slots: 0\n  colour: red\n')).map((p) => p.split(':')[0]).sort(), [
      'Shop corner spec.colour',
      'Shop corner spec.memory',
      'Shop corner spec.owner',
      'Shop corner spec.shelves[0].slots',
      'Shop corner spec.tier',
    ]);
    assert.match(checkSamples(Shop, sample('  owner: ""\n'))[0]!, /^Shop corner spec\.owner: Invalid value: "": spec\.owner in body should be at least 1 chars long$/);
    assert.match(checkSamples(Shop, sample('  tier: small\n'))[0]!, /^Shop corner spec\.owner: Required value$/);
    assert.match(checkSamples(Shop, sample('  owner: ann\n  colour: red\n'))[0]!, /^Shop corner spec\.colour: not a field of Shop's spec \(known: owner, tier, memory, shelves\)/);
  });

  test('a sample of another version, without a name or without a spec, a file without the kind, and YAML that does not parse are problems too', () => {
    assert.match(checkSamples(Shop, sample('  owner: ann\n', 'apiVersion: test.kfn.dev/v2\nkind: Shop\nmetadata:\n  name: corner\n')).join(), /Shop corner: apiVersion test\.kfn\.dev\/v2 is not served \(test\.kfn\.dev\/v1 is\)/);
    assert.match(checkSamples(Shop, sample('  owner: ann\n', 'apiVersion: test.kfn.dev/v1\nkind: Shop\nmetadata: {}\n')).join(), /Shop #1: metadata\.name is required/);
    assert.match(checkSamples(Shop, 'apiVersion: test.kfn.dev/v1\nkind: Shop\nmetadata:\n  name: corner\n').join(), /Shop corner: spec is required/);
    assert.deepEqual(checkSamples(Shop, 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: key\n'), ['no Shop (test.kfn.dev/v1) among the samples']);
    assert.match(checkSamples(Shop, 'spec: [unclosed\n').join(), /^samples: invalid YAML \(line \d+\): /);
  });
});

describe('testReconcile holds the primary to its kind as the apiserver would', () => {
  const Box = defineKind({
    group: 'test.kfn.dev',
    version: 'v1',
    kind: 'Box',
    spec: t.Object({
      size: t.Integer({ minimum: 1, maximum: 10 }),
      colour: t.Optional(t.String({ default: 'brown' })),
      ports: t.Optional(t.Array(t.Object({ name: t.String(), port: t.Integer({ default: 80 }) }))),
    }),
    status: t.Object({}),
    rules: [{ rule: 'self.size % 2 == 0', message: 'must be even', fieldPath: '.size' }],
  });
  const seen: unknown[] = [];
  const boxes = defineReconciler({
    for: Box,
    reconcile(b) {
      seen.push(b.spec);
      return { status: {} };
    },
  });
  const box = (spec: unknown) => ({ metadata: { name: 'b', namespace: 'shop' }, spec });

  test('the reconcile sees the spec with the schema\'s defaults, nested ones too', async () => {
    seen.length = 0;
    const out = await testReconcile(boxes, { object: box({ size: 2, ports: [{ name: 'web' }] }) });
    assert.equal(out.error, undefined);
    assert.deepEqual(seen, [{ size: 2, colour: 'brown', ports: [{ name: 'web', port: 80 }] }]);
    assert.equal(out.get(Box, 'b', 'shop')?.spec.colour, 'brown', 'stored with its defaults');
  });

  test('an object the apiserver would refuse is refused before the reconcile runs, naming the field and what is wrong', async () => {
    seen.length = 0;
    await assert.rejects(testReconcile(boxes, { object: box({ size: 'two' }) }), /Box\.test\.kfn\.dev "b" is invalid: spec\.size: .*integer/);
    await assert.rejects(testReconcile(boxes, { object: box({ size: 12 }) }), /spec\.size: .*less than or equal to 10/);
    await assert.rejects(testReconcile(boxes, { object: box({}) }), /spec\.size: Required value/);
    await assert.rejects(testReconcile(boxes, { object: box({ size: 2, ports: [{ port: 80 }] }) }), /spec\.ports\[0\]\.name: Required value/);
    await assert.rejects(testReconcile(boxes, { object: box({ size: 2, lid: true }) }), /spec\.lid: .*not a field of Box's spec/);
    await assert.rejects(testReconcile(boxes, { object: { metadata: { name: 'b' } } }), /Box\.test\.kfn\.dev "b" is invalid: spec: Required value/);
    assert.deepEqual(seen, [], 'no reconcile saw them');
  });

  test('and its CEL rules, on the defaulted spec, in the apiserver\'s words (a rule on the spec names its fieldPath, unquoted)', async () => {
    await assert.rejects(testReconcile(boxes, { object: box({ size: 3 }) }), /Box\.test\.kfn\.dev "b" is invalid: spec\.size: Invalid value: must be even/);
  });

  test('memoryApi holds the same object', async () => {
    const api = memoryApi(boxes, { object: box({ size: 4 }) });
    const stored = (await api.request('GET', '/apis/test.kfn.dev/v1/namespaces/shop/boxes/b')) as { spec: { colour?: string } };
    assert.equal(stored.spec.colour, 'brown');
    assert.throws(() => memoryApi(boxes, { object: box({ size: 5 }) }), /spec\.size: Invalid value: must be even/);
  });
});
