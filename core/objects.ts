// Object identity, as the bridge, the SDK, the CLI and the tests all say it: an object's key, a
// reference to it, its kind and the API group of that kind. One definition each, imported
// everywhere (a unit test keeps it so).

/** `namespace/name`, or `name` for cluster-scoped objects: the event subject, queue key and store key. */
export function objectKey(ref: { namespace?: string; name: string }): string {
  // join makes one flat string; a template literal makes a concatenation of two parts (and a
  // third string once it is hashed), which the bridge would keep per object as its store key.
  return ref.namespace ? [ref.namespace, ref.name].join('/') : ref.name;
}

/** The namespace an object key names (undefined for a cluster-scoped object's). */
export function namespaceOfKey(key: string): string | undefined {
  const slash = key.indexOf('/');
  return slash < 0 ? undefined : key.slice(0, slash);
}

/**
 * A kind: its apiVersion (`group/version`, or `version` for the core group) and its name. The
 * SDK's kinds also carry the type of their objects, as a type only (`Object` is never set), so
 * what a function reads and writes is checked by tsc; any `{apiVersion, kind}` is one.
 */
export interface KindRef<T = unknown> {
  readonly apiVersion: string;
  readonly kind: string;
  /** Type only: the kind's objects. Never set. */
  readonly Object?: T;
}

/** The API group of an apiVersion: `apps` for `apps/v1`, `''` for the core group's `v1`. */
export function groupOf(apiVersion: string): string {
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? '' : apiVersion.slice(0, slash);
}

/** The version of an apiVersion: `v1` for `apps/v1` and for the core group's `v1`. */
export function versionOf(apiVersion: string): string {
  return apiVersion.slice(apiVersion.indexOf('/') + 1);
}

/** Same kind in the same API group (any version: the apiserver converts between them). */
export function sameKind(a: KindRef, b: KindRef): boolean {
  return a.kind === b.kind && groupOf(a.apiVersion) === groupOf(b.apiVersion);
}

/**
 * `group/Kind/namespace/name`: an object's identity across kinds and versions, where objects of
 * several kinds share one map (a function's children, a fake apiserver's store).
 */
export function objectId(ref: { apiVersion: string; kind: string; namespace?: string; name: string }): string {
  return `${groupKind(ref)}/${ref.namespace ?? ''}/${ref.name}`;
}

/** A reference to a Kubernetes object, enough to GET it (and to tell versions apart). */
export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
}

/** The fields of an object that identify it (any Kubernetes object has them). */
export interface Identified {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; generation?: number };
}

/** The uid of the object's controller owner (the ownerReference with `controller: true`), if it has one. */
export function controllerUid(obj: { metadata: { ownerReferences?: readonly { uid?: string; controller?: boolean }[] } }): string | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller)?.uid;
}

/** The reference to `obj` that the contract carries (primary, trigger): kind, name, uid, version. */
export function refOf(obj: Identified): ObjectRef {
  const ref: ObjectRef = { apiVersion: obj.apiVersion ?? '', kind: obj.kind ?? '', name: obj.metadata.name };
  if (obj.metadata.namespace) ref.namespace = obj.metadata.namespace;
  if (obj.metadata.uid) ref.uid = obj.metadata.uid;
  if (obj.metadata.resourceVersion) ref.resourceVersion = obj.metadata.resourceVersion;
  if (obj.metadata.generation !== undefined) ref.generation = obj.metadata.generation;
  return ref;
}

/** `Kind namespace/name` (`Kind name` when cluster-scoped): how messages and logs name an object. */
export function describeObject(obj: Identified | ObjectRef): string {
  const ref = 'metadata' in obj ? { kind: obj.kind, namespace: obj.metadata.namespace, name: obj.metadata.name } : obj;
  return `${ref.kind || 'object'} ${objectKey(ref)}`;
}

/**
 * Kinds of the built-in API that are cluster-scoped, by `group/Kind`, for tools that must know a
 * kind's scope without asking a cluster (manifests, the test fakes). Everything else built in is
 * namespaced; a custom kind says its own scope.
 */
export const clusterScopedKinds: ReadonlySet<string> = new Set([
  '/Namespace',
  '/Node',
  '/PersistentVolume',
  'storage.k8s.io/StorageClass',
  'rbac.authorization.k8s.io/ClusterRole',
  'rbac.authorization.k8s.io/ClusterRoleBinding',
  'apiextensions.k8s.io/CustomResourceDefinition',
  'scheduling.k8s.io/PriorityClass',
  'networking.k8s.io/IngressClass',
  'node.k8s.io/RuntimeClass',
  'admissionregistration.k8s.io/MutatingWebhookConfiguration',
  'admissionregistration.k8s.io/ValidatingWebhookConfiguration',
  'apiregistration.k8s.io/APIService',
  'certificates.k8s.io/CertificateSigningRequest',
]);

/** A kind whatever its version: `group/Kind` (`/Secret` for the core group). */
export function groupKind(ref: { apiVersion: string; kind: string }): string {
  return `${groupOf(ref.apiVersion)}/${ref.kind}`;
}

/** True for a built-in cluster-scoped kind (see clusterScopedKinds). */
export function isClusterScopedKind(ref: KindRef): boolean {
  return clusterScopedKinds.has(groupKind(ref));
}
