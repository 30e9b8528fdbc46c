// Contract 2 on the function's side: what an event's observed state can answer, so that a
// reconcile reads the apiserver only for what the event does not hold.
//
//   - which owned kinds it holds every child of (`kinds`), and each child, projected to the
//     fields the function declared (`observe`): a read of a field not carried throws, naming the
//     declaration to change, rather than answering undefined;
//   - whether a desired child needs a write: not when the bridge vouches that the child is as
//     kfn last applied it (`applied`, by hash) and the labels kfn sets are still there.
import { createHash } from 'node:crypto';
import type { ObservedObject, ObservedState } from '../../core/event.ts';
import { controllerUid, describeObject, objectId, sameKind, type KindRef } from '../../core/objects.ts';
import { pathTree, type PathTree } from '../../core/paths.ts';
import type { KubeObject } from '../../kube/api.ts';

/** The hash of a desired child, as the function reports it and the bridge carries it back. */
export function desiredHash(desired: unknown): string {
  return createHash('sha256').update(JSON.stringify(desired)).digest('hex').slice(0, 32);
}

/** Property names any object answers (inspection, promises, JSON): never refused. */
const alwaysReadable = new Set(['toJSON', 'then', 'constructor', 'valueOf', 'toString', 'inspect', 'asymmetricMatch', 'nodeType', '$$typeof']);

/**
 * `obj`, where reading a field its projection does not carry throws an error that says so (a
 * field carried but absent reads undefined, as usual). `fields` undefined: the whole object.
 */
export function guarded<T extends object>(obj: T, fields: string[] | undefined, what: string): T {
  if (!fields) return obj;
  const wrap = (target: Record<string, unknown>, tree: PathTree, path: string): Record<string, unknown> =>
    new Proxy(target, {
      get(t, prop, receiver) {
        if (typeof prop !== 'string' || alwaysReadable.has(prop)) return Reflect.get(t, prop, receiver);
        const node = tree[prop];
        if (node === undefined) {
          throw new Error(`${what}: ${path}${prop} is not in the event, which carries only ${['metadata', ...fields].join(', ')} of this kind (observe in defineReconciler; without it, annotations and status). Add ${path}${prop} to the kind's fields there to read it.`);
        }
        const value = Reflect.get(t, prop, receiver);
        return node === true || value === null || typeof value !== 'object' ? value : wrap(value as Record<string, unknown>, node, `${path}${prop}.`);
      },
    });
  return wrap(obj as Record<string, unknown>, pathTree(['apiVersion', 'kind', 'metadata', ...fields]), '') as T;
}

/** The observed state of one event, as the runtime asks it. */
export class Snapshot {
  readonly state: ObservedState;
  constructor(state: ObservedState) {
    this.state = state;
  }

  /** The kind as the event holds it (every child of it), or undefined when the function must list it. */
  kind(ref: KindRef) {
    return this.state.kinds.find((k) => sameKind(k, ref));
  }

  /**
   * The children of `ref`'s kind the primary controls (uid), as carried — in the primary's
   * namespace only: an owner reference cannot cross namespaces, so one from elsewhere is forged.
   */
  children(ref: KindRef, uid: string): ObservedObject[] {
    const namespace = this.state.primary.metadata.namespace;
    return this.state.children.filter((c) => sameKind(c, ref) && controllerUid(c as never) === uid && c.metadata.namespace === namespace);
  }

  /** A child, guarded to the fields its kind carries. */
  guard<T extends object>(child: T & { kind?: string; metadata: { name: string; namespace?: string } }): T {
    const k = this.kind({ apiVersion: (child as { apiVersion?: string }).apiVersion ?? '', kind: child.kind ?? '' });
    return guarded(child, k?.fields, describeObject(child as never));
  }

  /**
   * Whether `desired` needs no write: the bridge vouches the child is as kfn last applied it,
   * with the same hash, and every label and annotation the function sets is on it as carried
   * (annotations only count when the kind carries them).
   */
  unchanged(desired: KubeObject, hash: string, live: ObservedObject | undefined): boolean {
    if (!live) return false;
    const id = objectId({ apiVersion: desired.apiVersion!, kind: desired.kind!, namespace: desired.metadata.namespace, name: desired.metadata.name });
    if (this.state.applied?.[id] !== hash) return false;
    const has = (want: Record<string, string> | undefined, got: unknown) => !want || Object.entries(want).every(([k, v]) => (got as Record<string, string> | undefined)?.[k] === v);
    if (!has(desired.metadata.labels, live.metadata.labels)) return false;
    const annotations = desired.metadata.annotations;
    if (annotations && Object.keys(annotations).length && !('annotations' in live.metadata && has(annotations, live.metadata.annotations))) return false;
    return true;
  }
}
