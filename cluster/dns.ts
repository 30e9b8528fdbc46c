// Cluster DNS for the local cluster: CoreDNS (built from its Go module, image kfn.local/coredns)
// as a Deployment in kube-system behind the `kube-dns` Service at the kubelet's clusterDNS
// address, as kubeadm installs it. It answers cluster.local names from the API; other names get
// no answer (this machine reaches nothing outside), so no `forward` upstream is configured.

const labels = { 'k8s-app': 'kube-dns' };

export const corefile = `.:1053 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loadbalance
}
`;

/** The objects to create, in order. */
export function dnsManifests(image: string, serviceIp: string): Record<string, unknown>[] {
  const meta = (name: string) => ({ name, namespace: 'kube-system', labels });
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('coredns') },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns', labels },
      rules: [
        { apiGroups: [''], resources: ['endpoints', 'services', 'pods', 'namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns', labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: 'kube-system' }],
    },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('coredns'), data: { Corefile: corefile } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta('coredns'),
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: 'coredns',
            priorityClassName: 'system-cluster-critical',
            // Its own lookups must not go through itself.
            dnsPolicy: 'Default',
            containers: [
              {
                name: 'coredns',
                image,
                imagePullPolicy: 'Never',
                args: ['-conf', '/etc/coredns/Corefile'],
                ports: [
                  { name: 'dns', containerPort: 1053, protocol: 'UDP' },
                  { name: 'dns-tcp', containerPort: 1053, protocol: 'TCP' },
                ],
                resources: { requests: { cpu: '50m', memory: '32Mi' }, limits: { memory: '128Mi' } },
                readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
                livenessProbe: { httpGet: { path: '/health', port: 8080 }, initialDelaySeconds: 10, periodSeconds: 10 },
                securityContext: { runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
                volumeMounts: [{ name: 'config', mountPath: '/etc/coredns', readOnly: true }],
              },
            ],
            volumes: [{ name: 'config', configMap: { name: 'coredns' } }],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta('kube-dns'),
      spec: {
        clusterIP: serviceIp,
        selector: labels,
        ports: [
          { name: 'dns', port: 53, targetPort: 1053, protocol: 'UDP' },
          { name: 'dns-tcp', port: 53, targetPort: 1053, protocol: 'TCP' },
        ],
      },
    },
  ];
}
