import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import { namespacesWatchedEach } from '../core/reconciler-spec.ts';
import { InvalidReconcilerError, loadReconcilerFile, parseReconciler, reconcilerCrd, reconcilerCrdYaml, watchedKinds } from './config.ts';
import { reconcilerLimits } from '../core/reconciler-spec.ts';

const valid = {
  apiVersion: 'kfn.dev/v1alpha1',
  kind: 'Reconciler',
  metadata: { name: 'myweb', generation: 2 },
  spec: {
    for: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' },
    owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
    watches: [{ apiVersion: 'v1', kind: 'Pod', mapping: { selectorField: 'spec.selector' } }],
    sink: { uri: 'http://127.0.0.1:8080/' },
    auth: { secretRef: { name: 'myweb-fn', namespace: 'kfn-system' } },
  },
};

test('a valid Reconciler gets the defaults', () => {
  const c = parseReconciler(valid);
  assert.equal(c.name, 'myweb');
  assert.equal(c.generation, 2);
  assert.equal(c.resyncPeriodSeconds, 300);
  assert.equal(c.maxConcurrentReconciles, 8, 'a ceiling: the bridge starts at 1 and adapts (bridge/concurrency.ts)');
  assert.equal(c.timeoutSeconds, 30);
  assert.deepEqual(c.backoff, { baseDelayMs: 5, maxDelayMs: 1_000_000 });
  assert.deepEqual(c.rateLimit, { qps: 10, burst: 100 }, 'controller-runtime\'s overall bucket');
  assert.deepEqual(parseReconciler({ ...valid, spec: { ...valid.spec, rateLimit: { qps: 2 } } }).rateLimit, { qps: 2, burst: 100 });
  assert.deepEqual(c.namespaces, []);
  assert.equal(c.auth?.type, 'hmac');
});

test('selector mapping makes the primary watched in full, everything else metadata-only', () => {
  assert.deepEqual(
    watchedKinds(parseReconciler(valid)).map((k) => [k.ref.kind, k.full]),
    [['MyWeb', true], ['ConfigMap', false], ['Pod', false]],
  );
  const byReference = { ...valid, spec: { ...valid.spec, watches: [{ apiVersion: 'v1', kind: 'Secret', mapping: { referenceField: 'spec.secretRef.name' } }] } };
  assert.deepEqual(parseReconciler(byReference).watches[0]!.mapping, { referenceField: 'spec.secretRef.name' });
  assert.deepEqual(watchedKinds(parseReconciler(byReference)).map((k) => [k.ref.kind, k.full]), [['MyWeb', true], ['ConfigMap', false], ['Secret', false]], 'so does reference mapping');
  const byLabel = { ...valid, spec: { ...valid.spec, watches: [{ apiVersion: 'v1', kind: 'Secret', mapping: { label: 'x' } }] } };
  assert.equal(watchedKinds(parseReconciler(byLabel))[0]!.full, false, 'label mapping needs metadata only');
});

test('every problem of an invalid Reconciler is named', () => {
  const bad = {
    metadata: { name: 'broken' },
    spec: {
      for: { apiVersion: 'not a version', kind: 'lower' },
      owns: [{ kind: 'ConfigMap' }],
      watches: [{ apiVersion: 'v1', kind: 'Pod', mapping: { selectorField: 'spec..x' } }, { apiVersion: 'v1', kind: 'Secret', mapping: { referenceField: 'spec.x', label: 'a' } }],
      sink: { uri: 'ftp://x' },
      maxConcurrentReconciles: 0,
      resyncPeriodSeconds: -1,
      rateLimit: { qps: 0 },
    },
  };
  assert.throws(() => parseReconciler(bad), (err: unknown) => {
    assert.ok(err instanceof InvalidReconcilerError);
    const text = err.problems.join('\n');
    for (const pattern of [/spec\.for\.apiVersion/, /spec\.for\.kind/, /spec\.owns\[0\]\.apiVersion/, /spec\.watches\[0\]\.mapping/, /spec\.watches\[1\]\.mapping/, /spec\.sink\.uri must be an http/, /maxConcurrentReconciles/, /resyncPeriodSeconds/, /spec\.rateLimit\.qps/]) {
      assert.match(text, pattern);
    }
    assert.match(err.message, /^Reconciler broken is invalid: /);
    return true;
  });
  assert.throws(() => parseReconciler({ metadata: { name: 'x' } }), /spec is required/);
  assert.throws(() => parseReconciler({ metadata: { name: 'x' }, spec: { for: valid.spec.for, sink: { uri: 'http://a/', ref: { apiVersion: 'v1', kind: 'K', name: 'n' } } } }), /exactly one of uri or ref/);
});

test('a config file holds several Reconcilers; duplicates and YAML errors are reported with the path', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'bridge.yaml');
  const second = { ...valid, metadata: { name: 'other' } };
  writeFileSync(file, `${JSON.stringify(valid)}\n---\n${JSON.stringify(second)}\n`);
  assert.deepEqual(loadReconcilerFile(file).map((c) => c.name), ['myweb', 'other']);
  writeFileSync(file, `${JSON.stringify(valid)}\n---\n${JSON.stringify(valid)}\n`);
  assert.throws(() => loadReconcilerFile(file), /two Reconcilers are named myweb/);
  writeFileSync(file, 'a: [');
  assert.throws(() => loadReconcilerFile(file), /bridge\.yaml: invalid YAML/);
  assert.throws(() => loadReconcilerFile(join(dir, 'missing.yaml')), /cannot read the bridge configuration/);
});

test('spec.sink.awsIam: SigV4 for a region (service lambda by default); a bad region is refused', () => {
  const withIam = (awsIam: unknown) => ({ ...valid, spec: { ...valid.spec, sink: { uri: 'https://abc.lambda-url.eu-west-1.on.aws/', awsIam } } });
  assert.deepEqual(parseReconciler(withIam({ region: 'eu-west-1' })).sink.awsIam, { region: 'eu-west-1', service: 'lambda' });
  assert.deepEqual(parseReconciler(withIam({ region: 'us-gov-west-1', service: 'execute-api' })).sink.awsIam, { region: 'us-gov-west-1', service: 'execute-api' });
  assert.throws(() => parseReconciler(withIam({ region: 'Europe' })), /spec\.sink\.awsIam\.region must be an AWS region such as eu-west-1, not "Europe"/);
  assert.throws(() => parseReconciler(withIam('yes')), /spec\.sink\.awsIam must be an object, not "yes"/);
  assert.equal(parseReconciler(valid).sink.awsIam, undefined);
});

test('every duration and count has a maximum, in the file path as in the CRD', () => {
  const spec = reconcilerCrd() as { spec: { versions: { schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, { maximum?: number; properties?: Record<string, { maximum?: number }> }> } } } } }[] } };
  const fields = spec.spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties;
  assert.equal(fields.timeoutSeconds!.maximum, reconcilerLimits.timeoutSeconds.maximum);
  assert.equal(fields.resyncPeriodSeconds!.maximum, reconcilerLimits.resyncPeriodSeconds.maximum);
  assert.equal(fields.backoff!.properties!.maxDelayMs!.maximum, reconcilerLimits.maxDelayMs.maximum);
  const over = (patch: Record<string, unknown>) => () => parseReconciler({ ...valid, spec: { ...valid.spec, ...patch } });
  assert.throws(over({ timeoutSeconds: 2_147_484 }), /spec\.timeoutSeconds must be a whole number from 1 to 900, not 2147484/);
  assert.throws(over({ resyncPeriodSeconds: 1e12 }), /spec\.resyncPeriodSeconds must be a whole number from 0 to 86400/);
  assert.throws(over({ maxConcurrentReconciles: 1.5 }), /spec\.maxConcurrentReconciles must be a whole number/);
  assert.throws(over({ backoff: { maxDelayMs: 1e15 } }), /spec\.backoff\.maxDelayMs must be a whole number from 1 to 86400000/);
  assert.throws(over({ backoff: { baseDelayMs: 2_000_000 } }), /spec\.backoff: backoff\.baseDelayMs must not exceed backoff\.maxDelayMs/, 'checked against the default maximum');
  assert.throws(over({ rateLimit: { burst: 1e9 } }), /spec\.rateLimit\.burst must be a whole number from 1 to 100000/);
  assert.equal(parseReconciler({ ...valid, spec: { ...valid.spec, timeoutSeconds: 900, resyncPeriodSeconds: 0 } }).timeoutSeconds, 900);
});

test('a field the schema does not know is named (in a file, most likely a typo)', () => {
  assert.throws(() => parseReconciler({ ...valid, spec: { ...valid.spec, timeoutSecond: 60 } }), /spec\.timeoutSecond is not a field of a Reconciler/);
  assert.throws(() => parseReconciler({ ...valid, spec: { ...valid.spec, owns: [{ apiVersion: 'v1', kind: 'ConfigMap', selector: 'a=b' }] } }), /spec\.owns\[0\]\.selector is not a field/);
});

test('owned kinds default to kfn\'s children; "" watches them all', () => {
  assert.equal(parseReconciler(valid).owns[0]!.labelSelector, 'app.kubernetes.io/managed-by=kfn');
  assert.equal(parseReconciler({ ...valid, spec: { ...valid.spec, owns: [{ apiVersion: 'v1', kind: 'ConfigMap', labelSelector: '' }] } }).owns[0]!.labelSelector, '');
});

test('manifests/crds/reconciler.yaml is the CRD the schema gives (npm run generate rewrites it)', () => {
  const file = readFileSync(new URL('../manifests/crds/reconciler.yaml', import.meta.url), 'utf8');
  assert.equal(file, reconcilerCrdYaml(), 'manifests/crds/reconciler.yaml is out of date: run npm run generate');
});

test('contract 2 keeps annotations and status of an owned kind that declares no fields; [*] keeps it whole; [] its metadata', () => {
  const owns = [
    { apiVersion: 'apps/v1', kind: 'Deployment' },
    { apiVersion: 'v1', kind: 'Secret', fields: ['*'] },
    { apiVersion: 'v1', kind: 'ConfigMap', fields: [] },
    { apiVersion: 'v1', kind: 'Service', fields: ['spec.ports'] },
  ];
  const c = parseReconciler({ ...valid, spec: { ...valid.spec, contract: 2, owns } });
  assert.deepEqual(c.owns.map((o) => [o.kind, o.fields]), [['Deployment', ['metadata.annotations', 'status']], ['Secret', undefined], ['ConfigMap', []], ['Service', ['spec.ports']]]);
  assert.deepEqual(
    watchedKinds(c).filter((k) => k.ref.kind !== 'MyWeb' && k.ref.kind !== 'Pod').map((k) => [k.ref.kind, k.full, k.fields]),
    [['Deployment', true, ['metadata.annotations', 'status']], ['Secret', true, undefined], ['ConfigMap', false, undefined], ['Service', true, ['spec.ports']]],
  );
  assert.throws(() => parseReconciler({ ...valid, spec: { ...valid.spec, owns: [{ apiVersion: 'v1', kind: 'Secret', fields: ['**'] }] } }), /spec\.owns\[0\]\.fields\[0\] must be a dotted field path such as status or spec\.selector, or \* for the whole object/);
});

test('a Reconciler naming a few namespaces watches each; one naming many watches each kind once, cluster-wide, and takes only its namespaces from it (no LIST per namespace at start)', () => {
  const few = parseReconciler({ ...valid, spec: { ...valid.spec, namespaces: ['a', 'b'] } });
  assert.deepEqual(watchedKinds(few).map((k) => `${k.ref.kind} ${k.namespace}`), ['MyWeb a', 'MyWeb b', 'ConfigMap a', 'ConfigMap b', 'Pod a', 'Pod b']);
  const namespaces = Array.from({ length: 1000 }, (_, i) => `team-${i}`);
  const many = parseReconciler({ ...valid, spec: { ...valid.spec, namespaces } });
  assert.deepEqual(watchedKinds(many).map((k) => `${k.ref.kind} ${k.namespace ?? 'every namespace'}`), ['MyWeb every namespace', 'ConfigMap every namespace', 'Pod every namespace']);
  const edge = parseReconciler({ ...valid, spec: { ...valid.spec, namespaces: namespaces.slice(0, namespacesWatchedEach) } });
  assert.equal(watchedKinds(edge).length, 3 * namespacesWatchedEach, `up to ${namespacesWatchedEach} namespaces, a watch each`);
});
