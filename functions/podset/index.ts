// PodSet (apps.jicki.cn/v1alpha1): spec.size busybox pods (`sleep 3600`) through a Deployment
// with the seed's labels; status.nodes lists the names of its running pods, kept current as
// pods come and go (Pods are watched and mapped to their PodSet by the podSet_cr label).
import { Deployment, Pod, defineKind, defineReconciler, t, type Desired, type ObjectOf } from '../sdk/index.ts';

export const PodSet = defineKind({
  group: 'apps.jicki.cn',
  version: 'v1alpha1',
  kind: 'PodSet',
  spec: t.Object({ size: t.Integer({ minimum: 0, description: 'Size is the size of the PodSet deployment' }) }),
  status: t.Object({ nodes: t.Optional(t.Array(t.String(), { description: 'Nodes are the names of the PodSet pods' })) }),
  printerColumns: [
    { name: 'Size', type: 'integer', jsonPath: '.spec.size' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  ],
});
type PodSetObject = ObjectOf<typeof PodSet>;

const labelsFor = (name: string) => ({ app: 'podSet', podSet_cr: name });

const deployment = (set: PodSetObject): Desired<typeof Deployment> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: set.metadata.name },
  spec: {
    replicas: set.spec.size,
    selector: { matchLabels: labelsFor(set.metadata.name) },
    template: {
      metadata: { labels: labelsFor(set.metadata.name) },
      spec: { containers: [{ name: 'podset', image: 'kfn.local/busybox:1.35', command: ['sleep', '3600'], ports: [{ containerPort: 1234, name: 'podset' }] }] },
    },
  },
});

export default defineReconciler({
  name: 'podset',
  for: PodSet,
  owns: [Deployment],
  watches: [{ ...Pod, mapping: { label: 'podSet_cr' }, list: true }],
  async reconcile(set, ctx) {
    const pods = await ctx.list(Pod, { namespace: set.metadata.namespace, labelSelector: `podSet_cr=${set.metadata.name}` });
    const nodes = pods.filter((p) => p.status?.phase === 'Running' && !p.metadata.deletionTimestamp).map((p) => p.metadata.name).sort();
    return {
      children: [deployment(set)],
      status: { nodes },
      ready: nodes.length === set.spec.size || { ready: false, reason: 'Scaling', message: `${nodes.length}/${set.spec.size} pods running` },
    };
  },
});
