// The Reconciler resource (kfn.dev/v1alpha1): what the bridge watches for one function and
// where it delivers. The same objects can come from the cluster (the CRD in manifests/) or from
// a YAML file (`kfn bridge --config F`). Validation names every problem, so an unusable spec
// becomes a Ready=False condition (or a startup error) that says what to fix.
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { KindRef } from '../core/objects.ts';
import { managedByKfnSelector, reconcilerKind } from '../core/names.ts';

/**
 * An owned kind. Its watch takes only objects matching `labelSelector` — by default the label
 * the SDK puts on every child, `app.kubernetes.io/managed-by=kfn`, so the bridge's memory and
 * watch traffic follow kfn's children, not every object of that kind in the cluster (and
 * Reconcilers owning one kind share one watch). `labelSelector: ""` watches them all
 * (children made without the SDK).
 */
export interface OwnedKind extends KindRef {
  labelSelector: string;
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

export interface SinkSpec {
  uri?: string;
  ref?: { apiVersion: string; kind: string; name: string; namespace?: string };
  /** Sign deliveries with AWS SigV4 (Lambda Function URLs with AuthType AWS_IAM). */
  awsIam?: { region: string; service: string };
}

export interface AuthSpec {
  /** hmac (default): sign with the secret; bearer: send it as a bearer token. */
  type?: 'hmac' | 'bearer';
  secretRef: { name: string; namespace: string; key?: string };
}

export interface ReconcilerSpec {
  for: KindRef;
  owns?: (KindRef & { labelSelector?: string })[];
  watches?: WatchSpec[];
  sink: SinkSpec;
  auth?: AuthSpec;
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  maxConcurrentReconciles?: number;
  timeoutSeconds?: number;
  backoff?: { baseDelayMs?: number; maxDelayMs?: number };
  rateLimit?: { qps?: number; burst?: number };
}

/** A Reconciler with every default filled in. */
export interface ReconcilerConfig {
  name: string;
  generation: number;
  for: KindRef;
  owns: OwnedKind[];
  watches: WatchSpec[];
  sink: SinkSpec;
  auth?: AuthSpec;
  namespaces: string[];
  resyncPeriodSeconds: number;
  maxConcurrentReconciles: number;
  timeoutSeconds: number;
  backoff: { baseDelayMs: number; maxDelayMs: number };
  /** The overall limit on retries across the Reconciler's keys (a token bucket). */
  rateLimit: { qps: number; burst: number };
}

export const reconcilerDefaults = {
  resyncPeriodSeconds: 300,
  maxConcurrentReconciles: 1,
  timeoutSeconds: 30,
  backoff: { baseDelayMs: 5, maxDelayMs: 1_000_000 },
  rateLimit: { qps: 10, burst: 100 },
};

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

function kindRef(value: unknown, where: string, problems: string[]): KindRef | undefined {
  if (!isObject(value)) {
    problems.push(`${where} must be an object with apiVersion and kind`);
    return undefined;
  }
  const { apiVersion, kind } = value;
  if (typeof apiVersion !== 'string' || !/^([a-z0-9.-]+\/)?v\d+((alpha|beta)\d+)?$/.test(apiVersion)) problems.push(`${where}.apiVersion must look like group/v1 or v1, not ${JSON.stringify(apiVersion)}`);
  if (typeof kind !== 'string' || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) problems.push(`${where}.kind must be a Kind name such as ConfigMap, not ${JSON.stringify(kind)}`);
  return typeof apiVersion === 'string' && typeof kind === 'string' ? { apiVersion, kind } : undefined;
}

function positiveInt(value: unknown, where: string, problems: string[], fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    problems.push(`${where} must be a whole number ≥ ${min}, not ${JSON.stringify(value)}`);
    return fallback;
  }
  return value;
}

/** Validates a Reconciler object (from the cluster or a file) and fills in the defaults. */
export function parseReconciler(obj: unknown): ReconcilerConfig {
  const problems: string[] = [];
  const o = isObject(obj) ? obj : {};
  const metadata = isObject(o.metadata) ? o.metadata : {};
  const name = typeof metadata.name === 'string' && metadata.name ? metadata.name : '(unnamed)';
  if (name === '(unnamed)') problems.push('metadata.name is required');
  if (o.kind !== undefined && o.kind !== reconcilerKind) problems.push(`kind must be ${reconcilerKind}, not ${JSON.stringify(o.kind)}`);
  const spec = isObject(o.spec) ? o.spec : undefined;
  if (!spec) throw new InvalidReconcilerError(name, [...problems, 'spec is required']);
  const backoffIn = isObject(spec.backoff) ? spec.backoff : {};
  const rateIn = isObject(spec.rateLimit) ? spec.rateLimit : {};
  const config: ReconcilerConfig = {
    name,
    generation: typeof metadata.generation === 'number' ? metadata.generation : 0,
    for: kindRef(spec.for, 'spec.for', problems) ?? { apiVersion: '', kind: '' },
    owns: parseOwns(spec.owns, problems),
    watches: parseWatches(spec.watches, problems),
    sink: parseSink(spec.sink, problems),
    auth: parseAuth(spec.auth, problems),
    namespaces: parseNamespaces(spec.namespaces, problems),
    resyncPeriodSeconds: positiveInt(spec.resyncPeriodSeconds, 'spec.resyncPeriodSeconds', problems, reconcilerDefaults.resyncPeriodSeconds, 0),
    maxConcurrentReconciles: positiveInt(spec.maxConcurrentReconciles, 'spec.maxConcurrentReconciles', problems, reconcilerDefaults.maxConcurrentReconciles),
    timeoutSeconds: positiveInt(spec.timeoutSeconds, 'spec.timeoutSeconds', problems, reconcilerDefaults.timeoutSeconds),
    backoff: {
      baseDelayMs: positiveInt(backoffIn.baseDelayMs, 'spec.backoff.baseDelayMs', problems, reconcilerDefaults.backoff.baseDelayMs),
      maxDelayMs: positiveInt(backoffIn.maxDelayMs, 'spec.backoff.maxDelayMs', problems, reconcilerDefaults.backoff.maxDelayMs),
    },
    rateLimit: {
      qps: positiveInt(rateIn.qps, 'spec.rateLimit.qps', problems, reconcilerDefaults.rateLimit.qps),
      burst: positiveInt(rateIn.burst, 'spec.rateLimit.burst', problems, reconcilerDefaults.rateLimit.burst),
    },
  };
  if (problems.length) throw new InvalidReconcilerError(name, problems);
  return config;
}

function parseOwns(value: unknown, problems: string[]): OwnedKind[] {
  const owns: OwnedKind[] = [];
  if (value !== undefined && !Array.isArray(value)) problems.push('spec.owns must be a list');
  for (const [i, item] of ((value as unknown[]) ?? []).entries()) {
    const ref = kindRef(item, `spec.owns[${i}]`, problems);
    const selector = isObject(item) ? item.labelSelector : undefined;
    if (selector !== undefined && typeof selector !== 'string') problems.push(`spec.owns[${i}].labelSelector must be a label selector string`);
    if (ref) owns.push({ ...ref, labelSelector: typeof selector === 'string' ? selector : managedByKfnSelector });
  }
  return owns;
}

const fieldPath = /^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/;

function parseWatches(value: unknown, problems: string[]): WatchSpec[] {
  const watches: WatchSpec[] = [];
  if (value !== undefined && !Array.isArray(value)) problems.push('spec.watches must be a list');
  for (const [i, item] of ((value as unknown[]) ?? []).entries()) {
    const ref = kindRef(item, `spec.watches[${i}]`, problems);
    const mapping = parseMapping(isObject(item) ? item.mapping : undefined);
    if (!mapping) problems.push(`spec.watches[${i}].mapping must be one of {label: <label key naming the primary>}, {selectorField: <dotted path of a label selector in the primary, e.g. spec.selector>} or {referenceField: <dotted path in the primary holding the watched object's name, e.g. spec.issuerRef.name>}`);
    if (ref && mapping) watches.push({ ...ref, mapping });
  }
  return watches;
}

/** Exactly one of label, selectorField or referenceField, well formed; undefined otherwise. */
function parseMapping(mapping: unknown): Mapping | undefined {
  if (!isObject(mapping)) return undefined;
  const given = (['label', 'selectorField', 'referenceField'] as const).filter((k) => mapping[k] !== undefined);
  const value = given.length === 1 ? mapping[given[0]!] : undefined;
  if (typeof value !== 'string') return undefined;
  if (given[0] === 'label' && value) return { label: value };
  if (given[0] === 'selectorField' && fieldPath.test(value)) return { selectorField: value };
  if (given[0] === 'referenceField' && fieldPath.test(value)) return { referenceField: value };
  return undefined;
}

function parseSink(value: unknown, problems: string[]): SinkSpec {
  const sink: SinkSpec = {};
  const sinkIn = isObject(value) ? value : undefined;
  if (!sinkIn) problems.push('spec.sink is required: {uri: http://…} or {ref: {apiVersion, kind, name, namespace}}');
  else if (typeof sinkIn.uri === 'string' && sinkIn.ref === undefined) {
    try {
      const url = new URL(sinkIn.uri);
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
      sink.uri = sinkIn.uri;
    } catch {
      problems.push(`spec.sink.uri must be an http(s) URL, not ${JSON.stringify(sinkIn.uri)}`);
    }
  } else if (isObject(sinkIn.ref) && sinkIn.uri === undefined) {
    const r = sinkIn.ref;
    if (typeof r.apiVersion !== 'string' || typeof r.kind !== 'string' || typeof r.name !== 'string') problems.push('spec.sink.ref needs apiVersion, kind and name');
    else sink.ref = { apiVersion: r.apiVersion, kind: r.kind, name: r.name, namespace: typeof r.namespace === 'string' ? r.namespace : undefined };
  } else problems.push('spec.sink needs exactly one of uri or ref');
  if (sinkIn && sinkIn.awsIam !== undefined) {
    const a = sinkIn.awsIam;
    if (!isObject(a) || typeof a.region !== 'string' || !/^[a-z]{2}(-[a-z]+)+-\d+$/.test(a.region)) problems.push(`spec.sink.awsIam.region must be an AWS region such as eu-west-1, not ${JSON.stringify(isObject(a) ? a.region : a)}`);
    else if (a.service !== undefined && (typeof a.service !== 'string' || !a.service)) problems.push('spec.sink.awsIam.service must be a signing service name (lambda for Function URLs)');
    else sink.awsIam = { region: a.region, service: typeof a.service === 'string' ? a.service : 'lambda' };
  }
  return sink;
}

function parseAuth(value: unknown, problems: string[]): AuthSpec | undefined {
  if (value === undefined) return undefined;
  const a = isObject(value) ? value : {};
  const ref = isObject(a.secretRef) ? a.secretRef : undefined;
  const type = a.type ?? 'hmac';
  if (type !== 'hmac' && type !== 'bearer') problems.push(`spec.auth.type must be hmac or bearer, not ${JSON.stringify(a.type)}`);
  if (!ref || typeof ref.name !== 'string' || typeof ref.namespace !== 'string') {
    problems.push('spec.auth.secretRef needs name and namespace');
    return undefined;
  }
  return { type: type as 'hmac' | 'bearer', secretRef: { name: ref.name, namespace: ref.namespace, key: typeof ref.key === 'string' ? ref.key : undefined } };
}

function parseNamespaces(value: unknown, problems: string[]): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((n) => typeof n !== 'string')) {
    problems.push('spec.namespaces must be a list of namespace names');
    return [];
  }
  return [...(value as string[])];
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
  /** Whole objects, or metadata only. */
  full: boolean;
  /** undefined: every namespace (or a cluster-scoped kind). */
  namespace?: string;
  labelSelector?: string;
}

/**
 * Every watch a Reconciler needs. Mapping by a selector or a reference stored in the primary
 * needs the primary's spec, so the primary is watched in full; everything else needs only metadata
 * (labels, owners, generation). A Reconciler that names namespaces watches each of them, not
 * the whole cluster (for a cluster-scoped kind the bridge drops the namespace).
 */
export function watchedKinds(config: ReconcilerConfig): WatchNeed[] {
  const fieldMapping = config.watches.some((w) => 'selectorField' in w.mapping || 'referenceField' in w.mapping);
  const kinds: Omit<WatchNeed, 'namespace'>[] = [
    { ref: config.for, full: fieldMapping },
    ...config.owns.map((o) => ({ ref: { apiVersion: o.apiVersion, kind: o.kind }, full: false, ...(o.labelSelector ? { labelSelector: o.labelSelector } : {}) })),
    ...config.watches.map((w) => ({ ref: { apiVersion: w.apiVersion, kind: w.kind }, full: false })),
  ];
  if (config.namespaces.length === 0) return kinds;
  return kinds.flatMap((k) => config.namespaces.map((namespace) => ({ ...k, namespace })));
}

export function kindId(ref: KindRef): string {
  return `${ref.apiVersion}/${ref.kind}`;
}
