// A CustomResourceDefinition from TypeBox schemas: the one definition that gives a kind's
// TypeScript types, its validation in code, and the OpenAPI schema the apiserver enforces. The
// SDK's kinds and the bridge's own Reconciler are both written this way.
import type { TSchema } from '@sinclair/typebox';
import { isObject } from '../core/json.ts';

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

/** One served version: its spec and status schemas; the storage version has the printer columns. */
export interface CrdVersion {
  name: string;
  spec: TSchema;
  status?: TSchema;
  storage: boolean;
}

export interface CrdOptions {
  group: string;
  kind: string;
  plural: string;
  scope: 'Namespaced' | 'Cluster';
  shortNames?: string[];
  categories?: string[];
  printerColumns?: PrinterColumn[];
  versions: CrdVersion[];
  /** The CRD's spec.conversion, when versions convert through a webhook. */
  conversion?: Record<string, unknown>;
}

/**
 * Keys a schema may carry for kfn's own validation in code (the words of an error message)
 * that a CRD schema has no field for: dropped from the OpenAPI form.
 */
export const codeOnlyKeys = ['expected', 'sensitive'] as const;

/**
 * A TypeBox schema as plain OpenAPI for a CRD: TypeBox's symbol keys and the code-only keys
 * dropped, and what TypeBox writes differently from a CRD rewritten (see structural). What has
 * no CRD form at all is left as it is, for crdRefusals to name.
 */
export function openApi(schema: TSchema): Record<string, unknown> {
  return structural(JSON.parse(JSON.stringify(schema))) as Record<string, unknown>;
}

/**
 * Rewrites what TypeBox emits but CRD schemas say otherwise: a Record's patternProperties become
 * additionalProperties, a literal (const) or a union of literals becomes an enum, a union of
 * exactly integer and string becomes x-kubernetes-int-or-string, and JSON Schema's numeric
 * exclusiveMinimum/Maximum become OpenAPI 3.0's minimum/maximum with a boolean flag.
 */
function structural(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(structural);
  if (typeof node !== 'object' || node === null) return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) if (!(codeOnlyKeys as readonly string[]).includes(k)) out[k] = k === 'default' || k === 'enum' || k === 'const' ? v : structural(v);
  if ('const' in out) {
    out.enum = [out.const];
    delete out.const;
  }
  const anyOf = out.anyOf as { enum?: unknown[]; type?: string }[] | undefined;
  if (anyOf?.length && anyOf.every((a) => a.enum?.length === 1 && a.type === anyOf[0]!.type)) {
    delete out.anyOf;
    out.type = anyOf[0]!.type;
    out.enum = anyOf.map((a) => a.enum![0]);
  }
  // Only the bare pair has a CRD form: the apiserver takes no other keys inside its branches.
  const bare = (a: Record<string, unknown>) => Object.keys(a).length === 1 && (a.type === 'integer' || a.type === 'string');
  if (anyOf?.length === 2 && !('type' in out) && anyOf.every((a) => bare(a)) && anyOf[0]!.type !== anyOf[1]!.type) {
    delete out.anyOf;
    out['x-kubernetes-int-or-string'] = true;
  }
  for (const [exclusive, bound] of [['exclusiveMinimum', 'minimum'], ['exclusiveMaximum', 'maximum']] as const) {
    if (typeof out[exclusive] === 'number' && out[bound] === undefined) {
      out[bound] = out[exclusive];
      out[exclusive] = true;
    }
  }
  const patterns = out.patternProperties as Record<string, unknown> | undefined;
  if (patterns && Object.keys(patterns).length === 1) {
    delete out.patternProperties;
    out.additionalProperties = Object.values(patterns)[0];
  }
  return out;
}

/** status.conditions as every kfn kind has it: metav1.Condition's shape, a map keyed by type. */
const conditionsSchema = {
  type: 'array',
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['type'],
  items: {
    type: 'object',
    required: ['type', 'status', 'reason', 'message', 'lastTransitionTime'],
    properties: {
      type: { type: 'string' },
      status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
      reason: { type: 'string' },
      message: { type: 'string' },
      observedGeneration: { type: 'integer' },
      lastTransitionTime: { type: 'string', format: 'date-time' },
    },
  },
};

/** A version's schema: spec and status, the status with the standard observedGeneration and conditions. */
function versionSchema(spec: TSchema, statusSchema: TSchema | undefined): Record<string, unknown> {
  const status = (statusSchema ? openApi(statusSchema) : { type: 'object' }) as { properties?: Record<string, unknown> };
  return {
    openAPIV3Schema: {
      type: 'object',
      required: ['spec'],
      properties: {
        spec: openApi(spec),
        status: { ...status, type: 'object', properties: { ...(status.properties ?? {}), observedGeneration: { type: 'integer' }, conditions: conditionsSchema } },
      },
    },
  };
}

/**
 * The CustomResourceDefinition: every version served with the status subresource, one stored.
 * Refused (CrdRefused) when the apiserver would refuse it, unless `check` is false: the CRD
 * exactly as written, for a test that shows the apiserver refusing it too.
 */
export function customResourceDefinition(o: CrdOptions, { check = true }: { check?: boolean } = {}): Record<string, unknown> {
  const version = (v: CrdVersion) => ({
    name: v.name,
    served: true,
    storage: v.storage,
    subresources: { status: {} },
    ...(o.printerColumns && v.storage ? { additionalPrinterColumns: o.printerColumns } : {}),
    schema: versionSchema(v.spec, v.status),
  });
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${o.plural}.${o.group}` },
    spec: {
      group: o.group,
      scope: o.scope,
      names: {
        kind: o.kind,
        listKind: `${o.kind}List`,
        plural: o.plural,
        singular: o.kind.toLowerCase(),
        ...(o.shortNames ? { shortNames: o.shortNames } : {}),
        ...(o.categories ? { categories: o.categories } : {}),
      },
      versions: o.versions.map(version),
      ...(o.conversion ? { conversion: o.conversion } : {}),
    },
  };
  const problems = check ? crdRefusals(crd) : [];
  if (problems.length) throw new CrdRefused(o.kind, o.group, problems);
  return crd;
}

/** The CRD's schema and names broke what the apiserver (or Kubernetes' naming) accepts: every problem, each naming its field. */
export class CrdRefused extends Error {
  readonly problems: string[];
  constructor(kind: string, group: string, problems: string[]) {
    super(`the apiserver would refuse the CRD of ${kind} (${group}):\n  ${problems.join('\n  ')}`);
    this.name = 'CrdRefused';
    this.problems = problems;
  }
}

/** A node of an OpenAPI schema, as the CRD holds it. */
type Schema = Record<string, unknown> & {
  type?: unknown;
  properties?: Record<string, Schema>;
  items?: Schema | Schema[];
  additionalProperties?: Schema | boolean;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  not?: Schema;
  enum?: unknown[];
  required?: string[];
};

/** The types a CRD's schema may name (apiextensions' openapiV3Types). */
const crdTypes = ['array', 'boolean', 'integer', 'number', 'object', 'string'];
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dnsLabel = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
// Stricter than the apiserver (which takes any DNS-1035 label, or kind lowercased): the
// conventions kubectl, client libraries and version ordering assume.
const kindName = /^[A-Z][A-Za-z0-9]*$/;
const versionName = /^v[0-9]+((alpha|beta)[0-9]+)?$/;

/**
 * What the apiserver would refuse in this CRD (or what breaks Kubernetes' naming conventions),
 * each problem naming the field as the kind's definition has it: `spec.properties.replicas.default`.
 * Checked on the CRD itself, so that a CRD from anywhere can be checked; empty when it is fine.
 */
export function crdRefusals(crd: Record<string, unknown>): string[] {
  const spec = crd.spec as { group: string; names: Names; versions: { name: string; schema?: { openAPIV3Schema?: Schema }; additionalPrinterColumns?: PrinterColumn[] }[] };
  const problems = nameRefusals(spec.group, spec.names);
  const several = spec.versions.length > 1;
  for (const version of spec.versions) {
    if (!versionName.test(version.name)) problems.push(`version "${version.name}": must be v<N>, v<N>alpha<M> or v<N>beta<M> (e.g. v1, v1alpha1, v2beta3)`);
    problems.push(...columnRefusals(version.additionalPrinterColumns ?? []).map((p) => (several ? `${version.name}: ${p}` : p)));
    const root = version.schema?.openAPIV3Schema?.properties ?? {};
    for (const part of ['spec', 'status'] as const) {
      if (root[part]) problems.push(...schemaRefusals(root[part], part).map((p) => (several ? `${version.name}: ${p}` : p)));
    }
  }
  return problems;
}

type Names = { kind: string; plural: string; shortNames?: string[]; categories?: string[] };

function nameRefusals(group: string, names: Names): string[] {
  const problems: string[] = [];
  const { kind, plural } = names;
  if (!kindName.test(kind)) problems.push(`kind "${kind}": must be UpperCamelCase letters and digits, starting with a capital letter (e.g. ${suggestKind(kind)})`);
  else if (kind.length > 59) problems.push(`kind "${kind}": at most 59 characters (its list kind, ${kind}List, must fit a DNS label's 63)`);
  if (!dnsSubdomain.test(group) || group.length > 253) problems.push(`group "${group}": must be a DNS subdomain, lowercase letters, digits, '-' and '.' (e.g. ${suggestGroup(group)})`);
  else if (!group.includes('.')) problems.push(`group "${group}": must have at least one dot, a domain you own (e.g. ${group}.com)`);
  else if (/(^|\.)(k8s|kubernetes)\.io$/.test(group)) problems.push(`group "${group}": *.k8s.io and *.kubernetes.io are for APIs the Kubernetes project approves (the apiserver wants an api-approved.kubernetes.io annotation): use a domain of your own`);
  const label = (what: string, value: string, example: string) => `${what} "${value}": must be a DNS label, lowercase letters, digits and '-', starting with a letter, at most 63 characters (e.g. ${example})`;
  if (!dnsLabel.test(plural) || plural.length > 63) problems.push(label('plural', plural, plural.toLowerCase().replace(/[^a-z0-9-]/g, '') || 'things'));
  for (const [i, short] of (names.shortNames ?? []).entries()) if (!dnsLabel.test(short) || short.length > 63) problems.push(label(`shortNames[${i}]`, short, short.toLowerCase().replace(/[^a-z0-9-]/g, '') || 'th'));
  for (const [i, category] of (names.categories ?? []).entries()) if (!dnsLabel.test(category) || category.length > 63) problems.push(label(`categories[${i}]`, category, category.toLowerCase().replace(/[^a-z0-9-]/g, '') || 'all'));
  return problems;
}

/** The printer column types the apiserver takes (apiextensions' printerColumnDatatypes). */
const columnTypes = ['boolean', 'date', 'integer', 'number', 'string'];

/**
 * What the apiserver refuses in printer columns: no name, an unknown type, and a jsonPath that
 * is empty or does not start with '.' (all it checks of the path when the CRD is written).
 */
function columnRefusals(columns: PrinterColumn[]): string[] {
  const problems: string[] = [];
  for (const [i, c] of columns.entries()) {
    const at = `printerColumns[${i}]${c.name ? ` (${c.name})` : ''}`;
    if (!c.name) problems.push(`${at}.name: must be set: the heading kubectl get shows`);
    if (!columnTypes.includes(c.type)) problems.push(`${at}.type ${show(c.type)}: must be one of ${columnTypes.join(', ')}`);
    if (!c.jsonPath) problems.push(`${at}.jsonPath: must be set, a path from the object's root (e.g. .status.phase)`);
    else if (!c.jsonPath.startsWith('.')) problems.push(`${at}.jsonPath ${show(c.jsonPath)}: must start with '.', a path from the object's root (e.g. .${c.jsonPath.replace(/^[$@]?\.?/, '')})`);
  }
  return problems;
}

const suggestKind = (kind: string) => kind.split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1)).join('').replace(/^[0-9]+/, '') || 'Thing';
const suggestGroup = (group: string) => {
  const g = group.toLowerCase().replace(/[^a-z0-9.]+/g, '.').replace(/^\.+|\.+$/g, '');
  return g.includes('.') ? g : `${g || 'demo'}.example.com`;
};

/** A schema's key in a path: `properties.replicas`, or `properties[my.key]` where a dot would mislead. */
const key = (k: string) => (/^[A-Za-z_$][\w$-]*$/.test(k) ? `.${k}` : `[${k}]`);

/** Keys that say what a value is, which the branches of allOf/anyOf/oneOf/not may not (structural schemas). */
const shapeKeys = ['type', 'properties', 'items', 'additionalProperties', 'description', 'title', 'default', 'nullable'];
const shapes = (s: Schema): boolean => shapeKeys.some((k) => k in s) || Object.keys(s).some((k) => k.startsWith('x-kubernetes-'));

/** What the apiserver refuses in one field's schema (and those under it), and defaults that break it. */
function schemaRefusals(s: Schema, at: string): string[] {
  const problems: string[] = [];
  const intOrString = s['x-kubernetes-int-or-string'] === true;
  const free = s['x-kubernetes-preserve-unknown-fields'] === true;
  const union = s.anyOf ?? s.oneOf;
  if (union?.length && s.type === undefined && !intOrString && union.every((b) => typeof b.type === 'string')) {
    const types = [...new Set(union.map((b) => b.type as string))];
    if (types.length === 2 && types.includes('integer') && types.includes('string')) {
      return [`${at}.type: must be set: a CRD's schema is structural (every field says its type); an integer-or-string field needs x-kubernetes-int-or-string: true`];
    }
    const what = types.length > 1 ? types.join(' and ') : `several ${types[0]} schemas`;
    return [`${at}: a union of ${what} has no CRD form (only integer | string has, as x-kubernetes-int-or-string): use one type${types.includes('null') ? ' (t.Optional for a field that may be absent)' : ''}`];
  }
  if (s.type === undefined) {
    if (!intOrString && !free) problems.push(`${at}.type: must be set: a CRD's schema is structural (every field says its type); for free-form data use t.Unsafe({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true })`);
  } else if (typeof s.type !== 'string' || !crdTypes.includes(s.type)) {
    const hints: Record<string, string> = { Date: ": for a time, use t.String({ format: 'date-time' })", null: ': use t.Optional for a field that may be absent', Uint8Array: ": for bytes, use t.String({ format: 'byte' }) (base64)" };
    problems.push(`${at}.type: ${JSON.stringify(s.type)} is not a type a CRD's schema has (${crdTypes.join(', ')})${hints[String(s.type)] ?? ''}`);
  }
  if (typeof s.$ref === 'string') problems.push(`${at}.$ref: the apiserver resolves no references: write the schema out (t.Ref and t.Recursive have no CRD form)`);
  if (s.patternProperties) problems.push(`${at}.patternProperties: a CRD has no patternProperties: use one t.Record per map, with one schema for its values`);
  if (Array.isArray(s.items)) problems.push(`${at}.items: must be one schema, not a list of them (a CRD has no tuples): use an object with named fields`);
  else if (s.type === 'array' && !s.items) problems.push(`${at}.items: must be set: an array says what its items are`);
  if (s.uniqueItems === true) problems.push(`${at}.uniqueItems: the apiserver refuses uniqueItems: true: use t.Array(…, { 'x-kubernetes-list-type': 'set' })`);
  if (s.properties && Object.keys(s.properties).length && s.additionalProperties !== undefined && s.additionalProperties !== true) {
    problems.push(s.additionalProperties === false ? `${at}.additionalProperties: false cannot go with properties in a CRD (the apiserver prunes unknown fields instead): drop additionalProperties: false` : `${at}.additionalProperties: cannot go with properties in a CRD: a map (t.Record) or an object with named fields, not both`);
  }
  for (const flag of ['exclusiveMinimum', 'exclusiveMaximum'] as const) {
    if (s[flag] !== undefined && typeof s[flag] !== 'boolean') problems.push(`${at}.${flag}: must be true or false in a CRD (OpenAPI 3.0), the bound itself in ${flag === 'exclusiveMinimum' ? 'minimum' : 'maximum'}`);
  }
  problems.push(...boundRefusals(s, at));
  if (typeof s.pattern === 'string') {
    try {
      new RegExp(s.pattern);
    } catch (err) {
      problems.push(`${at}.pattern: not a regular expression: ${(err as Error).message}`);
    }
  }
  for (const junctor of ['allOf', 'anyOf', 'oneOf'] as const) {
    for (const [i, branch] of (s[junctor] ?? []).entries()) {
      if (shapes(branch) || Object.values(branch.properties ?? {}).some(shapes)) {
        problems.push(`${at}.${junctor}[${i}]: a branch of ${junctor} may only constrain values (no type, properties, items, description or default): ${junctor === 'allOf' ? 'write one t.Object with all the fields instead of t.Intersect' : 'say the type outside it'}`);
      }
    }
  }
  if (s.not && shapes(s.not)) problems.push(`${at}.not: may only constrain values (no type, properties, items, description or default)`);
  if (problems.length) return problems;
  // The schema is sound: its default must pass it, and what is under it must be sound too.
  if (s.default !== undefined) problems.push(...valueRefusals(s.default, s, `${at}.default`));
  for (const [k, v] of Object.entries(s.properties ?? {})) problems.push(...schemaRefusals(v, `${at}.properties${key(k)}`));
  if (s.items && !Array.isArray(s.items)) problems.push(...schemaRefusals(s.items, `${at}.items`));
  if (typeof s.additionalProperties === 'object') problems.push(...schemaRefusals(s.additionalProperties, `${at}.additionalProperties`));
  return problems;
}

/** Lower bounds above their upper bounds: a field no value can be valid for. */
function boundRefusals(s: Schema, at: string): string[] {
  const problems: string[] = [];
  const pairs = [['minLength', 'maxLength'], ['minItems', 'maxItems'], ['minProperties', 'maxProperties']] as const;
  for (const [lo, hi] of pairs) {
    if (typeof s[lo] === 'number' && typeof s[hi] === 'number' && s[lo] > s[hi]) problems.push(`${at}: ${lo} ${s[lo]} is above ${hi} ${s[hi]}, so no value is valid`);
  }
  if (typeof s.minimum === 'number' && typeof s.maximum === 'number') {
    const strict = s.exclusiveMinimum === true || s.exclusiveMaximum === true;
    const lo = s.exclusiveMinimum === true ? 'exclusiveMinimum' : 'minimum';
    const hi = s.exclusiveMaximum === true ? 'exclusiveMaximum' : 'maximum';
    if (s.minimum > s.maximum) problems.push(`${at}: ${lo} ${s.minimum} is above ${hi} ${s.maximum}, so no value is valid`);
    else if (strict && s.minimum === s.maximum) problems.push(`${at}: ${lo} ${s.minimum} is not below ${hi} ${s.maximum}, so no value is valid`);
  }
  return problems;
}

const show = (v: unknown) => JSON.stringify(v);
const typeOf: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === 'string',
  integer: (v) => Number.isInteger(v),
  number: (v) => typeof v === 'number',
  boolean: (v) => typeof v === 'boolean',
  array: Array.isArray,
  object: isObject,
};
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Why `value` (a default) fails the schema `s`, as the apiserver validates defaults: its type,
 * enum, bounds, lengths, pattern, items and fields, and no field the schema would prune.
 */
function valueRefusals(value: unknown, s: Schema, at: string): string[] {
  if (value === null) return s.nullable === true ? [] : [`${at}: null, and the schema is not nullable`];
  if (s['x-kubernetes-int-or-string'] === true) {
    if (!Number.isInteger(value) && typeof value !== 'string') return [`${at}: ${show(value)} is neither an integer nor a string`];
  } else if (typeof s.type === 'string' && typeOf[s.type] && !typeOf[s.type]!(value)) {
    return [`${at}: ${show(value)} is not ${s.type === 'integer' || s.type === 'array' || s.type === 'object' ? 'an' : 'a'} ${s.type}`];
  }
  const problems: string[] = [];
  if (s.enum && !s.enum.some((e) => same(e, value))) problems.push(`${at}: ${show(value)} is not one of ${s.enum.map(show).join(', ')}`);
  if (typeof value === 'number') {
    if (typeof s.minimum === 'number') {
      if (s.exclusiveMinimum === true ? value <= s.minimum : value < s.minimum) problems.push(s.exclusiveMinimum === true ? `${at}: ${value} is not above exclusiveMinimum ${s.minimum}` : `${at}: ${value} is below minimum ${s.minimum}`);
    }
    if (typeof s.maximum === 'number') {
      if (s.exclusiveMaximum === true ? value >= s.maximum : value > s.maximum) problems.push(s.exclusiveMaximum === true ? `${at}: ${value} is not below exclusiveMaximum ${s.maximum}` : `${at}: ${value} is above maximum ${s.maximum}`);
    }
    if (typeof s.multipleOf === 'number' && !Number.isInteger(value / s.multipleOf)) problems.push(`${at}: ${value} is not a multiple of ${s.multipleOf}`);
  }
  if (typeof value === 'string') {
    // Counted in characters, as the apiserver counts runes, not UTF-16 units.
    const length = [...value].length;
    if (typeof s.minLength === 'number' && length < s.minLength) problems.push(`${at}: ${show(value)} is shorter than minLength ${s.minLength}`);
    if (typeof s.maxLength === 'number' && length > s.maxLength) problems.push(`${at}: ${show(value)} is longer than maxLength ${s.maxLength}`);
    if (typeof s.pattern === 'string' && !new RegExp(s.pattern).test(value)) problems.push(`${at}: ${show(value)} does not match pattern ${s.pattern}`);
  }
  if (Array.isArray(value)) {
    if (typeof s.minItems === 'number' && value.length < s.minItems) problems.push(`${at}: ${value.length} items, fewer than minItems ${s.minItems}`);
    if (typeof s.maxItems === 'number' && value.length > s.maxItems) problems.push(`${at}: ${value.length} items, more than maxItems ${s.maxItems}`);
    const items = s.items;
    if (items && !Array.isArray(items)) for (const [i, item] of value.entries()) problems.push(...valueRefusals(item, items, `${at}[${i}]`));
  }
  if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      const field = s.properties?.[k] ?? (typeof s.additionalProperties === 'object' ? s.additionalProperties : undefined);
      if (field) problems.push(...valueRefusals(v, field, `${at}${key(k)}`));
      else if (s['x-kubernetes-preserve-unknown-fields'] !== true && s.additionalProperties !== true) problems.push(`${at}${key(k)}: not in the schema (the apiserver would prune it, and refuses such a default)`);
    }
    for (const k of s.required ?? []) if (!(k in value)) problems.push(`${at}${key(k)}: required, missing`);
    const count = Object.keys(value).length;
    if (typeof s.minProperties === 'number' && count < s.minProperties) problems.push(`${at}: ${count} fields, fewer than minProperties ${s.minProperties}`);
    if (typeof s.maxProperties === 'number' && count > s.maxProperties) problems.push(`${at}: ${count} fields, more than maxProperties ${s.maxProperties}`);
  }
  return problems;
}
