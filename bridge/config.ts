// The Reconciler resource (kfn.dev/v1alpha1): what the bridge watches for one function and
// where it delivers. One TypeBox schema gives its TypeScript types, the validation of a
// Reconciler read from a file (`kfn bridge --config F`) or the cluster, and the CRD's OpenAPI
// schema (manifests/crds/reconciler.yaml, written by `npm run generate`), so the apiserver and
// the bridge refuse the same specs with the same bounds. Validation names every problem, so an
// unusable spec becomes a Ready=False condition (or a startup error) that says what to fix.
import { readFileSync } from 'node:fs';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { parseAllDocuments, stringify } from 'yaml';
import type { KindRef } from '../core/objects.ts';
import { kfnGroup, managedByKfnSelector, reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { customResourceDefinition } from '../kube/crd.ts';

/**
 * The bounds of every number in a spec. A period or a timeout beyond them would overflow a
 * platform timer (2^31-1 ms) or mean "never" in a way nobody meant.
 */
export const reconcilerLimits = {
  resyncPeriodSeconds: { minimum: 0, maximum: 86_400, default: 300 },
  maxConcurrentReconciles: { minimum: 1, maximum: 1_000, default: 1 },
  timeoutSeconds: { minimum: 1, maximum: 900, default: 30 },
  baseDelayMs: { minimum: 1, maximum: 3_600_000, default: 5 },
  maxDelayMs: { minimum: 1, maximum: 86_400_000, default: 1_000_000 },
  qps: { minimum: 1, maximum: 10_000, default: 10 },
  burst: { minimum: 1, maximum: 100_000, default: 100 },
} as const;

/** A whole number within its bounds, with its default. */
const bounded = (limits: { minimum: number; maximum: number; default: number }, description?: string) => Type.Optional(Type.Integer({ ...limits, ...(description ? { description } : {}) }));

/**
 * A rule across fields: its CEL form for the CRD (x-kubernetes-validations) and the same test in
 * code, with one message for both.
 */
interface CrossRule<T> {
  rule: string;
  message: string;
  holds(value: T): boolean;
}

/** Where a schema keeps its rules' tests: a symbol, so copies (Type.Optional) keep it and JSON drops it. */
const crossRules = Symbol('crossRules');

/** An object schema with rules across its fields, written once for the apiserver and the code. */
function withRules<S extends TSchema>(schema: S, rules: CrossRule<Record<string, unknown>>[]): S {
  (schema as Record<symbol, unknown>)[crossRules] = rules;
  (schema as Record<string, unknown>)['x-kubernetes-validations'] = rules.map(({ rule, message }) => ({ rule, message }));
  return schema;
}

const has = (o: Record<string, unknown>, key: string) => o[key] !== undefined;

const kindFields = {
  apiVersion: Type.String({ pattern: '^([a-z0-9.-]+/)?v[0-9]+((alpha|beta)[0-9]+)?$', expected: 'group/version or a core version such as v1' }),
  kind: Type.String({ pattern: '^[A-Z][A-Za-z0-9]*$', expected: 'a Kind name such as ConfigMap' }),
};

const fieldPath = (description: string) => Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*$', expected: 'a dotted field path such as spec.selector', description }));

const mappingSchema = withRules(
  Type.Object({
    label: Type.Optional(Type.String({ minLength: 1, description: 'Label key whose value names the primary (same namespace).' })),
    selectorField: fieldPath('Dotted path of a label selector in the primary, e.g. spec.selector.'),
    referenceField: fieldPath("Dotted path in the primary holding the watched object's name, e.g. spec.issuerRef.name (same namespace; any namespace for a cluster-scoped kind)."),
  }),
  [
    {
      rule: 'has(self.label) ? !has(self.selectorField) && !has(self.referenceField) : has(self.selectorField) != has(self.referenceField)',
      message: 'mapping needs exactly one of label, selectorField or referenceField',
      holds: (m) => ['label', 'selectorField', 'referenceField'].filter((k) => has(m, k)).length === 1,
    },
  ],
);

const sinkSchema = withRules(
  Type.Object({
    uri: Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', expected: 'an http(s) URL', description: 'URL of the function.' })),
    ref: Type.Optional(
      Type.Object(
        { apiVersion: Type.String(), kind: Type.String(), name: Type.String(), namespace: Type.Optional(Type.String()) },
        { description: 'An addressable object (a Knative Service); its status.url is used.' },
      ),
    ),
    awsIam: Type.Optional(
      Type.Object(
        {
          region: Type.String({ pattern: '^[a-z]{2}(-[a-z]+)+-[0-9]+$', expected: 'an AWS region such as eu-west-1', description: "The function's AWS region, e.g. eu-west-1." }),
          service: Type.String({ minLength: 1, default: 'lambda', description: 'The signing service name (lambda for Function URLs).' }),
        },
        {
          description:
            'Sign each delivery with AWS Signature Version 4 (a Lambda Function URL with AuthType AWS_IAM), with credentials from the AWS default chain of the bridge (environment, web identity / IRSA, shared config, container or instance role).',
        },
      ),
    ),
  }),
  [{ rule: 'has(self.uri) != has(self.ref)', message: 'sink needs exactly one of uri or ref', holds: (s) => has(s, 'uri') !== has(s, 'ref') }],
);

export const reconcilerSpecSchema = Type.Object({
  for: Type.Object(kindFields, { description: 'The primary kind; one reconcile per object of it.' }),
  contract: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 2,
      default: 1,
      description:
        "The event contract the function speaks: 1, references only (the function reads what it needs); 2, each event also carries the primary and the children it controls as the bridge's watches hold them, and the bridge does not deliver an object again before its watches have seen the function's writes.",
    }),
  ),
  owns: Type.Optional(
    Type.Array(
      Type.Object({
        ...kindFields,
        labelSelector: Type.String({
          default: managedByKfnSelector,
          description: 'Watch only children matching this selector (default app.kubernetes.io/managed-by=kfn, the label the SDK sets on every child; "" watches all).',
        }),
        fields: Type.Optional(
          Type.Array(Type.String({ pattern: '^[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*$', expected: 'a dotted field path such as status or spec.selector' }), {
            maxItems: 32,
            description:
              'Contract 2: the fields of these children its events carry besides their metadata (name, namespace, uid, resourceVersion, generation, labels, controller owner), e.g. [status, spec.selector]; [] for metadata alone. Absent: the whole object. The bridge keeps no more of them than this.',
          }),
        ),
      }),
      { description: 'Child kinds; their events map to the controller owner.' },
    ),
  ),
  watches: Type.Optional(
    Type.Array(Type.Object({ ...kindFields, mapping: mappingSchema }), {
      description: 'Other kinds; their events map to primaries by a label, by a selector in the primary, or by a field of the primary naming them.',
    }),
  ),
  sink: sinkSchema,
  auth: Type.Optional(
    Type.Object({
      type: Type.Union([Type.Literal('hmac'), Type.Literal('bearer')], { default: 'hmac', description: 'hmac: sign with the secret; bearer: send it as a bearer token.' }),
      secretRef: Type.Object(
        { name: Type.String(), namespace: Type.String(), key: Type.Optional(Type.String({ description: 'Key in the Secret (default "secret").' })) },
        { description: 'The Secret holding the key. It must name this Reconciler in its kfn.dev/auth-for annotation (comma-separated names): the bridge sends no other Secret\'s key.' },
      ),
    }),
  ),
  serviceAccount: Type.Optional(
    Type.Object(
      { name: Type.String({ minLength: 1 }), namespace: Type.String({ minLength: 1 }) },
      {
        description:
          "The identity the bridge watches and delivers for (the function's own ServiceAccount): it delivers only kinds this ServiceAccount may list (watched kinds: get) where the Reconciler looks. The ServiceAccount must name this Reconciler in its kfn.dev/identity-for annotation (comma-separated names).",
      },
    ),
  ),
  namespaces: Type.Optional(Type.Array(Type.String(), { description: 'Namespaces to reconcile in; empty means all.' })),
  resyncPeriodSeconds: bounded(reconcilerLimits.resyncPeriodSeconds, 'Seconds between deliveries of every object even without a change (0: never).'),
  maxConcurrentReconciles: bounded(reconcilerLimits.maxConcurrentReconciles),
  timeoutSeconds: bounded(reconcilerLimits.timeoutSeconds, 'How long one delivery may take; a second delivery of the object waits until then.'),
  backoff: Type.Optional(
    withRules(Type.Object({ baseDelayMs: bounded(reconcilerLimits.baseDelayMs), maxDelayMs: bounded(reconcilerLimits.maxDelayMs) }, { default: {} }), [
      { rule: '!has(self.baseDelayMs) || !has(self.maxDelayMs) || self.baseDelayMs <= self.maxDelayMs', message: 'backoff.baseDelayMs must not exceed backoff.maxDelayMs', holds: (b) => (b.baseDelayMs as number) <= (b.maxDelayMs as number) },
    ]),
  ),
  rateLimit: Type.Optional(
    Type.Object(
      { qps: bounded(reconcilerLimits.qps), burst: bounded(reconcilerLimits.burst) },
      { default: {}, description: 'The overall limit on retries across all objects (token bucket, as controller-runtime); the per-object backoff applies too.' },
    ),
  ),
});

export type ReconcilerSpec = Static<typeof reconcilerSpecSchema>;

/**
 * An owned kind. Its watch takes only objects matching `labelSelector` — by default the label
 * the SDK puts on every child, `app.kubernetes.io/managed-by=kfn`, so the bridge's memory and
 * watch traffic follow kfn's children, not every object of that kind in the cluster (and
 * Reconcilers owning one kind share one watch). `labelSelector: ""` watches them all
 * (children made without the SDK).
 */
export interface OwnedKind extends KindRef {
  labelSelector: string;
  /** Contract 2: the fields carried besides metadata; undefined, the whole object. */
  fields?: string[];
}

/**
 * How a watched object names the primaries to reconcile: a label whose value is the primary's
 * name; a label selector stored in the primary (`selectorField`, e.g. spec.selector); or a
 * field of the primary holding the watched object's name (`referenceField`, e.g.
 * spec.issuerRef.name; a path through a list names every item).
 */
export type Mapping = { label: string } | { selectorField: string } | { referenceField: string };

export interface WatchSpec extends KindRef {
  mapping: Mapping;
}

export type SinkSpec = Static<typeof sinkSchema>;
export type AuthSpec = NonNullable<ReconcilerSpec['auth']>;

/** A Reconciler with every default filled in. */
export interface ReconcilerConfig {
  name: string;
  generation: number;
  for: KindRef;
  /** The event contract the function speaks (1 or 2). */
  contract: 1 | 2;
  owns: OwnedKind[];
  watches: WatchSpec[];
  sink: SinkSpec;
  auth?: AuthSpec;
  /** The identity it watches and delivers for (bridge/identity.ts); none: see the bridge's requireIdentity. */
  serviceAccount?: { name: string; namespace: string };
  namespaces: string[];
  resyncPeriodSeconds: number;
  maxConcurrentReconciles: number;
  timeoutSeconds: number;
  backoff: { baseDelayMs: number; maxDelayMs: number };
  /** The overall limit on retries across the Reconciler's keys (a token bucket). */
  rateLimit: { qps: number; burst: number };
}

/** The Reconciler's CustomResourceDefinition, from the schema above. */
export function reconcilerCrd(): Record<string, unknown> {
  return customResourceDefinition({
    group: kfnGroup,
    kind: reconcilerKind,
    plural: reconcilerPlural,
    scope: 'Cluster',
    shortNames: ['rec'],
    categories: ['kfn'],
    printerColumns: [
      { name: 'For', type: 'string', jsonPath: '.spec.for.kind' },
      { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
      { name: 'Reason', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].reason' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    versions: [{ name: reconcilerApiVersion.split('/')[1]!, spec: reconcilerSpecSchema, storage: true }],
  });
}

/** The CRD as the YAML file manifests/crds/ holds. */
export function reconcilerCrdYaml(): string {
  return `# The Reconciler resource: what the kfn bridge watches for one function, and where it delivers.\n# Written by \`npm run generate\` from the schema in bridge/config.ts: edit that, not this file.\n${stringify(reconcilerCrd(), { lineWidth: 0 })}`;
}

export class InvalidReconcilerError extends Error {
  readonly problems: string[];
  readonly reconciler: string;
  constructor(reconciler: string, problems: string[]) {
    super(`Reconciler ${reconciler} is invalid: ${problems.join('; ')}`);
    this.reconciler = reconciler;
    this.problems = problems;
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Validates a Reconciler object (from the cluster or a file) and fills in the defaults. */
export function parseReconciler(obj: unknown): ReconcilerConfig {
  const problems: string[] = [];
  const o = isObject(obj) ? obj : {};
  const metadata = isObject(o.metadata) ? o.metadata : {};
  const name = typeof metadata.name === 'string' && metadata.name ? metadata.name : '(unnamed)';
  if (name === '(unnamed)') problems.push('metadata.name is required');
  if (o.kind !== undefined && o.kind !== reconcilerKind) problems.push(`kind must be ${reconcilerKind}, not ${JSON.stringify(o.kind)}`);
  if (!isObject(o.spec)) throw new InvalidReconcilerError(name, [...problems, 'spec is required']);
  const spec = Value.Default(reconcilerSpecSchema, Value.Clone(o.spec)) as ReconcilerSpec;
  problems.push(...specProblems(spec));
  if (problems.length) throw new InvalidReconcilerError(name, problems);
  return {
    name,
    generation: typeof metadata.generation === 'number' ? metadata.generation : 0,
    for: { apiVersion: spec.for.apiVersion, kind: spec.for.kind },
    contract: spec.contract === 2 ? 2 : 1,
    owns: (spec.owns ?? []).map((k) => ({ apiVersion: k.apiVersion, kind: k.kind, labelSelector: k.labelSelector, ...(k.fields ? { fields: k.fields } : {}) })),
    watches: (spec.watches ?? []).map((w) => ({ apiVersion: w.apiVersion, kind: w.kind, mapping: w.mapping as Mapping })),
    sink: spec.sink,
    auth: spec.auth,
    ...(spec.serviceAccount ? { serviceAccount: { name: spec.serviceAccount.name, namespace: spec.serviceAccount.namespace } } : {}),
    namespaces: spec.namespaces ?? [],
    resyncPeriodSeconds: spec.resyncPeriodSeconds!,
    maxConcurrentReconciles: spec.maxConcurrentReconciles!,
    timeoutSeconds: spec.timeoutSeconds!,
    backoff: spec.backoff as ReconcilerConfig['backoff'],
    rateLimit: spec.rateLimit as ReconcilerConfig['rateLimit'],
  };
}

/** Every problem of a defaulted spec, each naming its field: the schema's, unknown fields, the cross-field rules. */
function specProblems(spec: unknown): string[] {
  const problems = new Map<string, string>();
  for (const error of Value.Errors(reconcilerSpecSchema, spec)) {
    const where = fieldName(error.path);
    if (!problems.has(where)) problems.set(where, error.value === undefined ? `${where} is required` : `${where} must be ${expectation(error.schema)}, not ${JSON.stringify(error.value)}`);
  }
  return [...problems.values(), ...walk(reconcilerSpecSchema, spec, 'spec')];
}

/** Unknown fields (the apiserver prunes them; in a file they are most likely typos) and broken cross-field rules. */
function* walk(schema: TSchema, value: unknown, where: string): Generator<string> {
  if (schema.type === 'array' && Array.isArray(value)) for (const [i, item] of value.entries()) yield* walk(schema.items as TSchema, item, `${where}[${i}]`);
  if (schema.type !== 'object' || !isObject(value)) return;
  const properties = schema.properties as Record<string, TSchema>;
  for (const key of Object.keys(value)) {
    if (properties[key]) yield* walk(properties[key], value[key], `${where}.${key}`);
    else yield `${where}.${key} is not a field of a Reconciler (known: ${Object.keys(properties).join(', ')})`;
  }
  for (const rule of ((schema as unknown as Record<symbol, unknown>)[crossRules] as CrossRule<Record<string, unknown>>[] | undefined) ?? []) if (!rule.holds(value)) yield `${where}: ${rule.message}`;
}

/** `/spec/owns/0/kind` (as TypeBox reports it, below spec) → `spec.owns[0].kind`. */
function fieldName(path: string): string {
  return `spec${path.split('/').slice(1).map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part.replace(/~1/g, '/').replace(/~0/g, '~')}`)).join('')}`;
}

/** What a schema asks for, in words. */
function expectation(schema: TSchema): string {
  if (typeof schema.expected === 'string') return schema.expected;
  if (schema.type === 'integer') return `a whole number from ${schema.minimum} to ${schema.maximum}`;
  if (Array.isArray(schema.anyOf)) return `one of ${schema.anyOf.map((s: TSchema) => s.const).join(', ')}`;
  if (schema.type === 'string') return schema.minLength ? 'a non-empty string' : 'a string';
  if (schema.type === 'array') return 'a list';
  return 'an object';
}

/** Reads Reconcilers from a YAML file (one or more documents). */
export function loadReconcilerFile(path: string): ReconcilerConfig[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the bridge configuration ${path}: ${(err as Error).message}`);
  }
  const configs: ReconcilerConfig[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length) throw new Error(`${path}: invalid YAML: ${doc.errors[0]!.message}`);
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue;
    configs.push(parseReconciler(obj));
  }
  const names = configs.map((c) => c.name);
  const dup = names.find((n, i) => names.indexOf(n) !== i);
  if (dup) throw new Error(`${path}: two Reconcilers are named ${dup}`);
  return configs;
}

/** One watch a Reconciler needs: a kind, in one namespace or all, with a label selector or not. */
export interface WatchNeed {
  ref: KindRef;
  /** Whole objects (or the fields below), or metadata only. */
  full: boolean;
  /** With full: only these fields besides the compact metadata record; undefined, whole objects. */
  fields?: string[];
  /** undefined: every namespace (or a cluster-scoped kind). */
  namespace?: string;
  labelSelector?: string;
}

/**
 * Every watch a Reconciler needs. Mapping by a selector or a reference stored in the primary
 * needs the primary's spec, so the primary is watched in full; everything else needs only metadata
 * (labels, owners, generation). Contract 2 carries the primary whole and each owned kind's
 * declared fields in its events, so those watches keep them. A Reconciler that names namespaces
 * watches each of them, not the whole cluster (for a cluster-scoped kind the bridge drops the
 * namespace).
 */
export function watchedKinds(config: ReconcilerConfig): WatchNeed[] {
  const fieldMapping = config.watches.some((w) => 'selectorField' in w.mapping || 'referenceField' in w.mapping);
  const snapshots = config.contract === 2;
  const owned = (o: OwnedKind) => (!snapshots ? { full: false } : o.fields && o.fields.length === 0 ? { full: false } : { full: true, ...(o.fields ? { fields: o.fields } : {}) });
  const kinds: Omit<WatchNeed, 'namespace'>[] = [
    { ref: config.for, full: fieldMapping || snapshots },
    ...config.owns.map((o) => ({ ref: { apiVersion: o.apiVersion, kind: o.kind }, ...owned(o), ...(o.labelSelector ? { labelSelector: o.labelSelector } : {}) })),
    ...config.watches.map((w) => ({ ref: { apiVersion: w.apiVersion, kind: w.kind }, full: false })),
  ];
  if (config.namespaces.length === 0) return kinds;
  return kinds.flatMap((k) => config.namespaces.map((namespace) => ({ ...k, namespace })));
}

export function kindId(ref: KindRef): string {
  return `${ref.apiVersion}/${ref.kind}`;
}
