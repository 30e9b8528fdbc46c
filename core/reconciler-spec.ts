// The Reconciler's spec (kfn.dev/v1alpha1): what the bridge watches for one function and where it
// delivers, in one place for both sides of the line. The bridge validates the Reconcilers it is
// given against it (bridge/config.ts, which also makes the CRD from it: `npm run generate`); the
// SDK's manifests, `kfn dev` and `kfn replay` write or read it through the types below. One
// TypeBox schema gives the TypeScript types, the validation in code and the CRD's OpenAPI
// schema, so the apiserver and the bridge refuse the same specs with the same bounds, and a
// field added here reaches every writer and reader as a type error until they agree.
import { X509Certificate } from 'node:crypto';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { isObject, pointerAsField } from './json.ts';
import { managedByKfnSelector, reconcilerApiVersion, reconcilerKind } from './names.ts';

/**
 * The bounds of every number in a spec. A period or a timeout beyond them would overflow a
 * platform timer (2^31-1 ms) or mean "never" in a way nobody meant.
 */
/**
 * Up to this many namespaces a Reconciler's kinds are watched in each (and the bridge granted
 * list/watch in each); past it, each kind is watched once cluster-wide and filtered by the
 * namespaces, so that a thousand namespaces are not a thousand LISTs per kind at each start.
 */
export const namespacesWatchedEach = 10;

export const reconcilerLimits = {
  resyncPeriodSeconds: { minimum: 0, maximum: 86_400, default: 300 },
  maxConcurrentReconciles: { minimum: 1, maximum: 1_000, default: 8 },
  timeoutSeconds: { minimum: 1, maximum: 900, default: 30 },
  baseDelayMs: { minimum: 1, maximum: 3_600_000, default: 5 },
  maxDelayMs: { minimum: 1, maximum: 86_400_000, default: 1_000_000 },
  qps: { minimum: 1, maximum: 10_000, default: 10 },
  burst: { minimum: 1, maximum: 100_000, default: 100 },
  // Near Knative's: its stable window (60 s) and grace period (30 s) before a revision goes to zero.
  idleSeconds: { minimum: 10, maximum: 86_400, default: 90 },
  maxReplicas: { minimum: 1, maximum: 100, default: 1 },
  keysPerReplica: { minimum: 1, maximum: 10_000, default: 10 },
} as const;

/** The status the bridge writes besides observedGeneration and conditions. */
export const reconcilerStatusSchema = Type.Object({
  concurrency: Type.Optional(Type.Integer({ minimum: 1, description: 'Deliveries the bridge lets be in flight at once now, learnt from the function\'s answers (at most spec.maxConcurrentReconciles).' })),
});

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
    caBundle: Type.Optional(
      Type.String({
        // PEM blocks alone, as a ca.crt holds them: base64 in the blocks, line breaks between.
        pattern: '^(-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\\r\\n]+-----END CERTIFICATE-----[\\r\\n]*)+$',
        maxLength: 65_536,
        expected: 'PEM certificates (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----), as a ca.crt holds them, not base64-encoded',
        description:
          "With an https uri: the CA certificates (PEM) the bridge trusts for this sink, and no other: a function's own CA, whose certificate its Service serves (a function defined with deliveryTls, which keeps it current). Without it an https sink is checked against the system's public roots.",
      }),
    ),
    allowPlainHttp: Type.Optional(
      Type.Boolean({
        description:
          'Deliver over plain http:// to a host outside the cluster (not a Service name, not this machine). Every event can be read on the way, and a contract 2 event carries the objects themselves: without this such a sink is refused.',
      }),
    ),
    scaleToZero: Type.Optional(
      Type.Object(
        {
          deployment: Type.Object(
            { name: Type.String({ minLength: 1 }), namespace: Type.String({ minLength: 1 }) },
            { description: 'The Deployment the sink runs as (the function\'s, or a shared host\'s).' },
          ),
          idleSeconds: bounded(reconcilerLimits.idleSeconds, 'Seconds without a delivery before it is scaled back to zero.'),
          maxReplicas: bounded(reconcilerLimits.maxReplicas, 'The most replicas it is scaled out to while keys wait.'),
          keysPerReplica: bounded(reconcilerLimits.keysPerReplica, 'Keys waiting or in flight per replica before another replica is added.'),
        },
        {
          description:
            "The bridge scales the sink's Deployment from zero when a delivery waits (through its scale subresource), holds the deliveries while a pod starts, scales it out by the keys waiting, and back to zero when idle: scale to zero without Knative. The bridge needs get on that Deployment and get, patch on its scale (kfn deploy --scale-to-zero grants them).",
        },
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
  [
    { rule: 'has(self.uri) != has(self.ref)', message: 'sink needs exactly one of uri or ref', holds: (s) => has(s, 'uri') !== has(s, 'ref') },
    { rule: '!has(self.scaleToZero) || has(self.uri)', message: 'sink.scaleToZero goes with a uri: the Deployment it names serves that URL', holds: (s) => !has(s, 'scaleToZero') || has(s, 'uri') },
    {
      rule: "!has(self.caBundle) || (has(self.uri) && self.uri.startsWith('https://'))",
      message: 'sink.caBundle goes with an https:// uri: it is the CA the bridge trusts for that sink',
      holds: (s) => !has(s, 'caBundle') || (typeof s.uri === 'string' && s.uri.startsWith('https://')),
    },
  ],
);

/**
 * The certificates of a sink's caBundle that cannot be read, each named; what the schema's
 * pattern (PEM blocks) cannot tell. None for an absent bundle.
 */
export function caBundleProblems(bundle: string | undefined): string[] {
  const blocks = bundle?.match(/-----BEGIN CERTIFICATE-----[^-]*-----END CERTIFICATE-----/g) ?? [];
  return blocks.flatMap((pem, i) => {
    try {
      new X509Certificate(pem);
      return [];
    } catch (err) {
      return [`spec.sink.caBundle: certificate ${i + 1} of ${blocks.length} cannot be read (${(err as Error).message})`];
    }
  });
}

/**
 * What contract 2 carries of an owned kind's children when the Reconciler does not say (`fields`
 * absent), besides the metadata every record has: their annotations (the SDK vouches a child
 * unchanged only when the annotations it sets are still there) and their status (what a
 * reconcile reads of its children: is the Deployment available, did the Job finish?). A child's
 * spec is what the function itself wants, so it is not kept: the SDK reads a child whole only when
 * the bridge cannot vouch for it.
 */
export const defaultObservedFields: readonly string[] = ['metadata.annotations', 'status'];

/** The fields carried of an owned kind: as declared, else the default; undefined (the whole object) for [*]. */
export function observedFields(declared: readonly string[] | undefined): string[] | undefined {
  if (declared === undefined) return [...defaultObservedFields];
  return declared.includes('*') ? undefined : [...declared];
}

export const reconcilerSpecSchema = withRules(Type.Object({
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
          Type.Array(Type.String({ pattern: '^([*]|[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*)$', expected: 'a dotted field path such as status or spec.selector, or * for the whole object' }), {
            maxItems: 32,
            default: [...defaultObservedFields],
            description:
              'Contract 2: the fields of these children its events carry besides their metadata (name, namespace, uid, resourceVersion, generation, labels, controller owner), e.g. [status, spec.selector]; [] for metadata alone; [*] for the whole object. Absent: metadata.annotations and status. The bridge keeps no more of them than this.',
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
  resyncSchedule: Type.Optional(
    Type.Union([Type.Literal('spread'), Type.Literal('batch')], {
      description:
        'spread: each object at its own time in the period (no burst on a sink that is always up); batch: every object at once, once a period (a sink that scales to zero is woken once). Default: batch for a Knative Service or a Lambda, spread otherwise.',
    }),
  ),
  maxConcurrentReconciles: bounded(reconcilerLimits.maxConcurrentReconciles, 'The most deliveries in flight at once (each object still one at a time): the bridge starts at 1 and adapts to the function\'s answers up to this ceiling (status.concurrency says where it is); 1 for one reconcile at a time.'),
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
}), [
  {
    rule: "!(has(self.contract) && self.contract == 2 && has(self.auth) && has(self.auth.type) && self.auth.type == 'bearer')",
    message: 'auth.type bearer cannot carry contract 2: a bearer token signs neither the body nor the time, and a contract 2 event carries the objects themselves; use hmac',
    holds: (s) => !(s.contract === 2 && (s.auth as { type?: unknown } | undefined)?.type === 'bearer'),
  },
]);

/**
 * A Reconciler's spec, as the schema types it: a field with a default is optional here (a writer
 * may leave it out); DefaultedReconcilerSpec is the same spec once the defaults are filled in.
 */
export type ReconcilerSpec = Static<typeof reconcilerSpecSchema>;

export type SinkSpec = ReconcilerSpec['sink'];
export type AuthSpec = NonNullable<ReconcilerSpec['auth']>;
/** A kind the Reconciler owns (spec.owns). */
export type OwnedKindSpec = NonNullable<ReconcilerSpec['owns']>[number];
/** A kind the Reconciler watches (spec.watches), and how its objects name the primaries. */
export type WatchedKindSpec = NonNullable<ReconcilerSpec['watches']>[number];
/** How a watched object names its primaries, as the schema has it: three optional fields, of which its rule lets exactly one be set. */
export type MappingSpec = Static<typeof mappingSchema>;
/** A mapping as the schema's rule leaves it: exactly one of its fields, set ({ label } | { selectorField } | { referenceField }). */
export type Mapping = { [K in keyof MappingSpec]-?: { [P in K]-?: NonNullable<MappingSpec[P]> } }[keyof MappingSpec];

/** `T` with the fields `K` left to their defaults. */
type Defaulted<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;
/** `T` with the fields `K`, and theirs in turn, filled in by their defaults. */
type DefaultsFilled<T, K extends keyof T> = Omit<T, K> & { [P in K]-?: Required<NonNullable<T[P]>> };
type AwsIamSpec = NonNullable<SinkSpec['awsIam']>;

/**
 * A spec as defaulting leaves it (the apiserver's, or defaultedReconcilerSpec's): the top-level
 * fields with a default are there, and so are backoff's and rateLimit's. Two nested defaults stay
 * optional in the type, and are read with their defaults where used: an owned kind's `fields`
 * (observedFields) and sink.scaleToZero's numbers (reconcilerLimits).
 */
export type DefaultedReconcilerSpec = DefaultsFilled<ReconcilerSpec, 'contract' | 'resyncPeriodSeconds' | 'maxConcurrentReconciles' | 'timeoutSeconds' | 'backoff' | 'rateLimit'>;

/**
 * A Reconciler's spec as a manifest writes it: the fields the schema requires but defaults may
 * be left out, and the apiserver (or the bridge, for a file) fills them in. Leaving them out
 * keeps a written Reconciler on the bridge's defaults when they change. The unit test beside
 * this file fails when the schema gains such a field this type does not name.
 */
export type WrittenReconcilerSpec = Omit<ReconcilerSpec, 'owns' | 'sink' | 'auth'> & {
  owns?: Defaulted<OwnedKindSpec, 'labelSelector'>[];
  sink: Omit<SinkSpec, 'awsIam'> & { awsIam?: Defaulted<AwsIamSpec, 'service'> };
  auth?: Defaulted<AuthSpec, 'type'>;
};

/** A Reconciler object as written, read from the cluster (its spec then defaulted) or from a file. */
export type ReconcilerObject = {
  apiVersion: typeof reconcilerApiVersion;
  kind: typeof reconcilerKind;
  metadata: { name: string; labels?: Record<string, string>; generation?: number };
  spec: WrittenReconcilerSpec;
};

/**
 * A spec to write, typed, without the fields left undefined: a writer says `owns: owns.length ?
 * … : undefined` and the object carries no `owns` at all (YAML would write null; a deep
 * comparison would see a key).
 */
export function reconcilerSpec(spec: WrittenReconcilerSpec): WrittenReconcilerSpec {
  return Object.fromEntries(Object.entries(spec).filter(([, value]) => value !== undefined)) as WrittenReconcilerSpec;
}

/** A Reconciler object with this name and spec. */
export function reconcilerObject(metadata: ReconcilerObject['metadata'], spec: WrittenReconcilerSpec): ReconcilerObject {
  return { apiVersion: reconcilerApiVersion, kind: reconcilerKind, metadata, spec };
}

/** Whether one of a list of manifests is a Reconciler (the SDK writes one among a function's objects). */
export function isReconcilerObject(object: unknown): object is ReconcilerObject {
  const o = object as { apiVersion?: unknown; kind?: unknown } | null;
  return typeof o === 'object' && o !== null && o.apiVersion === reconcilerApiVersion && o.kind === reconcilerKind;
}

/**
 * A written spec with its defaults filled in (as the apiserver would), and every problem of it,
 * each naming its field: the schema's, unknown fields, the cross-field rules. The spec is a
 * DefaultedReconcilerSpec only when there is no problem.
 */
export function defaultedReconcilerSpec(written: Record<string, unknown>): { spec: DefaultedReconcilerSpec; problems: string[] } {
  const spec = Value.Default(reconcilerSpecSchema, Value.Clone(written)) as DefaultedReconcilerSpec;
  return { spec, problems: specProblems(spec) };
}

function specProblems(spec: unknown): string[] {
  const problems = new Map<string, string>();
  for (const error of Value.Errors(reconcilerSpecSchema, spec)) {
    const where = pointerAsField('spec', error.path);
    if (!problems.has(where)) problems.set(where, error.value === undefined ? `${where} is required` : `${where} must be ${expectation(error.schema)}, not ${JSON.stringify(error.value)}`);
  }
  const sink = isObject(spec) && isObject(spec.sink) ? spec.sink : {};
  return [...problems.values(), ...walk(reconcilerSpecSchema, spec, 'spec'), ...(problems.has('spec.sink.caBundle') ? [] : caBundleProblems(typeof sink.caBundle === 'string' ? sink.caBundle : undefined))];
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

/** What a schema asks for, in words. */
function expectation(schema: TSchema): string {
  if (typeof schema.expected === 'string') return schema.expected;
  if (schema.type === 'integer') return `a whole number from ${schema.minimum} to ${schema.maximum}`;
  if (Array.isArray(schema.anyOf)) return `one of ${schema.anyOf.map((s: TSchema) => s.const).join(', ')}`;
  if (schema.type === 'string') return schema.minLength ? 'a non-empty string' : 'a string';
  if (schema.type === 'array') return 'a list';
  return 'an object';
}
