import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ingressClass, knativeManifests, localSettings } from './knative.ts';
import { traefikManifests } from './traefik.ts';

/** A config tree shaped like the one the build copies out of Knative's modules, one object per file. */
function configTree(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-knative-'));
  const put = (path: string, yaml: string) => {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), yaml);
  };
  const crd = (name: string) => `apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: ${name}}\n`;
  const cm = (name: string) => `# comment\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ${name}, namespace: knative-serving}\ndata: {_example: x}\n`;
  const deployment = (name: string) => `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ${name}, namespace: knative-serving}\nspec:\n  template:\n    spec:\n      containers:\n      - name: ${name}\n        image: ko://knative.dev/serving/cmd/${name}\n        resources: {requests: {cpu: 300m, memory: 60Mi}}\n`;
  put('serving/core/100-namespace.yaml', 'apiVersion: v1\nkind: Namespace\nmetadata: {name: knative-serving}\n');
  put('serving/core/300-resources/service.yaml', crd('services.serving.knative.dev'));
  for (const n of ['certificate', 'ingress', 'serverlessservice', 'domain-claim']) put(`networking/${n}.yaml`, crd(`${n}.networking.internal.knative.dev`));
  put('caching/image.yaml', crd('images.caching.internal.knative.dev'));
  put('serving/core/200-serviceaccount.yaml', 'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: controller, namespace: knative-serving}\n');
  put('serving/core/200-roles/clusterrole.yaml', 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: knative-serving-admin}\n---\n');
  for (const n of ['config-deployment', 'config-autoscaler']) put(`serving/core/configmaps/${n}.yaml`, cm(n));
  put('networking/config-network.yaml', cm('config-network'));
  put('serving/core/webhooks/resource-validation.yaml', 'apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: validation.webhook.serving.knative.dev}\n');
  put('serving/core/deployments/controller.yaml', deployment('controller'));
  put('serving/core/deployments/activator-hpa.yaml', 'apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: activator, namespace: knative-serving}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: activator-pdb, namespace: knative-serving}\n');
  put('serving/core/999-cache.yaml', 'apiVersion: caching.internal.knative.dev/v1alpha1\nkind: Image\nmetadata: {name: queue-proxy, namespace: knative-serving}\nspec: {image: ko://knative.dev/serving/cmd/queue}\n');
  return dir;
}

const images = { controller: 'kfn.local/knative-controller:v0.50.0', queue: 'kfn.local/knative-queue:v0.50.0' };

test("Knative's own manifests, in an order that applies: namespace, CRDs, RBAC, config, webhooks, workloads", () => {
  const dir = configTree();
  try {
    const objs = knativeManifests(dir, images);
    assert.deepEqual(objs.map((o) => o.kind), ['Namespace', 'CustomResourceDefinition', 'CustomResourceDefinition', 'CustomResourceDefinition', 'CustomResourceDefinition', 'CustomResourceDefinition', 'CustomResourceDefinition', 'ServiceAccount', 'ClusterRole', 'ConfigMap', 'ConfigMap', 'ConfigMap', 'ValidatingWebhookConfiguration', 'PodDisruptionBudget', 'Deployment', 'Image']);
    assert.ok(!objs.some((o) => o.kind === 'HorizontalPodAutoscaler'), 'no HPA: nothing serves resource metrics here');
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test('images built here replace ko:// references; local settings and small CPU requests are applied', () => {
  const dir = configTree();
  try {
    const objs = knativeManifests(dir, images);
    const text = JSON.stringify(objs);
    assert.ok(!text.includes('ko://'), 'no ko:// reference left');
    const data = (name: string) => objs.find((o) => o.metadata.name === name)!.data as Record<string, string>;
    assert.equal(data('config-network')['ingress-class'], ingressClass);
    assert.equal(data('config-deployment')['queue-sidecar-image'], images.queue);
    assert.match(data('config-deployment')['registries-skipping-tag-resolving']!, /kfn\.local/);
    assert.equal(data('config-autoscaler')['scale-to-zero-grace-period'], localSettings.autoscaler['scale-to-zero-grace-period']);
    assert.equal(data('config-network')._example, 'x', 'what Knative ships stays');
    const controller = objs.find((o) => o.kind === 'Deployment')!.spec as { template: { spec: { containers: { image: string; resources: { requests: Record<string, string> } }[] } } };
    assert.deepEqual(controller.template.spec.containers[0], { name: 'controller', image: images.controller, resources: { requests: { cpu: localSettings.cpuRequest, memory: '60Mi' } } });
    assert.equal((objs.at(-1)!.spec as { image: string }).image, images.queue);
    assert.throws(() => knativeManifests(dir, { controller: images.controller }), /no image built for ko:\/\/knative\.dev\/serving\/cmd\/queue/);
    rmSync(join(dir, 'networking', 'ingress.yaml'));
    assert.throws(() => knativeManifests(dir, images), /Knative's manifest .*ingress\.yaml is missing/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("Traefik serves Knative's public and cluster-local routes on one entrypoint behind kfn-ingress/traefik", () => {
  const objs = traefikManifests('kfn.local/traefik:v3', localSettings.cpuRequest);
  const deployment = objs.find((o) => o.kind === 'Deployment')!.spec as { template: { spec: { containers: { args: string[]; securityContext: { readOnlyRootFilesystem: boolean } }[] } } };
  const args = deployment.template.spec.containers[0]!.args;
  for (const a of ['--experimental.knative=true', '--providers.knative=true', '--providers.knative.publicentrypoints=web', '--providers.knative.privateentrypoints=web', '--providers.knative.publicservice.name=traefik', '--providers.knative.privateservice.namespace=kfn-ingress']) {
    assert.ok(args.includes(a), `${a} in ${args.join(' ')}`);
  }
  const service = objs.find((o) => o.kind === 'Service')!.spec as { ports: { port: number; targetPort: string }[] };
  assert.deepEqual(service.ports, [{ name: 'http', port: 80, targetPort: 'web' }]);
  const role = objs.find((o) => o.kind === 'ClusterRole') as unknown as { rules: { resources: string[]; verbs: string[] }[] };
  assert.ok(role.rules.every((r) => !r.verbs.some((v) => ['create', 'delete', 'patch'].includes(v))), 'Traefik only reads, and updates Ingress status');
});
