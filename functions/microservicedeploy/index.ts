// MicroServiceDeploy (custom.ops/v1): the seed's micro-service instance. A Deployment of the
// image (replicas, or 0 when idle), a Service, the runtime config in a ConfigMap, and a
// HorizontalPodAutoscaler while autoscaling is on (it is pruned when it turns off; while it
// is on, the HPA owns the replica count).
import { ConfigMap, Deployment, containerResources, explainedFields, explainWorkload, HorizontalPodAutoscaler, Pod, Service, defineKind, defineReconciler, resourceRequirements, t, type Desired, type ObjectOf } from '../sdk/index.ts';


export const MicroServiceDeploy = defineKind({
  group: 'custom.ops',
  version: 'v1',
  kind: 'MicroServiceDeploy',
  spec: t.Object({
    msName: t.String({ minLength: 1, description: 'micro-service name' }),
    fullName: t.String({ minLength: 1, description: 'instance name' }),
    version: t.String({ minLength: 1 }),
    path: t.String({ description: 'major version, part of the instance domain' }),
    image: t.String({ minLength: 1 }),
    replicas: t.Integer({ minimum: 0 }),
    autoscaling: t.Boolean({ default: false }),
    needAuth: t.Boolean({ default: false }),
    config: t.String({ default: '' }),
    creationTimestamp: t.Optional(t.String()),
    resourceRequirements: t.Optional(resourceRequirements()),
    idle: t.Boolean({ default: false }),
  }),
  status: t.Object({ availableReplicas: t.Optional(t.Integer()) }),
  printerColumns: [
    { name: 'Service', type: 'string', jsonPath: '.spec.msName' },
    { name: 'Version', type: 'string', jsonPath: '.spec.version' },
    { name: 'Idle', type: 'boolean', jsonPath: '.spec.idle' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  ],
});
type Ms = ObjectOf<typeof MicroServiceDeploy>;

/** What it owns; its children are typed by these kinds' models. */
const owns = [ConfigMap, Deployment, Service, HorizontalPodAutoscaler] as const;

function children(ms: Ms): Desired<(typeof owns)[number]>[] {
  const name = ms.spec.fullName;
  const labels = { ms: ms.spec.msName, 'ms-version': ms.spec.version, 'ms-path': ms.spec.path, 'ms-instance': name };
  const autoscaled = ms.spec.autoscaling && !ms.spec.idle;
  const out: Desired<(typeof owns)[number]>[] = [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${name}-config`, labels }, data: { config: ms.spec.config } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, labels, annotations: { 'custom.ops/need-auth': String(ms.spec.needAuth) } },
      spec: {
        // Idle scales to zero; with autoscaling the HPA decides the count.
        ...(autoscaled ? {} : { replicas: ms.spec.idle ? 0 : ms.spec.replicas }),
        selector: { matchLabels: { 'ms-instance': name } },
        template: {
          metadata: { labels },
          spec: {
            containers: [
              {
                name: ms.spec.msName,
                image: ms.spec.image,
                envFrom: [{ configMapRef: { name: `${name}-config` } }],
                ...(ms.spec.resourceRequirements ? { resources: containerResources(ms.spec.resourceRequirements) } : {}),
              },
            ],
          },
        },
      },
    },
    { apiVersion: 'v1', kind: 'Service', metadata: { name, labels }, spec: { selector: { 'ms-instance': name }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] } },
  ];
  if (autoscaled) {
    out.push({
      apiVersion: 'autoscaling/v2',
      kind: 'HorizontalPodAutoscaler',
      metadata: { name, labels },
      spec: {
        scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name },
        minReplicas: Math.max(1, ms.spec.replicas),
        maxReplicas: Math.max(1, ms.spec.replicas) * 3,
        metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 80 } } }],
      },
    });
  }
  return out;
}

export default defineReconciler({
  name: 'microservicedeploy',
  for: MicroServiceDeploy,
  owns,
  // Its events carry the Deployment's pod selector besides annotations and status: explainWorkload lists its pods by it.
  observe: [{ kind: Deployment, fields: explainedFields }],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  async reconcile(ms, ctx) {
    const live = ctx.owned(Deployment, ms.spec.fullName);
    const available = live?.status?.availableReplicas ?? 0;
    const wanted = ms.spec.idle ? 0 : Math.max(1, ms.spec.autoscaling ? 1 : ms.spec.replicas);
    const why = available >= wanted ? undefined : await explainWorkload(ctx, Deployment, live);
    return {
      children: children(ms),
      status: { availableReplicas: available },
      ready: available >= wanted || { ready: false, reason: 'ReplicasNotAvailable', message: `${available} of at least ${wanted} replicas available${why ? `: ${why}` : ''}` },
    };
  },
});
