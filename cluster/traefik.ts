// Traefik, Knative's ingress on the local cluster: built from Go modules (traefik/go.mod) like
// the rest, routing Knative's networking Ingresses (class traefik.ingress.networking.knative.dev)
// through its Knative provider.
import { join } from 'node:path';
import type { Manifest } from '../kube/api.ts';

export const traefikModuleDir = join(import.meta.dirname, 'traefik');
export const ingressNamespace = 'kfn-ingress';

/** Traefik as Knative's ingress: one entrypoint (:8080) for public and cluster-local routes, behind Service kfn-ingress/traefik port 80. */
export function traefikManifests(image: string, cpuRequest: string): Manifest[] {
  const labels = { 'app.kubernetes.io/name': 'traefik', 'app.kubernetes.io/part-of': 'kfn' };
  const meta = (name: string) => ({ name, namespace: ingressNamespace, labels });
  const service = `--providers.knative.%s.name=traefik`;
  return [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ingressNamespace, labels } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('traefik') },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'kfn-ingress-traefik', labels },
      rules: [
        { apiGroups: ['networking.internal.knative.dev'], resources: ['ingresses'], verbs: ['get', 'list', 'watch'] },
        { apiGroups: ['networking.internal.knative.dev'], resources: ['ingresses/status'], verbs: ['update'] },
        // Services to route to; Secrets for the TLS certificates an Ingress may name.
        { apiGroups: [''], resources: ['services', 'secrets'], verbs: ['get', 'list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'kfn-ingress-traefik', labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'kfn-ingress-traefik' },
      subjects: [{ kind: 'ServiceAccount', name: 'traefik', namespace: ingressNamespace }],
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta('traefik'),
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: 'traefik',
            securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
            containers: [
              {
                name: 'traefik',
                image,
                imagePullPolicy: 'IfNotPresent',
                args: [
                  '--entrypoints.web.address=:8080',
                  '--entrypoints.ping.address=:9000',
                  '--ping.entrypoint=ping',
                  '--experimental.knative=true',
                  '--providers.knative=true',
                  '--providers.knative.publicentrypoints=web',
                  '--providers.knative.privateentrypoints=web',
                  service.replace('%s', 'publicservice'),
                  `--providers.knative.publicservice.namespace=${ingressNamespace}`,
                  service.replace('%s', 'privateservice'),
                  `--providers.knative.privateservice.namespace=${ingressNamespace}`,
                  '--log.level=INFO',
                  '--global.checknewversion=false',
                  '--global.sendanonymoususage=false',
                ],
                ports: [
                  { name: 'web', containerPort: 8080 },
                  { name: 'ping', containerPort: 9000 },
                ],
                readinessProbe: { httpGet: { path: '/ping', port: 'ping' }, periodSeconds: 2 },
                livenessProbe: { httpGet: { path: '/ping', port: 'ping' }, periodSeconds: 10 },
                resources: { requests: { cpu: cpuRequest, memory: '50Mi' }, limits: { memory: '300Mi' } },
                securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
              },
            ],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta('traefik'),
      spec: { selector: labels, ports: [{ name: 'http', port: 80, targetPort: 'web' }] },
    },
  ];
}
