import assert from 'node:assert/strict';
import { test } from 'node:test';
import MyWebFunction from '../myweb/index.ts';
import CertificateFunction from '../certificate/index.ts';
import IssuerFunction from '../issuer/index.ts';
import PodSetFunction from '../podset/index.ts';
import MyAppFunction from '../myapp/index.ts';
import ProjectFunction from '../project/index.ts';
import { generateServingPki } from '../../core/certificates.ts';
import { parseReconciler } from '../../bridge/config.ts';
import { functionKnativeService, functionManifests, functionServiceUrl, functionWorkload, hostManifests, hostWorkload } from './manifests.ts';
import { serviceAccountServes } from '../../core/names.ts';
import { pluralOf } from './kind.ts';
import { defineKind, defineReconciler, Secret, t } from './index.ts';
import type { Reconciler } from './reconciler.ts';

test('a function gets its CRD, Reconciler, ServiceAccount, least-privilege RBAC and the bridge grant', () => {
  const objs = functionManifests(MyWebFunction, { namespace: 'kfn-system' }) as { kind: string; metadata: { name: string; labels?: Record<string, string> }; rules?: { apiGroups: string[]; resources: string[]; verbs: string[] }[]; spec?: Record<string, unknown> }[];
  assert.deepEqual(objs.map((o) => o.kind), ['CustomResourceDefinition', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'ClusterRole', 'Reconciler'], 'the Reconciler last: its identity and rights exist when the bridge sees it');
  const crd = objs[0]!.spec as { names: { shortNames: string[]; categories: string[] }; versions: { subresources: unknown; schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, { minimum?: number; maximum?: number; default?: string }> } } } } }[] };
  assert.deepEqual(crd.names.shortNames, ['web']);
  assert.deepEqual(crd.names.categories, ['all']);
  const spec = crd.versions[0]!.schema.openAPIV3Schema.properties.spec.properties;
  assert.deepEqual([spec.nodePortNumber!.minimum, spec.nodePortNumber!.maximum], [30000, 32767]);
  assert.equal(spec.image!.default, 'kfn.local/nginx:1.22');
  assert.ok(crd.versions[0]!.subresources, 'status subresource');
  const reconciler = objs.find((o) => o.kind === 'Reconciler')!.spec as { for: { kind: string }; owns: { kind: string }[]; sink: { ref: { name: string } }; auth: { secretRef: { name: string } } };
  assert.equal(reconciler.for.kind, 'MyWeb');
  assert.deepEqual(reconciler.owns.map((o) => o.kind), ['ConfigMap', 'Deployment', 'Service']);
  assert.equal(reconciler.sink.ref.name, 'kfn-fn-myweb');
  const fnRole = objs[2]!;
  const verbsFor = (resource: string) => fnRole.rules!.filter((r) => r.resources.includes(resource)).flatMap((r) => r.verbs);
  assert.deepEqual(verbsFor('mywebs'), ['get', 'list', 'patch']);
  assert.deepEqual(verbsFor('mywebs/status'), ['get', 'patch', 'update']);
  assert.ok(verbsFor('deployments').includes('delete'));
  assert.ok(!verbsFor('mywebs').includes('delete'), 'the function never deletes its own objects');
  assert.equal(verbsFor('secrets').length, 0, 'no access to what it does not declare');
  const bridgeRole = objs[4]!;
  assert.equal(bridgeRole.metadata.labels?.['kfn.dev/aggregate-to-bridge'], 'true');
  const [sinkRule, ...watchRules] = [...bridgeRole.rules!].reverse() as { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] }[];
  assert.ok(watchRules.every((r) => r.verbs.join() === 'list,watch'));
  assert.deepEqual(sinkRule, { apiGroups: ['serving.knative.dev'], resources: ['services'], verbs: ['get'], resourceNames: ['kfn-fn-myweb'] }, 'the bridge may read its sink, that one object only');
  const withUri = functionManifests(MyWebFunction, { sinkUri: 'http://x/' }).at(-2) as { rules: { verbs: string[] }[] };
  assert.ok(withUri.rules.every((r) => r.verbs.join() === 'list,watch'), 'a URL sink needs no read');
});

test('a function as a Knative Service: its account, concurrency and timeout from the Reconciler, Knative owns PORT, scale to zero', () => {
  const fn = { ...MyWebFunction, maxConcurrentReconciles: 4, timeoutSeconds: 45 } as unknown as Reconciler;
  const ksvc = functionKnativeService(fn, { namespace: 'fns', image: 'registry.example/fn-myweb:1', imageId: 'abc', windowSeconds: 6 }) as {
    metadata: { name: string; namespace: string };
    spec: { template: { metadata: { annotations: Record<string, string> }; spec: { serviceAccountName: string; containerConcurrency: number; timeoutSeconds: number; containers: { image: string; env: { name: string }[]; ports: { name: string; containerPort: number }[]; readinessProbe: { httpGet: { path: string; port?: unknown } } }[] } } };
  };
  assert.deepEqual([ksvc.metadata.name, ksvc.metadata.namespace], ['kfn-fn-myweb', 'fns']);
  const t = ksvc.spec.template;
  assert.equal(t.spec.serviceAccountName, 'kfn-fn-myweb');
  assert.equal(t.spec.containerConcurrency, 4);
  assert.equal(t.spec.timeoutSeconds, 45);
  assert.deepEqual(t.metadata.annotations, { 'autoscaling.knative.dev/min-scale': '0', 'autoscaling.knative.dev/window': '6s', 'kfn.dev/image-id': 'abc' });
  const c = t.spec.containers[0]!;
  assert.equal(c.image, 'registry.example/fn-myweb:1');
  assert.deepEqual(c.env.map((e) => e.name), ['KFN_AUTH_SECRET_FILE', 'KFN_RECORD'], 'PORT is Knative\'s to set; records by default (redacted, to its log)');
  const unrecorded = functionKnativeService(fn, { namespace: 'fns', image: 'i', record: false }) as typeof ksvc;
  assert.deepEqual(unrecorded.spec.template.spec.containers[0]!.env.map((e) => e.name), ['KFN_AUTH_SECRET_FILE'], 'kfn deploy --record off: no records');
  const traced = functionKnativeService(fn, { namespace: 'fns', image: 'i', otlpEndpoint: 'http://collector.observability:4318' }) as typeof ksvc & { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } };
  assert.deepEqual(traced.spec.template.spec.containers[0]!.env.at(-1), { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://collector.observability:4318' }, 'kfn deploy --otlp-endpoint: traces over OTLP');
  assert.deepEqual(c.ports, [{ name: 'http1', containerPort: 8080 }]);
  assert.deepEqual(c.readinessProbe.httpGet, { path: '/healthz' }, 'Knative probes the serving port itself');
  const defaults = functionKnativeService(MyWebFunction, { image: 'i' }) as typeof ksvc;
  assert.deepEqual([defaults.spec.template.spec.containerConcurrency, defaults.spec.template.spec.timeoutSeconds], [8, 30]);
  const reconciler = functionManifests(fn).find((o) => o.kind === 'Reconciler') as { spec: { maxConcurrentReconciles: number; timeoutSeconds: number } };
  assert.deepEqual([reconciler.spec.maxConcurrentReconciles, reconciler.spec.timeoutSeconds], [4, 45], 'the bridge honours the same numbers');
});

test('a function\'s pods get a grace period longer than its timeoutSeconds: on SIGTERM a reconcile in flight finishes', () => {
  const grace = (fn: Reconciler) => (functionWorkload(fn, { image: 'i' })[0] as { spec: { template: { spec: { terminationGracePeriodSeconds: number } } } }).spec.template.spec.terminationGracePeriodSeconds;
  assert.equal(grace(MyWebFunction), 40, 'the default timeoutSeconds, 30, and 10 s to exit');
  assert.equal(grace({ ...MyWebFunction, timeoutSeconds: 600 } as unknown as Reconciler), 610);
});

test('pluralOf follows the API names of common kinds', () => {
  assert.deepEqual(['ConfigMap', 'Policy', 'Ingress', 'Status', 'Endpoints'].map(pluralOf), ['configmaps', 'policies', 'ingresses', 'statuses', 'endpoints']);
  assert.deepEqual(['Batch', 'Gateway', 'Box', 'Mesh', 'Address'].map(pluralOf), ['batches', 'gateways', 'boxes', 'meshes', 'addresses']);
  assert.equal(defineKind({ group: 'a.example', version: 'v1', kind: 'Batch', spec: t.Object({}), status: t.Object({}) }).plural, 'batches', 'a kind\'s default plural is the same');
});

test('limited to namespaces, the function is bound by RoleBindings there; only cluster-scoped kinds stay cluster-wide', () => {
  const objs = functionManifests(MyWebFunction, { namespace: 'kfn-system', namespaces: ['team-a', 'team-b'] }) as {
    kind: string;
    metadata: { name: string; namespace?: string; labels: Record<string, string> };
    roleRef?: { name: string };
    subjects?: { name: string; namespace: string }[];
    rules?: { resources: string[]; verbs: string[] }[];
  }[];
  assert.deepEqual(objs.map((o) => o.kind), ['CustomResourceDefinition', 'ServiceAccount', 'ClusterRole', 'RoleBinding', 'RoleBinding', 'ClusterRole', 'ClusterRole', 'RoleBinding', 'RoleBinding', 'Reconciler']);
  const bindings = objs.filter((o) => o.kind === 'RoleBinding').map((o) => [o.metadata.namespace, o.roleRef!.name, `${o.subjects![0]!.namespace}/${o.subjects![0]!.name}`]);
  assert.deepEqual(bindings, [
    ['team-a', 'kfn-fn-myweb-namespaced', 'kfn-system/kfn-fn-myweb'],
    ['team-b', 'kfn-fn-myweb-namespaced', 'kfn-system/kfn-fn-myweb'],
    ['team-a', 'kfn-bridge-myweb-namespaced', 'kfn-system/kfn-bridge'],
    ['team-b', 'kfn-bridge-myweb-namespaced', 'kfn-system/kfn-bridge'],
  ], 'the function and the bridge alike: bound in the namespaces served');
  assert.equal(objs.some((o) => o.kind === 'ClusterRoleBinding'), false, 'no cluster-wide binding');
  const aggregated = objs.filter((o) => o.metadata.labels?.['kfn.dev/aggregate-to-bridge'] === 'true');
  assert.deepEqual(aggregated.map((o) => o.rules!.map((r) => `${r.resources.join()}:${r.verbs.join()}`)), [['services:get']], 'cluster-wide, the bridge only reads its sink');
  const bridgeNamespaced = objs.find((o) => o.metadata.name === 'kfn-bridge-myweb-namespaced')!;
  assert.deepEqual(bridgeNamespaced.rules!.map((r) => r.resources.join()), ['mywebs', 'configmaps', 'deployments', 'services']);
});

test('a watched kind is read by name unless the function says it lists it', () => {
  const rolesOf = (fn: Reconciler) => functionManifests(fn).filter((o) => o.kind === 'ClusterRole' && (o.metadata as { name: string }).name.startsWith('kfn-fn-')) as { rules: { resources: string[]; verbs: string[] }[] }[];
  const verbs = (fn: Reconciler, resource: string) => rolesOf(fn).flatMap((r) => r.rules).filter((r) => r.resources.includes(resource)).flatMap((r) => r.verbs);
  assert.deepEqual(verbs(IssuerFunction, 'secrets'), ['get', 'get'], 'the issuer reads the CA Secret its Issuer names: get, never list');
  assert.ok(verbs(PodSetFunction, 'pods').includes('list'), 'PodSet lists its Pods: `list: true` on its watch');
});

test('a watch given as a spread kind ({...Issuer, mapping}) becomes apiVersion, kind and mapping in the Reconciler', () => {
  const reconciler = functionManifests(CertificateFunction).find((o) => o.kind === 'Reconciler') as { spec: { watches: unknown[] } };
  assert.deepEqual(reconciler.spec.watches, [{ apiVersion: 'certs.kfn.dev/v1alpha1', kind: 'Issuer', mapping: { referenceField: 'spec.issuerRef.name' } }]);
});

test('a kind discovery says is cluster-scoped is granted cluster-wide, whatever kfn\'s own list knows', () => {
  const CSIDriver = { apiVersion: 'storage.k8s.io/v1', kind: 'CSIDriver' };
  const fn = { ...MyWebFunction, owns: [...(MyWebFunction.owns ?? []), CSIDriver] } as unknown as Reconciler;
  const rolesOf = (scopeOf?: (ref: { kind: string }) => 'Namespaced' | 'Cluster' | undefined) => {
    const objs = functionManifests(fn, { namespaces: ['team-a'], scopeOf }) as { kind: string; metadata: { name: string }; rules?: { resources: string[] }[] }[];
    const resources = (name: string) => objs.find((o) => o.kind === 'ClusterRole' && o.metadata.name === name)?.rules?.flatMap((r) => r.resources) ?? [];
    return { clusterWide: resources('kfn-fn-myweb'), namespaced: resources('kfn-fn-myweb-namespaced'), bound: objs.some((o) => o.kind === 'ClusterRoleBinding') };
  };
  const unknown = rolesOf();
  assert.ok(unknown.namespaced.includes('csidrivers'), 'without discovery, an unknown kind is taken as namespaced');
  const discovered = rolesOf((ref) => (ref.kind === 'CSIDriver' ? 'Cluster' : undefined));
  assert.deepEqual([discovered.clusterWide.includes('csidrivers'), discovered.namespaced.includes('csidrivers'), discovered.bound], [true, false, true]);
});

test('rights a function limits to names become RBAC resourceNames, beside its other rights on the kind', () => {
  const Shelf = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Shelf', spec: t.Object({}), status: t.Object({}) });
  const fn = defineReconciler({ name: 'shelves', for: Shelf, uses: [{ kind: Secret, verbs: ['get', 'patch'], names: ['shelf-settings'] }, { kind: Secret, verbs: ['create'] }], reconcile: () => ({}) });
  const role = functionManifests(fn).find((o) => o.kind === 'ClusterRole' && (o.metadata as { name: string }).name === 'kfn-fn-shelves') as { rules: { resources: string[]; verbs: string[]; resourceNames?: string[] }[] };
  const secrets = role.rules.filter((r) => r.resources.includes('secrets'));
  assert.deepEqual(secrets, [
    { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'patch'], resourceNames: ['shelf-settings'] },
    { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
  ]);
});

test('a function with webhooks on its Deployment may renew its own certificate, and nothing more: its TLS Secret in its namespace, its webhook configurations, each by name', () => {
  type Obj = { kind: string; metadata: { name: string; namespace?: string }; rules?: unknown[]; roleRef?: { name: string }; subjects?: { name: string; namespace: string }[] };
  const certificateObjects = (options: Parameters<typeof functionManifests>[1]) => (functionManifests(MyAppFunction, options) as Obj[]).filter((o) => o.metadata.name.startsWith('kfn-fn-myapp-certificate'));
  const deployment = { namespace: 'shop', sinkUri: functionServiceUrl(MyAppFunction, 'shop') };
  const objs = certificateObjects(deployment);
  assert.deepEqual(objs.map((o) => `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name} ${o.roleRef?.name ?? ''}`.trim()), [
    'ClusterRole kfn-fn-myapp-certificate-secret',
    'RoleBinding shop/kfn-fn-myapp-certificate kfn-fn-myapp-certificate-secret',
    'ClusterRole kfn-fn-myapp-certificate',
    'ClusterRoleBinding kfn-fn-myapp-certificate:shop kfn-fn-myapp-certificate',
  ], 'the Secret\'s right bound in its namespace only; the cluster-scoped configurations cluster-wide');
  assert.deepEqual(objs[0]!.rules, [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'update'], resourceNames: ['kfn-fn-myapp-webhook-tls'] }]);
  assert.deepEqual(objs[2]!.rules, [
    { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], verbs: ['get', 'patch'], resourceNames: ['kfn-fn-myapp'] },
  ], 'only its defaulting webhook (its validation is CEL in the CRD); no CRD: MyApp has no previous versions');
  assert.deepEqual(objs.flatMap((o) => o.subjects ?? []), [{ kind: 'ServiceAccount', name: 'kfn-fn-myapp', namespace: 'shop' }, { kind: 'ServiceAccount', name: 'kfn-fn-myapp', namespace: 'shop' }]);
  assert.deepEqual(certificateObjects({ ...deployment, webhookCa: 'cert-manager' }), [], 'cert-manager renews it');
  assert.deepEqual(certificateObjects({ namespace: 'shop' }), [], 'on Knative (no listener of its own)');
  assert.deepEqual(certificateObjects({ namespace: 'shop', sinkUri: 'http://127.0.0.1:8080/' }), [], 'a local process');
  assert.equal((functionManifests(MyWebFunction, { namespace: 'shop', sinkUri: functionServiceUrl(MyWebFunction, 'shop') }) as Obj[]).some((o) => o.metadata.name.includes('certificate')), false, 'no webhooks, no certificate');

  const env = (options: { webhookCa?: 'kfn' | 'cert-manager' }) => (functionWorkload(MyAppFunction, { namespace: 'shop', image: 'i', ...options })[0] as { spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } }).spec.template.spec.containers[0]!.env;
  assert.deepEqual(env({}).find((e) => e.name === 'KFN_TLS_SECRET'), { name: 'KFN_TLS_SECRET', value: 'shop/kfn-fn-myapp-webhook-tls' }, 'the Secret the function renews');
  assert.equal(env({ webhookCa: 'cert-manager' }).some((e) => e.name === 'KFN_TLS_SECRET'), false);
});

test('deliveryTls: the Deployment serves deliveries on its HTTPS port, the Reconciler\'s sink is that port with the function\'s CA, and the function may write that CA there', () => {
  const Shelf = defineKind({ group: 'test.kfn.dev', version: 'v1', kind: 'Shelf', spec: t.Object({}), status: t.Object({}) });
  const fn = defineReconciler({ name: 'shelves', for: Shelf, deliveryTls: true, reconcile: () => ({}) });
  const url = functionServiceUrl(fn, 'shop');
  assert.equal(url, 'https://kfn-fn-shelves.shop.svc.cluster.local/');
  const ca = generateServingPki('kfn-fn-shelves', ['kfn-fn-shelves.shop.svc']).caCert;
  const objs = functionManifests(fn, { namespace: 'shop', sinkUri: url, deliveryCaBundle: ca }) as { kind: string; metadata: { name: string }; rules?: unknown[]; spec?: { sink: unknown } }[];
  const reconciler = objs.find((o) => o.kind === 'Reconciler')!;
  assert.deepEqual(reconciler.spec!.sink, { uri: url, caBundle: ca });
  assert.deepEqual(parseReconciler(reconciler).sink, { uri: url, caBundle: ca }, 'a spec the bridge takes');
  assert.deepEqual(objs.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'kfn-fn-shelves-certificate')!.rules, [{ apiGroups: ['kfn.dev'], resources: ['reconcilers'], verbs: ['get', 'patch'], resourceNames: ['shelves'] }], 'its own Reconciler, to keep the CA current there');
  assert.deepEqual((functionManifests(fn, { namespace: 'shop', sinkUri: url }).find((o) => o.kind === 'Reconciler') as { spec: { sink: unknown } }).spec.sink, { uri: url }, 'without the bundle: the function writes it when it starts');
  assert.deepEqual((functionManifests(fn, { namespace: 'shop', sinkUri: 'https://elsewhere.example/', deliveryCaBundle: ca }).find((o) => o.kind === 'Reconciler') as { spec: { sink: unknown } }).spec.sink, { uri: 'https://elsewhere.example/' }, 'another sink keeps to its own certificate');

  const [deployment, service] = functionWorkload(fn, { namespace: 'shop', image: 'i' }) as [
    { spec: { template: { spec: { containers: { env: { name: string; value: string }[]; ports: { name: string }[] }[]; volumes: { name: string }[] } } } },
    { spec: { ports: { name: string; port: number }[] } },
  ];
  const c = deployment.spec.template.spec.containers[0]!;
  assert.deepEqual(c.ports.map((p) => p.name), ['http', 'webhook'], 'the HTTPS listener, without webhooks');
  assert.ok(c.env.some((e) => e.name === 'KFN_TLS_SECRET' && e.value === 'shop/kfn-fn-shelves-webhook-tls'));
  assert.deepEqual(service.spec.ports.map((p) => p.port), [80, 443]);
});

type Manifest = { kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }; roleRef?: { name: string }; subjects?: { kind: string; name: string; namespace: string }[]; spec?: Record<string, unknown> };

test('a shared host: one ServiceAccount serving every Reconciler, each function\'s RBAC bound to it, each sink on the function\'s path', () => {
  const objs = hostManifests('pair', [PodSetFunction, ProjectFunction], { namespace: 'fns' }) as Manifest[];
  const accounts = objs.filter((o) => o.kind === 'ServiceAccount');
  assert.deepEqual(accounts.map((o) => `${o.metadata.namespace}/${o.metadata.name}`), ['fns/kfn-host-pair'], 'one identity, and none of the functions\' own');
  assert.deepEqual(accounts[0]!.metadata.labels, { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/host': 'pair' });
  assert.equal(accounts[0]!.metadata.annotations?.['kfn.dev/identity-for'], 'podset,project');
  assert.ok(['podset', 'project'].every((name) => serviceAccountServes(accounts[0]!.metadata.annotations, name)), 'it agrees to be the identity of both Reconcilers');
  assert.equal(objs[0]!.kind, 'ServiceAccount', 'first: it exists when the bridge sees the Reconcilers');
  const functionBindings = objs.filter((o) => /RoleBinding$/.test(o.kind) && o.metadata.name.startsWith('kfn-fn-'));
  assert.deepEqual(functionBindings.map((o) => `${o.metadata.name} → ${o.roleRef!.name}`), ['kfn-fn-podset:fns → kfn-fn-podset', 'kfn-fn-project:fns → kfn-fn-project'], 'each function\'s own rights, named for it');
  assert.ok(functionBindings.every((o) => JSON.stringify(o.subjects) === JSON.stringify([{ kind: 'ServiceAccount', name: 'kfn-host-pair', namespace: 'fns' }])), 'bound to the host\'s account: its identity is the union of its functions\' rights');
  const bridgeRoles = objs.filter((o) => o.kind === 'ClusterRole' && o.metadata.labels?.['kfn.dev/aggregate-to-bridge'] === 'true');
  assert.deepEqual(bridgeRoles.map((o) => o.metadata.name), ['kfn-bridge-podset', 'kfn-bridge-project'], 'the bridge\'s grants as for functions on their own');
  const reconcilers = objs.filter((o) => o.kind === 'Reconciler');
  assert.deepEqual(reconcilers.map((o) => o.spec!.serviceAccount), [{ name: 'kfn-host-pair', namespace: 'fns' }, { name: 'kfn-host-pair', namespace: 'fns' }]);
  assert.deepEqual(reconcilers.map((o) => o.spec!.sink), [{ uri: 'http://kfn-host-pair.fns.svc.cluster.local/podset/' }, { uri: 'http://kfn-host-pair.fns.svc.cluster.local/project/' }]);
  assert.deepEqual(reconcilers.map((o) => o.spec!.auth), [{ secretRef: { name: 'kfn-fn-podset', namespace: 'fns' } }, { secretRef: { name: 'kfn-fn-project', namespace: 'fns' } }], 'each function keeps its own key');
  for (const r of reconcilers) assert.equal(parseReconciler(r).sink.uri, (r.spec!.sink as { uri: string }).uri, 'a spec the bridge takes');
  assert.equal(objs.at(-1)!.kind, 'Reconciler');
  const limited = hostManifests('pair', [PodSetFunction, ProjectFunction], { namespace: 'fns', namespaces: ['team-a'] }) as Manifest[];
  const roleBindings = limited.filter((o) => o.kind === 'RoleBinding' && o.metadata.name.startsWith('kfn-fn-'));
  assert.deepEqual(roleBindings.map((o) => `${o.metadata.namespace}/${o.metadata.name} → ${o.subjects![0]!.name}`), ['team-a/kfn-fn-podset:fns → kfn-host-pair', 'team-a/kfn-fn-project:fns → kfn-host-pair'], 'limited to namespaces: RoleBindings there, to the host');
  assert.throws(() => hostManifests('pair', [PodSetFunction, MyAppFunction]), /myapp \(default\) needs a TLS listener of its own/);
});

test("a shared host's workload: one Deployment and Service, every function's auth Secret mounted as a file named by the function", () => {
  const slow = { ...ProjectFunction, timeoutSeconds: 90 } as unknown as Reconciler;
  const objs = hostWorkload('pair', [PodSetFunction, slow], { namespace: 'fns', image: 'kfn.local/host-pair:1', imageId: 'abc', imagePullSecrets: ['kfn-registry'] }) as Manifest[];
  assert.deepEqual(objs.map((o) => `${o.kind} ${o.metadata.namespace}/${o.metadata.name}`), ['Deployment fns/kfn-host-pair', 'Service fns/kfn-host-pair']);
  type Pod = { serviceAccountName: string; terminationGracePeriodSeconds: number; imagePullSecrets: { name: string }[]; volumes: { name: string; projected: { sources: { secret: { name: string; items: { key: string; path: string }[] } }[] } }[]; containers: { image: string; env: { name: string; value: string }[]; volumeMounts: { name: string; mountPath: string; readOnly: boolean }[]; readinessProbe: { httpGet: { path: string } } }[] };
  const deployment = objs[0]!.spec as { selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string>; annotations: Record<string, string> }; spec: Pod } };
  const pod = deployment.template.spec;
  assert.equal(pod.serviceAccountName, 'kfn-host-pair');
  assert.equal(pod.terminationGracePeriodSeconds, 100, 'the longest of the functions\' timeouts, and 10 s to exit');
  assert.deepEqual(pod.imagePullSecrets, [{ name: 'kfn-registry' }]);
  assert.deepEqual(deployment.template.metadata.annotations, { 'kfn.dev/image-id': 'abc' });
  const c = pod.containers[0]!;
  assert.equal(c.image, 'kfn.local/host-pair:1');
  assert.deepEqual(c.env, [{ name: 'PORT', value: '8080' }, { name: 'KFN_AUTH_SECRET_DIR', value: '/var/run/kfn/auth' }, { name: 'KFN_RECORD', value: 'stdout' }]);
  assert.deepEqual(c.volumeMounts, [{ name: 'auth', mountPath: '/var/run/kfn/auth', readOnly: true }]);
  assert.equal(c.readinessProbe.httpGet.path, '/healthz');
  assert.deepEqual(pod.volumes, [{ name: 'auth', projected: { sources: [{ secret: { name: 'kfn-fn-podset', items: [{ key: 'secret', path: 'podset' }] } }, { secret: { name: 'kfn-fn-project', items: [{ key: 'secret', path: 'project' }] } }] } }], 'every function\'s key, each in the file the host reads it from');
  const service = objs[1]!.spec as { selector: Record<string, string>; ports: unknown[] };
  assert.deepEqual(service.selector, deployment.template.metadata.labels);
  assert.deepEqual(deployment.selector.matchLabels, { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/host': 'pair' }, 'no function\'s Service selects the host\'s pods (they carry no kfn.dev/function)');
  assert.deepEqual(service.ports, [{ name: 'http', port: 80, targetPort: 'http' }]);
  assert.throws(() => hostWorkload('pair', [MyAppFunction], { image: 'i' }), /myapp \(default\) needs a TLS listener/);
});


test('a function whose declared defaults are the apiserver\'s policies is told so in its environment, on both targets', () => {
  const env = (objs: Record<string, unknown>[]) => objs.flatMap((o) => ((o.spec as { template?: { spec: { containers: { env: { name: string; value: string }[] }[] } } } | undefined)?.template?.spec.containers ?? []).flatMap((c) => c.env));
  const flag = (e: { name: string; value: string }[]) => e.filter((v) => v.name === 'KFN_DEFAULTS_AS_POLICIES').map((v) => v.value);
  assert.deepEqual(flag(env(functionWorkload(MyAppFunction, { image: 'x', defaultsAsPolicies: true }))), ['true']);
  assert.deepEqual(flag(env(functionWorkload(MyAppFunction, { image: 'x' }))), []);
  assert.deepEqual(flag(env([functionKnativeService(MyAppFunction, { image: 'x', defaultsAsPolicies: true })])), ['true']);
});

test('at rest, a function on a Deployment is probed as kubebuilder probes an operator; at start, every second until it answers', () => {
  type Probe = { httpGet: { path: string; port?: string }; periodSeconds: number; failureThreshold?: number };
  type Container = { readinessProbe: Probe; livenessProbe?: Probe; startupProbe?: Probe };
  const containerOf = (objs: Record<string, unknown>[], kind: string) => (objs.find((o) => o.kind === kind)!.spec as { template: { spec: { containers: Container[] } } }).template.spec.containers[0]!;
  for (const c of [containerOf(functionWorkload(MyWebFunction, { image: 'i' }) as Record<string, unknown>[], 'Deployment'), containerOf(hostWorkload('pair', [PodSetFunction, ProjectFunction], { image: 'i' }) as Record<string, unknown>[], 'Deployment')]) {
    // Probes are HTTP requests the function answers: every 2 s they were most of its idle CPU.
    assert.deepEqual([c.readinessProbe.periodSeconds, c.livenessProbe?.periodSeconds], [10, 20], 'readiness every 10 s, liveness every 20 s');
    assert.deepEqual(c.startupProbe, { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 1, failureThreshold: 120 }, 'a new pod is probed every second (the kubelet runs the readiness probe as soon as it answers), for up to 2 minutes');
  }
  const knative = containerOf([functionKnativeService(MyWebFunction, { image: 'i' }) as Record<string, unknown>], 'Service');
  assert.equal(knative.readinessProbe.periodSeconds, 1, 'Knative: the queue proxy probes, at every scale from zero');
  assert.equal(knative.startupProbe, undefined);
});

test('scaled to zero by the bridge: the Reconciler names the Deployment, the bridge may read it and set its scale there alone, and the Deployment is written without replicas (a redeploy neither wakes it nor fights the bridge)', () => {
  const sinkUri = functionServiceUrl(MyWebFunction, 'fns');
  const objs = functionManifests(MyWebFunction, { namespace: 'fns', sinkUri, scaleToZero: { deployment: 'kfn-fn-myweb', idleSeconds: 30 } }) as { kind: string; metadata: { name: string; namespace?: string }; rules?: { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] }[]; subjects?: { name: string; namespace: string }[]; spec?: Record<string, unknown> }[];
  const reconciler = parseReconciler(objs.find((o) => o.kind === 'Reconciler'));
  assert.deepEqual(reconciler.sink.scaleToZero, { deployment: { name: 'kfn-fn-myweb', namespace: 'fns' }, idleSeconds: 30, maxReplicas: 1, keysPerReplica: 10 });
  assert.equal(reconciler.resyncBatch, true, 'resyncs in one batch per period: one wake, not one per object');
  assert.equal(reconciler.resyncPeriodSeconds, 36_000, 'as rarely as on Knative');
  const role = objs.find((o) => o.kind === 'Role' && o.metadata.name === 'kfn-bridge-myweb-scale')!;
  assert.equal(role.metadata.namespace, 'fns');
  assert.deepEqual(role.rules, [
    { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get'], resourceNames: ['kfn-fn-myweb'] },
    { apiGroups: ['apps'], resources: ['deployments/scale'], verbs: ['get', 'patch', 'update'], resourceNames: ['kfn-fn-myweb'] },
  ]);
  const binding = objs.find((o) => o.kind === 'RoleBinding' && o.metadata.name === 'kfn-bridge-myweb-scale')!;
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'kfn-bridge', namespace: 'kfn-system' }]);
  const deployment = functionWorkload(MyWebFunction, { namespace: 'fns', image: 'fn-myweb:1', scaleToZero: true }).find((o) => o.kind === 'Deployment') as { spec: Record<string, unknown> };
  assert.equal('replicas' in deployment.spec, false);
  const always = functionWorkload(MyWebFunction, { namespace: 'fns', image: 'fn-myweb:1' }).find((o) => o.kind === 'Deployment') as { spec: { replicas: number } };
  assert.equal(always.spec.replicas, 1);
  // A shared host: every function's Reconciler names the host's one Deployment.
  const hosted = hostManifests('ops', [MyWebFunction, PodSetFunction], { namespace: 'fns', scaleToZero: {} }).filter((o) => o.kind === 'Reconciler').map((o) => parseReconciler(o).sink.scaleToZero?.deployment.name);
  assert.deepEqual(hosted, ['kfn-host-ops', 'kfn-host-ops']);
});

test('limited to many namespaces (past namespacesWatchedEach), the bridge is granted list/watch cluster-wide, as it watches each kind once; the function stays bound namespace by namespace', () => {
  const namespaces = Array.from({ length: 40 }, (_, i) => `team-${i}`);
  const objs = functionManifests(MyWebFunction, { namespace: 'kfn-system', namespaces }) as { kind: string; metadata: { name: string; namespace?: string; labels: Record<string, string> }; roleRef?: { name: string }; subjects?: { name: string }[]; rules?: { resources: string[]; verbs: string[] }[] }[];
  const aggregated = objs.find((o) => o.metadata.labels?.['kfn.dev/aggregate-to-bridge'] === 'true')!;
  assert.ok(aggregated.rules!.some((r) => r.resources.includes('mywebs') && r.verbs.includes('watch')), 'the bridge lists and watches MyWebs everywhere');
  assert.equal(objs.filter((o) => o.kind === 'RoleBinding' && o.subjects![0]!.name === 'kfn-bridge').length, 0, 'no RoleBinding of the bridge per namespace');
  assert.equal(objs.filter((o) => o.kind === 'RoleBinding' && o.subjects![0]!.name === 'kfn-fn-myweb').length, 40, "the function's own rights stay in its namespaces");
});
