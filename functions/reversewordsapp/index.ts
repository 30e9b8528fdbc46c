// ReverseWordsApp (apps.linuxera.org/v1alpha1): Deployment `dp-<name>` of the reverse-words
// image at spec.appVersion (port 8080, liveness and readiness probes on /health) and Service
// `service-<name>` (LoadBalancer, 8080). Status: the running pods in appPods and the seed's two
// conditions, Ready and ReverseWordsDeploymentNotReady. A finalizer cleans up what the app
// created outside its ownership (a cache ConfigMap, standing for the seed's "resources not
// owned by this CR, like a PVC") before the object may go.
import { ConfigMap, Deployment, Pod, Service, defineKind, defineReconciler, t, type Desired, type ObjectOf, type ReconcileContext } from '../sdk/index.ts';

export const ReverseWordsApp = defineKind({
  group: 'apps.linuxera.org',
  version: 'v1alpha1',
  kind: 'ReverseWordsApp',
  spec: t.Object({
    replicas: t.Integer({ minimum: 1, default: 1 }),
    appVersion: t.String({ default: 'latest', minLength: 1 }),
  }),
  status: t.Object({ appPods: t.Optional(t.Array(t.String())) }),
  printerColumns: [
    { name: 'Replicas', type: 'integer', jsonPath: '.spec.replicas' },
    { name: 'Version', type: 'string', jsonPath: '.spec.appVersion' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  ],
});
type App = ObjectOf<typeof ReverseWordsApp>;

/** Annotation on the cache ConfigMap that makes cleanup fail (a resource that cannot go yet). */
export const lockedAnnotation = 'reversewords.kfn.dev/locked';
const cacheName = (app: App) => `reversewords-cache-${app.metadata.name}`;

const probe = { httpGet: { path: '/health', port: 8080 }, initialDelaySeconds: 5, timeoutSeconds: 2, periodSeconds: 15 };

const deployment = (app: App): Desired<typeof Deployment> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: `dp-${app.metadata.name}`, labels: { app: app.metadata.name } },
  spec: {
    replicas: app.spec.replicas,
    selector: { matchLabels: { app: app.metadata.name } },
    template: {
      metadata: { labels: { app: app.metadata.name } },
      spec: {
        containers: [
          {
            name: 'reversewords',
            image: `kfn.local/reversewords:${app.spec.appVersion}`,
            // Explicit, so that "latest" uses an image already on the node instead of always pulling.
            imagePullPolicy: 'IfNotPresent',
            ports: [{ containerPort: 8080, name: 'reverse' }],
            livenessProbe: probe,
            readinessProbe: probe,
          },
        ],
      },
    },
  },
});

const service = (app: App): Desired<typeof Service> => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: `service-${app.metadata.name}`, labels: { app: app.metadata.name } },
  spec: { type: 'LoadBalancer', selector: { app: app.metadata.name }, ports: [{ name: 'http', port: 8080, targetPort: 8080 }] },
});

/** The cache lives outside the app's ownership, so only the finalizer removes it. */
async function ensureCache(app: App, ctx: ReconcileContext): Promise<void> {
  if (await ctx.get(ConfigMap, cacheName(app))) return;
  await ctx.api.request('POST', `/api/v1/namespaces/${app.metadata.namespace}/configmaps`, {
    body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: cacheName(app), labels: { app: app.metadata.name } }, data: { words: '' } },
  });
}

export default defineReconciler({
  name: 'reversewordsapp',
  for: ReverseWordsApp,
  owns: [Deployment, Service],
  watches: [{ ...Pod, mapping: { label: 'app' }, list: true }],
  uses: [{ kind: ConfigMap, verbs: ['get', 'create', 'delete'] }],
  async reconcile(app, ctx) {
    await ensureCache(app, ctx);
    const live = ctx.owned(Deployment, `dp-${app.metadata.name}`);
    const ready = (live?.status?.readyReplicas ?? 0) === app.spec.replicas;
    const pods = await ctx.list(Pod, { namespace: app.metadata.namespace, labelSelector: `app=${app.metadata.name}` });
    return {
      children: [deployment(app), service(app)],
      status: { appPods: pods.filter((p) => p.status?.phase === 'Running' && !p.metadata.deletionTimestamp).map((p) => p.metadata.name).sort() },
      ready: ready || { ready: false, reason: 'Ready', message: 'the Deployment is not ready' },
      conditions: [{ type: 'ReverseWordsDeploymentNotReady', status: !ready, reason: 'ReverseWordsDeploymentNotReady' }],
    };
  },
  async finalize(app, ctx) {
    const cache = await ctx.get(ConfigMap, cacheName(app));
    if (!cache) return;
    if (cache.metadata.annotations?.[lockedAnnotation] === 'true') throw new Error(`ConfigMap ${cacheName(app)} is locked (${lockedAnnotation}); cannot clean up yet`);
    await ctx.api.request('DELETE', `/api/v1/namespaces/${app.metadata.namespace}/configmaps/${cacheName(app)}`);
    await ctx.event('Normal', 'Finalized', `removed ${cacheName(app)}`);
  },
  finalizeTimeoutSeconds: 15,
});
