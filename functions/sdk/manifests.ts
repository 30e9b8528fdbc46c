// Everything a function needs in a cluster, derived from what it declares: its CRD, the
// Reconciler that tells the bridge what to watch and where to deliver, the function's own
// ServiceAccount with least-privilege RBAC (its kind, status, finalizers, owned and watched
// kinds, Events), and the list/watch grant the bridge needs, aggregated into kfn-bridge.
import { crdOf } from './kind.ts';
import type { KindRef, Reconciler } from './reconciler.ts';

export interface ManifestOptions {
  /** Namespace of the function's ServiceAccount and auth Secret (default kfn-system). */
  namespace?: string;
  /** Where the bridge delivers: a URL, or a Knative Service of the function's name (default). */
  sinkUri?: string;
  /** Namespaces the Reconciler is limited to (default: all). */
  namespaces?: string[];
  resyncPeriodSeconds?: number;
}

const irregular: Record<string, string> = { Endpoints: 'endpoints', Ingress: 'ingresses', NetworkPolicy: 'networkpolicies' };

/** The resource (plural) of a kind, as the API names it. */
export function pluralOf(kind: string): string {
  if (irregular[kind]) return irregular[kind];
  const lower = kind.toLowerCase();
  if (lower.endsWith('y')) return `${lower.slice(0, -1)}ies`;
  if (lower.endsWith('s')) return `${lower}es`;
  return `${lower}s`;
}

const groupOf = (apiVersion: string) => (apiVersion.includes('/') ? apiVersion.split('/')[0]! : '');

function rule(ref: KindRef, verbs: string[], plural = pluralOf(ref.kind)) {
  return { apiGroups: [groupOf(ref.apiVersion)], resources: [plural], verbs };
}

export function functionManifests(reconciler: Reconciler, options: ManifestOptions = {}): Record<string, unknown>[] {
  const ns = options.namespace ?? 'kfn-system';
  const name = reconciler.name;
  const account = `kfn-fn-${name}`;
  const kind = reconciler.for;
  const owns = reconciler.owns ?? [];
  const watches = reconciler.watches ?? [];
  const labels = { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/function': name };
  const sink = options.sinkUri ? { uri: options.sinkUri } : { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: account, namespace: ns } };
  return [
    crdOf(kind),
    {
      apiVersion: 'kfn.dev/v1alpha1',
      kind: 'Reconciler',
      metadata: { name, labels },
      spec: {
        for: { apiVersion: kind.apiVersion, kind: kind.kind },
        ...(owns.length ? { owns: owns.map((o) => ({ apiVersion: o.apiVersion, kind: o.kind })) } : {}),
        ...(watches.length ? { watches } : {}),
        sink,
        auth: { secretRef: { name: account, namespace: ns } },
        ...(options.namespaces?.length ? { namespaces: options.namespaces } : {}),
        ...(options.resyncPeriodSeconds !== undefined ? { resyncPeriodSeconds: options.resyncPeriodSeconds } : {}),
      },
    },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: account, namespace: ns, labels } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: account, labels },
      rules: [
        rule(kind, ['get', 'patch'], kind.plural),
        rule(kind, ['get', 'patch', 'update'], `${kind.plural}/status`),
        ...owns.map((o) => rule(o, ['get', 'list', 'create', 'patch', 'update', 'delete'])),
        ...watches.map((w) => rule(w, ['get', 'list'])),
        ...(reconciler.uses ?? []).map((u) => rule(u.kind, u.verbs, `${pluralOf(u.kind.kind)}${u.subresource ? `/${u.subresource}` : ''}`)),
        { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      // One binding per (function, namespace of its ServiceAccount): RBAC names may hold ':'.
      metadata: { name: `${account}:${ns}`, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: account },
      subjects: [{ kind: 'ServiceAccount', name: account, namespace: ns }],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: `kfn-bridge-${name}`, labels: { ...labels, 'kfn.dev/aggregate-to-bridge': 'true' } },
      rules: [rule(kind, ['list', 'watch'], kind.plural), ...owns.map((o) => rule(o, ['list', 'watch'])), ...watches.map((w) => rule(w, ['list', 'watch']))],
    },
  ];
}
