// What the bridge keeps of each watched object (`Projection`). A metadata watch keeps a compact
// record (`recordOf`): what routing and delivery read, and a digest of what makes a change worth
// a reconcile (`changeDigest`), not the object; a watch that keeps some fields keeps them beside
// that record; a full watch keeps the whole object, less managedFields. What is kept remembers
// the store's key string, so the bridge's per-object structures share one string rather than copies.
import { createHash } from 'node:crypto';
import type { KubeObject, ResourceInfo } from '../kube/api.ts';
import { ownerUidLabel } from '../core/names.ts';
import { objectKey } from '../core/objects.ts';
import { pickFields } from '../core/paths.ts';

/**
 * Where a compact record keeps its digest of labels, annotations and finalizers: 48 bits as two
 * halves of 24, each a small integer held in the record itself. As one number it would be a
 * boxed double in every record (V8 keeps a field that ever held a non-small number boxed).
 */
const digestHigh = Symbol('kfn.digest.high');
const digestLow = Symbol('kfn.digest.low');
/**
 * Where a kept object remembers the store's key string. A Map keeps the first key string an
 * entry was set with; handing that same string on (not an equal copy built from each event)
 * lets the resync schedule and the indexes share it.
 */
const keySlot = Symbol('kfn.key');

/** The store's key string of an object the store keeps (or, for any other, its key built anew). */
export function keptKey(obj: KubeObject): string {
  return (obj as { [keySlot]?: string })[keySlot] ?? objectKey(obj.metadata);
}

/** A whole object the store keeps, remembering the store's key string. */
export function rememberKey(obj: KubeObject, key: string): KubeObject {
  (obj as { [keySlot]?: string })[keySlot] = key;
  return obj;
}

/**
 * A digest of what, besides generation and deletion, makes a change to a primary worth a
 * reconcile: its labels, annotations and finalizers (0 when it has none). A compact record
 * carries it; for a whole object it is computed.
 */
export function changeDigest(obj: KubeObject): number {
  const kept = obj as { [digestHigh]?: number; [digestLow]?: number };
  if (kept[digestHigh] !== undefined) return kept[digestHigh] * 2 ** 24 + kept[digestLow]!;
  const { labels, annotations, finalizers } = obj.metadata;
  if (!labels && !annotations && !finalizers) return 0;
  // 48 bits of a SHA-256, as a number (no string per record): two different sets of labels,
  // annotations and finalizers give the same digest about once in 2^48 changes.
  return createHash('sha256').update(JSON.stringify([labels ?? null, annotations ?? null, finalizers ?? null])).digest().readUIntBE(0, 6);
}

/** Strings many records hold the same value of (namespaces, their owners' apiVersion and kind), kept once. */
export class Interned {
  private readonly values = new Map<string, string>();
  of(value: string): string {
    const kept = this.values.get(value);
    if (kept !== undefined) return kept;
    // Bounded: namespaces are few; past this the strings are kept as they come.
    if (this.values.size < 10_000) this.values.set(value, value);
    return value;
  }
}

/**
 * The compact record a metadata watch keeps of an object: apiVersion and kind (the watch's own
 * strings), name, namespace (interned), uid, resourceVersion, generation, deletionTimestamp,
 * labels (label and selector mappings read them), the controller owner reference (whose child
 * it is), and the digest of labels, annotations and finalizers. Annotations, finalizers, other
 * owner references, creationTimestamp and the rest are not kept.
 */
export function recordOf(obj: KubeObject, resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, key: string = objectKey(obj.metadata), intern: (s: string) => string = (s) => s): KubeObject {
  const m = obj.metadata;
  const owner = m.ownerReferences?.find((r) => r.controller);
  const labels = m.labels && Object.keys(m.labels).length > 0 ? m.labels : undefined;
  const digest = changeDigest(obj);
  // One literal with every field (undefined when absent): every record has the same shape, its
  // fields inside the object, no separate property store.
  const metadata: KubeObject['metadata'] = {
    name: m.name,
    namespace: m.namespace ? intern(m.namespace) : undefined,
    uid: m.uid,
    resourceVersion: m.resourceVersion,
    generation: m.generation,
    deletionTimestamp: m.deletionTimestamp,
    labels,
    // A child made by kfn names its owner's uid in a label too: one string for both.
    ownerReferences: owner ? [{ apiVersion: intern(owner.apiVersion), kind: intern(owner.kind), name: owner.name, uid: labels?.[ownerUidLabel] === owner.uid ? labels[ownerUidLabel] : owner.uid, controller: true }] : undefined,
  };
  const high = Math.floor(digest / 2 ** 24);
  // `| 0`: a small integer; the remainder as a division leaves it would be a double.
  return { apiVersion: resource.apiVersion, kind: resource.kind, metadata, [digestHigh]: high, [digestLow]: (digest - high * 2 ** 24) | 0, [keySlot]: key };
}

/** managedFields entries of kfn's own field managers (`kfn-…`): what the SDK reads to know whether a status write would change anything. */
export function kfnManagedFields(obj: KubeObject): unknown[] | undefined {
  const entries = obj.metadata.managedFields as { manager?: string }[] | undefined;
  const mine = entries?.filter((e) => typeof e.manager === 'string' && e.manager.startsWith('kfn-'));
  return mine?.length ? mine : undefined;
}

/** What a watch keeps of each object of its kind: a compact record (`metadata`), that and some fields, or the whole object (`full`). */
export class Projection {
  private readonly interned = new Interned();
  private readonly resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>;
  private readonly projection: 'metadata' | 'full';
  private readonly fields: string[] | undefined;

  constructor(resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, projection: 'metadata' | 'full', fields: string[] | undefined) {
    this.resource = resource;
    this.projection = projection;
    this.fields = fields;
  }

  /**
   * Lists return items without apiVersion/kind: fill them in. Drop managedFields, which are
   * often the largest part of an object's metadata, except kfn's own entries in a whole
   * object (the SDK reads them to know whether a status write would change anything).
   */
  normalise(obj: KubeObject): KubeObject {
    obj.apiVersion = this.resource.apiVersion;
    obj.kind = this.resource.kind;
    const whole = this.projection === 'full' && !this.fields;
    const mine = whole ? kfnManagedFields(obj) : undefined;
    if (mine) obj.metadata.managedFields = mine;
    else delete obj.metadata.managedFields;
    return obj;
  }

  /** What the store keeps of `obj`, under `key` (the record remembers its key string). */
  kept(obj: KubeObject, key: string): KubeObject {
    const fields = this.fields;
    if (this.projection === 'metadata' || fields) {
      const record = recordOf(obj, this.resource, key, (s) => this.interned.of(s));
      return fields ? pickFields(record as unknown as Record<string, unknown>, obj as unknown as Record<string, unknown>, fields) as unknown as KubeObject : record;
    }
    return rememberKey(obj, key);
  }
}
