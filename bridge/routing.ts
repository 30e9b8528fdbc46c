// From a watch event to the primaries that must be reconciled: the primary itself (filtered so
// that status-only writes do not loop), the controller owner of an owned child (old and new
// owner on updates), or the primaries a watched object maps to (by a label naming the primary,
// by a label selector stored in a field of the primary, or by a field of the primary naming it).
import { namespaceOfKey, objectKey, refOf, sameKind, type KindRef, type ObjectRef } from '../core/objects.ts';
import { type ReconcileReason } from '../core/event.ts';
import { valueAt, valuesAt } from '../core/paths.ts';
import { selectorMatches, type LabelSelector } from '../kube/selectors.ts';
import { servesNamespace, type ReconcilerConfig } from './config.ts';
import type { KubeObject } from '../kube/api.ts';
import { changeDigest } from './records.ts';
import type { WatchEvent } from './store.ts';
import type { Priority } from './workqueue.ts';

export interface Enqueue {
  /** namespace/name of the primary (name alone when cluster-scoped). */
  key: string;
  reason: ReconcileReason;
  priority: Priority;
  trigger?: ObjectRef;
}

/**
 * True when an update to a primary is worth a reconcile: its spec (generation), labels,
 * annotations, finalizers or deletion changed. A status-only write changes none of them, so
 * a function patching its own status does not trigger itself. Either side may be the watch's
 * compact record, which keeps a digest of labels, annotations and finalizers instead of them.
 */
export function primaryChanged(old: KubeObject, cur: KubeObject): boolean {
  const a = old.metadata;
  const b = cur.metadata;
  return a.uid !== b.uid || a.generation !== b.generation || a.deletionTimestamp !== b.deletionTimestamp || changeDigest(old) !== changeDigest(cur);
}

/** Primary keys filed under names (a selector's key=value pair, a referenced name): add, remove, look up. */
class Filing {
  private readonly byName = new Map<string, Set<string>>();

  add(name: string, key: string): void {
    let keys = this.byName.get(name);
    if (!keys) this.byName.set(name, (keys = new Set()));
    keys.add(key);
  }

  remove(name: string, key: string): void {
    const keys = this.byName.get(name);
    if (!keys) return;
    keys.delete(key);
    if (keys.size === 0) this.byName.delete(name);
  }

  under(name: string): Iterable<string> {
    return this.byName.get(name) ?? [];
  }
}

/**
 * What the primaries hold at one field of theirs (`E` for each primary that holds anything
 * there), kept up to date from the primaries' events and filed so that a query looks at few.
 */
abstract class PrimaryIndex<E> {
  readonly field: string;
  protected readonly entries = new Map<string, E>();
  /** Entries looked at by the last query (for tests and metrics). */
  lastChecked = 0;

  constructor(field: string) {
    this.field = field;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Records (or replaces) what the primary `key` holds at the field. */
  set(key: string, primary: KubeObject): void {
    this.delete(key);
    const entry = this.entryOf(primary);
    if (entry === undefined) return;
    this.entries.set(key, entry);
    this.file(key, entry);
  }

  /** Forgets every primary (their Reconciler no longer watches them). */
  clear(): void {
    for (const key of [...this.entries.keys()]) this.delete(key);
  }

  delete(key: string): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.entries.delete(key);
    this.unfile(key, entry);
  }

  /** The entry of a primary, or undefined when it holds nothing to index at the field. */
  protected abstract entryOf(primary: KubeObject): E | undefined;
  protected abstract file(key: string, entry: E): void;
  protected abstract unfile(key: string, entry: E): void;
}

/**
 * The primaries' label selectors (one field of theirs), indexed so that finding the primaries
 * selecting an object looks at few of them, not every primary on every event: a selector with
 * matchLabels is filed under one of its key=value pairs (an object it selects carries every
 * pair, so that one too); only selectors without any — empty, or expressions alone — are
 * checked on every event.
 */
export class SelectorIndex extends PrimaryIndex<{ selector: unknown; namespace?: string; pair?: string }> {
  private readonly byPair = new Filing();
  private readonly unfiled = new Set<string>();

  protected entryOf(primary: KubeObject) {
    const selector = valueAt(primary, this.field);
    if (typeof selector !== 'object' || selector === null || Array.isArray(selector)) return undefined; // selects nothing
    const s = selector as LabelSelector & Record<string, unknown>;
    const labels = 'matchLabels' in s || 'matchExpressions' in s ? (s.matchLabels ?? {}) : (s as Record<string, string>);
    const first = Object.entries(labels).find(([, v]) => typeof v === 'string');
    return { selector, namespace: primary.metadata.namespace, pair: first ? `${first[0]}=${first[1]}` : undefined };
  }

  protected file(key: string, entry: { pair?: string }): void {
    if (entry.pair) this.byPair.add(entry.pair, key);
    else this.unfiled.add(key);
  }

  protected unfile(key: string, entry: { pair?: string }): void {
    if (entry.pair) this.byPair.remove(entry.pair, key);
    else this.unfiled.delete(key);
  }

  /** Keys of the primaries whose selector matches `labels` (same namespace, or cluster-scoped primaries). */
  matching(labels: Record<string, string> = {}, namespace: string | undefined): string[] {
    const out: string[] = [];
    this.lastChecked = 0;
    const check = (key: string) => {
      const entry = this.entries.get(key)!;
      if (entry.namespace && entry.namespace !== namespace) return;
      this.lastChecked++;
      if (selectorMatches(entry.selector, labels)) out.push(key);
    };
    for (const [k, v] of Object.entries(labels)) for (const key of this.byPair.under(`${k}=${v}`)) check(key);
    for (const key of this.unfiled) check(key);
    return out;
  }
}

/**
 * The primaries' references (one field of theirs naming another object), indexed by the name
 * they hold: the primaries naming a watched object are found without looking at the others —
 * controller-runtime's field index with EnqueueRequestsFromMapFunc, declared as a path.
 */
export class ReferenceIndex extends PrimaryIndex<{ names: string[]; namespace?: string }> {
  private readonly byName = new Filing();

  protected entryOf(primary: KubeObject) {
    const names = [...new Set(valuesAt(primary, this.field, { eachItem: true }).filter((v): v is string => typeof v === 'string' && v !== ''))];
    return names.length ? { names, namespace: primary.metadata.namespace } : undefined;
  }

  protected file(key: string, entry: { names: string[] }): void {
    for (const name of entry.names) this.byName.add(name, key);
  }

  protected unfile(key: string, entry: { names: string[] }): void {
    for (const name of entry.names) this.byName.remove(name, key);
  }

  /**
   * Keys of the primaries naming `name`: in `namespace` (or cluster-scoped primaries) when the
   * named object is namespaced, in any namespace when it is cluster-scoped (undefined).
   */
  naming(name: string, namespace: string | undefined): string[] {
    const out: string[] = [];
    this.lastChecked = 0;
    for (const key of this.byName.under(name)) {
      this.lastChecked++;
      const entry = this.entries.get(key)!;
      if (namespace === undefined || !entry.namespace || entry.namespace === namespace) out.push(key);
    }
    return out;
  }
}

export interface RouteContext {
  /** True for events of a watcher's first list (work at low priority). */
  initial: boolean;
  /** The primaries' selectors by field, for selector mapping. */
  selectors?: (field: string) => SelectorIndex | undefined;
  /** The primaries' references by field, for reference mapping. */
  references?: (field: string) => ReferenceIndex | undefined;
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
    } else if ('selectorField' in mapping) {
      const index = ctx.selectors?.(mapping.selectorField);
      for (const version of [obj, old]) {
        if (version) for (const key of index?.matching(version.metadata.labels, version.metadata.namespace) ?? []) keys.add(key);
      }
    } else {
      // The name does not change on update: the new version alone says who names it.
      for (const key of ctx.references?.(mapping.referenceField)?.naming(obj.metadata.name, obj.metadata.namespace) ?? []) keys.add(key);
    }
    for (const key of keys) out.push({ key, reason: 'mapped', priority, trigger: refOf(obj) });
  }

  if (config.namespaces.length === 0) return out;
  return out.filter((e) => servesNamespace(config, namespaceOfKey(e.key)));
}

/**
 * Whether `config` needs the record of `obj` (of `kind`) when only the primaries `keeps` says are
 * kept: a kept primary itself, a child whose controller owner is one, an object whose label names
 * one. An object mapped by selector or reference is always needed: which primaries it maps to
 * depends on their records, not on it.
 */
export function needs(config: ReconcilerConfig, kind: KindRef, obj: KubeObject, keeps: (primaryKey: string) => boolean, primaryNamespaced: boolean): boolean {
  const wanted = (key: string) => keeps(key) && servesNamespace(config, namespaceOfKey(key));
  const m = obj.metadata;
  const primaryKey = (name: string) => objectKey({ namespace: primaryNamespaced ? m.namespace : undefined, name });
  if (sameKind(kind, config.for) && wanted(objectKey(m))) return true;
  if (config.owns.some((o) => sameKind(o, kind))) {
    const owner = m.ownerReferences?.find((r) => r.controller && sameKind(r, config.for));
    if (owner && wanted(primaryKey(owner.name))) return true;
  }
  for (const watch of config.watches) {
    if (!sameKind(watch, kind)) continue;
    if (!('label' in watch.mapping)) return true;
    const name = m.labels?.[watch.mapping.label];
    if (name && wanted(primaryKey(name))) return true;
  }
  return false;
}

export { selectorMatches };
