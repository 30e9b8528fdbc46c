// A kind's rules as the apiserver runs them: CEL expressions in the CRD's schema
// (`x-kubernetes-validations`), checked by the apiserver itself on every create and update, so
// they hold with the function scaled to zero, on Knative or Lambda, or not deployed at all. This
// module evaluates the same expressions without a cluster (for a function's unit tests and
// `kfn manifests`' samples check), with @bufbuild/cel: it passes the CEL conformance suite and
// matches regexes with RE2, as the apiserver does (a JavaScript RegExp would not).
//
// What the apiserver does and this does too: `self` is the value where the rule sits, integers
// of the schema are CEL ints (a JSON number is a CEL double otherwise), `oldSelf` is the value
// before an update and a rule that reads it runs only on updates that had one, a refusal names
// the field (the rule's fieldPath) in the apiserver's words, and Kubernetes' quantity library
// (cel-quantity.ts). What it does not: Kubernetes' other CEL libraries (IP/CIDR, URL, format …)
// and the cost budget — the apiserver refuses such a CRD itself, and the integration test holds
// the two to the same answers.
import { celEnv, isCelError, parse, plan, type CelInput } from '@bufbuild/cel';
import { strings } from '@bufbuild/cel/ext';
import { quantityFuncs, quantityRegistry } from './cel-quantity.ts';
import { kindSchema, type Kind, type Rule } from './kind.ts';

interface Schema {
  type?: string;
  'x-kubernetes-int-or-string'?: boolean;
  properties?: Record<string, Schema>;
  items?: Schema;
  additionalProperties?: Schema | boolean;
  'x-kubernetes-validations'?: Rule[];
}

const env = celEnv({ funcs: [...strings, ...quantityFuncs], registry: quantityRegistry });
const planned = new Map<string, ReturnType<typeof plan>>();

/** A CEL expression, parsed once (rules and policies share them); a syntax error names it. */
export function compiled(rule: string): ReturnType<typeof plan> {
  let p = planned.get(rule);
  if (!p) {
    try {
      p = plan(env, parse(rule));
    } catch (err) {
      throw new Error(`\`${rule}\` is not CEL: ${(err as Error).message}`);
    }
    planned.set(rule, p);
  }
  return p;
}

/** A JSON value as CEL sees it under `schema`: the schema's integers (an int-or-string's too) are CEL ints. */
function celValue(value: unknown, schema: Schema | undefined): CelInput {
  if ((schema?.type === 'integer' || schema?.['x-kubernetes-int-or-string']) && typeof value === 'number' && Number.isInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map((v) => celValue(v, schema?.items)) as CelInput;
  if (value && typeof value === 'object') {
    const extra = typeof schema?.additionalProperties === 'object' ? schema.additionalProperties : undefined;
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, celValue(v, schema?.properties?.[k] ?? extra)])) as CelInput;
  }
  return value as CelInput;
}

/**
 * A refusal in the apiserver's words: `spec.tags[1]: Invalid value: "NotOk": must be lowercase`
 * for a value of its own, `spec.replicas: Invalid value: must be at most 10` for a rule on an
 * object or a list (the apiserver does not quote those).
 */
function refusal(path: string, value: unknown, rule: Rule, detail: string): string {
  if (rule.reason === 'FieldValueForbidden') return `${path}: Forbidden: ${detail}`;
  if (rule.reason === 'FieldValueRequired') return `${path}: Required value: ${detail}`;
  return `${path}: Invalid value: ${value !== null && typeof value === 'object' ? '' : `${JSON.stringify(value)}: `}${detail}`;
}

/** A failed rule's message: its messageExpression's (the apiserver falls back to message when that fails or is empty), or its message. */
function messageOf(rule: Rule, self: CelInput): string {
  const fallback = rule.message ?? `failed rule: ${rule.rule}`;
  if (!rule.messageExpression) return fallback;
  const said = compiled(rule.messageExpression)({ self });
  return typeof said === 'string' && said.trim() ? said : fallback;
}

/** `.replicas`, `.a.b` or `['odd.name']` appended to a field path as the apiserver writes it. */
const joinPath = (base: string, relative: string | undefined) =>
  !relative ? base : `${base}${relative.replace(/\['([^']*)'\]/g, (_m, name: string) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? `.${name}` : `[${name}]`))}`;

/** Evaluates every rule of `schema` and its fields on `value` (`old`, on an update), each refusal at its field. */
function check(schema: Schema, value: unknown, old: unknown, path: string, update: boolean, out: string[]): void {
  if (value === undefined) return;
  for (const rule of schema['x-kubernetes-validations'] ?? []) {
    const transition = /\boldSelf\b/.test(rule.rule);
    // A transition rule runs only on an update, and only where the value existed before.
    if (transition && (!update || old === undefined)) continue;
    const result = compiled(rule.rule)({ self: celValue(value, schema), ...(transition ? { oldSelf: celValue(old, schema) } : {}) });
    if (result === true) continue;
    const detail = isCelError(result) ? `${rule.rule}: ${result.message}` : messageOf(rule, celValue(value, schema));
    out.push(refusal(joinPath(path, rule.fieldPath), value, rule, detail));
  }
  if (Array.isArray(value)) {
    if (schema.items) value.forEach((v, i) => check(schema.items!, v, undefined, `${path}[${i}]`, update, out));
    return;
  }
  if (!value || typeof value !== 'object') return;
  const fields = value as Record<string, unknown>;
  const before = old && typeof old === 'object' && !Array.isArray(old) ? (old as Record<string, unknown>) : undefined;
  for (const [k, v] of Object.entries(fields)) {
    const sub = schema.properties?.[k] ?? (typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined);
    if (sub) check(sub, v, before?.[k], path ? `${path}.${k}` : k, update, out);
  }
}

/** Every rule of `schema` and below it, with where it is (`spec.properties.region`). */
function rulesIn(schema: Schema, at: string, out: { at: string; rule: Rule }[]): void {
  for (const rule of schema['x-kubernetes-validations'] ?? []) out.push({ at, rule });
  for (const [k, sub] of Object.entries(schema.properties ?? {})) rulesIn(sub, `${at}.properties.${k}`, out);
  if (schema.items) rulesIn(schema.items, `${at}.items`, out);
  if (typeof schema.additionalProperties === 'object') rulesIn(schema.additionalProperties, `${at}.additionalProperties`, out);
}

/** Every CEL rule of the kind's current version, with where it is in the schema. */
export function rulesOf(kind: Kind): { at: string; rule: Rule }[] {
  const found: { at: string; rule: Rule }[] = [];
  const schema = kindSchema(kind) as Schema;
  for (const part of ['spec', 'status']) if (schema.properties?.[part]) rulesIn(schema.properties[part]!, part, found);
  return found;
}

/**
 * The kind's rules that are not CEL (a rule or a messageExpression that does not parse), each at
 * its place in the schema, as the apiserver would refuse the CRD: none when all parse.
 */
export function ruleProblems(kind: Kind): string[] {
  const found = rulesOf(kind);
  const problems: string[] = [];
  const counts = new Map<string, number>();
  for (const { at, rule } of found) {
    const i = counts.get(at) ?? 0;
    counts.set(at, i + 1);
    for (const [field, expression] of [['rule', rule.rule], ['messageExpression', rule.messageExpression]] as const) {
      if (expression === undefined) continue;
      try {
        compiled(expression);
      } catch (err) {
        problems.push(`${at}.x-kubernetes-validations[${i}].${field}: ${(err as Error).message}`);
      }
    }
  }
  return problems;
}

/**
 * What the apiserver would refuse of `object` (a create; with `old`, an update) by the rules in
 * its kind's schema, in the apiserver's words, one line per refusal; none when it is allowed.
 */
export function checkRules(kind: Kind, object: { spec?: unknown; status?: unknown }, old?: { spec?: unknown; status?: unknown }): string[] {
  const schema = kindSchema(kind) as Schema;
  const out: string[] = [];
  for (const part of ['spec', 'status'] as const) {
    const sub = schema.properties?.[part];
    if (sub) check(sub, object[part], old?.[part], part, old !== undefined, out);
  }
  return out;
}
