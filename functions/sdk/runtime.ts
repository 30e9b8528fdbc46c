// One invocation: from a verified reconcile event to the writes it takes, and the answer.
// With contract 2 the event carries the primary and its children as the bridge's watches hold
// them (snapshot.ts): the GET and the LISTs below are made only for what it does not hold.
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
import { checkDeclared } from './access.ts';
import { scrub, sensitiveFieldsOf, sensitiveValues } from './record.ts';
import { systemClock, type Clock } from '../../core/clock.ts';
import { controllerUid, describeObject, objectId, refOf, sameKind, type KindRef, type ObjectRef } from '../../core/objects.ts';
import { childLabels, finalizeFailingSinceAnnotation, ownerUidLabel, skipFinalizerAnnotation } from '../../core/names.ts';
import { type Change, type ChildState, type ReconcileResponse } from '../../core/response.ts';
import { type ReceivedReconcile } from '../../core/event.ts';
import { ApiError, collectionPath, listAll, objectPath, recordEvent, type KubeApi, type KubeObject } from '../../kube/api.ts';
import { applyNeeded } from './fields.ts';
import { desiredHash, Snapshot } from './snapshot.ts';
import type { InvocationObserver } from './record.ts';
import type { Kind } from './kind.ts';
import { settleCondition, type Condition } from '../../core/conditions.ts';
import type { Live } from './types.ts';
import { userFirstStack } from './stack.ts';
import { Terminal, type Child, type ReconcileContext, type ReconcileResult, type Reconciler, type Readiness } from './reconciler.ts';

/** How long a failing finalize is retried after the object's deletionTimestamp, by default. */
export const defaultFinalizeTimeoutSeconds = 600;

/** The resource (plural) a request path names: `/apis/apps/v1/namespaces/ns/deployments/x` → `deployments`. */
function resourceOf(path: string): string {
  const parts = path.split('?')[0]!.split('/').filter(Boolean);
  let rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
  if (rest[0] === 'namespaces' && rest.length > 2) rest = rest.slice(2);
  return rest[0] ?? '';
}

/** The steps that run the user's code: a failure there is logged with its stack. */
const userSteps = new Set(['reconcile', 'finalize']);

/** A failure the bridge should retry: HTTP 500 with a message naming the object and the step. */
export class ReconcileError extends Error {
  readonly step: string;
  constructor(step: string, object: string, cause: unknown) {
    super(`${step} for ${object} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.step = step;
  }
}


function readiness(ready: Readiness | undefined): Verdict {
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
  /** Counts of the invocation's requests to the apiserver (reads are GETs, lists included; readsOf by resource). */
  requests?: { reads: number; writes: number; readsOf: Record<string, number> };
  /** The monotonic clock the delivery's time is counted on (default: the system's). */
  clock?: Clock;
  /** When the request arrived, on `clock`: the time the event gives (kfntimeleft) runs from then. */
  arrivedAt?: number;
}

/** The delivery's time ran out: the bridge no longer waits for this answer. */
export class DeadlineExceeded extends Error {
  constructor(limit: { timeLeftMs: number } | { deadline: Date }) {
    const which = 'timeLeftMs' in limit ? `the time the delivery gave this reconcile (${limit.timeLeftMs} ms from receipt) ran out` : `the delivery's deadline (${limit.deadline.toISOString()}) passed`;
    super(`${which}: the bridge has stopped waiting and will deliver the event again, so this reconcile stops before writing more`);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * Runs one reconcile event. When it carries a deadline (kfndeadline), every read and write is
 * bound to it and no step starts after it: the bridge retries once it has passed, and two
 * reconciles of one object must never write at once.
 */
export async function reconcileEvent(reconciler: Reconciler, received: ReceivedReconcile, given: InvocationOptions): Promise<ReconcileResponse> {
  // Every request counted for the log line that ends the invocation (what a reconcile costs the apiserver).
  const requests = { reads: 0, writes: 0, readsOf: {} as Record<string, number> };
  const outer = given.api.tap;
  const options = {
    ...given,
    requests,
    api: given.api.withTap({
      request: (e) => {
        if (e.method === 'GET') {
          requests.reads++;
          const plural = resourceOf(e.path);
          requests.readsOf[plural] = (requests.readsOf[plural] ?? 0) + 1;
        } else requests.writes++;
        outer?.request(e);
      },
      ...(outer?.resource ? { resource: (info) => outer.resource!(info) } : {}),
    }),
  };
  const { deadline, timeLeftMs } = received;
  if (!deadline && timeLeftMs === undefined) return invoke(reconciler, received, options, new AbortController().signal);
  const controller = new AbortController();
  const clock = options.clock ?? systemClock;
  // The time left is counted from receipt on this machine's monotonic clock: the bridge holds
  // the object for that long (plus a grace) on its own, so neither clock's error matters. Only an
  // event without it (a bridge of another kfn version) is timed by its wall-clock deadline.
  const cancel =
    timeLeftMs !== undefined
      ? clock.setTimer(() => controller.abort(new DeadlineExceeded({ timeLeftMs })), timeLeftMs - (clock.now() - (options.arrivedAt ?? clock.now())))
      : clock.setTimer(() => controller.abort(new DeadlineExceeded({ deadline: deadline! })), deadline!.getTime() - (options.now ?? (() => new Date()))().getTime());
  try {
    return await invoke(reconciler, received, { ...options, api: options.api.withSignal(controller.signal) }, controller.signal);
  } finally {
    cancel();
  }
}

/** What a failed reconcile wrote before it failed (the 500's `changes`): the bridge waits for it before the retry. */
const writesBeforeFailure = Symbol('kfn.writesBeforeFailure');

/** The writes `err`, a failed reconcile's error, made before failing; empty when none or unknown. */
export function writesOf(err: unknown): Change[] {
  return (typeof err === 'object' && err !== null ? (err as { [writesBeforeFailure]?: Change[] })[writesBeforeFailure] : undefined) ?? [];
}

async function invoke(reconciler: Reconciler, received: ReceivedReconcile, options: InvocationOptions, signal: AbortSignal): Promise<ReconcileResponse> {
  const run = new Invocation(reconciler, received, options, signal);
  try {
    return await invokeSteps(run, reconciler, received, options);
  } catch (err) {
    if (typeof err === 'object' && err !== null && run.changes.length) Object.defineProperty(err, writesBeforeFailure, { value: run.changes });
    throw err;
  }
}

async function invokeSteps(run: Invocation, reconciler: Reconciler, received: ReceivedReconcile, options: InvocationOptions): Promise<ReconcileResponse> {
  const obj = await run.read();
  if (!obj) return run.answer();
  // The values of the fields its kind marks sensitive: no message the SDK writes shows them.
  run.secrets = sensitiveValues(obj, sensitiveFieldsOf(reconciler));
  const ctx = run.context(obj);
  if (obj.metadata.deletionTimestamp) return run.finalize(obj, ctx);
  await run.addFinalizer(obj);
  const live = await run.observe(obj, ctx);
  const outcome = await run.reconcile(obj, ctx);
  const { desired, rejected } = await run.apply(obj, live, outcome.result);
  if (outcome.result.children && !rejected) await run.prune(live, desired);
  const verdict = outcome.terminal ? { ready: false, reason: outcome.terminal.reason, message: outcome.terminal.message } : (rejected ?? readiness(outcome.result.ready));
  const ready = { ...verdict, message: run.scrub(verdict.message) };
  const condition = await run.writeStatus(obj, ready, outcome.result);
  if (!condition) return run.answer({ result: 'requeue', message: 'the status was not written: the object changed since the event was built; delivered again once the bridge has seen it' });
  run.log.info({ changes: run.changes.length, ready: condition.status, ...options.requests, snapshot: received.data.observed !== undefined }, 'reconciled');
  // A rejected child is retried with the bridge's backoff: the cause may go away (a port freed).
  if (rejected) return run.answer({ result: 'requeue', message: ready.message });
  if (outcome.terminal) return run.answer({ message: `terminal: ${ready.message}` });
  return run.answer(outcome.result.requeueAfterSeconds ? { requeueAfterSeconds: outcome.result.requeueAfterSeconds } : {});
}

/** What a reconcile returned: the children and status it wants. */
type Wanted = Awaited<ReturnType<Reconciler['reconcile']>>;

/** Why the primary is or is not Ready, as its condition says it. */
interface Verdict {
  ready: boolean;
  reason: string;
  message: string;
}

/**
 * Children are known by group, kind and name — never by version: the same object read as
 * autoscaling/v2 and returned as autoscaling/v1 is one child, not one to prune and one to apply.
 */
const childKey = (ref: { apiVersion: string; kind: string }, name: string) => objectId({ apiVersion: ref.apiVersion, kind: ref.kind, name });

/** One invocation's steps, in the order invoke() takes them, and what they share. */
class Invocation {
  readonly changes: Change[] = [];
  readonly log: Logger;
  /** The children this object controls, as observe() found them, by childKey. */
  private readonly children = new Map<string, KubeObject>();
  private readonly api: KubeApi;
  private readonly now: () => Date;
  private readonly kind: Kind;
  private readonly primaryPath: string;
  /** The primary, as messages name it. */
  private readonly name: string;
  private readonly reconciler: Reconciler;
  private readonly received: ReceivedReconcile;
  private readonly options: InvocationOptions;
  private readonly signal: AbortSignal;
  /** Values of the primary's sensitive fields (Kind.sensitive), replaced in every message. */
  secrets: string[] = [];
  /** Contract 2: what the event holds of the primary and its children. */
  private readonly snapshot: Snapshot | undefined;
  /** Contract 2: the wanted children as this reconcile leaves them, for the answer. */
  private readonly childStates: ChildState[] = [];
  /** Contract 2: objects of the snapshot found stale (a preconditioned write failed with 409). */
  private readonly stale: ObjectRef[] = [];

  constructor(reconciler: Reconciler, received: ReceivedReconcile, options: InvocationOptions, signal: AbortSignal) {
    this.reconciler = reconciler;
    this.received = received;
    this.options = options;
    this.signal = signal;
    this.api = options.api;
    this.now = options.now ?? (() => new Date());
    this.kind = reconciler.for;
    const ref = received.data.primary;
    this.primaryPath = objectPath({ apiVersion: this.kind.apiVersion, kind: this.kind.kind, plural: this.kind.plural, namespaced: this.kind.namespaced, verbs: [] }, ref.name, ref.namespace);
    this.name = describeObject({ kind: this.kind.kind, metadata: { name: ref.name, namespace: ref.namespace } });
    this.log = options.log.child({ reconciler: reconciler.name, object: this.name, reason: received.reason, event: received.event.id });
    const observed = received.data.contract === 2 ? received.data.observed : undefined;
    this.snapshot = observed ? new Snapshot(observed) : undefined;
  }

  /** Runs one step, unless the deadline has passed; a failure names the step and the object. */
  private async step<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      this.signal.throwIfAborted();
      return await fn();
    } catch (err) {
      if (err instanceof ReconcileError) throw err;
      // An aborted request reports the abort, not the deadline: say what really happened.
      const failure = new ReconcileError(what, this.name, this.signal.aborted ? this.signal.reason : err);
      failure.message = this.scrub(failure.message); // an apiserver's 422 echoes the value it refused
      // The user's own code threw: where, in the log (the answer and the Event carry the message only).
      if (userSteps.has(what) && !(err instanceof Terminal) && !this.signal.aborted) this.log.error({ step: what, error: failure.message, stack: this.scrub(userFirstStack(failure)) }, `${what} threw`);
      throw failure;
    }
  }

  /** `text` without the values of the primary's sensitive fields. */
  scrub(text: string): string {
    return this.secrets.length ? scrub(text, this.secrets) : text;
  }

  answer(rest: Partial<ReconcileResponse> = {}): ReconcileResponse {
    const v2 = this.received.data.contract === 2 ? { children: this.childStates, ...(this.stale.length ? { stale: this.stale } : {}) } : {};
    return { result: 'done', changes: this.changes, ...v2, ...rest };
  }

  /**
   * 1. Current state: from the event (contract 2), else fresh from the apiserver; undefined
   * when it is gone (its children are collected).
   */
  async read(): Promise<KubeObject | undefined> {
    if (this.snapshot) {
      const obj = this.snapshot.state.primary as KubeObject;
      obj.apiVersion ??= this.kind.apiVersion;
      obj.kind ??= this.kind.kind;
      return obj;
    }
    let obj: KubeObject;
    try {
      obj = await this.api.request<KubeObject>('GET', this.primaryPath);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        this.log.info({}, 'object is gone; nothing to do');
        return undefined;
      }
      throw new ReconcileError('reading the object', this.name, err);
    }
    obj.apiVersion ??= this.kind.apiVersion;
    obj.kind ??= this.kind.kind;
    return obj;
  }

  /** The context the user's reconcile and finalize get; `owned` answers from what observe() found. */
  context(obj: KubeObject): ReconcileContext {
    const { api, now, reconciler, received, log, signal, children } = this;
    return {
      reason: received.reason,
      attempt: received.attempt,
      trigger: received.data.trigger,
      owned: <R extends KindRef>(r: R, n: string) => this.carried(children.get(childKey(r, n))) as Live<R> | undefined,
      get: async <R extends KindRef>(r: R, n: string, namespace = obj.metadata.namespace) => {
        checkDeclared(reconciler, r, 'get', n);
        // A child this object controls, held by the event: no request.
        const held = this.snapshot?.kind(r) ? children.get(childKey(r, n)) : undefined;
        if (held && (held.metadata.namespace ?? obj.metadata.namespace) === namespace) return this.carried(held) as Live<R>;
        const resource = await api.resource(r.apiVersion, r.kind);
        try {
          return await api.request<Live<R>>('GET', objectPath(resource, n, resource.namespaced ? namespace : undefined));
        } catch (err) {
          if (err instanceof ApiError && err.status === 404) return undefined;
          throw err;
        }
      },
      list: async <R extends KindRef>(r: R, opts: { namespace?: string; labelSelector?: string; pageSize?: number } = {}) => {
        checkDeclared(reconciler, r, 'list');
        const resource = await api.resource(r.apiVersion, r.kind);
        return listAll<Live<R>>(api, collectionPath(resource, opts.namespace), { query: { labelSelector: opts.labelSelector }, pageSize: opts.pageSize });
      },
      now,
      event: (type, reason, message) => recordEvent(api, obj, { type, reason, message, component: `kfn-${reconciler.name}`, now: now() }),
      api,
      log,
      signal,
    };
  }

  /** A child as the function sees it: guarded to the fields the event carries of its kind. */
  private carried(child: KubeObject | undefined): KubeObject | undefined {
    return child && this.snapshot?.kind(child as KindRef) ? this.snapshot.guard(child as KubeObject & { kind: string }) : child;
  }

  /** 2. Deletion: run the user's finalize (bounded by finalizeTimeoutSeconds), then let the object go. */
  async finalize(obj: KubeObject, ctx: ReconcileContext): Promise<ReconcileResponse> {
    const finalizer = this.reconciler.finalizer;
    if (!finalizer || !obj.metadata.finalizers?.includes(finalizer)) return this.answer();
    if (obj.metadata.annotations?.[skipFinalizerAnnotation] === 'true') {
      this.log.warn({}, `${skipFinalizerAnnotation} is set: removing the finalizer without cleanup`);
      await ctx.event('Warning', 'FinalizerSkipped', `${skipFinalizerAnnotation} is set: ${finalizer} removed without running cleanup`).catch(() => undefined);
    } else {
      await this.step('finalize', async () => this.reconciler.finalize!(obj as never, ctx)).catch((err: unknown) => this.finalizeFailed(obj, ctx, err));
    }
    const removed = await this.step('removing the finalizer', () => removeFinalizer(this.api, this.primaryPath, obj, finalizer));
    if (!removed) {
      // This object is gone (and a new one of the same name is not ours to touch). Nothing is left to finalize.
      this.log.info({}, 'the object went while it was being finalized');
      return this.answer();
    }
    this.changes.push({ action: 'finalizer', ref: refOf(obj), detail: `removed ${finalizer}` });
    this.log.info({}, 'finalized');
    return this.answer();
  }

  /**
   * A failed finalize is retried (rethrown) until finalizeTimeoutSeconds have passed since its
   * first failure, noted on the object (finalizeFailingSinceAnnotation), and then given up, so
   * that deletion can finish. Not from the deletion: a delivery held up past the timeout would
   * make a first, passing failure the last. Not by attempts either: they count the bridge's
   * retries of this object whatever their cause and may be high already.
   */
  private async finalizeFailed(obj: KubeObject, ctx: ReconcileContext, err: unknown): Promise<void> {
    const finalizer = this.reconciler.finalizer!;
    const timeoutSeconds = this.reconciler.finalizeTimeoutSeconds ?? defaultFinalizeTimeoutSeconds;
    const cause = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
    const now = this.now().getTime();
    // The event's copy may predate the note: the live object says (a read on failure only).
    const noted = obj.metadata.annotations?.[finalizeFailingSinceAnnotation] ?? (await this.api.request<KubeObject>('GET', this.primaryPath).then((live) => live.metadata.annotations?.[finalizeFailingSinceAnnotation], () => undefined));
    const since = noted === undefined ? NaN : Date.parse(noted);
    if (Number.isNaN(since)) {
      const body = { metadata: { uid: obj.metadata.uid, annotations: { [finalizeFailingSinceAnnotation]: new Date(now).toISOString() } } };
      await this.api.request('PATCH', this.primaryPath, { body, contentType: 'application/merge-patch+json' }).catch((patchErr: unknown) => this.log.warn({ error: (patchErr as Error).message }, 'could not note when finalize first failed; the next failure tries again'));
    }
    const first = Number.isNaN(since) ? now : since;
    const elapsedSeconds = Math.max(0, Math.round((now - first) / 1000));
    if (elapsedSeconds < timeoutSeconds) {
      const giveUpAt = new Date(first + timeoutSeconds * 1000).toISOString();
      await ctx.event('Warning', 'FinalizeFailed', `cleanup failed: ${cause}; retried until ${giveUpAt}, then ${finalizer} is removed without it (annotate ${skipFinalizerAnnotation}=true to let the object go now)`).catch(() => undefined);
      throw err;
    }
    this.log.error({ elapsedSeconds, timeoutSeconds, error: cause }, 'finalize kept failing past its timeout; letting the object go');
    await ctx.event('Warning', 'FinalizerGaveUp', `cleanup kept failing for ${elapsedSeconds}s since its first failure (finalizeTimeoutSeconds ${timeoutSeconds}), last: ${cause}; ${finalizer} removed so that deletion can finish`).catch(() => undefined);
  }

  /** Before the first reconcile of a function with `finalize`: its finalizer on the object. */
  async addFinalizer(obj: KubeObject): Promise<void> {
    const finalizer = this.reconciler.finalizer;
    if (!finalizer || obj.metadata.finalizers?.includes(finalizer)) return;
    const written = await this.step('adding the finalizer', () => addFinalizer(this.api, this.reconciler, this.primaryPath, obj));
    // Later writes are preconditioned on the version this one made.
    if (written?.metadata?.resourceVersion) obj.metadata.resourceVersion = written.metadata.resourceVersion;
    this.changes.push({ action: 'finalizer', ref: refOf(obj), detail: `added ${finalizer}` });
  }

  /**
   * 3. What exists now: the children this object controls — from the event for the kinds it
   * holds, else one list per owned kind, all at once.
   */
  async observe(obj: KubeObject, ctx: ReconcileContext): Promise<Map<string, KubeObject>> {
    const uid = obj.metadata.uid!;
    const snapshot = this.snapshot;
    const owned = (this.reconciler.owns ?? []).filter((r) => !snapshot?.kind(r));
    for (const r of (this.reconciler.owns ?? []).filter((k) => snapshot?.kind(k))) {
      for (const child of snapshot!.children(r, uid)) this.children.set(childKey(r, child.metadata.name), { ...child, apiVersion: r.apiVersion, kind: r.kind } as KubeObject);
    }
    if (!owned.length) return this.children;
    await this.step('listing owned objects', async () => {
      const lists = await Promise.all(owned.map((r) => ctx.list(r, { namespace: obj.metadata.namespace, labelSelector: `${ownerUidLabel}=${uid}` }) as Promise<KubeObject[]>));
      for (const [i, r] of owned.entries()) {
        for (const child of lists[i]!) {
          if (controllerUid(child) === uid) this.children.set(childKey(r, child.metadata.name), { ...child, apiVersion: r.apiVersion, kind: r.kind });
        }
      }
    });
    return this.children;
  }

  /** 4. What should exist: the user's reconcile. A Terminal error is an answer, not a failure. */
  async reconcile(obj: KubeObject, ctx: ReconcileContext): Promise<{ result: Wanted; terminal?: Terminal }> {
    let terminal: Terminal | undefined;
    const result = await this.step('reconcile', async () => this.reconciler.reconcile(obj as never, ctx)).catch((err: unknown) => {
      if (!(err instanceof ReconcileError && err.cause instanceof Terminal)) throw err;
      terminal = err.cause;
      this.log.warn({ reason: terminal.reason, error: terminal.message }, 'reconcile ended with a terminal error; not retried');
      // No children (none applied, none pruned); the status fields written before are kept.
      const { conditions: _c, observedGeneration: _g, ...kept } = (obj.status ?? {}) as Record<string, unknown>;
      return { status: kept } as ReconcileResult<Record<string, unknown>>;
    });
    // Ready=False and a Warning Event; no retry.
    if (terminal) await this.step('recording a Warning Event', () => ctx.event('Warning', terminal!.reason, terminal!.message));
    return { result, ...(terminal ? { terminal } : {}) };
  }

  /**
   * 5. Children: apply what changed, all at once (a reconcile waits for one round trip, not one
   * per child), except that cluster-scoped children — a Namespace the others live in — go
   * first. A child the apiserver refuses as invalid becomes Ready=False, not a retry storm.
   */
  async apply(obj: KubeObject, live: Map<string, KubeObject>, result: Wanted): Promise<{ desired: Set<string>; rejected?: Verdict }> {
    const desiredKeys = new Set<string>();
    const toApply: KubeObject[] = [];
    const hashes = new Map<KubeObject, string>();
    const refusals: Refusal[] = [];
    const wanted: { desired: Child; live?: KubeObject }[] = [];
    const children = ((result.children ?? []) as Child[]).map((child) => childWithOwner(child, obj, this.reconciler.name));
    const scoped = await Promise.all(children.map((d) => this.api.resource(d.apiVersion, d.kind).then((r) => !r.namespaced, () => false)));
    for (const [i, desired] of children.entries()) {
      if (!(this.reconciler.owns ?? []).some((r) => sameKind(r, desired as KindRef))) {
        // Never listed, so never pruned nor seen changing: a bug in the function, said plainly.
        throw new ReconcileError(`applying ${describeObject(desired)}`, this.name, new Error(`${desired.kind} (${desired.apiVersion}) is not in the reconciler's owns: add it there, or create it imperatively through ctx`));
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
      wanted.push({ desired, live: live.get(key) });
    }
    // Whether each needs a write, all at once: a child the event cannot vouch for is read.
    const needed = await Promise.all(wanted.map((w) => this.needsApply(w.desired, w.live, hashes.get(w.desired)!)));
    for (const [i, { desired, live: current }] of wanted.entries()) {
      this.options.observer?.child(desired, current, needed[i]!);
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
        this.changes.push({ action: 'applied', ref });
        this.childStates.push({ ref, hash: hashes.get(d)! });
      }
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
    }
    if (!refusals.length) return { desired: desiredKeys };
    // The first refusal in full, the others by name: what to fix first, and what else is waiting.
    const [first, ...others] = refusals;
    const message = others.length ? `${first!.message} (also refused: ${others.map((r) => r.child).join(', ')})` : first!.message;
    return { desired: desiredKeys, rejected: { ready: false, reason: first!.reason, message } };
  }

  /**
   * Whether a desired child needs a write. Held by the event: not when the bridge vouches it is
   * as kfn last applied it (same hash, unchanged since); a child it does not have is created;
   * one it cannot vouch for (changed since, or never reported) is read whole and compared.
   * Otherwise: compared with the child as listed (fields.ts).
   */
  private async needsApply(desired: KubeObject, live: KubeObject | undefined, hash: string): Promise<boolean> {
    const snapshot = this.snapshot;
    if (!snapshot?.kind(desired as KindRef)) return applyNeeded(live, desired, this.reconciler.fieldManager);
    if (!live) return true;
    if (snapshot.unchanged(desired, hash, live as never)) {
      this.childStates.push({ ref: { ...refOf(live), apiVersion: desired.apiVersion!, kind: desired.kind! }, hash });
      return false;
    }
    const whole = await this.step(`reading ${describeObject(desired)}`, async () => {
      const resource = await this.api.resource(desired.apiVersion!, desired.kind!);
      return this.api.request<KubeObject>('GET', objectPath(resource, desired.metadata.name, resource.namespaced ? desired.metadata.namespace : undefined)).catch((err: unknown) => (err instanceof ApiError && err.status === 404 ? undefined : Promise.reject(err)));
    });
    const needed = applyNeeded(whole, desired, this.reconciler.fieldManager);
    if (!needed && whole) this.childStates.push({ ref: { ...refOf(whole), apiVersion: desired.apiVersion!, kind: desired.kind! }, hash });
    return needed;
  }

  /** One server-side apply: the object as written, or a refusal (422) instead of an error. */
  private async applyChild(desired: KubeObject): Promise<{ written?: KubeObject } | { refused: Refusal }> {
    try {
      const written = await this.step(`applying ${describeObject(desired)}`, async () => {
        const resource = await this.api.resource(desired.apiVersion!, desired.kind!);
        return this.api.request<KubeObject | undefined>('PATCH', objectPath(resource, desired.metadata.name, resource.namespaced ? desired.metadata.namespace : undefined), {
          body: desired,
          contentType: 'application/apply-patch+yaml',
          query: { fieldManager: this.reconciler.fieldManager, force: true },
        });
      });
      return { written: written?.metadata ? written : undefined };
    } catch (err) {
      const cause = (err as Error).cause;
      const apiErr = cause instanceof ApiError ? cause : undefined;
      if (apiErr && apiErr.status === 422) {
        this.log.warn({ child: describeObject(desired), error: apiErr.message }, 'the apiserver rejected a child');
        return { refused: { child: describeObject(desired), reason: apiErr.reason ?? 'Invalid', message: `${describeObject(desired)}: ${apiErr.message}` } };
      }
      throw err;
    }
  }

  /**
   * 6. Prune what this object controls but no longer wants (only when the result lists its
   * children: a result without `children` says nothing about them; `children: []` means none).
   */
  async prune(live: Map<string, KubeObject>, desired: Set<string>): Promise<void> {
    for (const [key, child] of live) {
      if (desired.has(key)) continue;
      await this.step(`pruning ${describeObject(child)}`, async () => {
        const resource = await this.api.resource(child.apiVersion!, child.kind!);
        try {
          // Preconditioned on the uid listed: a child deleted and recreated meanwhile is not this one.
          await this.api.request('DELETE', objectPath(resource, child.metadata.name, child.metadata.namespace), {
            body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background', preconditions: { uid: child.metadata.uid } },
          });
        } catch (err) {
          if (!(err instanceof ApiError && (err.status === 404 || err.status === 409))) throw err;
        }
      });
      this.changes.push({ action: 'pruned', ref: refOf(child) });
    }
  }

  /**
   * 7. The status, with observedGeneration and the Ready condition, written only when it
   * changed. From a snapshot (contract 2) the write is preconditioned on the version the event
   * held: undefined when the object changed since (409), so that no stale status is written.
   */
  async writeStatus(obj: KubeObject, ready: Verdict, result: Wanted): Promise<Condition | undefined> {
    const previous = ((obj.status ?? {}) as { conditions?: Condition[] }).conditions;
    const settle = (type: string, ok: boolean, reason: string, message: string) => settleCondition(previous, { type, status: ok ? 'True' : 'False', reason, message }, obj.metadata.generation, this.now());
    const condition = settle('Ready', ready.ready, ready.reason, ready.message);
    const extra = (result.conditions ?? []).map((c) => settle(c.type, c.status, c.reason, c.message ?? ''));
    const status = { ...(result.status ?? {}), observedGeneration: obj.metadata.generation, conditions: [condition, ...extra] };
    const statusBody = { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid }, status };
    const needed = applyNeeded(obj, statusBody, this.reconciler.fieldManager, 'status');
    this.options.observer?.status(statusBody, needed);
    if (!needed) return condition;
    const precondition = this.snapshot && obj.metadata.resourceVersion ? { resourceVersion: obj.metadata.resourceVersion } : {};
    let written: KubeObject | undefined;
    try {
      written = await this.step('writing the status', () =>
        this.api.request<KubeObject | undefined>('PATCH', `${this.primaryPath}/status`, {
          body: { ...statusBody, metadata: { ...statusBody.metadata, ...precondition } },
          contentType: 'application/apply-patch+yaml',
          query: { fieldManager: this.reconciler.fieldManager, force: true },
        }),
      );
    } catch (err) {
      const cause = (err as Error).cause;
      if (!(precondition.resourceVersion && cause instanceof ApiError && cause.status === 409)) throw err;
      this.log.info({ resourceVersion: precondition.resourceVersion }, 'the object changed since the event was built; its status is written at the next delivery');
      this.stale.push(refOf(obj));
      return undefined;
    }
    this.changes.push({ action: 'status', ref: refOf(written?.metadata ? { ...written, apiVersion: obj.apiVersion, kind: obj.kind } : obj), detail: `Ready=${condition.status} (${condition.reason})` });
    return condition;
  }
}

/** A child the apiserver refused as invalid (422). */
interface Refusal {
  child: string;
  reason: string;
  message: string;
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


async function addFinalizer(api: KubeApi, reconciler: Reconciler, path: string, obj: KubeObject): Promise<KubeObject | undefined> {
  // Applying only our finalizer under our field manager: other finalizers are someone else's.
  return api.request<KubeObject | undefined>('PATCH', path, {
    // The uid makes the apply a precondition: it never creates a deleted object again, nor
    // touches a new object that took the name (409 / 422 instead).
    body: { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid, finalizers: [reconciler.finalizer] } },
    contentType: 'application/apply-patch+yaml',
    query: { fieldManager: `${reconciler.fieldManager}-finalizer`, force: true },
  });
}

/**
 * Removes `finalizer` whoever wrote it (an apply of an empty list would remove only an entry
 * kfn's field manager owns, and an object restored with the finalizer in its manifest would
 * stay Terminating): a JSON patch that tests the uid and the list as read and writes the list
 * without it. A list changed meanwhile (another controller's finalizer) is read again. False
 * when the object is gone, or another object has taken its name.
 */
/** Whether the apiserver's refusal is an admission webhook's (its message says so), not its own check. */
const refusedByWebhook = (err: ApiError) => /admission webhook "[^"]*" denied the request/.test(err.message);

async function removeFinalizer(api: KubeApi, path: string, obj: KubeObject, finalizer: string): Promise<boolean> {
  const uid = obj.metadata.uid;
  let finalizers = obj.metadata.finalizers ?? [];
  for (let attempt = 1; ; attempt++) {
    if (!finalizers.includes(finalizer)) return true;
    const patch = [
      { op: 'test', path: '/metadata/uid', value: uid },
      { op: 'test', path: '/metadata/finalizers', value: finalizers },
      { op: 'replace', path: '/metadata/finalizers', value: finalizers.filter((f) => f !== finalizer) },
    ];
    try {
      await api.request('PATCH', path, { body: patch, contentType: 'application/json-patch+json' });
      return true;
    } catch (err) {
      if (!(err instanceof ApiError) || (err.status !== 422 && err.status !== 404) || attempt === 5) throw err;
      // An admission webhook's refusal comes as a 422 too: it is no changed list, and reading
      // again would not change it.
      if (refusedByWebhook(err)) throw err;
      const fresh = await api.request<KubeObject>('GET', path).catch((e: unknown) => (e instanceof ApiError && e.status === 404 ? undefined : Promise.reject(e)));
      if (!fresh || fresh.metadata.uid !== uid) return false;
      finalizers = fresh.metadata.finalizers ?? [];
    }
  }
}
