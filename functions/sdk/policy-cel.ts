// A function's declared defaults and guards evaluated as the apiserver evaluates their policies,
// without a cluster: applyDefaults and checkAdmission for unit tests (kfn/sdk/testing), the
// defaulting webhook (admission.ts, which loads this module on its first request), and the check
// that each expression is CEL when kfn loads a function. The only module of the SDK's runtime
// that loads the CEL library (@bufbuild/cel): a function without defaults never does.
//
// The variables are the apiserver's: `object` (null on DELETE), `oldObject` (null on CREATE),
// `request` (operation, name, namespace, kind), `params` (null: kfn binds no parameters). The
// apiserver types an object's numbers by its OpenAPI schema; here an integral number is a CEL int
// and any other a double, which is what Kubernetes' built-in kinds declare (their numbers are
// integers; fractions travel as quantity strings).
import { isCelError, isCelList, isCelMap, isCelUint, type CelInput } from '@bufbuild/cel';
import { groupOf, sameKind, versionOf } from '../../core/objects.ts';
import { unescapePointerToken } from '../../core/json.ts';
import { defaultsName, guardName, operationsOf, ownWritesPass, type AdmissionRequest } from './policies.ts';
import type { Reconciler } from './reconciler.ts';
import { compiled } from './rules.ts';

/**
 * The expressions of a function's declared defaults that are not CEL, each named by where it is
 * (`defaults[0].when: \`object.spec.(\` is not CEL: …`). Not its guards: the apiserver's CEL takes
 * syntax this library does not parse (optional fields, `object.?spec`), and it judges them itself.
 */
export function expressionProblems(reconciler: Pick<Reconciler, 'defaults'>): string[] {
  const problems: string[] = [];
  const cel = (what: string, expression: string) => {
    try {
      compiled(expression);
    } catch (err) {
      problems.push(`${what}: ${(err as Error).message}`);
    }
  };
  (reconciler.defaults ?? []).forEach((d, i) => {
    if (d.when !== undefined) cel(`defaults[${i}].when`, d.when);
    for (const [path, value] of Object.entries(d.set)) cel(`defaults[${i}].set[${JSON.stringify(path)}]`, value);
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
  const parts = path.slice(1).split('/').map(unescapePointerToken);
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
