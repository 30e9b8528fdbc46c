// The names kfn gives things, in one place: its own API (the Reconciler kind), the labels and
// annotations it writes on children and on what `kfn deploy` creates, and the prefix of its
// finalizers and field managers.

/** kfn's own API group, and the Reconciler kind the bridge is configured with. */
export const kfnGroup = 'kfn.dev';
export const reconcilerApiVersion = `${kfnGroup}/v1alpha1`;
export const reconcilerKind = 'Reconciler';
export const reconcilerPlural = 'reconcilers';

/** The finalizer a function with `finalize` puts on its primaries: `kfn.dev/<name>`. */
export function finalizerName(reconciler: string): string {
  return `${kfnGroup}/${reconciler}`;
}

/** The field manager of a function's server-side applies: one stable manager per Reconciler. */
export function fieldManagerName(reconciler: string): string {
  return `kfn-${reconciler}`;
}

/** True for a finalizer kfn added (any Reconciler's). */
export function isKfnFinalizer(finalizer: string): boolean {
  return finalizer.startsWith(`${kfnGroup}/`);
}

/** On the bridge's Deployment (manifests/, the Helm chart): the event contract version it speaks. */
export const contractAnnotation = `${kfnGroup}/contract`;

/** Kubernetes' recommended label for the tool that manages an object. */
export const managedByLabel = 'app.kubernetes.io/managed-by';
export const managedByKfn = 'kfn';
/** The selector for everything kfn manages; the bridge watches owned kinds through it by default. */
export const managedByKfnSelector = `${managedByLabel}=${managedByKfn}`;

/** On a child: the uid of the primary that owns it (children are listed by it to prune). */
export const ownerUidLabel = 'kfn.dev/owner-uid';
/** On a child: the Reconciler whose function applied it. */
export const reconcilerLabel = 'kfn.dev/reconciler';
/** The labels the SDK puts on every child it applies: kfn manages it, for this owner and Reconciler. */
export function childLabels(ownerUid: string, reconciler: string): Record<string, string> {
  return { [ownerUidLabel]: ownerUid, [reconcilerLabel]: reconciler, [managedByLabel]: managedByKfn };
}

/** On what `kfn deploy` and the manifests create for a function: the function's name. */
export const functionLabel = 'kfn.dev/function';

/** The labels of an object kfn creates for the function `name` (its Deployment, RBAC, Secrets). */
export function functionLabels(name: string): Record<string, string> {
  return { [managedByLabel]: managedByKfn, [functionLabel]: name };
}

/** On what `kfn deploy --host` creates for a shared host (its ServiceAccount, Deployment, Service): the host's name. */
export const hostLabel = 'kfn.dev/host';

/** The labels of an object kfn creates for the shared host `name`, which serves several functions in one process. */
export function hostLabels(name: string): Record<string, string> {
  return { [managedByLabel]: managedByKfn, [hostLabel]: name };
}

/** On a function's Deployment and Service: the id of the image it runs (a new image rolls it). */
export const imageIdAnnotation = 'kfn.dev/image-id';

/** The documented way out of a finalizer whose cleanup cannot succeed. */
export const skipFinalizerAnnotation = 'kfn.dev/skip-finalizer';

/**
 * On an object being deleted: when its finalize first failed. finalizeTimeoutSeconds run from
 * here, not from the deletion: a delivery held up (an apiserver restart, a leader hand-over, a
 * sink not ready) must not make the first failure the last.
 */
export const finalizeFailingSinceAnnotation = 'kfn.dev/finalize-failing-since';

/**
 * On an auth Secret: the Reconcilers (comma-separated) allowed to send its key. The bridge
 * reads the key for a Reconciler only when its name is there: whoever may write a Reconciler
 * cannot have another function's key (or any Secret) sent to a sink of their choosing.
 */
export const authForAnnotation = 'kfn.dev/auth-for';

/** Whether a Secret with these annotations may be read as the auth Secret of Reconciler `name`. */
export function secretServes(annotations: Record<string, string> | undefined, name: string): boolean {
  return names(annotations?.[authForAnnotation]).includes(name);
}

/**
 * The annotation by which a ServiceAccount agrees to be the identity of Reconcilers (their names,
 * comma-separated): a Reconciler, which anyone allowed to create one may write, cannot borrow an
 * identity its owner has not lent it.
 */
export const identityForAnnotation = 'kfn.dev/identity-for';

/** The Reconcilers a ServiceAccount agrees to be the identity of (kfn.dev/identity-for). */
export function identityFor(annotations: Record<string, string> | undefined): string[] {
  return names(annotations?.[identityForAnnotation]).filter(Boolean);
}

/** Whether a ServiceAccount with these annotations agrees to be the identity of Reconciler `name`. */
export function serviceAccountServes(annotations: Record<string, string> | undefined, name: string): boolean {
  return identityFor(annotations).includes(name);
}

const names = (list: string | undefined) => (list ?? '').split(',').map((n) => n.trim());
