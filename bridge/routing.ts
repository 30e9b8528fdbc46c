// From a watch event to the primaries that must be reconciled: the primary itself (filtered so
// that status-only writes do not loop), the controller owner of an owned child (old and new
// owner on updates), or the primaries a watched object maps to (by a label naming the primary,
// or by a label selector stored in a field of the primary).
import { objectKey, type ObjectRef, type ReconcileReason } from './contract.ts';
import type { KindRef, ReconcilerConfig } from './config.ts';
import type { KubeObject } from './kubeapi.ts';
import type { WatchEvent } from './watcher.ts';
import type { Priority } from './workqueue.ts';

export interface Enqueue {
  /** namespace/name of the primary (name alone when cluster-scoped). */
  key: string;
  reason: ReconcileReason;
  priority: Priority;
  trigger?: ObjectRef;
}

export function groupOf(apiVersion: string): string {
  return apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '';
}

/** Same kind in the same API group (any version: the apiserver converts between them). */
export function sameKind(a: KindRef, b: KindRef): boolean {
  return a.kind === b.kind && groupOf(a.apiVersion) === groupOf(b.apiVersion);
}

export function refOf(obj: KubeObject): ObjectRef {
  const ref: ObjectRef = { apiVersion: obj.apiVersion ?? '', kind: obj.kind ?? '', name: obj.metadata.name };
  if (obj.metadata.namespace) ref.namespace = obj.metadata.namespace;
  if (obj.metadata.uid) ref.uid = obj.metadata.uid;
  if (obj.metadata.resourceVersion) ref.resourceVersion = obj.metadata.resourceVersion;
  if (obj.metadata.generation !== undefined) ref.generation = obj.metadata.generation;
  return ref;
}

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

/**
 * True when an update to a primary is worth a reconcile: its spec (generation), labels,
 * annotations, finalizers or deletion changed. A status-only write changes none of them, so
 * a function patching its own status does not trigger itself.
 */
export function primaryChanged(old: KubeObject, cur: KubeObject): boolean {
  const a = old.metadata;
  const b = cur.metadata;
  return (
    a.uid !== b.uid ||
    a.generation !== b.generation ||
    a.deletionTimestamp !== b.deletionTimestamp ||
    !sameJson(a.labels, b.labels) ||
    !sameJson(a.annotations, b.annotations) ||
    !sameJson(a.finalizers, b.finalizers)
  );
}

interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

/** Reads a dotted path (`spec.selector`) from an object. */
export function fieldAt(obj: unknown, path: string): unknown {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (typeof cur !== 'object' || cur === null) return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}

/**
 * Kubernetes label-selector semantics: an empty selector matches everything, a missing one
 * nothing. A plain string map (a Service-style selector) is read as matchLabels.
 */
export function selectorMatches(selector: unknown, labels: Record<string, string> = {}): boolean {
  if (typeof selector !== 'object' || selector === null || Array.isArray(selector)) return false;
  const s = selector as LabelSelector & Record<string, unknown>;
  const structured = 'matchLabels' in s || 'matchExpressions' in s;
  const matchLabels = structured ? (s.matchLabels ?? {}) : (s as Record<string, string>);
  for (const [k, v] of Object.entries(matchLabels)) if (labels[k] !== v) return false;
  for (const e of (structured ? s.matchExpressions : undefined) ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const value = labels[e.key];
    switch (e.operator) {
      case 'In':
        if (!has || !(e.values ?? []).includes(value!)) return false;
        break;
      case 'NotIn':
        if (has && (e.values ?? []).includes(value!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false; // an operator we do not know matches nothing, as the apiserver rejects it
    }
  }
  return true;
}

export interface RouteContext {
  /** True for events of a watcher's first list (work at low priority). */
  initial: boolean;
  /** The primaries the watcher knows, for selector mapping. */
  primaries?: () => Iterable<KubeObject>;
  /**
   * Whether the primary kind is namespaced. A reference from a child or a watched object to a
   * cluster-scoped primary names no namespace, so its key is the name alone.
   */
  primaryNamespaced: boolean;
}

/** The primaries of `config` that `event` (on kind `kind`) asks to reconcile. */
export function route(config: ReconcilerConfig, kind: KindRef, event: WatchEvent, ctx: RouteContext): Enqueue[] {
  if (event.type === 'synced') return [];
  const out: Enqueue[] = [];
  const obj = event.object;
  const old = event.type === 'apply' ? event.old : undefined;
  const priority: Priority = ctx.initial ? 'low' : 'high';
  // The primary named from an object in `namespace`: same namespace, or none if cluster-scoped.
  const primaryKey = (namespace: string | undefined, name: string) => objectKey({ namespace: ctx.primaryNamespaced ? namespace : undefined, name });

  if (sameKind(kind, config.for)) {
    if (event.type === 'delete') out.push({ key: objectKey(obj.metadata), reason: 'deleted', priority: 'high' });
    else if (!old) out.push({ key: objectKey(obj.metadata), reason: 'created', priority });
    else if (primaryChanged(old, obj)) out.push({ key: objectKey(obj.metadata), reason: 'updated', priority });
  }

  if (config.owns.some((o) => sameKind(o, kind))) {
    const owners = new Set<string>();
    for (const version of [obj, old]) {
      for (const ref of version?.metadata.ownerReferences ?? []) {
        if (ref.controller && sameKind(ref, config.for)) owners.add(primaryKey(version!.metadata.namespace, ref.name));
      }
    }
    for (const key of owners) out.push({ key, reason: 'child', priority, trigger: refOf(obj) });
  }

  for (const watch of config.watches) {
    if (!sameKind(watch, kind)) continue;
    const keys = new Set<string>();
    const mapping = watch.mapping;
    if ('label' in mapping) {
      for (const version of [obj, old]) {
        const name = version?.metadata.labels?.[mapping.label];
        if (name) keys.add(primaryKey(version!.metadata.namespace, name));
      }
    } else {
      for (const primary of ctx.primaries?.() ?? []) {
        if (primary.metadata.namespace && primary.metadata.namespace !== obj.metadata.namespace) continue;
        const selector = fieldAt(primary, mapping.selectorField);
        if (selectorMatches(selector, obj.metadata.labels) || (old && selectorMatches(selector, old.metadata.labels))) {
          keys.add(objectKey(primary.metadata));
        }
      }
    }
    for (const key of keys) out.push({ key, reason: 'mapped', priority, trigger: refOf(obj) });
  }

  if (config.namespaces.length === 0) return out;
  return out.filter((e) => {
    const slash = e.key.indexOf('/');
    return slash < 0 || config.namespaces.includes(e.key.slice(0, slash));
  });
}
