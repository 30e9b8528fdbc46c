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
import { isCelError, type CelInput } from '@bufbuild/cel';
import { compiled } from './rules.ts';
import { groupOf, sameKind, type KindRef } from '../../core/objects.ts';
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
    const [group, version] = guard.kind.apiVersion.includes('/') ? guard.kind.apiVersion.split('/') : ['', guard.kind.apiVersion];
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
    const [group, version] = target.apiVersion.includes('/') ? target.apiVersion.split('/') : ['', target.apiVersion];
    const vars = {
      object: celValue(request.operation === 'DELETE' ? null : request.object),
      oldObject: celValue(request.operation === 'CREATE' ? null : request.oldObject),
      request: celValue({ operation: request.operation, name: target.metadata?.name ?? '', namespace: target.metadata?.namespace ?? '', kind: { group, version, kind: target.kind } }),
      params: null,
    } as Record<string, CelInput>;
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
