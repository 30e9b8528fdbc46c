// Whose rights a Reconciler's deliveries carry. The bridge watches each kind once for every
// Reconciler (one copy of each object in memory), under its own ServiceAccount; but an event
// hands what it saw to whoever runs the sink. So before it delivers for a Reconciler, the bridge
// asks the apiserver whether the Reconciler's identity — a ServiceAccount, as Knative's
// ApiServerSource has one — could have seen it itself: a SubjectAccessReview per kind, verb and
// namespace, repeated every recheck period so that a granted or revoked Role takes effect.
//
// Why reviews and not impersonation: impersonating would need a watch per identity (no sharing)
// and the right to impersonate every ServiceAccount of the cluster, a wider power than the list
// and watch rights the bridge holds; a review needs only `create subjectaccessreviews`.
//
// Naming an identity is no escalation: the ServiceAccount must agree to serve the Reconciler
// (its kfn.dev/identity-for annotation names it), and only who may edit ServiceAccounts in that
// namespace can make it agree.
import { kindId, type ReconcilerConfig } from './config.ts';
import { namespacesWatchedEach } from '../core/reconciler-spec.ts';
import { identityForAnnotation, serviceAccountServes } from '../core/names.ts';
import { groupOf, type KindRef } from '../core/objects.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';

/** How often a Reconciler's rights are reviewed again while the bridge cannot watch RBAC (changes take effect within it). */
export const identityRecheckMs = 30_000;

/**
 * How often they are reviewed again while it watches RBAC (bridge/rbac-changes.ts), which
 * reviews them at each change: a safety net for what no RBAC object shows (an authorizer
 * other than RBAC, a webhook's verdict changing).
 */
export const identityRecheckWatchedMs = 10 * 60_000;

/**
 * How long the last verdict stands while reviews cannot reach one (the apiserver away, failing or
 * timing out): past it, deliveries are held until a review decides, so a revocation made while the
 * bridge could not ask is never ignored for longer (reviews are retried at 1, 2, 4 … s meanwhile).
 */
export const undecidedGraceMs = 30_000;

/** The rights could not be reviewed now (a kind not served, the apiserver away): no verdict either way. */
export class Undecided extends Error {}

/** One question to the apiserver: may the identity do `verb` on `kind` in `namespace` ('' for every namespace)? */
export interface AccessQuestion {
  kind: KindRef;
  verb: 'list' | 'get';
  namespace: string;
}

/**
 * What a Reconciler's deliveries disclose, as questions: the primary and each owned kind are
 * delivered whole (contract 2) or as references to every object of them, so the identity must
 * be able to list them where the Reconciler looks; a watched kind is disclosed only by name (the
 * trigger of a mapped event).
 */
export function accessQuestions(config: ReconcilerConfig): AccessQuestion[] {
  const scopes = config.namespaces.length ? config.namespaces : [''];
  const kinds: { kind: KindRef; verb: AccessQuestion['verb'] }[] = [
    { kind: config.for, verb: 'list' },
    ...config.owns.map((o) => ({ kind: { apiVersion: o.apiVersion, kind: o.kind }, verb: 'list' as const })),
    // A watch mapped by a label or by a selector finds its objects by listing them: whoever runs
    // the sink learns the names of every object that matches (the trigger of a mapped event), so
    // the identity must be able to list them. A reference names its object in the primary, which
    // the identity reads already: get is enough.
    ...config.watches.map((w) => ({ kind: { apiVersion: w.apiVersion, kind: w.kind }, verb: 'referenceField' in w.mapping ? ('get' as const) : ('list' as const) })),
  ];
  return kinds.flatMap((k) => scopes.map((namespace) => ({ ...k, namespace })));
}

/** Who a ServiceAccount is to the authorizer: its user name and the groups every ServiceAccount has. */
function subjectOf(sa: { name: string; namespace: string }) {
  return { user: `system:serviceaccount:${sa.namespace}:${sa.name}`, groups: ['system:serviceaccounts', `system:serviceaccounts:${sa.namespace}`, 'system:authenticated'] };
}

/**
 * Why the Reconciler may not be delivered for now, or undefined when its identity may see
 * everything it would be sent. `required`: a Reconciler without an identity is refused.
 */
export async function identityProblem(api: KubeApi, config: ReconcilerConfig, required: boolean): Promise<string | undefined> {
  const sa = config.serviceAccount;
  if (!sa) return required ? `spec.serviceAccount is not set: the bridge delivers for a Reconciler only what its identity may read (set it to the function's ServiceAccount, as kfn deploy and kfn manifests do)` : undefined;
  const who = `ServiceAccount ${sa.namespace}/${sa.name}`;
  let account: { metadata?: { annotations?: Record<string, string> } };
  try {
    account = await api.request('GET', `/api/v1/namespaces/${sa.namespace}/serviceaccounts/${sa.name}`);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return `${who} does not exist`;
    if (err instanceof ApiError && err.status === 403) return `the bridge may not read ${who} (grant it get on serviceaccounts): ${err.message}`;
    throw new Undecided(`cannot read ${who}: ${(err as Error).message}`);
  }
  if (!serviceAccountServes(account.metadata?.annotations, config.name)) {
    return `${who} does not agree to be the identity of Reconciler ${config.name}: if it should, annotate it (kubectl annotate serviceaccount -n ${sa.namespace} ${sa.name} ${identityForAnnotation}=${config.name})`;
  }
  // A Reconciler of many namespaces asks first whether its identity may list each kind
  // everywhere (one review per kind); only the kinds it may not are asked namespace by namespace.
  const subject = subjectOf(sa);
  let questions = accessQuestions(config);
  if (config.namespaces.length > namespacesWatchedEach) {
    const everywhere = accessQuestions({ ...config, namespaces: [] });
    const allowed = await inBatches(everywhere, answer);
    const settled = new Set(everywhere.filter((_, i) => allowed[i] === undefined).map((q) => `${q.verb} ${kindId(q.kind)}`));
    questions = questions.filter((q) => !settled.has(`${q.verb} ${kindId(q.kind)}`));
  }
  const answers = await inBatches(questions, answer);
  const refused = answers.filter((a): a is string => a !== undefined);
  if (refused.length) return `${who} may not ${refused.join(', nor ')}: nothing is delivered until it may (grant it with a Role or ClusterRole bound to it)`;
  return undefined;

  /** One review: undefined when allowed, else what is refused. */
  async function answer(q: AccessQuestion): Promise<string | undefined> {
    let plural: string;
    let namespaced: boolean;
    try {
      ({ plural, namespaced } = await api.resource(q.kind.apiVersion, q.kind.kind));
    } catch (err) {
      // A kind not served (yet): no verdict — its watch says what is wrong, and nothing of it
      // can be delivered meanwhile.
      throw new Undecided(`cannot tell what ${q.kind.kind} (${q.kind.apiVersion}) is: ${(err as Error).message}`);
    }
    const namespace = namespaced ? q.namespace : '';
    const review = await api
      .request<{ status?: { allowed?: boolean; reason?: string } }>('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
        body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { ...subject, resourceAttributes: { group: groupOf(q.kind.apiVersion), resource: plural, verb: q.verb, ...(namespace ? { namespace } : {}) } } },
      })
      .catch((err: Error) => {
        // The bridge itself may not ask (its ClusterRole lacks create subjectaccessreviews): a
        // verdict a person must act on. Anything else is passing.
        if (err instanceof ApiError && err.status === 403) return { status: { allowed: false, reason: `the bridge may not review rights: ${err.message}` } };
        throw new Undecided(`cannot review the rights of ${who}: ${err.message}`);
      });
    return review.status?.allowed ? undefined : `${q.verb} ${plural}${groupOf(q.kind.apiVersion) ? `.${groupOf(q.kind.apiVersion)}` : ''} ${namespace ? `in namespace ${namespace}` : namespaced ? 'in every namespace' : '(cluster-scoped)'}`;
  }
}

/** Reviews in flight at once: a Reconciler of many kinds and namespaces is reviewed in a few round trips, never in one burst of thousands. */
export const reviewsAtOnce = 16;

/** `fn` of each item, at most reviewsAtOnce at a time; the answers in the items' order. */
async function inBatches<T, R>(items: T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(reviewsAtOnce, items.length) }, worker));
  return out;
}
