// One watch's store: everything the watch knows of its kind, by namespace/name, each object as
// its projection keeps it (bridge/records.ts), and how a list or a watch line changes it. A list
// is applied page by page as it comes, only the keys it names are remembered (mark), and what it
// did not name is deleted at the end (sweep): no second copy of the objects is built, which at
// 100,000 objects was most of a heap.
import { keptKey, Projection } from './records.ts';
import { objectKey } from '../core/objects.ts';
import type { KubeObject, ResourceInfo } from '../kube/api.ts';

/**
 * `apply` carries the object as the apiserver sent it (normalised) and the store's previous
 * record of it, and `kept: false` when the store does not keep it (WatcherOptions.keeps);
 * `delete` carries the store's record. `key` is the store's own key string, so that the
 * bridge's other per-object structures can share it instead of holding copies.
 */
export type WatchEvent =
  | { type: 'apply'; object: KubeObject; old?: KubeObject; key?: string; kept?: false }
  | { type: 'delete'; object: KubeObject; inferred: boolean; key?: string; fromReplaced?: boolean }
  | { type: 'synced'; relist: boolean; streamed: boolean };

/** An object the store took in or let go, its key string in the store, and what the store held of it before. */
export interface StoreChange {
  object: KubeObject;
  key: string;
  old?: KubeObject;
  /** False when the store did not keep the object (`keeps` said no): what it held of it before, if anything, is gone. */
  kept?: false;
}

/**
 * Which objects a store keeps a record of: all when absent. A sharded bridge keeps only the
 * objects the shards it delivers (and the one it goes for first) need (bridge/shards.ts).
 */
export type Keeps = (object: KubeObject, key: string) => boolean;

export class WatchStore {
  /** Compact records, or whole objects for a `full` watch, by namespace/name. */
  readonly byKey = new Map<string, KubeObject>();
  private readonly projection: Projection;
  /** The replaced watch's store, until this one's first list has been compared with it. */
  private inherited: Map<string, KubeObject> | undefined;
  private readonly keeps: Keeps | undefined;
  /** Whether `keeps` said no to an object since the last list began: only then can a list bring in more. */
  leftSomeOut = false;

  constructor(resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, projection: 'metadata' | 'full', fields: string[] | undefined, inherit: Map<string, KubeObject> | undefined, keeps?: Keeps) {
    this.projection = new Projection(resource, projection, fields);
    this.inherited = inherit;
    this.keeps = keeps;
  }

  /** Keeps `change`'s object, or lets go of what it held of it when `keeps` says no. */
  private keep(change: StoreChange): StoreChange {
    if (this.keeps && !this.keeps(change.object, change.key)) {
      this.leftSomeOut = true;
      if (change.old) this.byKey.delete(change.key);
      return { ...change, kept: false };
    }
    this.byKey.set(change.key, this.projection.kept(change.object, change.key));
    return change;
  }

  /** `item` normalised, the key string the store has it under (its own, when it has it) and what it holds of it. */
  private locate(item: KubeObject): StoreChange {
    const object = this.projection.normalise(item);
    const fresh = objectKey(object.metadata);
    const old = this.byKey.get(fresh);
    return { object, key: old ? keptKey(old) : fresh, old };
  }

  /**
   * Applies a list as its pages come, telling each change (ListIntake: mark and sweep). Answers
   * the list's resourceVersion and how many objects it named that the store keeps.
   */
  async applyList(pages: AsyncIterable<{ items?: KubeObject[]; metadata?: { resourceVersion?: string } }>, tell: (event: WatchEvent) => void): Promise<{ resourceVersion: string; objects: number }> {
    const intake = this.beginList();
    let resourceVersion = '';
    for await (const page of pages) {
      for (const item of page.items ?? []) intake.take(item, tell);
      resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
    }
    return { resourceVersion, objects: intake.end(tell) };
  }

  /** A list begins: its objects go through the intake answered, as they come (a page's, or a streaming list's events). */
  beginList(): ListIntake {
    this.leftSomeOut = false;
    return new ListIntake(this);
  }

  /** A watch line's object added, changed or deleted: applied, and the event it makes. */
  line(type: 'ADDED' | 'MODIFIED' | 'DELETED', item: KubeObject): Exclude<WatchEvent, { type: 'synced' }> {
    if (type !== 'DELETED') return { type: 'apply', ...this.applied(item) };
    const { object, key } = this.deleted(item);
    return { type: 'delete', object, inferred: false, key };
  }

  /** A listed object, its key marked in `seen`: the change, or undefined when the store holds it at this version already. */
  listed(item: KubeObject, seen: Set<string>): StoreChange | undefined {
    const change = this.locate(item);
    if (change.old && change.old.metadata.resourceVersion === change.object.metadata.resourceVersion) {
      seen.add(change.key);
      return undefined;
    }
    const result = this.keep(change);
    // Only what the store holds is swept, and what a replaced watch held compared: the key of
    // an object not kept is not remembered (a sharded replica lists every shard's objects).
    if (result.kept !== false || this.inherited?.has(change.key)) seen.add(change.key);
    return result;
  }

  /** After a list: what it did not name, deleted one at a time (each told before the next goes). */
  *unlisted(seen: Set<string>): Generator<StoreChange> {
    for (const [key, old] of this.byKey) {
      if (!seen.has(key)) {
        this.byKey.delete(key);
        yield { object: old, key };
      }
    }
  }

  /** After the first list: what the replaced watch knew and the list no longer has, which vanished between the two watches. */
  *vanished(seen: Set<string>): Generator<StoreChange> {
    for (const [key, old] of this.inherited ?? []) if (!seen.has(key)) yield { object: old, key };
    this.inherited = undefined;
  }

  /** A watched object added or changed. */
  applied(item: KubeObject): StoreChange {
    return this.keep(this.locate(item));
  }

  /** A watched object deleted: the change carries what the store would keep of it. */
  deleted(item: KubeObject): StoreChange {
    const { object, key } = this.locate(item);
    this.byKey.delete(key);
    return { object: this.projection.kept(object, key), key };
  }
}

/**
 * One list taken into a store, mark and sweep: each object as it comes (a page's, or a streaming
 * list's event), telling what it changed and remembering only its key; at the end, what the list
 * did not name is deleted. No second copy of the objects is built: at 100,000 objects that copy
 * was most of a heap.
 */
export class ListIntake {
  private readonly seen = new Set<string>();
  private readonly store: WatchStore;

  constructor(store: WatchStore) {
    this.store = store;
  }

  /** One listed object: the change it makes told, if any. */
  take(item: KubeObject, tell: (event: WatchEvent) => void): void {
    const change = this.store.listed(item, this.seen);
    if (change) tell({ type: 'apply', ...change });
  }

  /** An object deleted while the list comes (a streaming list's DELETED event): let go of, and no longer counted as listed. */
  forget(item: KubeObject, tell: (event: WatchEvent) => void): void {
    const { object, key } = this.store.deleted(item);
    this.seen.delete(key);
    tell({ type: 'delete', object, inferred: false, key });
  }

  /** The list is complete: what it did not name told as deleted. Answers how many objects it named that the store keeps. */
  end(tell: (event: WatchEvent) => void): number {
    for (const { object, key } of this.store.unlisted(this.seen)) tell({ type: 'delete', object, inferred: true, key });
    for (const { object, key } of this.store.vanished(this.seen)) tell({ type: 'delete', object, inferred: true, key, fromReplaced: true });
    const listed = this.seen.size;
    // A streaming list's intake lives as long as its request, the watch after the list included:
    // its marks (a hash-table entry per object) go now.
    this.seen.clear();
    return listed;
  }

  /** Keys marked so far (none once the list has ended). */
  get marked(): number {
    return this.seen.size;
  }
}
