import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { TSchema } from '@sinclair/typebox';
import { parseReconciler } from '../bridge/config.ts';
import { functionManifests, functionReconciler, type ManifestOptions } from '../functions/sdk/manifests.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { defaultedReconcilerSpec, isReconcilerObject, reconcilerObject, reconcilerSpec, reconcilerSpecSchema, type ReconcilerObject, type WrittenReconcilerSpec } from './reconciler-spec.ts';
import { generateServingPki } from './certificates.ts';

/** True only when A and B are one type: `npm run typecheck` refuses `sameType<A, B>(true)` otherwise. */
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const sameType = <A, B>(same: Same<A, B>) => same;

const functionsDir = join(import.meta.dirname, '..', 'functions');
const examples = readdirSync(functionsDir, { withFileTypes: true }).filter((d) => d.isDirectory() && d.name !== 'sdk').map((d) => d.name);

test('the Reconciler the SDK writes for each example function is one the bridge takes, as the SDK meant it', async () => {
  const ways: ManifestOptions[] = [{}, { namespace: 'fns', sinkUri: 'http://127.0.0.1:8070/fn/x', namespaces: ['a', 'b'], resyncPeriodSeconds: 0 }];
  assert.ok(examples.length >= 5, `example functions under functions/: ${examples.join(', ')}`);
  for (const example of examples) {
    const fn = ((await import(join(functionsDir, example, 'index.ts'))) as { default: Reconciler }).default;
    for (const options of ways) {
      const written = functionManifests(fn, options).filter(isReconcilerObject);
      assert.equal(written.length, 1, `${example}: one Reconciler among its manifests`);
      assert.deepEqual(written[0], functionReconciler(fn, options), `${example}: the manifests carry the SDK's one Reconciler`);
      const config = parseReconciler(written[0]);
      assert.equal(config.name, fn.name);
      assert.deepEqual(config.for, { apiVersion: fn.for.apiVersion, kind: fn.for.kind });
      assert.deepEqual(config.serviceAccount, { name: `kfn-fn-${fn.name}`, namespace: options.namespace ?? 'kfn-system' }, `${example}: delivered for its own identity`);
      assert.deepEqual(config.namespaces, options.namespaces ?? []);
      if (options.resyncPeriodSeconds !== undefined) assert.equal(config.resyncPeriodSeconds, options.resyncPeriodSeconds);
    }
  }
});

test('the SDK writes the spec type core exports, and nothing but the spec says its shape', () => {
  assert.equal(sameType<ReturnType<typeof functionReconciler>, ReconcilerObject>(true), true);
  assert.equal(sameType<ReturnType<typeof functionReconciler>['spec'], WrittenReconcilerSpec>(true), true);
  assert.equal(sameType<ReturnType<typeof reconcilerSpec>, WrittenReconcilerSpec>(true), true);
  // @ts-expect-error: the check refuses a spec of another shape, so the lines above mean something.
  assert.equal(sameType<{ for: string }, WrittenReconcilerSpec>(true), true);
});

/** Every field the schema requires but defaults, as a dotted path: a writer may leave it out. */
function requiredWithDefault(schema: TSchema, where: string): string[] {
  if (schema.type === 'array') return requiredWithDefault(schema.items as TSchema, `${where}[]`);
  if (schema.type !== 'object') return [];
  const required = new Set((schema.required as string[] | undefined) ?? []);
  return Object.entries(schema.properties as Record<string, TSchema>).flatMap(([key, field]) => [
    ...(required.has(key) && field.default !== undefined ? [`${where}.${key}`] : []),
    ...requiredWithDefault(field, `${where}.${key}`),
  ]);
}

test('a written spec may leave out exactly the fields the schema requires but defaults', () => {
  // WrittenReconcilerSpec names these three: a new defaulted field must be named there too.
  assert.deepEqual(requiredWithDefault(reconcilerSpecSchema, 'spec'), ['spec.owns[].labelSelector', 'spec.sink.awsIam.service', 'spec.auth.type']);
  const leftOut: WrittenReconcilerSpec = {
    for: { apiVersion: 'example.com/v1', kind: 'Widget' },
    owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
    sink: { uri: 'https://abc.lambda-url.eu-west-1.on.aws/', awsIam: { region: 'eu-west-1' } },
    auth: { secretRef: { name: 'widgets', namespace: 'kfn-system' } },
  };
  const config = parseReconciler(reconcilerObject({ name: 'widgets' }, reconcilerSpec(leftOut)));
  assert.deepEqual([config.owns[0]!.labelSelector, config.sink.awsIam?.service, config.auth?.type], ['app.kubernetes.io/managed-by=kfn', 'lambda', 'hmac'], 'the bridge fills them in');
});

test('a spec built by reconcilerSpec carries no field left undefined', () => {
  const spec = reconcilerSpec({ for: { apiVersion: 'v1', kind: 'Secret' }, owns: undefined, sink: { uri: 'http://127.0.0.1:1/' }, namespaces: undefined, timeoutSeconds: 5 });
  assert.deepEqual(Object.keys(spec), ['for', 'sink', 'timeoutSeconds'], 'in the order written');
});

test('a sink\'s caBundle: PEM certificates, each readable, with an https uri only', () => {
  const [a, b] = [generateServingPki('a', ['a.example']), generateServingPki('b', ['b.example'])];
  const problems = (sink: Record<string, unknown>) => defaultedReconcilerSpec({ for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink }).problems;
  assert.deepEqual(problems({ uri: 'https://kfn-fn-x.fns.svc.cluster.local/', caBundle: a.caCert }), []);
  assert.deepEqual(problems({ uri: 'https://kfn-fn-x.fns.svc.cluster.local/', caBundle: `${a.caCert}${b.caCert}` }), [], 'the new CA and the old one around a renewal');
  assert.deepEqual(problems({ uri: 'https://x/', caBundle: a.caCert.replace(/\r\n/g, '\n') }), [], 'as a YAML block scalar holds it');
  assert.deepEqual(problems({ uri: 'http://kfn-fn-x.fns.svc.cluster.local/', caBundle: a.caCert }), ['spec.sink: sink.caBundle goes with an https:// uri: it is the CA the bridge trusts for that sink']);
  assert.deepEqual(problems({ ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'x' }, caBundle: a.caCert }), ['spec.sink: sink.caBundle goes with an https:// uri: it is the CA the bridge trusts for that sink']);
  const encoded = Buffer.from(a.caCert).toString('base64');
  assert.deepEqual(problems({ uri: 'https://x/', caBundle: encoded }), [`spec.sink.caBundle must be PEM certificates (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----), as a ca.crt holds them, not base64-encoded, not ${JSON.stringify(encoded)}`], 'a webhook\'s base64 form is refused, saying which form');
  const broken = a.caCert.replace(/(-----BEGIN CERTIFICATE-----\r\n)..../, '$1AAAA');
  assert.match(problems({ uri: 'https://x/', caBundle: `${b.caCert}${broken}` }).join('\n'), /^spec\.sink\.caBundle: certificate 2 of 2 cannot be read \(/);
  const crd = JSON.stringify(reconcilerSpecSchema.properties.sink);
  assert.match(crd, /"rule":"!has\(self\.caBundle\) \|\| \(has\(self\.uri\) && self\.uri\.startsWith\('https:\/\/'\)\)"/, 'the apiserver refuses the same');
});

test('a bearer token does not go with contract 2; plain http outside the cluster is allowed only by sink.allowPlainHttp', () => {
  const spec = (extra: Record<string, unknown>) => defaultedReconcilerSpec({ for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink: { uri: 'http://fn/' }, ...extra }).problems;
  const auth = { type: 'bearer', secretRef: { name: 't', namespace: 'kfn-system' } };
  assert.deepEqual(spec({ contract: 2, auth }), ['spec: auth.type bearer cannot carry contract 2: a bearer token signs neither the body nor the time, and a contract 2 event carries the objects themselves; use hmac']);
  assert.deepEqual(spec({ contract: 1, auth }), []);
  assert.deepEqual(spec({ contract: 2, auth: { secretRef: auth.secretRef } }), []);
  assert.deepEqual(defaultedReconcilerSpec({ for: { apiVersion: 'v1', kind: 'ConfigMap' }, sink: { uri: 'http://fn.example.com/', allowPlainHttp: true } }).problems, []);
});
