// One watch's store: everything the watch knows of its kind, by namespace/name, each object as
// its projection keeps it (bridge/records.ts), and how a list or a watch line changes it. A list
// is applied page by page as it comes, only the keys it names are remembered (mark), and what it
// did not name is deleted at the end (sweep): no second copy of the objects is built, which at
// 100,000 objects was most of a heap.
import { keptKey, Projection } from './records.ts';
import { objectKey } from '../core/objects.ts';
import type { KubeObject, ResourceInfo } from '../kube/api.ts';

/** An object the store took in or let go, its key string in the store, and what the store held of it before. */
export interface StoreChange {
  object: KubeObject;
  key: string;
  old?: KubeObject;
}

export class WatchStore {
  /** Compact records, or whole objects for a `full` watch, by namespace/name. */
  readonly byKey = new Map<string, KubeObject>();
  private readonly projection: Projection;
  /** The replaced watch's store, until this one's first list has been compared with it. */
  private inherited: Map<string, KubeObject> | undefined;

  constructor(resource: Pick<ResourceInfo, 'apiVersion' | 'kind'>, projection: 'metadata' | 'full', fields: string[] | undefined, inherit: Map<string, KubeObject> | undefined) {
    this.projection = new Projection(resource, projection, fields);
    this.inherited = inherit;
  }

  /** `item` normalised, the key string the store has it under (its own, when it has it) and what it holds of it. */
  private locate(item: KubeObject): StoreChange {
    const object = this.projection.normalise(item);
    const fresh = objectKey(object.metadata);
    const old = this.byKey.get(fresh);
    return { object, key: old ? keptKey(old) : fresh, old };
  }

  /** A listed object, its key marked in `seen`: the change, or undefined when the store holds it at this version already. */
  listed(item: KubeObject, seen: Set<string>): StoreChange | undefined {
    const change = this.locate(item);
    seen.add(change.key);
    if (change.old && change.old.metadata.resourceVersion === change.object.metadata.resourceVersion) return undefined;
    this.byKey.set(change.key, this.projection.kept(change.object, change.key));
    return change;
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
    const change = this.locate(item);
    this.byKey.set(change.key, this.projection.kept(change.object, change.key));
    return change;
  }

  /** A watched object deleted: the change carries what the store would keep of it. */
  deleted(item: KubeObject): StoreChange {
    const { object, key } = this.locate(item);
    this.byKey.delete(key);
    return { object: this.projection.kept(object, key), key };
  }
}
