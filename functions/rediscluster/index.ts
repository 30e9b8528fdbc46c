// RedisCluster (redis.io/v1beta1): the seed's "only size and config matter" operator. A
// StatefulSet of `size` redis pods behind a headless Service, with spec.config rendered into
// redis.conf in a ConfigMap (the pod template carries its hash, so a config change rolls the
// pods). Status: ready replicas.
import { createHash } from 'node:crypto';
import { ConfigMap, Pod, Service, StatefulSet, containerResources, defineKind, defineReconciler, explainedFields, explainWorkload, resourceRequirements, t } from '../sdk/index.ts';


export const RedisCluster = defineKind({
  group: 'redis.io',
  version: 'v1beta1',
  kind: 'RedisCluster',
  spec: t.Object({
    size: t.Integer({ minimum: 1 }),
    imagePullPolicy: t.Union([t.Literal('Always'), t.Literal('IfNotPresent'), t.Literal('Never')], { default: 'IfNotPresent' }),
    resources: t.Optional(resourceRequirements()),
    config: t.Record(t.String(), t.String(), { default: {} }),
  }),
  status: t.Object({ readyReplicas: t.Optional(t.Integer()) }),
  printerColumns: [
    { name: 'Size', type: 'integer', jsonPath: '.spec.size' },
    { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
  ],
});
/**
 * Settings every pod needs, under spec.config: the other pods and clients reach redis over the
 * pod network, which its protected mode refuses when no password is set.
 */
const podDefaults: Record<string, string> = { 'protected-mode': 'no' };

/** redis.conf from spec.config over podDefaults, keys sorted so the same config always renders the same. */
export function renderConfig(spec: Record<string, string>): string {
  const config = { ...podDefaults, ...spec };
  return `${Object.keys(config).sort().map((k) => `${k} ${config[k]}`).join('\n')}\n`;
}

export default defineReconciler({
  name: 'rediscluster',
  for: RedisCluster,
  owns: [ConfigMap, Service, StatefulSet],
  // Its events carry the StatefulSet's pod selector besides annotations and status: explainWorkload lists its pods by it.
  observe: [{ kind: StatefulSet, fields: explainedFields }],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  async reconcile(redis, ctx) {
    const name = redis.metadata.name;
    const labels = { 'app.kubernetes.io/name': 'redis', 'app.kubernetes.io/instance': name };
    const conf = renderConfig(redis.spec.config);
    const live = ctx.owned(StatefulSet, name);
    const ready = live?.status?.readyReplicas ?? 0;
    const why = ready === redis.spec.size ? undefined : await explainWorkload(ctx, StatefulSet, live);
    return {
      children: [
        { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${name}-config`, labels }, data: { 'redis.conf': conf } },
        { apiVersion: 'v1', kind: 'Service', metadata: { name: `${name}-headless`, labels }, spec: { clusterIP: 'None', selector: labels, ports: [{ name: 'redis', port: 6379 }] } },
        {
          apiVersion: 'apps/v1',
          kind: 'StatefulSet',
          metadata: { name, labels },
          spec: {
            serviceName: `${name}-headless`,
            replicas: redis.spec.size,
            selector: { matchLabels: labels },
            template: {
              metadata: { labels, annotations: { 'redis.kfn.dev/config-sha256': createHash('sha256').update(conf).digest('hex').slice(0, 16) } },
              spec: {
                containers: [
                  {
                    name: 'redis',
                    image: 'kfn.local/redis:7.0',
                    imagePullPolicy: redis.spec.imagePullPolicy,
                    command: ['redis-server', '/etc/redis/redis.conf'],
                    ports: [{ containerPort: 6379, name: 'redis' }],
                    ...(redis.spec.resources ? { resources: containerResources(redis.spec.resources) } : {}),
                    volumeMounts: [{ name: 'config', mountPath: '/etc/redis' }],
                  },
                ],
                volumes: [{ name: 'config', configMap: { name: `${name}-config` } }],
              },
            },
          },
        },
      ],
      status: { readyReplicas: ready },
      ready: ready === redis.spec.size || { ready: false, reason: 'ReplicasNotReady', message: `${ready}/${redis.spec.size} redis pods ready${why ? `: ${why}` : ''}` },
    };
  },
});
