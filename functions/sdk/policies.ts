// Rules a function keeps on other kinds (or on its own, where a rule needs the request or the
// stored object), run by the apiserver itself as a ValidatingAdmissionPolicy and its binding
// (GA since Kubernetes 1.30): no webhook, so they hold with the function at zero or not deployed.
// checkAdmission evaluates the same CEL without a cluster, as the apiserver does, for unit tests.
//
// The variables are the apiserver's: `object` (null on DELETE), `oldObject` (null on CREATE),
// `request` (operation, name, namespace, kind), `params` (null: kfn binds no parameters). The
// apiserver types an object's numbers by its OpenAPI schema; here an integral number is a CEL int
// and any other a double, which is what Kubernetes' built-in kinds declare (their numbers are
// integers; fractions travel as quantity strings).
import { isCelError, isCelList, isCelMap, isCelUint, type CelInput } from '@bufbuild/cel';
import { compiled } from './rules.ts';
import { groupOf, sameKind, versionOf, type KindRef } from '../../core/objects.ts';
import { functionLabels } from '../../core/names.ts';
import { pluralOf } from './kind.ts';
import type { Reconciler } from './reconciler.ts';

export type Operation = 'CREATE' | 'UPDATE' | 'DELETE';

/** One validation: a CEL expression that is true when the request may go on. */
export interface GuardRule {
  expression: string;
  /** What the refusal says (default: "failed expression: <expression>"). */
  message?: string;
  /** CEL giving what the refusal says; wins over message when it gives a non-empty string. */
  messageExpression?: string;
  /** The refusal's HTTP reason (default Invalid, 422). */
  reason?: 'Invalid' | 'Forbidden' | 'Unauthorized' | 'RequestEntityTooLarge';
}

/** Rules on requests for one kind. */
export interface Guard {
  kind: KindRef & { plural?: string };
  /** The requests they apply to (default: CREATE and UPDATE). */
  operations?: Operation[];
  rules: GuardRule[];
}

/** The policy's (and its binding's) name: `kfn-<function>-<plural>.<group>`. */
export function guardName(reconciler: Pick<Reconciler, 'name'>, guard: Guard): string {
  const group = groupOf(guard.kind.apiVersion) || 'core';
  return `kfn-${reconciler.name}-${guard.kind.plural ?? pluralOf(guard.kind.kind)}.${group}`;
}

const operationsOf = (guard: Guard): Operation[] => guard.operations ?? ['CREATE', 'UPDATE'];

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

/**
 * Defaults of the function's own kind, in CEL, that the apiserver writes itself before it stores
 * an object (a MutatingAdmissionPolicy, where the cluster serves one): when `when` holds, each
 * field of `set` gets its value, as a JSON Patch `add` (set when missing, replaced when there).
 * Where the cluster does not serve the policies, the function's defaulting webhook applies the
 * same declarations. On create and update, never on an object being deleted nor on an update of
 * its metadata alone (as the webhooks: ownWritesPass).
 */
export interface Defaults {
  /** CEL over `object`, `oldObject` and `request`: these defaults apply only when it is true (default: always). */
  when?: string;
  /** A field's JSON Pointer → CEL giving its value: `{ '/spec/image': "object.spec.image + ':latest'" }`. */
  set: Record<string, string>;
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
 * evaluated by the apiserver): an object being deleted, and an update that leaves the spec as it
 * was — kfn's own finalizer removal and notes, a user's annotations. A rule tightened since, or one
 * that reads an object already gone, must not leave an object Terminating forever; and a function
 * that is down must not block them.
 */
export const ownWritesPass = [
  { name: 'not-being-deleted', expression: '!has(object.metadata.deletionTimestamp)' },
  { name: 'not-metadata-only', expression: "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec" },
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

/** Problems with declared defaults: an expression that is not CEL, a path that is not a JSON Pointer below the object. */
export function defaultsProblems(defaults: Defaults[]): string[] {
  const problems: string[] = [];
  const cel = (what: string, expression: string) => {
    try {
      compiled(expression);
    } catch (err) {
      problems.push(`${what}: ${(err as Error).message}`);
    }
  };
  defaults.forEach((d, i) => {
    if (d.when !== undefined) cel(`defaults[${i}].when`, d.when);
    if (!Object.keys(d.set).length) problems.push(`defaults[${i}].set names no field`);
    for (const [path, value] of Object.entries(d.set)) {
      if (!/^(\/([^~/]|~[01])+)+$/.test(path) || /^\/(apiVersion|kind)$|^\/metadata\/(name|namespace|uid|resourceVersion)$/.test(path)) problems.push(`defaults[${i}].set: ${JSON.stringify(path)} is not a JSON Pointer to a field of the object that a default may set (/spec/image)`);
      cel(`defaults[${i}].set[${JSON.stringify(path)}]`, value);
    }
  });
  return problems;
}

/** A CEL result as JSON: ints as numbers, maps as objects. */
function jsonOf(value: unknown): unknown {
  if (typeof value === 'bigint') return Number(value);
  if (isCelUint(value)) return Number(value.value);
  if (isCelMap(value)) return Object.fromEntries([...value].map(([k, v]) => [String(isCelUint(k) ? k.value : k), jsonOf(v)]));
  if (isCelList(value) || Array.isArray(value)) return [...(value as Iterable<unknown>)].map(jsonOf);
  return value;
}

/**
 * `add` at a JSON Pointer, as the apiserver's JSON Patch library does it: the parent must exist;
 * an object's member is set; in an array, `-` appends, an index from 0 to its length inserts
 * there, a negative one counts from the end (-1 appends), anything else is an error.
 */
function addAt(root: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.slice(1).split('/').map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));
  const last = parts.pop()!;
  let at: unknown = root;
  for (const part of parts) {
    at = Array.isArray(at) ? at[Number(part)] : at && typeof at === 'object' ? (at as Record<string, unknown>)[part] : undefined;
    if (at === undefined || at === null || typeof at !== 'object') throw new Error(`the JSON Patch cannot add ${path}: its parent does not exist`);
  }
  if (!Array.isArray(at)) {
    (at as Record<string, unknown>)[last] = value;
    return;
  }
  if (last === '-') {
    at.push(value);
    return;
  }
  let index = /^-?\d+$/.test(last) ? Number(last) : NaN;
  const size = at.length + 1;
  if (Number.isNaN(index) || index >= size || index < -size) throw new Error(`the JSON Patch cannot add ${path}: no index ${last} in an array of ${at.length}`);
  if (index < 0) index += size;
  at.splice(index, 0, value);
}

/**
 * The object the apiserver would store after the function's declared defaults (its
 * MutatingAdmissionPolicy), without a cluster: `request.object` with each declaration whose
 * `when` holds applied in order, each on what the ones before wrote. Not for an object being
 * deleted nor an update of its metadata alone (ownWritesPass). A `when` or value that fails to
 * evaluate throws, in the apiserver's words, as the policy's failurePolicy Fail refuses the
 * request (with Ignore, the object comes back as it was). Requests for other kinds, and DELETE,
 * come back as they are.
 */
export function applyDefaults<T extends Record<string, unknown>>(reconciler: Reconciler, request: AdmissionRequest & { object?: T }): T | undefined {
  const obj = request.object;
  const defaults = reconciler.defaults ?? [];
  if (!obj || !defaults.length || request.operation === 'DELETE' || !sameKind(reconciler.for, obj as never)) return obj;
  const name = defaultsName(reconciler);
  const fail = (expression: string, why: string) => new Error(`policy '${name}' with binding '${name}' denied request: expression '${expression}' resulted in error: ${why}`);
  try {
    for (const condition of ownWritesPass) {
      const holds = compiled(condition.expression)(requestVars(request));
      if (isCelError(holds)) throw fail(condition.expression, holds.message);
      if (holds !== true) return obj;
    }
    let current = structuredClone(obj);
    for (const d of defaults) {
      const vars = requestVars({ ...request, object: current });
      if (d.when) {
        const holds = compiled(d.when)(vars);
        if (isCelError(holds)) throw fail(d.when, holds.message);
        if (typeof holds !== 'boolean') throw fail(d.when, `no such overload: it gives a ${typeof holds}, not a bool`);
        if (!holds) continue;
      }
      const next = structuredClone(current);
      for (const [path, expression] of Object.entries(d.set)) {
        const value = compiled(expression)(vars);
        if (isCelError(value)) throw fail(expression, value.message);
        addAt(next, path, jsonOf(value));
      }
      current = next;
    }
    return current;
  } catch (err) {
    if (reconciler.admission?.failurePolicy === 'Ignore') return obj;
    throw err;
  }
}

/** The variables a policy's CEL sees for `request`: object, oldObject, request (with what the webhook's review gives of it), params. */
function requestVars(request: AdmissionRequest): Record<string, CelInput> {
  const target = (request.object ?? request.oldObject)!;
  const [group, version] = [groupOf(target.apiVersion), versionOf(target.apiVersion)];
  return {
    object: celValue(request.operation === 'DELETE' ? null : request.object),
    oldObject: celValue(request.operation === 'CREATE' ? null : request.oldObject),
    request: celValue({ ...request.request, operation: request.operation, name: target.metadata?.name ?? '', namespace: target.metadata?.namespace ?? '', kind: { group, version, kind: target.kind } }),
    params: null,
  } as Record<string, CelInput>;
}

/** A JSON value as CEL sees it: integral numbers as ints (see above), null as null. */
function celValue(value: unknown): CelInput {
  if (typeof value === 'number' && Number.isInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map(celValue) as CelInput;
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, celValue(v)])) as CelInput;
  return (value ?? null) as CelInput;
}

export interface AdmissionRequest {
  operation: Operation;
  /** The object sent (CREATE, UPDATE). */
  object?: { apiVersion: string; kind: string; metadata?: { name?: string; namespace?: string } } & Record<string, unknown>;
  /** The object stored (UPDATE, DELETE). */
  oldObject?: { apiVersion: string; kind: string; metadata?: { name?: string; namespace?: string } } & Record<string, unknown>;
  /** More of the request, as `request` in CEL gives it (an AdmissionReview's: userInfo, uid, dryRun, resource …). */
  request?: Record<string, unknown>;
}

/**
 * What the apiserver would refuse of a request by the function's guards, in its words
 * (`ValidatingAdmissionPolicy '<name>' with binding '<name>' denied request: <message>`), one
 * line per failed rule; none when it is allowed.
 */
export function checkAdmission(reconciler: Reconciler, request: AdmissionRequest): string[] {
  const target = request.object ?? request.oldObject;
  if (!target) throw new Error('checkAdmission: a request needs its object (CREATE, UPDATE) or its oldObject (DELETE)');
  const out: string[] = [];
  for (const guard of reconciler.guards ?? []) {
    if (!sameKind(guard.kind, target) || !operationsOf(guard).includes(request.operation)) continue;
    const name = guardName(reconciler, guard);
    const vars = requestVars(request);
    for (const rule of guard.rules) {
      const result = compiled(rule.expression)(vars);
      if (result === true) continue;
      let message = rule.message ?? `failed expression: ${rule.expression}`;
      if (isCelError(result)) message = `expression '${rule.expression}' resulted in error: ${result.message}`;
      else if (rule.messageExpression) {
        const said = compiled(rule.messageExpression)(vars);
        if (typeof said === 'string' && said.trim()) message = said;
      }
      out.push(`ValidatingAdmissionPolicy '${name}' with binding '${name}' denied request: ${message}`);
    }
  }
  return out;
}
