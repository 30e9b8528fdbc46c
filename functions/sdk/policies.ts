// Rules a function keeps on other kinds (or on its own, where a rule needs the request or the
// stored object), run by the apiserver itself as a ValidatingAdmissionPolicy and its binding
// (GA since Kubernetes 1.30): no webhook, so they hold with the function at zero or not deployed;
// and its declared defaults, as a MutatingAdmissionPolicy. A function declares them as it declares
// the rest (reconciler.ts: Guard, Defaults); this module makes their manifests; policy-cel.ts evaluates their CEL without a cluster (unit tests, and the
// defaulting webhook), and only it loads the CEL library.
import { groupOf, versionOf } from '../../core/objects.ts';
import { functionLabels } from '../../core/names.ts';
import { pluralOf } from './kind.ts';
import type { Defaults, Guard, Operation, Reconciler } from './reconciler.ts';

/** The policy's (and its binding's) name: `kfn-<function>-<plural>.<group>`. */
export function guardName(reconciler: Pick<Reconciler, 'name'>, guard: Guard): string {
  const group = groupOf(guard.kind.apiVersion) || 'core';
  return `kfn-${reconciler.name}-${guard.kind.plural ?? pluralOf(guard.kind.kind)}.${group}`;
}

export const operationsOf = (guard: Guard): Operation[] => guard.operations ?? ['CREATE', 'UPDATE'];

/**
 * Each guard as a ValidatingAdmissionPolicy (Fail when a rule cannot be evaluated) and its
 * binding (Deny), limited to `namespaces` when the function watches only those.
 */
export function policyManifests(reconciler: Reconciler, namespaces?: string[]): Record<string, unknown>[] {
  const labels = functionLabels(reconciler.name);
  return (reconciler.guards ?? []).flatMap((guard) => {
    const name = guardName(reconciler, guard);
    const [group, version] = [groupOf(guard.kind.apiVersion), versionOf(guard.kind.apiVersion)];
    return [
      {
        apiVersion: 'admissionregistration.k8s.io/v1',
        kind: 'ValidatingAdmissionPolicy',
        metadata: { name, labels },
        spec: {
          failurePolicy: 'Fail',
          matchConstraints: { resourceRules: [{ apiGroups: [group], apiVersions: [version], resources: [guard.kind.plural ?? pluralOf(guard.kind.kind)], operations: operationsOf(guard) }] },
          validations: guard.rules.map((r) => ({ expression: r.expression, ...(r.message ? { message: r.message } : {}), ...(r.messageExpression ? { messageExpression: r.messageExpression } : {}), ...(r.reason ? { reason: r.reason } : {}) })),
        },
      },
      {
        apiVersion: 'admissionregistration.k8s.io/v1',
        kind: 'ValidatingAdmissionPolicyBinding',
        metadata: { name, labels },
        spec: {
          policyName: name,
          validationActions: ['Deny'],
          ...(namespaces?.length ? { matchResources: { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: namespaces }] } } } : {}),
        },
      },
    ];
  });
}

/** The API group and versions that serve MutatingAdmissionPolicy, newest first (GA in 1.36, beta before). */
export const mutatingPolicyVersions = ['admissionregistration.k8s.io/v1', 'admissionregistration.k8s.io/v1beta1'] as const;
export type MutatingPolicyVersion = (typeof mutatingPolicyVersions)[number];

/** The policy's (and its binding's) name: `kfn-<function>-<plural>.<group>`. */
export function defaultsName(reconciler: Pick<Reconciler, 'name' | 'for'>): string {
  return `kfn-${reconciler.name}-${reconciler.for.plural}.${reconciler.for.group}`;
}

/**
 * What neither the admission webhooks nor the policies of declared defaults are asked about (CEL,
 * evaluated by the apiserver): an update that leaves the spec as it was, there or not — kfn's own
 * finalizer removal and notes, a user's annotations (status has a subresource of its own). A rule
 * tightened since must not leave an object Terminating forever, nor a function that is down block
 * its finalizer's removal. Any other update is asked about, of an object being deleted too: its
 * spec can still change, and is validated and defaulted as ever.
 */
export const ownWritesPass = [
  { name: 'not-metadata-only', expression: "request.operation != 'UPDATE' || has(object.spec) != has(oldObject.spec) || (has(object.spec) && object.spec != oldObject.spec)" },
];

/** One declaration's JSON Patch, as a policy's mutation: its `add`s, or none when its `when` does not hold. */
const patchOf = (d: Defaults): string => {
  const adds = `[${Object.entries(d.set).map(([path, value]) => `JSONPatch{op: "add", path: ${JSON.stringify(path)}, value: ${value}}`).join(', ')}]`;
  return d.when ? `(${d.when}) ? ${adds} : []` : adds;
};

/**
 * The function's declared defaults as one MutatingAdmissionPolicy of `apiVersion` and its
 * binding, limited to `namespaces`: a JSON Patch mutation per declaration, in order (the
 * apiserver runs a policy's mutations in order, each on what the ones before wrote), the
 * function's failurePolicy (default Fail: a value that cannot be computed refuses the request),
 * run once per request, as the defaulting webhook is.
 */
export function defaultsManifests(reconciler: Reconciler, apiVersion: MutatingPolicyVersion, namespaces?: string[]): Record<string, unknown>[] {
  if (!reconciler.defaults?.length) return [];
  const labels = functionLabels(reconciler.name);
  const kind = reconciler.for;
  const name = defaultsName(reconciler);
  return [
    {
      apiVersion,
      kind: 'MutatingAdmissionPolicy',
      metadata: { name, labels },
      spec: {
        failurePolicy: reconciler.admission?.failurePolicy ?? 'Fail',
        reinvocationPolicy: 'Never',
        matchConstraints: { resourceRules: [{ apiGroups: [kind.group], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: [kind.plural] }] },
        matchConditions: ownWritesPass,
        mutations: reconciler.defaults.map((d) => ({ patchType: 'JSONPatch', jsonPatch: { expression: patchOf(d) } })),
      },
    },
    {
      apiVersion,
      kind: 'MutatingAdmissionPolicyBinding',
      metadata: { name, labels },
      spec: {
        policyName: name,
        ...(namespaces?.length ? { matchResources: { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: namespaces }] } } } : {}),
      },
    },
  ];
}

/** True when the function's defaulting webhook has work: `default()`, or declared defaults that no policy of the apiserver runs (defaultsAsPolicies). */
export const hasDefaulting = (reconciler: Reconciler) => Boolean(reconciler.default || reconciler.defaults?.length);

/** The reconciler as served where the apiserver runs its declared defaults as policies: no defaulting webhook for them. */
export function defaultsAsPolicies<R extends Reconciler>(reconciler: R): R {
  if (!reconciler.defaults?.length) return reconciler;
  const { defaults: _, ...rest } = reconciler;
  return rest as R;
}

/**
 * Set (to any value) on a deployed function whose declared defaults the apiserver runs as
 * policies: its runtime then serves no defaulting webhook for them, and renews no certificate
 * for one (kfn deploy grants it no rights on a webhook configuration it does not have).
 */
export const defaultsAsPoliciesEnv = 'KFN_DEFAULTS_AS_POLICIES';

export interface AdmissionRequest {
  operation: Operation;
  /** The object sent (CREATE, UPDATE). */
  object?: { apiVersion: string; kind: string; metadata?: { name?: string; namespace?: string } } & Record<string, unknown>;
  /** The object stored (UPDATE, DELETE). */
  oldObject?: { apiVersion: string; kind: string; metadata?: { name?: string; namespace?: string } } & Record<string, unknown>;
  /** More of the request, as `request` in CEL gives it (an AdmissionReview's: userInfo, uid, dryRun, resource …). */
  request?: Record<string, unknown>;
}
