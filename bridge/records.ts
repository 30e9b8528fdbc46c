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

/** A kind as a record names it (its own, or its controller owner's): one object per kind, shared by its records. */
interface KindOf {
  readonly apiVersion: string;
  readonly kind: string;
}

/** Kinds as records name them, one object each (bounded as `Interned` is), by apiVersion, then kind: no two kinds share an entry whatever their names hold. */
class Kinds {
  private readonly byVersion = new Map<string, Map<string, KindOf>>();
  private size = 0;
  of(apiVersion: string, kind: string): KindOf {
    let kinds = this.byVersion.get(apiVersion);
    const kept = kinds?.get(kind);
    if (kept) return kept;
    const made = { apiVersion, kind };
    if (this.size >= 10_000) return made;
    if (!kinds) this.byVersion.set(apiVersion, (kinds = new Map()));
    kinds.set(kind, made);
    this.size++;
    return made;
  }
}

/** Where a record keeps what is not a field of the object it stands for (symbols: not seen by spread, keys or JSON, and no name an object's own field could have). */
const typeSlot = Symbol('kfn.type');
const versionSlot = Symbol('kfn.resourceVersion');
const ownerTypeSlot = Symbol('kfn.owner.type');
const ownerNameSlot = Symbol('kfn.owner.name');
const ownerUidSlot = Symbol('kfn.owner.uid');

/**
 * The compact record a metadata watch keeps of an object, flat: one object per watched object
 * (no metadata object, no owner reference array), read as a KubeObject through getters:
 * `metadata` is the record itself, `name` is cut from the key when read, `ownerReferences` is
 * made when read from the controller owner's kind, name and uid. It keeps apiVersion and kind
 * (the watch's one object for them), name, namespace (interned), uid, resourceVersion,
 * generation, deletionTimestamp, labels (label and selector mappings read them), the controller
 * owner reference (whose child it is), and the digest of labels, annotations and finalizers.
 * Annotations, finalizers, other owner references, creationTimestamp and the rest are not kept.
 * Nested objects (the nested `metadata`, an owner reference in an array) cost a child about 190
 * bytes more; `toJSON` gives the nested form, so an event or a journal entry carries it.
 */
class CompactRecord {
  [keySlot]: string;
  private readonly [typeSlot]: KindOf;
  readonly namespace: string | undefined;
  readonly uid: string | undefined;
  /** The resourceVersion: as a small integer when it is one written plainly (no string kept), else as given. */
  private readonly [versionSlot]: number | string | undefined;
  readonly generation: number | undefined;
  readonly deletionTimestamp: string | undefined;
  readonly labels: Record<string, string> | undefined;
  private readonly [ownerTypeSlot]: KindOf | undefined;
  private readonly [ownerNameSlot]: string | undefined;
  private readonly [ownerUidSlot]: string | undefined;
  [digestHigh]: number;
  [digestLow]: number;

  constructor(obj: KubeObject, type: KindOf, key: string, kinds: Kinds, intern: (s: string) => string) {
    const m = obj.metadata;
    const owner = m.ownerReferences?.find((r) => r.controller);
    const labels = m.labels && Object.keys(m.labels).length > 0 ? m.labels : undefined;
    const digest = changeDigest(obj);
    const high = Math.floor(digest / 2 ** 24);
    // Every field set, in one order (undefined when absent): every record has one shape.
    this[keySlot] = key;
    this[typeSlot] = type;
    this.namespace = m.namespace ? intern(m.namespace) : undefined;
    this.uid = m.uid;
    this[versionSlot] = smallDecimal(m.resourceVersion);
    this.generation = m.generation;
    this.deletionTimestamp = m.deletionTimestamp;
    this.labels = labels;
    this[ownerTypeSlot] = owner ? kinds.of(owner.apiVersion, owner.kind) : undefined;
    this[ownerNameSlot] = owner?.name;
    // A child made by kfn names its owner's uid in a label too: one string for both.
    this[ownerUidSlot] = owner ? (labels?.[ownerUidLabel] === owner.uid ? labels[ownerUidLabel] : owner.uid) : undefined;
    this[digestHigh] = high;
    // `| 0`: a small integer; the remainder as a division leaves it would be a double.
    this[digestLow] = (digest - high * 2 ** 24) | 0;
  }

  get apiVersion(): string {
    return this[typeSlot].apiVersion;
  }

  get kind(): string {
    return this[typeSlot].kind;
  }

  get resourceVersion(): string | undefined {
    const version = this[versionSlot];
    return typeof version === 'number' ? String(version) : version;
  }

  /**
   * The record itself, read as an object's metadata: `record.metadata.name` and the like. So it
   * has apiVersion and kind too, and writing `record.metadata` out (JSON, a log) writes the whole
   * record, nested: write the record, or pick the fields.
   */
  get metadata(): KubeObject['metadata'] {
    return this as unknown as KubeObject['metadata'];
  }

  get name(): string {
    const key = this[keySlot];
    return this.namespace ? key.slice(this.namespace.length + 1) : key;
  }

  get ownerReferences(): KubeObject['metadata']['ownerReferences'] {
    const type = this[ownerTypeSlot];
    return type ? [{ apiVersion: type.apiVersion, kind: type.kind, name: this[ownerNameSlot]!, uid: this[ownerUidSlot]!, controller: true }] : undefined;
  }

  /** The record as a KubeObject of plain objects, nested as the apiserver's are (what JSON gives of it). */
  toJSON(): KubeObject {
    return {
      apiVersion: this.apiVersion,
      kind: this.kind,
      metadata: {
        name: this.name,
        namespace: this.namespace,
        uid: this.uid,
        resourceVersion: this.resourceVersion,
        generation: this.generation,
        deletionTimestamp: this.deletionTimestamp,
        labels: this.labels,
        ownerReferences: this.ownerReferences,
      },
    };
  }

  /** The nested form remembering the key and the digest: what a watch keeping some fields adds them to. */
  nested(): KubeObject {
    return Object.assign(this.toJSON(), { [keySlot]: this[keySlot], [digestHigh]: this[digestHigh], [digestLow]: this[digestLow] });
  }
}

/**
 * `text` as a number when it is a decimal integer that V8 keeps in a field unboxed (up to nine
 * digits, no leading zero: `String` gives the same text back), else `text` itself. A
 * resourceVersion is opaque to clients: this keeps it exactly, in 8 bytes rather than a string's
 * 24–32, and hands the same text back.
 */
function smallDecimal(text: string | undefined): number | string | undefined {
  return text !== undefined && /^[1-9]\d{0,8}$/.test(text) ? Number(text) : text;
}

/** The compact record a metadata watch keeps of `obj` (CompactRecord), read as a KubeObject. */
export function recordOf(obj: KubeObject, resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, key: string = objectKey(obj.metadata), intern: (s: string) => string = (s) => s, kinds: Kinds = new Kinds()): KubeObject {
  return new CompactRecord(obj, kinds.of(resource.apiVersion, resource.kind), key, kinds, intern) as unknown as KubeObject;
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
  private readonly kinds = new Kinds();
  private readonly type: KindOf;
  private readonly projection: 'metadata' | 'full';
  private readonly fields: string[] | undefined;

  constructor(resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, projection: 'metadata' | 'full', fields: string[] | undefined) {
    this.type = this.kinds.of(resource.apiVersion, resource.kind);
    this.projection = projection;
    this.fields = fields;
  }

  /**
   * Lists return items without apiVersion/kind: fill them in. Drop managedFields, which are
   * often the largest part of an object's metadata, except kfn's own entries in a whole
   * object (the SDK reads them to know whether a status write would change anything).
   */
  normalise(obj: KubeObject): KubeObject {
    obj.apiVersion = this.type.apiVersion;
    obj.kind = this.type.kind;
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
      const record = new CompactRecord(obj, this.type, key, this.kinds, (s) => this.interned.of(s));
      return fields ? pickFields(record.nested() as Record<string, unknown>, obj as unknown as Record<string, unknown>, fields) as unknown as KubeObject : record as unknown as KubeObject;
    }
    return rememberKey(obj, key);
  }
}
