// A custom kind, written once: its names, its spec and status schema (TypeBox, so the same
// definition gives the TypeScript types and the CRD's OpenAPI schema), printer columns, and the
// CEL rules the apiserver checks (rules.ts evaluates them without a cluster).
import { Type, type Static, type TObject, type TSchema } from '@sinclair/typebox';
import type { KubeObject } from '../../kube/api.ts';
import type { Condition } from '../../core/conditions.ts';
import { CrdRefused, crdRefusals, customResourceDefinition, type CrdOptions, type PrinterColumn } from '../../kube/crd.ts';

/** One rule: a CEL expression that is true when the value is valid. */
export interface Rule {
  /** `self` is the value the rule is on (a kind's `rules`: its spec); `oldSelf`, on an update, the value before. */
  rule: string;
  /** What the refusal says (default: "failed rule: <rule>"). */
  message?: string;
  /** CEL giving what the refusal says, from `self`: `'must be ≤ 10 (got ' + string(self.replicas) + ')'`; wins over message. */
  messageExpression?: string;
  /** The field the refusal names, relative to where the rule is: `.replicas`. */
  fieldPath?: string;
  /** How the apiserver words the refusal (default FieldValueInvalid). */
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired';
}

export interface KindOptions<Spec extends TObject, Status extends TObject> {
  group: string;
  version: string;
  kind: string;
  /** Default: lower-case kind + "s". */
  plural?: string;
  scope?: 'Namespaced' | 'Cluster';
  shortNames?: string[];
  categories?: string[];
  spec: Spec;
  status: Status;
  printerColumns?: PrinterColumn[];
  /**
   * Rules the apiserver checks itself on every create and update (CEL, in the CRD's
   * x-kubernetes-validations): `self` is the spec, `oldSelf` the spec before an update. They hold
   * with the function down or scaled to zero; `checkRules` (kfn/sdk/testing) evaluates them in a
   * unit test. A rule deeper in the schema goes on its field: `t.Integer({ 'x-kubernetes-validations': [...] })`.
   */
  rules?: Rule[];
  /**
   * Earlier versions still served (v1alpha1 while `version` is v1): their schemas and how an
   * object converts to the current version (`up`) and back (`down`). The apiserver stores the
   * current version and calls the function's conversion webhook (/convert) to translate.
   */
  previousVersions?: PreviousVersion[];
}

/** An earlier version of a kind: its schema, and its conversions to and from the current one. */
export interface PreviousVersion {
  version: string;
  spec: TObject;
  status?: TObject;
  /** This version's object → the current version's (metadata is kept by the SDK; return spec and status). */
  up(obj: VersionedObject): VersionedObject;
  /** The current version's object → this version's. */
  down(obj: VersionedObject): VersionedObject;
}

/** An object in conversion: whatever its version holds, typed loosely. */
export interface VersionedObject {
  apiVersion?: string;
  kind?: string;
  metadata?: Record<string, unknown>;
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  [field: string]: unknown;
}

/** Object metadata, as the bridge and the SDK read it. */
export type ObjectMeta = KubeObject['metadata'];

/** A Kubernetes quantity ("500m", "1Gi", 2): a string or an integer. */
export const quantity = () => Type.Unsafe<string | number>({ 'x-kubernetes-int-or-string': true });

/** Container resource limits and requests, as in a pod spec. */
export const resourceRequirements = () => {
  const amounts = Type.Object({ cpu: Type.Optional(quantity()), memory: Type.Optional(quantity()) });
  return Type.Object({ limits: Type.Optional(amounts), requests: Type.Optional(amounts) });
};

/**
 * Resource requirements as a pod spec's model types them (quantities as strings): what a spec
 * field of `resourceRequirements()` gives, ready to put in a container (`2` → `"2"`; the
 * apiserver stores both alike).
 */
export function containerResources(r: { limits?: Record<string, string | number | undefined>; requests?: Record<string, string | number | undefined> }): { limits?: Record<string, string>; requests?: Record<string, string> } {
  const strings = (m: Record<string, string | number | undefined>) => Object.fromEntries(Object.entries(m).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]));
  return { ...(r.limits ? { limits: strings(r.limits) } : {}), ...(r.requests ? { requests: strings(r.requests) } : {}) };
}

/** The status every kfn kind has besides its own fields. */
export interface StandardStatus {
  observedGeneration?: number;
  conditions?: Condition[];
}

export interface Kind<Spec extends TObject = TObject, Status extends TObject = TObject> {
  apiVersion: string;
  kind: string;
  group: string;
  version: string;
  plural: string;
  namespaced: boolean;
  options: KindOptions<Spec, Status>;
  /**
   * The fields marked `sensitive: true` in the schema (`password: t.String({ sensitive: true })`),
   * as paths from the object's root (`['spec', 'password']`; `*` for every item of an array, or
   * every value of a map): invocation records hold a keyed digest instead of their values, and
   * the SDK's error messages, logs and answers never show them.
   */
  sensitive: string[][];
  /** The object type: what a reconcile function receives. */
  readonly Object?: { apiVersion: string; kind: string; metadata: ObjectMeta; spec: Static<Spec>; status?: Partial<Static<Status>> & StandardStatus };
}

/** The TypeScript type of a kind's objects: `type Web = ObjectOf<typeof MyWeb>`. */
export type ObjectOf<K extends Kind> = NonNullable<K['Object']>;

const irregular: Record<string, string> = { Endpoints: 'endpoints', Ingress: 'ingresses', NetworkPolicy: 'networkpolicies' };

/** The resource (plural) of a kind, as the API names it (and as kubebuilder's default would). */
export function pluralOf(kind: string): string {
  if (irregular[kind]) return irregular[kind];
  const lower = kind.toLowerCase();
  if (/[^aeiou]y$/.test(lower)) return `${lower.slice(0, -1)}ies`;
  if (/(s|x|z|ch|sh)$/.test(lower)) return `${lower}es`;
  return `${lower}s`;
}

/**
 * A custom kind. Refused here (CrdRefused, every problem naming its field) when the apiserver
 * would refuse its CRD: the error points at the definition, not at a cluster later.
 */
export function defineKind<Spec extends TObject, Status extends TObject>(options: KindOptions<Spec, Status>): Kind<Spec, Status> {
  const kind: Kind<Spec, Status> = {
    apiVersion: `${options.group}/${options.version}`,
    kind: options.kind,
    group: options.group,
    version: options.version,
    plural: options.plural ?? pluralOf(options.kind),
    namespaced: (options.scope ?? 'Namespaced') === 'Namespaced',
    sensitive: [...sensitivePaths(options.spec, ['spec']), ...sensitivePaths(options.status, ['status'])],
    options,
  };
  const problems = crdRefusals(customResourceDefinition(crdOptions(kind), { check: false }));
  if (problems.length) throw new CrdRefused(options.kind, options.group, problems);
  return kind;
}

/** What the kind's CRD is made of: every version, the current one stored. */
function crdOptions(kind: Kind): CrdOptions {
  const o = kind.options;
  return {
    group: kind.group,
    kind: kind.kind,
    plural: kind.plural,
    scope: o.scope ?? 'Namespaced',
    shortNames: o.shortNames,
    categories: o.categories,
    printerColumns: o.printerColumns,
    versions: [{ name: kind.version, spec: o.rules?.length ? withRules(o.spec, o.rules) : o.spec, status: o.status, storage: true }, ...(o.previousVersions ?? []).map((p) => ({ name: p.version, spec: p.spec, status: p.status, storage: false }))],
  };
}

/** `schema` with `rules` added to its own (a copy: the kind's TypeBox schema is left as it is). */
function withRules(schema: TSchema, rules: Rule[]): TSchema {
  const own = (schema as { 'x-kubernetes-validations'?: Rule[] })['x-kubernetes-validations'] ?? [];
  return { ...schema, 'x-kubernetes-validations': [...own, ...rules] } as TSchema;
}

/** The OpenAPI schema the apiserver holds objects of the kind's current version to (the CRD's). */
export function kindSchema(kind: Kind): Record<string, unknown> {
  const crd = customResourceDefinition(crdOptions(kind), { check: false }) as { spec: { versions: { name: string; schema: { openAPIV3Schema: Record<string, unknown> } }[] } };
  return crd.spec.versions.find((v) => v.name === kind.version)!.schema.openAPIV3Schema;
}

/** The paths of the sub-schemas marked `sensitive: true`. */
function sensitivePaths(schema: TSchema, at: string[]): string[][] {
  const s = schema as TSchema & { sensitive?: boolean; properties?: Record<string, TSchema>; items?: TSchema; additionalProperties?: TSchema | boolean; anyOf?: TSchema[] };
  if (s.sensitive === true) return [at];
  const out: string[][] = [];
  for (const [k, v] of Object.entries(s.properties ?? {})) out.push(...sensitivePaths(v, [...at, k]));
  if (s.items) out.push(...sensitivePaths(s.items, [...at, '*']));
  if (typeof s.additionalProperties === 'object') out.push(...sensitivePaths(s.additionalProperties, [...at, '*']));
  for (const v of s.anyOf ?? []) out.push(...sensitivePaths(v, at));
  return out;
}

/**
 * How the apiserver reaches a kind's conversion webhook, and the CA its certificate is signed by:
 * `caBundle`, or `injectCaFrom` (namespace/name of a cert-manager Certificate, whose CA
 * cert-manager's cainjector writes into the CRD).
 */
export type ConversionClient = { client: { url: string } | { service: { namespace: string; name: string; port?: number } } } & ({ caBundle: string; injectCaFrom?: undefined } | { caBundle?: undefined; injectCaFrom: string });

/**
 * The CustomResourceDefinition of a kind, with the status subresource and standard status. A
 * kind with previous versions serves them all, stores the current one, and needs `conversion`:
 * where its function's /convert answers.
 */
export function crdOf(kind: Kind, options: { conversion?: ConversionClient } = {}): Record<string, unknown> {
  const o = kind.options;
  const previous = o.previousVersions ?? [];
  if (previous.length && !options.conversion) {
    throw new Error(`${kind.kind} has previous versions (${previous.map((p) => p.version).join(', ')}): its CRD needs a conversion webhook — pass crdOf(kind, { conversion: { client, caBundle } }), as kfn deploy does`);
  }
  const conversion = options.conversion;
  const crd = customResourceDefinition({
    ...crdOptions(kind),
    conversion: conversion && {
      strategy: 'Webhook',
      webhook: {
        conversionReviewVersions: ['v1'],
        clientConfig: {
          ...(conversion.caBundle ? { caBundle: Buffer.from(conversion.caBundle).toString('base64') } : {}),
          ...('url' in conversion.client ? { url: `${conversion.client.url.replace(/\/$/, '')}/convert` } : { service: { ...conversion.client.service, port: conversion.client.service.port ?? 443, path: '/convert' } }),
        },
      },
    },
  });
  if (conversion?.injectCaFrom) {
    const metadata = crd.metadata as { annotations?: Record<string, string> };
    metadata.annotations = { ...metadata.annotations, [injectCaAnnotation]: conversion.injectCaFrom };
  }
  return crd;
}

/** cert-manager's cainjector writes the CA of the Certificate this names into the object's caBundle fields. */
export const injectCaAnnotation = 'cert-manager.io/inject-ca-from';
