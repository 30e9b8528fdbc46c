// The children of one primary, step 4 of docs/functions.md, each owned object handled as Java
// Operator SDK handles a dependent resource:
//
//   observe ── what the primary controls now: from the event (contract 2), else listed
//   apply   ── each child the function returns: owner reference and kfn labels set, refused
//              when an owner reference cannot hold it, written only when it needs a write
//   prune   ── what the primary controls but the function no longer returns, deleted
//
// The user's reconcile runs between observe and apply (runtime.ts). Whether a child needs a
// write, fields.ts tells from the live one, unless the bridge vouches (contract 2) that it is as
// kfn last applied it.
import { controllerUid, describeObject, objectId, refOf, sameKind, type KindRef } from '../../core/objects.ts';
import { childLabels, ownerUidLabel } from '../../core/names.ts';
import type { ChildState } from '../../core/response.ts';
import { ApiError, metadataAccept, objectPath, type KubeObject } from '../../kube/api.ts';
import { applyNeeded } from './fields.ts';
import { ReconcileError, type InvocationScope } from './invocation.ts';
import type { InvocationObserver } from './record.ts';
import type { Child, ReconcileContext } from './reconciler.ts';
import { desiredHash, type Snapshot } from './snapshot.ts';
import { activeTraceparent } from '../../core/tracing.ts';

/**
 * Children are known by group, kind and name — never by version: the same object read as
 * autoscaling/v2 and returned as autoscaling/v1 is one child, not one to prune and one to apply.
 */
const childKey = (ref: { apiVersion: string; kind: string }, name: string) => objectId({ apiVersion: ref.apiVersion, kind: ref.kind, name });

/** A child the apiserver refused as invalid (422), or one an owner reference cannot hold. */
interface Refusal {
  child: string;
  reason: string;
  message: string;
}

/** One invocation's children: what the primary controls, what it wants, and the writes between. */
export class Children {
  /** Contract 2: the wanted children as this reconcile leaves them, for the answer. */
  readonly states: ChildState[] = [];
  /** The children this object controls, as observe() found them, by childKey. */
  private readonly found = new Map<string, KubeObject>();
  private readonly run: InvocationScope;
  /** Contract 2: what the event holds of the primary and its children. */
  private readonly snapshot: Snapshot | undefined;
  private readonly observer: InvocationObserver | undefined;

  constructor(run: InvocationScope, snapshot: Snapshot | undefined, observer: InvocationObserver | undefined) {
    this.run = run;
    this.snapshot = snapshot;
    this.observer = observer;
  }

  /** A child this object controls, by kind and name, as observe() found it. */
  controlled(ref: KindRef, name: string): KubeObject | undefined {
    return this.found.get(childKey(ref, name));
  }

  /**
   * What exists now: the children this object controls — from the event for the kinds it
   * holds, else one list per owned kind, all at once.
   */
  async observe(obj: KubeObject, ctx: ReconcileContext): Promise<void> {
    const uid = obj.metadata.uid!;
    const snapshot = this.snapshot;
    const owns = this.run.reconciler.owns ?? [];
    const listed = owns.filter((r) => !snapshot?.kind(r));
    for (const r of owns.filter((k) => snapshot?.kind(k))) {
      for (const child of snapshot!.children(r, uid)) this.found.set(childKey(r, child.metadata.name), { ...child, apiVersion: r.apiVersion, kind: r.kind } as KubeObject);
    }
    if (!listed.length) return;
    await this.run.step('listing owned objects', async () => {
      const lists = await Promise.all(listed.map((r) => ctx.list(r, { namespace: obj.metadata.namespace, labelSelector: `${ownerUidLabel}=${uid}` }) as Promise<KubeObject[]>));
      for (const [i, r] of listed.entries()) {
        for (const child of lists[i]!) {
          if (controllerUid(child) === uid) this.found.set(childKey(r, child.metadata.name), { ...child, apiVersion: r.apiVersion, kind: r.kind });
        }
      }
    });
  }

  /**
   * Apply what changed, all at once (a reconcile waits for one round trip, not one per child),
   * except that cluster-scoped children — a Namespace the others live in — go first. A child
   * the apiserver refuses as invalid, or one the primary cannot own, is `refused` (the primary
   * becomes Ready=False), not a retry storm. `desired`: the keys of every child returned.
   */
  async apply(obj: KubeObject, returned: readonly Child[] | undefined): Promise<{ desired: Set<string>; refused?: { reason: string; message: string } }> {
    const { reconciler } = this.run;
    const desiredKeys = new Set<string>();
    const toApply: KubeObject[] = [];
    const hashes = new Map<KubeObject, string>();
    const refusals: Refusal[] = [];
    const wanted: { desired: Child; live?: KubeObject }[] = [];
    const children = (returned ?? []).map((child) => childWithOwner(child, obj, reconciler.name));
    const scoped = await Promise.all(children.map((d) => this.run.resource(d.apiVersion, d.kind).then((r) => !r.namespaced, () => false)));
    for (const [i, desired] of children.entries()) {
      if (!(reconciler.owns ?? []).some((r) => sameKind(r, desired as KindRef))) {
        // Never listed, so never pruned nor seen changing: a bug in the function, said plainly.
        throw new ReconcileError(`applying ${describeObject(desired)}`, this.run.name, new Error(`${desired.kind} (${desired.apiVersion}) is not in the reconciler's owns: add it there, or create it imperatively through ctx`));
      }
      if (scoped[i]) delete desired.metadata.namespace;
      const key = childKey(desired as KindRef, desired.metadata.name);
      desiredKeys.add(key);
      const unownable = ownershipProblem(obj, desired, scoped[i]!);
      if (unownable) {
        refusals.push({ child: describeObject(desired), reason: 'ChildNotOwnable', message: `${describeObject(desired)}: ${unownable}` });
        continue;
      }
      hashes.set(desired, desiredHash(desired));
      wanted.push({ desired, live: this.found.get(key) });
    }
    // Whether each needs a write, all at once: a child the event cannot vouch for is read.
    const needed = await Promise.all(wanted.map((w) => this.needsApply(w.desired, w.live, hashes.get(w.desired)!)));
    for (const [i, { desired, live: current }] of wanted.entries()) {
      this.observer?.child(desired, current, needed[i]!);
      if (needed[i]) toApply.push(desired);
    }
    const clusterScoped = new Set(children.filter((_, i) => scoped[i]));
    for (const wave of [toApply.filter((d) => clusterScoped.has(d as Child)), toApply.filter((d) => !clusterScoped.has(d as Child))]) {
      const settled = await Promise.allSettled(wave.map((d) => this.applyChild(d)));
      // Changes and refusals in the children's order, whatever order the answers came in.
      for (const [i, s] of settled.entries()) {
        if (s.status !== 'fulfilled') continue;
        const d = wave[i]!;
        if ('refused' in s.value) {
          refusals.push(s.value.refused);
          continue;
        }
        const ref = { ...refOf(s.value.written ?? d), apiVersion: d.apiVersion!, kind: d.kind! };
        this.run.changes.push({ action: 'applied', ref, ...(s.value.traceparent ? { traceparent: s.value.traceparent } : {}) });
        this.states.push({ ref, hash: hashes.get(d)! });
      }
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
    }
    if (!refusals.length) return { desired: desiredKeys };
    // The first refusal in full, the others by name: what to fix first, and what else is waiting.
    const [first, ...others] = refusals;
    const message = others.length ? `${first!.message} (also refused: ${others.map((r) => r.child).join(', ')})` : first!.message;
    return { desired: desiredKeys, refused: { reason: first!.reason, message } };
  }

  /**
   * Whether a desired child needs a write. Held by the event: not when the bridge vouches it is
   * as kfn last applied it (same hash, unchanged since); a child it does not have is created;
   * one it cannot vouch for (changed since, or never reported) is read whole and compared.
   * Otherwise: compared with the child as listed (fields.ts).
   */
  private async needsApply(desired: KubeObject, live: KubeObject | undefined, hash: string): Promise<boolean> {
    const { api, reconciler } = this.run;
    const snapshot = this.snapshot;
    if (!snapshot?.kind(desired as KindRef)) return applyNeeded(live, desired, reconciler.fieldManager);
    if (!live) return true;
    if (snapshot.unchanged(desired, hash, live as never)) {
      this.states.push({ ref: { ...refOf(live), apiVersion: desired.apiVersion!, kind: desired.kind! }, hash });
      return false;
    }
    const whole = await this.run.step(`reading ${describeObject(desired)}`, async () => {
      const resource = await this.run.resource(desired.apiVersion!, desired.kind!);
      return api.request<KubeObject>('GET', objectPath(resource, desired.metadata.name, resource.namespaced ? desired.metadata.namespace : undefined)).catch((err: unknown) => (err instanceof ApiError && err.status === 404 ? undefined : Promise.reject(err)));
    });
    const needed = applyNeeded(whole, desired, reconciler.fieldManager);
    if (!needed && whole) this.states.push({ ref: { ...refOf(whole), apiVersion: desired.apiVersion!, kind: desired.kind! }, hash });
    return needed;
  }

  /** One server-side apply: the object as written, or a refusal (422) instead of an error. */
  private async applyChild(desired: KubeObject): Promise<{ written?: KubeObject; traceparent?: string } | { refused: Refusal }> {
    const { api, reconciler } = this.run;
    let traceparent: string | undefined;
    try {
      const written = await this.run.step(`applying ${describeObject(desired)}`, async () => {
        traceparent = activeTraceparent();
        const resource = await this.run.resource(desired.apiVersion!, desired.kind!);
        return api.request<KubeObject | undefined>('PATCH', objectPath(resource, desired.metadata.name, resource.namespaced ? desired.metadata.namespace : undefined), {
          body: desired,
          contentType: 'application/apply-patch+yaml',
          // Only its metadata back (the reference reported to the bridge): the whole object is
          // the apiserver's to encode and this process's to parse for nothing.
          accept: metadataAccept,
          query: { fieldManager: reconciler.fieldManager, force: true },
        });
      });
      return { written: written?.metadata ? written : undefined, ...(traceparent ? { traceparent } : {}) };
    } catch (err) {
      const cause = (err as Error).cause;
      const apiErr = cause instanceof ApiError ? cause : undefined;
      if (apiErr && apiErr.status === 422) {
        this.run.log.warn({ child: describeObject(desired), error: apiErr.message }, 'the apiserver rejected a child');
        return { refused: { child: describeObject(desired), reason: apiErr.reason ?? 'Invalid', message: `${describeObject(desired)}: ${apiErr.message}` } };
      }
      throw err;
    }
  }

  /**
   * Prune what this object controls but no longer wants (only when the result lists its
   * children: a result without `children` says nothing about them; `children: []` means none).
   */
  async prune(desired: Set<string>): Promise<void> {
    const { api } = this.run;
    for (const [key, child] of this.found) {
      if (desired.has(key)) continue;
      let traceparent: string | undefined;
      await this.run.step(`pruning ${describeObject(child)}`, async () => {
        traceparent = activeTraceparent();
        const resource = await this.run.resource(child.apiVersion!, child.kind!);
        try {
          // Preconditioned on the uid listed: a child deleted and recreated meanwhile is not this one.
          await api.request('DELETE', objectPath(resource, child.metadata.name, child.metadata.namespace), {
            body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background', preconditions: { uid: child.metadata.uid } },
          });
        } catch (err) {
          if (!(err instanceof ApiError && (err.status === 404 || err.status === 409))) throw err;
        }
      });
      this.run.changes.push({ action: 'pruned', ref: refOf(child), ...(traceparent ? { traceparent } : {}) });
    }
  }
}

/**
 * Why `child` cannot carry a controller reference to `owner`, or undefined. An owner reference
 * never crosses namespaces, and a cluster-scoped object's owner must be cluster-scoped: the
 * garbage collector would delete such a child (or leave it behind), the next reconcile would
 * make it again, and prune would never see it. kfn refuses them rather than keep a second
 * inventory; such objects are made imperatively (ctx) and removed in finalize.
 */
function ownershipProblem(owner: KubeObject, child: KubeObject, clusterScopedChild: boolean): string | undefined {
  const ownerNamespace = owner.metadata.namespace;
  const remedy = 'create it imperatively through ctx and delete it in finalize';
  if (clusterScopedChild && ownerNamespace) return `a cluster-scoped child of a namespaced ${owner.kind} cannot be owned by it (the garbage collector refuses the owner reference): make ${owner.kind} cluster-scoped, or ${remedy}`;
  if (!clusterScopedChild && ownerNamespace && child.metadata.namespace !== ownerNamespace) return `in namespace ${child.metadata.namespace}, not ${ownerNamespace} where ${owner.kind} ${owner.metadata.name} is: an owner reference cannot cross namespaces (the garbage collector would delete the child, and it would be made again on every reconcile); create it in ${ownerNamespace}, or ${remedy}`;
  return undefined;
}

/** The child as it will be applied: namespace, controller ownerReference, kfn labels. */
function childWithOwner(child: Child, owner: KubeObject, reconcilerName: string): Child {
  const namespace = child.metadata.namespace ?? owner.metadata.namespace;
  return {
    ...child,
    metadata: {
      ...child.metadata,
      ...(namespace ? { namespace } : {}),
      labels: { ...child.metadata.labels, ...childLabels(owner.metadata.uid!, reconcilerName) },
      ownerReferences: [{ apiVersion: owner.apiVersion!, kind: owner.kind!, name: owner.metadata.name, uid: owner.metadata.uid!, controller: true, blockOwnerDeletion: true }],
    },
  };
}
