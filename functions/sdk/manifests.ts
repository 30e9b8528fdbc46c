// Everything a function needs in a cluster, derived from what it declares: its CRD, the
// Reconciler that tells the bridge what to watch and where to deliver, the function's own
// ServiceAccount with least-privilege RBAC (its kind, status, finalizers, owned and watched
// kinds, Events), and the list/watch grant the bridge needs, aggregated into kfn-bridge; its
// workload (a Deployment and Service, or a Knative Service); and the same for several functions
// served by one shared host (hostManifests, hostWorkload).
import { crdOf, pluralOf, type ConversionClient } from './kind.ts';
import type { Reconciler } from './reconciler.ts';
import { groupOf, isClusterScopedKind, sameKind, type KindRef } from '../../core/objects.ts';
import { declaredAccess } from './access.ts';
import { servesHttps } from './webhooks.ts';
import { defaultsAsPoliciesEnv, policyManifests } from './policies.ts';
import { hostPath, sharedHostProblem } from './host.ts';
import { caBundleHolders, holderRules } from './renewal.ts';
import { contractVersion } from '../../core/event.ts';
import { functionLabels, hostLabels, identityForAnnotation, imageIdAnnotation } from '../../core/names.ts';
import { namespacesWatchedEach, reconcilerLimits, reconcilerObject, reconcilerSpec, type ReconcilerObject, type SinkSpec } from '../../core/reconciler-spec.ts';

/** The bridge's defaults for what a Reconciler does not say: a function's workload is sized by the same numbers. */
export const reconcileDefaults = { maxConcurrentReconciles: reconcilerLimits.maxConcurrentReconciles.default, timeoutSeconds: reconcilerLimits.timeoutSeconds.default };

export interface ManifestOptions {
  /** Namespace of the function's ServiceAccount and auth Secret (default kfn-system). */
  namespace?: string;
  /** Where the bridge delivers: a URL, or the Knative Service `kfn-fn-<name>` in `namespace` (default). */
  sinkUri?: string;
  /** Namespaces the Reconciler is limited to (default: all). */
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  /** For a kind with previous versions: where the CRD's conversion webhook is (`kfn deploy` sets it). */
  conversion?: ConversionClient;
  /** The bridge's namespace, where its ServiceAccount `kfn-bridge` is (default kfn-system). */
  bridgeNamespace?: string;
  /**
   * A kind's scope as the cluster's API discovery says it (`kfn deploy`, `kfn manifests
   * --apply`): a cluster-scoped kind (a ClusterIssuer, any cluster-scoped CRD) is granted by a
   * ClusterRoleBinding, since a RoleBinding cannot grant it. Without an answer: kfn's list of
   * built-in cluster-scoped kinds, and the scope a kind defined with defineKind declares.
   */
  scopeOf?: (ref: KindRef) => 'Namespaced' | 'Cluster' | undefined;
  /**
   * Who signs and renews the serving certificate of a function with an HTTPS listener (webhooks,
   * deliveryTls) that runs as its Deployment (its Service is the sink): kfn (the default: the function renews it itself, and
   * may write its TLS Secret and the CA bundles for that) or cert-manager (which renews it: no
   * such rights).
   */
  webhookCa?: 'kfn' | 'cert-manager';
  /**
   * With `deliveryTls`, on the Deployment: the CA bundle of the function's certificate, written
   * as its Reconciler's sink.caBundle (`kfn deploy` knows it). Without it the function writes it
   * there when it starts, and deliveries are retried until then.
   */
  deliveryCaBundle?: string;
  /**
   * The ServiceAccount the function runs as when it is not its own `kfn-fn-<name>`: a shared
   * host's (hostManifests). Its rights are bound to that account, its Reconciler names it as its
   * identity, and no ServiceAccount of its own is written.
   */
  serviceAccount?: string;
  /**
   * The bridge scales the function's Deployment (`deployment`: the function's own, or a shared
   * host's) to zero when idle and from zero on demand (bridge/activator.ts): with a sinkUri only.
   */
  scaleToZero?: ScaleToZero & { deployment: string };
}

/** How the bridge scales a function's Deployment to and from zero (the Reconciler's sink.scaleToZero; unsaid, the bridge's defaults). */
export interface ScaleToZero {
  idleSeconds?: number;
  maxReplicas?: number;
}

/** Whether `ref` is cluster-scoped: as discovery said, else as kfn knows built-in and defined kinds. */
function clusterScoped(ref: KindRef, options: ManifestOptions): boolean {
  const said = options.scopeOf?.(ref);
  if (said) return said === 'Cluster';
  return isClusterScopedKind(ref) || (ref as { namespaced?: boolean }).namespaced === false;
}



function rule(ref: KindRef, verbs: string[], plural = pluralOf(ref.kind)) {
  return { apiGroups: [groupOf(ref.apiVersion)], resources: [plural], verbs };
}


/** The fields the events carry of an owned kind, as the Reconciler spec says them (absent: whole objects). */
function observedFields(reconciler: Reconciler, kind: KindRef): { fields?: string[] } {
  const declared = (reconciler.observe ?? []).find((o) => sameKind(o.kind, kind));
  return declared ? { fields: declared.fields } : {};
}

export function functionManifests(reconciler: Reconciler, options: ManifestOptions = {}): Record<string, unknown>[] {
  const ns = options.namespace ?? 'kfn-system';
  const account = `kfn-fn-${reconciler.name}`;
  const labels = functionLabels(reconciler.name);
  return [
    crdOf(reconciler.for, { conversion: options.conversion }),
    ...(options.serviceAccount ? [] : [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: account, namespace: ns, labels, annotations: { [identityForAnnotation]: reconciler.name } } }]),
    ...functionRbac(reconciler, account, ns, labels, options),
    ...(renewsOwnCertificate(reconciler, options) ? certificateRbac(reconciler, account, ns, labels) : []),
    ...bridgeRbac(reconciler, labels, ns, functionSink(reconciler, options).ref, options),
    // Its guards: rules the apiserver runs on other kinds' requests, with no function up.
    ...policyManifests(reconciler, options.namespaces),
    // Last: by the time the bridge sees the Reconciler, its identity and rights exist.
    functionReconciler(reconciler, options),
  ];
}

/** Where the bridge delivers: the given URL (the function's own Service: with the CA it trusts there, for deliveryTls), or the function's Knative Service. */
function functionSink(reconciler: Reconciler, options: ManifestOptions): SinkSpec {
  const ns = options.namespace ?? 'kfn-system';
  if (!options.sinkUri) return { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: `kfn-fn-${reconciler.name}`, namespace: ns } };
  const ownTls = reconciler.deliveryTls && options.deliveryCaBundle && options.sinkUri === functionServiceUrl(reconciler, ns);
  const scale = options.scaleToZero;
  return {
    uri: options.sinkUri,
    ...(ownTls ? { caBundle: options.deliveryCaBundle } : {}),
    ...(scale ? { scaleToZero: { deployment: { name: scale.deployment, namespace: ns }, ...(scale.idleSeconds ? { idleSeconds: scale.idleSeconds } : {}), ...(scale.maxReplicas ? { maxReplicas: scale.maxReplicas } : {}) } } : {}),
  };
}

/**
 * The function's Reconciler: what the bridge watches for it and where it delivers (the last of
 * its manifests; `kfn dev` runs it in its own bridge). What the function leaves unsaid is left
 * out, so the bridge's defaults apply.
 */
/** The resync period of a function on a target that scales to zero: controller-runtime's default, 10 h. */
export const serverlessResyncSeconds = 36_000;

export function functionReconciler(reconciler: Reconciler, options: ManifestOptions = {}): ReconcilerObject {
  const ns = options.namespace ?? 'kfn-system';
  const name = reconciler.name;
  const account = `kfn-fn-${name}`;
  const kind = reconciler.for;
  const owns = reconciler.owns ?? [];
  const watches = reconciler.watches ?? [];
  return reconcilerObject(
    { name, labels: functionLabels(name) },
    reconcilerSpec({
      for: { apiVersion: kind.apiVersion, kind: kind.kind },
      contract: contractVersion,
      owns: owns.length ? owns.map((o) => ({ apiVersion: o.apiVersion, kind: o.kind, ...observedFields(reconciler, o) })) : undefined,
      watches: watches.length ? watches.map((w) => ({ apiVersion: w.apiVersion, kind: w.kind, mapping: w.mapping })) : undefined,
      sink: functionSink(reconciler, options),
      auth: { secretRef: { name: account, namespace: ns } },
      // The bridge delivers only what this identity may read; the ServiceAccount agrees to it.
      serviceAccount: { name: options.serviceAccount ?? account, namespace: ns },
      namespaces: options.namespaces?.length ? options.namespaces : undefined,
      // A Knative Service rests at zero between changes: its resyncs come rarely (10 h, as
      // controller-runtime's default), in one batch; a function that must look sooner asks with
      // requeueAfterSeconds.
      resyncPeriodSeconds: options.resyncPeriodSeconds ?? (options.sinkUri && !options.scaleToZero ? undefined : serverlessResyncSeconds),
      maxConcurrentReconciles: reconciler.maxConcurrentReconciles,
      timeoutSeconds: reconciler.timeoutSeconds,
    }),
  );
}

/**
 * What the bridge needs for this function: list and watch of its primary, owned and watched
 * kinds, and get on its sink object. Cluster-wide (a ClusterRole aggregated into kfn-bridge)
 * unless the Reconciler is limited to a few namespaces (namespacesWatchedEach at most): then a
 * RoleBinding in each of them grants the namespaced kinds, and only cluster-scoped kinds and the sink stay cluster-wide — a function
 * that owns Secrets in one namespace does not let the bridge read every Secret of the cluster.
 */
function bridgeRbac(reconciler: Reconciler, labels: Record<string, string>, functionNamespace: string, sinkRef: (KindRef & { name: string }) | undefined, options: ManifestOptions): Record<string, unknown>[] {
  const kind = reconciler.for;
  const namespaces = options.namespaces ?? [];
  const bridgeNamespace = options.bridgeNamespace ?? 'kfn-system';
  const name = `kfn-bridge-${reconciler.name}`;
  const watched: { ref: KindRef; rule: ReturnType<typeof rule> }[] = [
    { ref: kind, rule: rule(kind, ['list', 'watch'], kind.plural) },
    ...(reconciler.owns ?? []).map((o) => ({ ref: o, rule: rule(o, ['list', 'watch']) })),
    ...(reconciler.watches ?? []).map((w) => ({ ref: w, rule: rule(w, ['list', 'watch']) })),
  ];
  const isCluster = (ref: KindRef) => clusterScoped(ref, options);
  // Past namespacesWatchedEach namespaces the bridge watches each kind once, cluster-wide (and
  // delivers only the Reconciler's namespaces): it needs list/watch everywhere, as for every namespace.
  const scoped = namespaces.length > 0 && namespaces.length <= namespacesWatchedEach && kind.namespaced;
  // The bridge reads the sink's address (status.address.url / status.url) from that one object.
  const sinkRule = sinkRef ? [{ ...rule(sinkRef, ['get']), resourceNames: [sinkRef.name] }] : [];
  const clusterWide = [...(scoped ? watched.filter((w) => isCluster(w.ref)) : watched).map((w) => w.rule), ...sinkRule];
  const out: Record<string, unknown>[] = [];
  // Scale to zero: the bridge reads that one Deployment (is a pod ready?) and sets its replicas
  // through the scale subresource, in the function's namespace and nowhere else.
  const scaled = options.scaleToZero?.deployment;
  if (scaled) {
    const role = `${name}-scale`;
    out.push(
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: role, namespace: functionNamespace, labels }, rules: [{ apiGroups: ['apps'], resources: ['deployments'], verbs: ['get'], resourceNames: [scaled] }, { apiGroups: ['apps'], resources: ['deployments/scale'], verbs: ['get', 'patch', 'update'], resourceNames: [scaled] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: role, namespace: functionNamespace, labels }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role }, subjects: [{ kind: 'ServiceAccount', name: 'kfn-bridge', namespace: bridgeNamespace }] },
    );
  }
  if (clusterWide.length) out.push({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name, labels: { ...labels, 'kfn.dev/aggregate-to-bridge': 'true' } }, rules: clusterWide });
  if (scoped) {
    const perNamespace = watched.filter((w) => !isCluster(w.ref)).map((w) => w.rule);
    out.push({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: `${name}-namespaced`, labels }, rules: perNamespace });
    for (const target of namespaces) {
      out.push({
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        // Named for the function's namespace too, as its own bindings are: `kfn deploy` removes it there alone.
        metadata: { name: `${name}:${functionNamespace}`, namespace: target, labels },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: `${name}-namespaced` },
        subjects: [{ kind: 'ServiceAccount', name: 'kfn-bridge', namespace: bridgeNamespace }],
      });
    }
  }
  return out;
}

/**
 * The function's own permissions, named for it and bound to the account it runs as (its own, or
 * its shared host's). Limited to namespaces (the Reconciler's `namespaces`), its
 * namespaced rights are granted by a RoleBinding in each of them, so it is refused elsewhere;
 * only what cannot be granted per namespace — a cluster-scoped primary or child kind — is
 * bound cluster-wide.
 */
function functionRbac(reconciler: Reconciler, account: string, ns: string, labels: Record<string, string>, options: ManifestOptions): Record<string, unknown>[] {
  const namespaces = options.namespaces ?? [];
  const kind = reconciler.for;
  const primary: KindRef = { apiVersion: kind.apiVersion, kind: kind.kind };
  // What it declares, and nothing else (access.ts): the runtime refuses the rest the same way.
  const rules = declaredAccess(reconciler).map(({ ref, verbs, subresource, names }) => {
    const plural = sameKind(ref, primary) ? kind.plural : pluralOf(ref.kind);
    return { ref, rule: { ...rule(ref, verbs, subresource ? `${plural}/${subresource}` : plural), ...(names ? { resourceNames: names } : {}) } };
  });
  const scoped = namespaces.length > 0 && kind.namespaced;
  // Kinds that live outside namespaces: a RoleBinding cannot grant them.
  const isCluster = (ref: KindRef) => clusterScoped(ref, options);
  const perNamespace = scoped ? rules.filter((r) => !isCluster(r.ref)).map((r) => r.rule) : [];
  const clusterWide = scoped ? rules.filter((r) => isCluster(r.ref)).map((r) => r.rule) : rules.map((r) => r.rule);
  const roleRef = (role: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role });
  const subjects = [{ kind: 'ServiceAccount', name: options.serviceAccount ?? account, namespace: ns }];
  const out: Record<string, unknown>[] = [];
  if (clusterWide.length) {
    out.push(
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: account, labels }, rules: clusterWide },
      // One binding per (function, namespace of its ServiceAccount): RBAC names may hold ':'.
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: `${account}:${ns}`, labels }, roleRef: roleRef(account), subjects },
    );
  }
  if (perNamespace.length) {
    const role = `${account}-namespaced`;
    out.push({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: role, labels }, rules: perNamespace });
    for (const target of namespaces) {
      out.push({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: `${account}:${ns}`, namespace: target, labels }, roleRef: roleRef(role), subjects });
    }
  }
  return out;
}

/**
 * Whether the function renews its serving certificate itself (functions/sdk/renewal.ts): it has
 * an HTTPS listener (webhooks, deliveryTls), runs as the Deployment functionWorkload writes (its
 * own Service is its sink), and kfn's own CA signs for it.
 */
function renewsOwnCertificate(reconciler: Reconciler, options: ManifestOptions): boolean {
  return servesHttps(reconciler) && options.webhookCa !== 'cert-manager' && options.sinkUri === functionServiceUrl(reconciler, options.namespace);
}

/**
 * What renewing its certificate takes, each object by name: get and update its TLS Secret, in
 * its namespace only (a ClusterRole bound there by a RoleBinding); get and patch its webhook
 * configurations and, with deliveryTls, its Reconciler; patch its CRD when it has a conversion
 * webhook (caBundleHolders).
 */
function certificateRbac(reconciler: Reconciler, account: string, ns: string, labels: Record<string, string>): Record<string, unknown>[] {
  const name = `${account}-certificate`;
  const subjects = [{ kind: 'ServiceAccount', name: account, namespace: ns }];
  const roleRef = (role: string) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role });
  const rbac = 'rbac.authorization.k8s.io/v1';
  return [
    { apiVersion: rbac, kind: 'ClusterRole', metadata: { name: `${name}-secret`, labels }, rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'update'], resourceNames: [webhookTlsSecretName(reconciler)] }] },
    { apiVersion: rbac, kind: 'RoleBinding', metadata: { name, namespace: ns, labels }, roleRef: roleRef(`${name}-secret`), subjects },
    { apiVersion: rbac, kind: 'ClusterRole', metadata: { name, labels }, rules: holderRules(caBundleHolders(reconciler)) },
    { apiVersion: rbac, kind: 'ClusterRoleBinding', metadata: { name: `${name}:${ns}`, labels }, roleRef: roleRef(name), subjects },
  ];
}

export interface WorkloadOptions {
  namespace?: string;
  /** The function's image, e.g. kfn.local/fn-myweb:0.1.0 (`kfn deploy` builds it). */
  image: string;
  /** Changes when the image's content does, so that a redeploy rolls the pods. */
  imageId?: string;
  /**
   * Write an invocation record to stdout (KFN_RECORD=stdout), for `kfn replay cluster:<function>`
   * (default true; false: `kfn deploy --record off`). What a record holds of Secrets and of the
   * fields a kind marks sensitive is hashed before it is written; the kubelet's rotation of the
   * container's log bounds how many are kept, and they go with the pod (docs/debugging.md).
   */
  record?: boolean;
  /** Where the function sends its spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT): tracing, off by default. */
  otlpEndpoint?: string;
  /** The apiserver runs the function's declared defaults as policies: its runtime serves no webhook for them ($KFN_DEFAULTS_AS_POLICIES). */
  defaultsAsPolicies?: boolean;
  /** Secrets (kubernetes.io/dockerconfigjson) the kubelet pulls the image with: a registry that asks for credentials. */
  imagePullSecrets?: string[];
  /** Who renews the serving certificate (ManifestOptions.webhookCa): kfn, the function itself (default), or cert-manager. */
  webhookCa?: 'kfn' | 'cert-manager';
  /** The bridge owns the replicas (scale to zero): the Deployment is written without them, so a redeploy leaves them as they are. */
  scaleToZero?: boolean;
}

/** The Service a function deployed by `kfn deploy` answers on; its Reconciler's sink (its HTTPS port with `deliveryTls`). */
export const functionServiceUrl = (reconciler: Reconciler, namespace = 'kfn-system') => `${reconciler.deliveryTls ? 'https' : 'http'}://kfn-fn-${reconciler.name}.${namespace}.svc.cluster.local/`;

/**
 * The function as a Deployment + Service (`kfn deploy`, clusters without Knative): its own
 * ServiceAccount, the auth secret from the Secret `kfn manifests --apply` creates, $PORT 8080,
 * ready once /healthz answers.
 */
export function functionWorkload(reconciler: Reconciler, options: WorkloadOptions): Record<string, unknown>[] {
  const ns = options.namespace ?? 'kfn-system';
  const account = `kfn-fn-${reconciler.name}`;
  const webhooks = servesHttps(reconciler);
  const container = functionContainer(options, false);
  return deploymentAndService({
    name: account,
    namespace: ns,
    labels: functionLabels(reconciler.name),
    graceSeconds: graceSeconds([reconciler]),
    container: webhooks ? withWebhooks(container, options.webhookCa === 'cert-manager' ? undefined : `${ns}/${webhookTlsSecretName(reconciler)}`) : container,
    volumes: [authVolume(account), ...(webhooks ? [{ name: 'webhook-tls', secret: { secretName: webhookTlsSecretName(reconciler) } }] : [])],
    ports: [{ name: 'http', port: 80, targetPort: 'http' }, ...(webhooks ? [{ name: 'webhook', port: 443, targetPort: 'webhook' }] : [])],
  }, options);
}

/** The name of a shared host's ServiceAccount, Deployment and Service. */
export const hostResourceName = (host: string) => `kfn-host-${host}`;

/** Where a shared host serves the function: its Service, on the function's path; the function's Reconciler's sink. */
export const hostServiceUrl = (host: string, reconciler: Reconciler, namespace = 'kfn-system') => `http://${hostResourceName(host)}.${namespace}.svc.cluster.local${hostPath(reconciler.name)}`;

/**
 * What a shared host's functions need in a cluster (see host.ts): one ServiceAccount
 * `kfn-host-<host>` that agrees to be the identity of every function's Reconciler, then each
 * function's objects as functionManifests writes them — its own RBAC bound to that account, its
 * own auth Secret's key, its Reconciler delivering to its path on the host's Service. The host's
 * identity is the union of its functions' rights.
 */
export function hostManifests(host: string, reconcilers: Reconciler[], options: Omit<ManifestOptions, 'sinkUri' | 'serviceAccount' | 'conversion' | 'webhookCa' | 'deliveryCaBundle' | 'scaleToZero'> & { scaleToZero?: ScaleToZero } = {}): Record<string, unknown>[] {
  const problem = sharedHostProblem(reconcilers);
  if (problem) throw new Error(problem);
  const ns = options.namespace ?? 'kfn-system';
  const account = hostResourceName(host);
  const identity = { [identityForAnnotation]: reconcilers.map((r) => r.name).join(',') };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: account, namespace: ns, labels: hostLabels(host), annotations: identity } },
    // Scaled to zero, the host is one Deployment for all: each function's Reconciler names it.
    ...reconcilers.flatMap((r) => functionManifests(r, { ...options, serviceAccount: account, sinkUri: hostServiceUrl(host, r, ns), scaleToZero: options.scaleToZero && { ...options.scaleToZero, deployment: account } })),
  ];
}

/**
 * A shared host as a Deployment + Service `kfn-host-<host>`: one process serving every function
 * on its path, under the host's ServiceAccount, each function's auth Secret mounted as a file
 * named by the function (KFN_AUTH_SECRET_DIR), given the longest of their timeouts to finish on SIGTERM.
 */
export function hostWorkload(host: string, reconcilers: Reconciler[], options: WorkloadOptions): Record<string, unknown>[] {
  const problem = sharedHostProblem(reconcilers);
  if (problem) throw new Error(problem);
  const name = hostResourceName(host);
  // One volume: each function's Secret, its key at the function's name (refreshed by the kubelet as a rotation changes it).
  const keys = { name: 'auth', projected: { sources: reconcilers.map((r) => ({ secret: { name: `kfn-fn-${r.name}`, items: [{ key: 'secret', path: r.name }] } })) } };
  return deploymentAndService({
    name,
    namespace: options.namespace ?? 'kfn-system',
    labels: hostLabels(host),
    graceSeconds: graceSeconds(reconcilers),
    container: functionContainer(options, false, { name: 'KFN_AUTH_SECRET_DIR', value: authKeyDir }),
    volumes: [keys],
    ports: [{ name: 'http', port: 80, targetPort: 'http' }],
  }, options);
}

/** On SIGTERM a process finishes the reconciles in flight: each may take its function's timeoutSeconds. */
const graceSeconds = (reconcilers: Reconciler[]) => Math.max(...reconcilers.map((r) => r.timeoutSeconds ?? reconcileDefaults.timeoutSeconds)) + 10;

/** What a Deployment of `kfn deploy` is made of: one process (a function, or a shared host) under the account of its name. */
interface DeployedProcess {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  graceSeconds: number;
  container: ReturnType<typeof functionContainer>;
  volumes: Record<string, unknown>[];
  ports: { name: string; port: number; targetPort: string }[];
}

/** One replica, non-root, under the ServiceAccount of its name, its pods rolled when the image changes; and its Service. */
function deploymentAndService(p: DeployedProcess, options: WorkloadOptions): Record<string, unknown>[] {
  return [
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: p.name, namespace: p.namespace, labels: p.labels },
      spec: {
        // Scaled by the bridge: not written, so a redeploy neither wakes an idle function nor fights the bridge.
        ...(options.scaleToZero ? {} : { replicas: 1 }),
        selector: { matchLabels: p.labels },
        template: {
          metadata: { labels: p.labels, ...(options.imageId ? { annotations: { [imageIdAnnotation]: options.imageId } } : {}) },
          spec: {
            serviceAccountName: p.name,
            ...(options.imagePullSecrets?.length ? { imagePullSecrets: options.imagePullSecrets.map((name) => ({ name })) } : {}),
            terminationGracePeriodSeconds: p.graceSeconds,
            securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
            containers: [p.container],
            volumes: p.volumes,
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: p.name, namespace: p.namespace, labels: p.labels },
      spec: { selector: p.labels, ports: p.ports },
    },
  ];
}

/** The Secret holding a deployed function's webhook certificate (tls.crt, tls.key, ca.crt). */
export const webhookTlsSecretName = (reconciler: Reconciler) => `kfn-fn-${reconciler.name}-webhook-tls`;

/** Where a deployed function's webhook listener takes its certificate from; rotated in place by the kubelet. */
const webhookCertDir = '/var/run/kfn/webhook-tls';

/**
 * The container of a function with webhooks or deliveryTls: the HTTPS listener on 9443, its
 * certificate mounted; and, when the function renews it itself, the Secret it is in
 * (`<namespace>/<name>`, KFN_TLS_SECRET: functions/sdk/renewal.ts).
 */
function withWebhooks(container: ReturnType<typeof functionContainer>, renewedSecret: string | undefined) {
  return {
    ...container,
    env: [...container.env, { name: 'KFN_WEBHOOK_CERT_DIR', value: webhookCertDir }, { name: 'KFN_WEBHOOK_PORT', value: '9443' }, ...(renewedSecret ? [{ name: 'KFN_TLS_SECRET', value: renewedSecret }] : [])],
    ports: [...container.ports, { name: 'webhook', containerPort: 9443 }],
    volumeMounts: [...container.volumeMounts, { name: 'webhook-tls', mountPath: webhookCertDir, readOnly: true }],
  };
}

/**
 * Where a deployed function reads its auth key: the Secret mounted as a volume, which the
 * kubelet refreshes in place when the Secret is rotated (an environment variable would keep the
 * old key until the pod restarts, and every delivery signed with the new one would be refused).
 */
const authKeyDir = '/var/run/kfn/auth';

const authVolume = (account: string) => ({ name: 'auth', secret: { secretName: account, items: [{ key: 'secret', path: 'secret' }] } });

/**
 * The function's container, the same on a Deployment and on Knative (which sets PORT itself);
 * `auth` says where its key is (a shared host's: a folder of keys, one per function).
 */
function functionContainer(options: WorkloadOptions, knative: boolean, auth = { name: 'KFN_AUTH_SECRET_FILE', value: `${authKeyDir}/secret` }) {
  const probe = { httpGet: { path: '/healthz', ...(knative ? {} : { port: 'http' }) } };
  return {
    name: 'function',
    image: options.image,
    imagePullPolicy: 'IfNotPresent',
    env: [
      ...(knative ? [] : [{ name: 'PORT', value: '8080' }]),
      auth,
      ...(options.record === false ? [] : [{ name: 'KFN_RECORD', value: 'stdout' }]),
      ...(options.otlpEndpoint ? [{ name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: options.otlpEndpoint }] : []),
      ...(options.defaultsAsPolicies ? [{ name: defaultsAsPoliciesEnv, value: 'true' }] : []),
    ],
    ports: [{ name: knative ? 'http1' : 'http', containerPort: 8080 }],
    volumeMounts: [{ name: 'auth', mountPath: authKeyDir, readOnly: true }],
    // Each probe is a request the function answers: at rest, as kubebuilder probes an operator
    // (readiness every 10 s, liveness every 20 s); a new pod every second until it answers (the
    // kubelet then runs the readiness probe at once), so a rollout is not slowed. On Knative the
    // queue proxy probes, at each scale from zero.
    readinessProbe: { ...probe, periodSeconds: knative ? 1 : 10 },
    ...(knative ? {} : { livenessProbe: { ...probe, periodSeconds: 20 }, startupProbe: { ...probe, periodSeconds: 1, failureThreshold: 120 } }),
    resources: { requests: { cpu: '20m', memory: '64Mi' }, limits: { memory: '256Mi' } },
    securityContext: { runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] }, seccompProfile: { type: 'RuntimeDefault' } },
  };
}

export interface KnativeWorkloadOptions extends WorkloadOptions {
  /** Pods kept when idle: 0 lets Knative scale the function to zero (the default). */
  minScale?: number;
  /** Seconds the last pod is kept after the autoscaler decides on zero (scale-to-zero-pod-retention-period). */
  retentionSeconds?: number;
  /** The autoscaler's window in seconds (6–3600, Knative's default 60): how long without requests before scaling to zero. */
  windowSeconds?: number;
}

/** The function as a Knative Service (`kfn deploy --target knative`); the Reconciler's default sink ref names it. */
export function functionKnativeService(reconciler: Reconciler, options: KnativeWorkloadOptions): Record<string, unknown> {
  const ns = options.namespace ?? 'kfn-system';
  const account = `kfn-fn-${reconciler.name}`;
  const labels = functionLabels(reconciler.name);
  const annotations: Record<string, string> = {
    'autoscaling.knative.dev/min-scale': String(options.minScale ?? 0),
    ...(options.retentionSeconds !== undefined ? { 'autoscaling.knative.dev/scale-to-zero-pod-retention-period': `${options.retentionSeconds}s` } : {}),
    ...(options.windowSeconds !== undefined ? { 'autoscaling.knative.dev/window': `${options.windowSeconds}s` } : {}),
    ...(options.imageId ? { [imageIdAnnotation]: options.imageId } : {}),
  };
  return {
    apiVersion: 'serving.knative.dev/v1',
    kind: 'Service',
    metadata: { name: account, namespace: ns, labels },
    spec: {
      template: {
        metadata: { labels, annotations },
        spec: {
          serviceAccountName: account,
          ...(options.imagePullSecrets?.length ? { imagePullSecrets: options.imagePullSecrets.map((name) => ({ name })) } : {}),
          containerConcurrency: reconciler.maxConcurrentReconciles ?? reconcileDefaults.maxConcurrentReconciles,
          timeoutSeconds: reconciler.timeoutSeconds ?? reconcileDefaults.timeoutSeconds,
          containers: [functionContainer(options, true)],
          volumes: [authVolume(account)],
        },
      },
    },
  };
}
