// MyWeb (operator.k8s-summit.org/v1): a web page served by nginx on a NodePort. The page goes
// into a ConfigMap, nginx serves it from a Deployment (the pod template carries a hash of the
// page, so an edit rolls the pods), and a NodePort Service exposes it.
import { createHash } from 'node:crypto';
import { ConfigMap, Deployment, Pod, Service, defineKind, defineReconciler, explainWorkload, t, type Desired, type ObjectOf } from '../sdk/index.ts';

export const MyWeb = defineKind({
  group: 'operator.k8s-summit.org',
  version: 'v1',
  kind: 'MyWeb',
  shortNames: ['web'],
  categories: ['all'],
  spec: t.Object({
    image: t.String({ default: 'kfn.local/nginx:1.22', minLength: 1 }),
    nodePortNumber: t.Integer({ minimum: 30000, maximum: 32767 }),
    pageContentHtml: t.String({ default: '' }),
  }),
  status: t.Object({ completed: t.Optional(t.Boolean()) }),
  printerColumns: [
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
    { name: 'Port', type: 'integer', jsonPath: '.spec.nodePortNumber' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
    { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
  ],
});
type Web = ObjectOf<typeof MyWeb>;

/**
 * The web's name where Kubernetes allows 63 characters at most (label values, Service names),
 * while a MyWeb's own name may be longer: a longer one is cut and ends with a hash of the whole.
 */
export function shortName(name: string): string {
  if (name.length <= 63) return name;
  return `${name.slice(0, 52).replace(/[-.]+$/, '')}-${createHash('sha256').update(name).digest('hex').slice(0, 10)}`;
}

const labels = (web: Web) => ({ 'app.kubernetes.io/name': 'myweb', 'app.kubernetes.io/instance': shortName(web.metadata.name) });

const page = (web: Web): Desired<typeof ConfigMap> => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: `${web.metadata.name}-page`, labels: labels(web) },
  data: { 'index.html': web.spec.pageContentHtml },
});

const deployment = (web: Web): Desired<typeof Deployment> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: web.metadata.name, labels: labels(web) },
  spec: {
    replicas: 1,
    selector: { matchLabels: labels(web) },
    template: {
      metadata: {
        labels: labels(web),
        annotations: { 'myweb.kfn.dev/page-sha256': createHash('sha256').update(web.spec.pageContentHtml).digest('hex').slice(0, 16) },
      },
      spec: {
        containers: [
          {
            name: 'nginx',
            image: web.spec.image,
            ports: [{ containerPort: 80 }],
            volumeMounts: [{ name: 'page', mountPath: '/usr/share/nginx/html' }],
          },
        ],
        volumes: [{ name: 'page', configMap: { name: `${web.metadata.name}-page` } }],
      },
    },
  },
});

const service = (web: Web): Desired<typeof Service> => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: shortName(web.metadata.name), labels: labels(web) },
  spec: { type: 'NodePort', selector: labels(web), ports: [{ port: 80, targetPort: 80, nodePort: web.spec.nodePortNumber }] },
});

export default defineReconciler({
  name: 'myweb',
  for: MyWeb,
  owns: [ConfigMap, Deployment, Service],
  // What its events carry of each child: the Deployment's status (is it available?) and
  // selector (explainWorkload lists its pods by it); only the metadata of the others.
  observe: [
    { kind: ConfigMap, fields: [] },
    { kind: Deployment, fields: ['status', 'spec.selector'] },
    { kind: Service, fields: [] },
  ],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  async reconcile(web, ctx) {
    const live = ctx.owned(Deployment, web.metadata.name);
    const available = (live?.status?.availableReplicas ?? 0) >= 1;
    const why = available ? undefined : await explainWorkload(ctx, Deployment, live);
    return {
      children: [page(web), deployment(web), service(web)],
      status: { completed: available },
      ready: available ? true : { ready: false, reason: 'DeploymentNotAvailable', message: why ?? `waiting for Deployment ${web.metadata.name} to be available` },
    };
  },
});
