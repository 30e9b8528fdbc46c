import assert from 'node:assert/strict';
import { test } from 'node:test';
import MyWebFunction from '../myweb/index.ts';
import { functionManifests, pluralOf } from './manifests.ts';

test('a function gets its CRD, Reconciler, ServiceAccount, least-privilege RBAC and the bridge grant', () => {
  const objs = functionManifests(MyWebFunction, { namespace: 'kfn-system' }) as { kind: string; metadata: { name: string; labels?: Record<string, string> }; rules?: { apiGroups: string[]; resources: string[]; verbs: string[] }[]; spec?: Record<string, unknown> }[];
  assert.deepEqual(objs.map((o) => o.kind), ['CustomResourceDefinition', 'Reconciler', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'ClusterRole']);
  const crd = objs[0]!.spec as { names: { shortNames: string[]; categories: string[] }; versions: { subresources: unknown; schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, { minimum?: number; maximum?: number; default?: string }> } } } } }[] };
  assert.deepEqual(crd.names.shortNames, ['web']);
  assert.deepEqual(crd.names.categories, ['all']);
  const spec = crd.versions[0]!.schema.openAPIV3Schema.properties.spec.properties;
  assert.deepEqual([spec.nodePortNumber!.minimum, spec.nodePortNumber!.maximum], [30000, 32767]);
  assert.equal(spec.image!.default, 'kfn.local/nginx:1.22');
  assert.ok(crd.versions[0]!.subresources, 'status subresource');
  const reconciler = objs[1]!.spec as { for: { kind: string }; owns: { kind: string }[]; sink: { ref: { name: string } }; auth: { secretRef: { name: string } } };
  assert.equal(reconciler.for.kind, 'MyWeb');
  assert.deepEqual(reconciler.owns.map((o) => o.kind), ['ConfigMap', 'Deployment', 'Service']);
  assert.equal(reconciler.sink.ref.name, 'kfn-fn-myweb');
  const fnRole = objs[3]!;
  const verbsFor = (resource: string) => fnRole.rules!.filter((r) => r.resources.includes(resource)).flatMap((r) => r.verbs);
  assert.deepEqual(verbsFor('mywebs'), ['get', 'patch']);
  assert.deepEqual(verbsFor('mywebs/status'), ['get', 'patch', 'update']);
  assert.ok(verbsFor('deployments').includes('delete'));
  assert.ok(!verbsFor('mywebs').includes('delete'), 'the function never deletes its own objects');
  assert.equal(verbsFor('secrets').length, 0, 'no access to what it does not declare');
  const bridgeRole = objs[5]!;
  assert.equal(bridgeRole.metadata.labels?.['kfn.dev/aggregate-to-bridge'], 'true');
  assert.ok(bridgeRole.rules!.every((r) => r.verbs.join() === 'list,watch'));
});

test('pluralOf follows the API names of common kinds', () => {
  assert.deepEqual(['ConfigMap', 'Policy', 'Ingress', 'Status', 'Endpoints'].map(pluralOf), ['configmaps', 'policies', 'ingresses', 'statuses', 'endpoints']);
});
