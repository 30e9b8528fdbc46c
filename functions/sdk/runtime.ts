// One invocation: from a verified reconcile event to the writes it takes, and the answer.
//
//   GET the primary ── gone? done ─────────────────────────────────────────────┐
//     deleting? ── finalize, then remove the finalizer ── done                 │
//     finalizer missing? add it                                                │
//     LIST owned children ── reconcile(obj, ctx) ── apply changed children ──  │
//     prune children no longer desired ── write status if it changed ──────────┴─▶ answer
//
// Writes go through server-side apply with one field manager per reconciler and `force`.
// Before each write the live object is compared with the desired one (fields.ts): nothing is
// sent when it holds every desired field and kfn's field manager owns no field the function
// dropped, so an idle resync makes no writes while a removed field is removed.
import type { Logger } from 'pino';
import { systemClock } from '../../core/clock.ts';
import { describeObject, objectId, refOf, sameKind, type KindRef } from '../../core/objects.ts';
import { childLabels, ownerUidLabel, skipFinalizerAnnotation } from '../../core/names.ts';
import { type Change, type ReconcileResponse } from '../../core/response.ts';
import { type ReceivedReconcile } from '../../core/event.ts';
import { ApiError, collectionPath, listAll, objectPath, recordEvent, type KubeApi, type KubeObject } from '../../kube/api.ts';
import { applyNeeded } from './fields.ts';
import type { InvocationObserver } from './record.ts';
import type { Kind } from './kind.ts';
import { settleCondition, type Condition } from '../../core/conditions.ts';
import type { Live } from './types.ts';
import { Terminal, type Child, type ReconcileContext, type ReconcileResult, type Reconciler, type Readiness } from './reconciler.ts';

/** How long a failing finalize is retried after the object's deletionTimestamp, by default. */
export const defaultFinalizeTimeoutSeconds = 600;

/** A failure the bridge should retry: HTTP 500 with a message naming the object and the step. */
export class ReconcileError extends Error {
  readonly step: string;
  constructor(step: string, object: string, cause: unknown) {
    super(`${step} for ${object} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.step = step;
  }
}


function readiness(ready: Readiness | undefined): { ready: boolean; reason: string; message: string } {
  if (ready === undefined || ready === true) return { ready: true, reason: 'Reconciled', message: 'all children are applied' };
  if (ready === false) return { ready: false, reason: 'NotReady', message: 'waiting for children to become ready' };
  return { ready: ready.ready, reason: ready.reason, message: ready.message ?? '' };
}

export interface InvocationOptions {
  api: KubeApi;
  log: Logger;
  now?: () => Date;
  /** Told what was decided about each child and the status (an invocation record). */
  observer?: InvocationObserver;
}

/** The delivery's deadline passed: the bridge no longer waits for this answer. */
export class DeadlineExceeded extends Error {
  constructor(deadline: Date) {
    super(`the delivery's deadline (${deadline.toISOString()}) passed: the bridge has stopped waiting and will deliver the event again, so this reconcile stops before writing more`);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * Runs one reconcile event. When it carries a deadline (kfndeadline), every read and write is
 * bound to it and no step starts after it: the bridge retries once it has passed, and two
 * reconciles of one object must never write at once.
 */
export async function reconcileEvent(reconciler: Reconciler, received: ReceivedReconcile, options: InvocationOptions): Promise<ReconcileResponse> {
  const deadline = received.deadline;
  if (!deadline) return invoke(reconciler, received, options, new AbortController().signal);
  const controller = new AbortController();
  const now = options.now ?? (() => new Date());
  const cancel = systemClock.setTimer(() => controller.abort(new DeadlineExceeded(deadline)), deadline.getTime() - now().getTime());
  try {
    return await invoke(reconciler, received, { ...options, api: options.api.withSignal(controller.signal) }, controller.signal);
  } finally {
    cancel();
  }
}

async function invoke(reconciler: Reconciler, received: ReceivedReconcile, options: InvocationOptions, signal: AbortSignal): Promise<ReconcileResponse> {
  const { api } = options;
  const now = options.now ?? (() => new Date());
  const kind: Kind = reconciler.for;
  const ref = received.data.primary;
  const primaryPath = objectPath({ apiVersion: kind.apiVersion, kind: kind.kind, plural: kind.plural, namespaced: kind.namespaced, verbs: [] }, ref.name, ref.namespace);
  const name = describeObject({ kind: kind.kind, metadata: { name: ref.name, namespace: ref.namespace } });
  const log = options.log.child({ reconciler: reconciler.name, object: name, reason: received.reason, event: received.event.id });
  const changes: Change[] = [];
  const step = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    try {
      signal.throwIfAborted();
      return await fn();
    } catch (err) {
      if (err instanceof ReconcileError) throw err;
      // An aborted request reports the abort, not the deadline: say what really happened.
      throw new ReconcileError(what, name, signal.aborted ? signal.reason : err);
    }
  };

  // 1. Current state, fresh from the apiserver. Gone: nothing to do (children are collected).
  let obj: KubeObject;
  try {
    obj = await api.request<KubeObject>('GET', primaryPath);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      log.info({}, 'object is gone; nothing to do');
      return { result: 'done', changes };
    }
    throw new ReconcileError('reading the object', name, err);
  }
  obj.apiVersion ??= kind.apiVersion;
  obj.kind ??= kind.kind;
  const uid = obj.metadata.uid!;

  // Children are known by group, kind and name — never by version: the same object read as
  // autoscaling/v2 and returned as autoscaling/v1 is one child, not one to prune and one to apply.
  const childKey = (apiVersion: string, kind: string, name: string) => objectId({ apiVersion, kind, name });
  const liveChildren = new Map<string, KubeObject>();
  const ctx: ReconcileContext = {
    reason: received.reason,
    attempt: received.attempt,
    trigger: received.data.trigger,
    owned: <R extends KindRef>(r: R, n: string) => liveChildren.get(childKey(r.apiVersion, r.kind, n)) as Live<R> | undefined,
    get: async <R extends KindRef>(r: R, n: string, namespace = obj.metadata.namespace) => {
      const resource = await api.resource(r.apiVersion, r.kind);
      try {
        return await api.request<Live<R>>('GET', objectPath(resource, n, resource.namespaced ? namespace : undefined));
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return undefined;
        throw err;
      }
    },
    list: async <R extends KindRef>(r: R, opts: { namespace?: string; labelSelector?: string; pageSize?: number } = {}) => {
      const resource = await api.resource(r.apiVersion, r.kind);
      return listAll<Live<R>>(api, collectionPath(resource, opts.namespace), { query: { labelSelector: opts.labelSelector }, pageSize: opts.pageSize });
    },
    now,
    event: (type, reason, message) => recordEvent(api, obj, { type, reason, message, component: `kfn-${reconciler.name}`, now: now() }),
    api,
    log,
    signal,
  };

  // 2. Deletion: run the finalizer, then let the object go.
  const finalizer = reconciler.finalizer;
  if (obj.metadata.deletionTimestamp) {
    if (finalizer && obj.metadata.finalizers?.includes(finalizer)) {
      if (obj.metadata.annotations?.[skipFinalizerAnnotation] === 'true') {
        log.warn({}, `${skipFinalizerAnnotation} is set: removing the finalizer without cleanup`);
        await ctx.event('Warning', 'FinalizerSkipped', `${skipFinalizerAnnotation} is set: ${finalizer} removed without running cleanup`).catch(() => undefined);
      } else {
        try {
          await step('finalize', async () => reconciler.finalize!(obj as never, ctx));
        } catch (err) {
          // Bounded by time since deletion was asked for — not by attempts, which count the
          // bridge's retries of this object whatever their cause and may be high already.
          const timeoutSeconds = reconciler.finalizeTimeoutSeconds ?? defaultFinalizeTimeoutSeconds;
          const parsed = Date.parse(obj.metadata.deletionTimestamp);
          const since = Number.isNaN(parsed) ? now().getTime() : parsed;
          const elapsedSeconds = Math.max(0, Math.round((now().getTime() - since) / 1000));
          const cause = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
          if (elapsedSeconds < timeoutSeconds) {
            const giveUpAt = new Date(since + timeoutSeconds * 1000).toISOString();
            await ctx.event('Warning', 'FinalizeFailed', `cleanup failed: ${cause}; retried until ${giveUpAt}, then ${finalizer} is removed without it (annotate ${skipFinalizerAnnotation}=true to let the object go now)`).catch(() => undefined);
            throw err;
          }
          log.error({ elapsedSeconds, timeoutSeconds, error: cause }, 'finalize kept failing past its timeout; letting the object go');
          await ctx.event('Warning', 'FinalizerGaveUp', `cleanup kept failing for ${elapsedSeconds}s since deletion (finalizeTimeoutSeconds ${timeoutSeconds}), last: ${cause}; ${finalizer} removed so that deletion can finish`).catch(() => undefined);
        }
      }
      try {
        await step('removing the finalizer', () => applyFinalizers(api, reconciler, primaryPath, obj, false));
      } catch (err) {
        // The uid precondition failed: this object is gone (and a new one of the same name is
        // not ours to touch). Nothing is left to finalize.
        if (uidPreconditionFailed((err as Error).cause)) {
          log.info({}, 'the object went while it was being finalized');
          return { result: 'done', changes };
        }
        throw err;
      }
      changes.push({ action: 'finalizer', ref: refOf(obj), detail: `removed ${finalizer}` });
      log.info({}, 'finalized');
    }
    return { result: 'done', changes };
  }
  if (finalizer && !obj.metadata.finalizers?.includes(finalizer)) {
    await step('adding the finalizer', () => applyFinalizers(api, reconciler, primaryPath, obj, true));
    changes.push({ action: 'finalizer', ref: refOf(obj), detail: `added ${finalizer}` });
  }

  // 3. What exists now, then what should.
  const owned = reconciler.owns ?? [];
  await step('listing owned objects', async () => {
    // One list per owned kind, all at once: a reconcile waits for one round trip, not one per kind.
    const lists = await Promise.all(owned.map((r) => ctx.list(r, { namespace: obj.metadata.namespace, labelSelector: `${ownerUidLabel}=${uid}` }) as Promise<KubeObject[]>));
    for (const [i, r] of owned.entries()) {
      for (const child of lists[i]!) {
        if (child.metadata.ownerReferences?.some((o) => o.controller && o.uid === uid)) liveChildren.set(childKey(r.apiVersion, r.kind, child.metadata.name), { ...child, apiVersion: r.apiVersion, kind: r.kind });
      }
    }
  });
  // A Terminal error is an answer, not a failure: Ready=False, a Warning Event, no retry.
  let terminal: Terminal | undefined;
  const result = await step('reconcile', async () => reconciler.reconcile(obj as never, ctx)).catch((err: unknown) => {
    if (!(err instanceof ReconcileError && err.cause instanceof Terminal)) throw err;
    terminal = err.cause;
    log.warn({ reason: terminal.reason, error: terminal.message }, 'reconcile ended with a terminal error; not retried');
    // No children (none applied, none pruned); the status fields written before are kept.
    const { conditions: _c, observedGeneration: _g, ...kept } = (obj.status ?? {}) as Record<string, unknown>;
    return { status: kept } as ReconcileResult<Record<string, unknown>>;
  });
  if (terminal) await step('recording a Warning Event', () => ctx.event('Warning', terminal!.reason, terminal!.message));

  // 4. Children: apply what changed, all at once (a reconcile waits for one round trip, not one
  // per child), except that cluster-scoped children — a Namespace the others live in — go
  // first. An invalid one becomes Ready=False, not a retry storm.
  const desiredKeys = new Set<string>();
  const toApply: KubeObject[] = [];
  for (const child of (result.children ?? []) as Child[]) {
    const desired = childWithOwner(child, obj, reconciler.name);
    if (!owned.some((r) => sameKind(r, desired as KindRef))) {
      // Never listed, so never pruned nor seen changing: a bug in the function, said plainly.
      throw new ReconcileError(`applying ${describeObject(desired)}`, name, new Error(`${desired.kind} (${desired.apiVersion}) is not in the reconciler's owns: add it there, or create it imperatively through ctx`));
    }
    const key = childKey(desired.apiVersion, desired.kind, desired.metadata.name);
    desiredKeys.add(key);
    const live = liveChildren.get(key);
    const needed = applyNeeded(live, desired, reconciler.fieldManager);
    options.observer?.child(desired, live, needed);
    if (needed) toApply.push(desired);
  }
  type Applied = { desired: KubeObject; refusal?: { child: string; reason: string; message: string } };
  const applyOne = async (desired: KubeObject): Promise<Applied> => {
    try {
      await step(`applying ${describeObject(desired)}`, async () => {
        const resource = await api.resource(desired.apiVersion!, desired.kind!);
        await api.request('PATCH', objectPath(resource, desired.metadata.name, resource.namespaced ? desired.metadata.namespace : undefined), {
          body: desired,
          contentType: 'application/apply-patch+yaml',
          query: { fieldManager: reconciler.fieldManager, force: true },
        });
      });
      return { desired };
    } catch (err) {
      const cause = (err as Error).cause;
      const apiErr = cause instanceof ApiError ? cause : undefined;
      if (apiErr && apiErr.status === 422) {
        log.warn({ child: describeObject(desired), error: apiErr.message }, 'the apiserver rejected a child');
        return { desired, refusal: { child: describeObject(desired), reason: apiErr.reason ?? 'Invalid', message: `${describeObject(desired)}: ${apiErr.message}` } };
      }
      throw err;
    }
  };
  const clusterScoped = await Promise.all(toApply.map((d) => api.resource(d.apiVersion!, d.kind!).then((r) => !r.namespaced, () => false)));
  const refusals: Applied['refusal'][] = [];
  for (const wave of [toApply.filter((_, i) => clusterScoped[i]), toApply.filter((_, i) => !clusterScoped[i])]) {
    const settled = await Promise.allSettled(wave.map(applyOne));
    // Changes and refusals in the children's order, whatever order the answers came in.
    for (const s of settled) {
      if (s.status !== 'fulfilled') continue;
      if (s.value.refusal) refusals.push(s.value.refusal);
      else changes.push({ action: 'applied', ref: { apiVersion: s.value.desired.apiVersion!, kind: s.value.desired.kind!, namespace: s.value.desired.metadata.namespace, name: s.value.desired.metadata.name } });
    }
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
  }
  // The first refusal in full, the others by name: what to fix first, and what else is waiting.
  const rejected = refusals.length
    ? { reason: refusals[0]!.reason, message: refusals.length === 1 ? refusals[0]!.message : `${refusals[0]!.message} (also refused: ${refusals.slice(1).map((r) => r!.child).join(', ')})` }
    : undefined;
  // 5. Prune what this object controls but no longer wants. A result without `children` says
  // nothing about them (nothing is pruned); `children: []` means none.
  for (const [key, live] of result.children ? liveChildren : []) {
    if (desiredKeys.has(key) || rejected) continue;
    await step(`pruning ${describeObject(live)}`, async () => {
      const resource = await api.resource(live.apiVersion!, live.kind!);
      try {
        // Preconditioned on the uid listed: a child deleted and recreated meanwhile is not this one.
        await api.request('DELETE', objectPath(resource, live.metadata.name, live.metadata.namespace), {
          body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background', preconditions: { uid: live.metadata.uid } },
        });
      } catch (err) {
        if (!(err instanceof ApiError && (err.status === 404 || err.status === 409))) throw err;
      }
    });
    changes.push({ action: 'pruned', ref: refOf(live) });
  }

  // 6. Status, with observedGeneration and a Ready condition, only when it changed.
  const ready = terminal ? { ready: false, reason: terminal.reason, message: terminal.message } : rejected ? { ready: false, reason: rejected.reason, message: rejected.message } : readiness(result.ready);
  const previous = ((obj.status ?? {}) as { conditions?: Condition[] }).conditions;
  const settle = (type: string, ok: boolean, reason: string, message: string) => settleCondition(previous, { type, status: ok ? 'True' : 'False', reason, message }, obj.metadata.generation, now());
  const condition = settle('Ready', ready.ready, ready.reason, ready.message);
  const extra = (result.conditions ?? []).map((c) => settle(c.type, c.status, c.reason, c.message ?? ''));
  const status = { ...(result.status ?? {}), observedGeneration: obj.metadata.generation, conditions: [condition, ...extra] };
  const statusBody = { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid }, status };
  const statusNeeded = applyNeeded(obj, statusBody, reconciler.fieldManager, 'status');
  options.observer?.status(statusBody, statusNeeded);
  if (statusNeeded) {
    await step('writing the status', () =>
      api.request('PATCH', `${primaryPath}/status`, {
        body: statusBody,
        contentType: 'application/apply-patch+yaml',
        query: { fieldManager: reconciler.fieldManager, force: true },
      }),
    );
    changes.push({ action: 'status', ref: refOf(obj), detail: `Ready=${condition.status} (${condition.reason})` });
  }
  log.info({ changes: changes.length, ready: condition.status }, 'reconciled');
  // A rejected child is retried with the bridge's backoff: the cause may go away (a port freed).
  if (rejected) return { result: 'requeue', changes, message: rejected.message };
  if (terminal) return { result: 'done', changes, message: `terminal: ${terminal.message}` };
  return { result: 'done', changes, ...(result.requeueAfterSeconds ? { requeueAfterSeconds: result.requeueAfterSeconds } : {}) };
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

/** A write preconditioned on a uid found no object with it: 404, 409 "uid mismatch", 422 "uid … immutable". */
function uidPreconditionFailed(err: unknown): boolean {
  return err instanceof ApiError && (err.status === 404 || err.status === 409 || (err.status === 422 && /metadata\.uid/.test(err.message)));
}

async function applyFinalizers(api: KubeApi, reconciler: Reconciler, path: string, obj: KubeObject, present: boolean): Promise<void> {
  // Applying only our finalizer under our field manager: other finalizers are someone else's.
  await api.request('PATCH', path, {
    // The uid makes the apply a precondition: it never creates a deleted object again, nor
    // touches a new object that took the name (409 / 422 instead).
    body: { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid, finalizers: present ? [reconciler.finalizer] : [] } },
    contentType: 'application/apply-patch+yaml',
    query: { fieldManager: `${reconciler.fieldManager}-finalizer`, force: true },
  });
}
