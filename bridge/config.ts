// The bridge's side of the Reconciler resource (kfn.dev/v1alpha1): validating a Reconciler read
// from a file (`kfn bridge --config F`) or the cluster into a ReconcilerConfig with every default
// filled in, the watches it needs, and its CRD (manifests/crds/reconciler.yaml, written by `npm run
// generate`). The spec itself — its schema, the types derived from it, bounds and defaults — is
// core/reconciler-spec.ts, shared with the SDK that writes it; a ReconcilerConfig is that spec's
// shape, with what the bridge adds. Validation names every problem, so an unusable spec becomes
// a Ready=False condition (or a startup error) that says what to fix.
import { readFileSync } from 'node:fs';
import { parseAllDocuments, stringify } from 'yaml';
import { isObject } from '../core/json.ts';
import type { KindRef } from '../core/objects.ts';
import { kfnGroup, reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { defaultedReconcilerSpec, namespacesWatchedEach, observedFields, reconcilerLimits, reconcilerSpecSchema, reconcilerStatusSchema, type DefaultedReconcilerSpec, type Mapping, type MappingSpec, type OwnedKindSpec, type WatchedKindSpec } from '../core/reconciler-spec.ts';
import type { ScaleTarget } from './activator.ts';
import { customResourceDefinition } from '../kube/crd.ts';

/**
 * An owned kind. Its watch takes only objects matching `labelSelector` — by default the label
 * the SDK puts on every child, `app.kubernetes.io/managed-by=kfn`, so the bridge's memory and
 * watch traffic follow kfn's children, not every object of that kind in the cluster (and
 * Reconcilers owning one kind share one watch). `labelSelector: ""` watches them all
 * (children made without the SDK).
 */
export type OwnedKind = Omit<OwnedKindSpec, 'fields'> & {
  /** Contract 2: the fields carried besides metadata (the spec's, or observedFields' default); undefined, the whole object. */
  fields?: string[];
};

/**
 * A watched kind. Its objects name the primaries to reconcile by a label whose value is the
 * primary's name; by a label selector stored in the primary (`selectorField`, e.g.
 * spec.selector); or by a field of the primary holding the watched object's name
 * (`referenceField`, e.g. spec.issuerRef.name; a path through a list names every item).
 */
export type WatchSpec = Omit<WatchedKindSpec, 'mapping'> & { mapping: Mapping };

/**
 * A Reconciler with every default filled in: its spec as the bridge reads it (serviceAccount:
 * the identity it watches and delivers for, bridge/identity.ts; none, see the bridge's
 * requireIdentity), and what the bridge adds.
 */
export interface ReconcilerConfig extends Pick<DefaultedReconcilerSpec, 'for' | 'sink' | 'auth' | 'serviceAccount' | 'resyncPeriodSeconds' | 'maxConcurrentReconciles' | 'timeoutSeconds' | 'backoff' | 'rateLimit'> {
  name: string;
  generation: number;
  /** The event contract the function speaks (1 or 2). */
  contract: 1 | 2;
  owns: OwnedKind[];
  watches: WatchSpec[];
  /** Namespaces to reconcile in; empty means all. */
  namespaces: string[];
  /** Resyncs as one batch per period (a sink that scales to zero), not spread over it. */
  resyncBatch: boolean;
}

/** The Reconciler's CustomResourceDefinition, from the spec's one schema. */
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
      { name: 'Concurrency', type: 'integer', jsonPath: '.status.concurrency' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    versions: [{ name: reconcilerApiVersion.split('/')[1]!, spec: reconcilerSpecSchema, status: reconcilerStatusSchema, storage: true }],
  });
}

/** The CRD as the YAML file manifests/crds/ holds. */
export function reconcilerCrdYaml(): string {
  return `# The Reconciler resource: what the kfn bridge watches for one function, and where it delivers.\n# Written by \`npm run generate\` from the schema in core/reconciler-spec.ts: edit that, not this file.\n${stringify(reconcilerCrd(), { lineWidth: 0 })}`;
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

/** Validates a Reconciler object (from the cluster or a file) and fills in the defaults. */
export function parseReconciler(obj: unknown): ReconcilerConfig {
  const problems: string[] = [];
  const o = isObject(obj) ? obj : {};
  const metadata = isObject(o.metadata) ? o.metadata : {};
  const name = typeof metadata.name === 'string' && metadata.name ? metadata.name : '(unnamed)';
  if (name === '(unnamed)') problems.push('metadata.name is required');
  if (o.kind !== undefined && o.kind !== reconcilerKind) problems.push(`kind must be ${reconcilerKind}, not ${JSON.stringify(o.kind)}`);
  if (!isObject(o.spec)) throw new InvalidReconcilerError(name, [...problems, 'spec is required']);
  const { spec, problems: specProblems } = defaultedReconcilerSpec(o.spec);
  problems.push(...specProblems);
  if (problems.length) throw new InvalidReconcilerError(name, problems);
  return {
    name,
    generation: typeof metadata.generation === 'number' ? metadata.generation : 0,
    for: { apiVersion: spec.for.apiVersion, kind: spec.for.kind },
    contract: spec.contract === 2 ? 2 : 1,
    owns: (spec.owns ?? []).map((k) => {
      const fields = observedFields(k.fields);
      return { apiVersion: k.apiVersion, kind: k.kind, labelSelector: k.labelSelector, ...(fields ? { fields } : {}) };
    }),
    watches: (spec.watches ?? []).map((w) => ({ apiVersion: w.apiVersion, kind: w.kind, mapping: mappingOf(w.mapping) })),
    sink: spec.sink,
    auth: spec.auth,
    ...(spec.serviceAccount ? { serviceAccount: { name: spec.serviceAccount.name, namespace: spec.serviceAccount.namespace } } : {}),
    namespaces: spec.namespaces ?? [],
    resyncPeriodSeconds: spec.resyncPeriodSeconds,
    resyncBatch: spec.resyncSchedule ? spec.resyncSchedule === 'batch' : scalesToZero(spec.sink),
    maxConcurrentReconciles: spec.maxConcurrentReconciles,
    timeoutSeconds: spec.timeoutSeconds,
    backoff: spec.backoff,
    rateLimit: spec.rateLimit,
  };
}

/** A valid mapping as its one field (the schema's rule, checked above, lets exactly one be set). */
function mappingOf(m: MappingSpec): Mapping {
  if (m.label !== undefined) return { label: m.label };
  if (m.selectorField !== undefined) return { selectorField: m.selectorField };
  if (m.referenceField !== undefined) return { referenceField: m.referenceField };
  throw new Error('a mapping with none of label, selectorField or referenceField passed validation');
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

/** Each Reconciler's namespaces as a set: asked on every event, and a list of a thousand would be scanned. */
const namespaceSets = new WeakMap<ReconcilerConfig, Set<string>>();

/** Whether `config` serves objects of `namespace`: all of them when it names none; a cluster-scoped object (no namespace) always. */
export function servesNamespace(config: ReconcilerConfig, namespace: string | undefined): boolean {
  if (config.namespaces.length === 0 || !namespace) return true;
  let set = namespaceSets.get(config);
  if (!set) namespaceSets.set(config, (set = new Set(config.namespaces)));
  return set.has(namespace);
}

/**
 * Every watch a Reconciler needs. Mapping by a selector or a reference stored in the primary
 * needs the primary's spec, so the primary is watched in full; everything else needs only metadata
 * (labels, owners, generation). Contract 2 carries the primary whole and each owned kind's
 * declared fields in its events, so those watches keep them. A Reconciler that names a few
 * namespaces watches each of them, not the whole cluster (for a cluster-scoped kind the bridge
 * drops the namespace); one that names more than namespacesWatchedEach watches each kind once,
 * cluster-wide, and takes only its namespaces from it (intake and routing filter by them): a
 * thousand namespaces would otherwise be a thousand LISTs per kind at every start and relist.
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
  if (config.namespaces.length === 0 || config.namespaces.length > namespacesWatchedEach) return kinds;
  return kinds.flatMap((k) => config.namespaces.map((namespace) => ({ ...k, namespace })));
}

export function kindId(ref: KindRef): string {
  return `${ref.apiVersion}/${ref.kind}`;
}

/** Whether a sink scales to zero when idle: a Knative Service, a Lambda Function URL (SigV4), or a Deployment the bridge scales. */
function scalesToZero(sink: { ref?: { apiVersion: string; kind: string }; awsIam?: unknown; scaleToZero?: unknown }): boolean {
  return Boolean(sink.awsIam) || Boolean(sink.scaleToZero) || (sink.ref?.kind === 'Service' && sink.ref.apiVersion.startsWith('serving.knative.dev/'));
}

/** The Deployment a Reconciler's bridge scales to and from zero, with every default filled in; undefined when it scales none. */
export function scaleTargetOf(config: ReconcilerConfig): ScaleTarget | undefined {
  const s = config.sink.scaleToZero;
  if (!s) return undefined;
  return {
    namespace: s.deployment.namespace,
    name: s.deployment.name,
    idleSeconds: s.idleSeconds ?? reconcilerLimits.idleSeconds.default,
    maxReplicas: s.maxReplicas ?? reconcilerLimits.maxReplicas.default,
    keysPerReplica: s.keysPerReplica ?? reconcilerLimits.keysPerReplica.default,
  };
}
