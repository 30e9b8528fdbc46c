// MyWeb's reconcile without a cluster (functions/sdk/testing.ts): what it wants for a new
// object, Ready from the live Deployment, an edited page, and a child the apiserver refuses.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, Deployment, Service } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import MyWebFunction from './index.ts';

const web = (html = '<h1>hi</h1>') => ({ metadata: { name: 'site', namespace: 'demo' }, spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: 30080, pageContentHtml: html } });
type Dep = { spec: { replicas: number; template: { metadata: { annotations: Record<string, string> }; spec: { containers: { image: string }[] } } } };

test('a new MyWeb: page ConfigMap, nginx Deployment and NodePort Service, owned; not Ready until the Deployment is available', async () => {
  const out = await testReconcile(MyWebFunction, { object: web(), reason: 'created' });
  assert.equal(out.error, undefined);
  assert.deepEqual(out.children.map((c) => `${c.kind}/${c.metadata.name}`), ['ConfigMap/site-page', 'Deployment/site', 'Service/site']);
  assert.equal(out.child<{ data: Record<string, string> }>(ConfigMap, 'site-page')?.data['index.html'], '<h1>hi</h1>');
  const dep = out.child<Dep>(Deployment, 'site')!;
  assert.equal(dep.spec.replicas, 1);
  assert.equal(dep.spec.template.spec.containers[0]!.image, 'kfn.local/nginx:1.22');
  assert.equal(out.child<{ spec: { type: string; ports: { nodePort: number }[] } }>(Service, 'site')?.spec.ports[0]!.nodePort, 30080);
  for (const c of out.children) assert.equal((c.metadata as { ownerReferences: { kind: string; controller: boolean }[] }).ownerReferences[0]!.kind, 'MyWeb');
  assert.deepEqual([out.ready?.status, out.ready?.reason], ['False', 'DeploymentNotAvailable']);
  assert.equal(out.status?.completed, false);
});

test('Ready once the live Deployment has an available replica', async () => {
  const live = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'site' }, spec: {}, status: { availableReplicas: 1 } };
  const out = await testReconcile(MyWebFunction, { object: web(), children: [live] });
  assert.deepEqual([out.ready?.status, out.ready?.reason], ['True', 'Reconciled']);
  assert.equal(out.status?.completed, true);
});

test('an edited page changes the pod template (a rollout), not only the ConfigMap', async () => {
  const hash = async (html: string) => (await testReconcile(MyWebFunction, { object: web(html) })).child<Dep>(Deployment, 'site')!.spec.template.metadata.annotations['myweb.kfn.dev/page-sha256'];
  assert.notEqual(await hash('<h1>v1</h1>'), await hash('<h1>v2</h1>'));
});

test('a port in use: the Service is refused, Ready=False with the apiserver message, retried', async () => {
  const out = await testReconcile(MyWebFunction, {
    object: web(),
    refuse: (w) => (w.path.endsWith('/services/site') ? { status: 422, message: 'Service "site" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated' } : undefined),
  });
  assert.equal(out.result?.result, 'requeue');
  assert.deepEqual([out.ready?.status, out.ready?.reason], ['False', 'Invalid']);
  assert.match(out.ready!.message, /provided port is already allocated/);
  assert.ok(out.get(ConfigMap, 'site-page'), 'the other children were applied');
});
