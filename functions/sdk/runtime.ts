// One invocation: from a verified reconcile event to the writes it takes, and the answer, in the
// numbered steps of docs/functions.md ("What the SDK does for every event"; step 1, verifying
// the request, is app.ts's). With contract 2 the event carries the primary and its children as
// the bridge's watches hold them (snapshot.ts): the GET and the LISTs below are made only for
// what it does not hold.
//
//   2. GET the primary ── gone? done ──────────────────────────────────────────┐
//   3. deleting? ── finalize, then remove the finalizer ── done  (finalizer.ts) │
//      finalizer missing? add it                                               │
//   4. LIST owned children ── reconcile(obj, ctx) ── apply changed children ── │
//      prune children no longer desired                          (children.ts) │
//   5. write status if it changed ─────────────────────────────────────────────┴─▶ 6. answer
//
// Writes go through server-side apply with one field manager per reconciler and `force`.
// Before each write the live object is compared with the desired one (fields.ts): nothing is
// sent when it holds every desired field and kfn's field manager owns no field the function
// dropped, so an idle resync makes no writes while a removed field is removed.
import type { Logger } from 'pino';
import { checkDeclared } from './access.ts';
import { scrub, sensitiveFieldsOf, sensitiveValues } from './record.ts';
import { systemClock, type Clock } from '../../core/clock.ts';
import { describeObject, refOf, sameKind, type KindRef, type ObjectRef } from '../../core/objects.ts';
import { type Change, type ReconcileResponse } from '../../core/response.ts';
import { type ObservedKind, type ReceivedReconcile } from '../../core/event.ts';
import { ApiError, collectionPath, listAll, metadataAccept, objectPath, recordEvent, type KubeApi, type KubeObject, type ResourceInfo } from '../../kube/api.ts';
import { applyNeeded } from './fields.ts';
import { Snapshot } from './snapshot.ts';
import type { InvocationObserver } from './record.ts';
import type { Kind } from './kind.ts';
import { settleCondition, type Condition } from '../../core/conditions.ts';
import type { Live } from './types.ts';
import { userFirstStack } from './stack.ts';
import { Terminal, type Child, type ReconcileContext, type ReconcileResult, type Reconciler, type Readiness } from './reconciler.ts';
import { Children } from './children.ts';
import { addFinalizer, finalize } from './finalizer.ts';
import { ReconcileError, type InvocationScope } from './invocation.ts';
import { activeTraceparent, inSpan } from '../../core/tracing.ts';

/** The resource (plural) a request path names: `/apis/apps/v1/namespaces/ns/deployments/x` → `deployments`. */
function resourceOf(path: string): string {
  const parts = path.split('?')[0]!.split('/').filter(Boolean);
  let rest = parts[0] === 'api' ? parts.slice(2) : parts.slice(3);
  if (rest[0] === 'namespaces' && rest.length > 2) rest = rest.slice(2);
  return rest[0] ?? '';
}

/** The steps that run the user's code: a failure there is logged with its stack. */
const userSteps = new Set(['reconcile', 'finalize']);

/**
 * The resources a contract-2 event names for the kinds the reconciler owns (ObservedKind.plural),
 * by `apiVersion/kind`: for that reconcile alone. Any other kind it names is ignored, and nothing
 * outlives the reconcile, so no event can change the paths of another event's reconcile, nor of
 * another function's in a shared host.
 */
export function namedResources(kinds: readonly ObservedKind[], owns: readonly KindRef[] = []): Map<string, ResourceInfo> {
  const named = new Map<string, ResourceInfo>();
  for (const k of kinds) {
    if (k.plural === undefined || k.namespaced === undefined || !owns.some((o) => sameKind(o, k))) continue;
    named.set(`${k.apiVersion}/${k.kind}`, { apiVersion: k.apiVersion, kind: k.kind, plural: k.plural, namespaced: k.namespaced, verbs: [] });
  }
  return named;
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
  // 2. The object, from the event or the apiserver.
  const obj = await run.read();
  if (!obj) return run.answer();
  // The values of the fields its kind marks sensitive: no message the SDK writes shows them.
  run.secrets = sensitiveValues(obj, sensitiveFieldsOf(reconciler));
  const ctx = run.context(obj);
  // 3. The finalizer: finalize and let go of an object being deleted, else make sure it is there.
  if (obj.metadata.deletionTimestamp) {
    await finalize(run, obj, ctx);
    return run.answer();
  }
  await addFinalizer(run, obj);
  // 4. The children it controls, the user's reconcile, then apply and prune.
  await run.children.observe(obj, ctx);
  const outcome = await run.reconcile(obj, ctx);
  const { desired, refused } = await run.children.apply(obj, outcome.result.children as Child[] | undefined);
  if (outcome.result.children && !refused) await run.children.prune(desired);
  // 5. The status, if it changed.
  const verdict = outcome.terminal ? { ready: false, reason: outcome.terminal.reason, message: outcome.terminal.message } : refused ? { ready: false, ...refused } : readiness(outcome.result.ready);
  const ready = { ...verdict, message: run.scrub(verdict.message) };
  const condition = await run.writeStatus(obj, ready, outcome.result);
  // 6. The answer.
  if (!condition) return run.answer({ result: 'requeue', message: 'the status was not written: the object changed since the event was built; delivered again once the bridge has seen it' });
  run.log.info({ changes: run.changes.length, ready: condition.status, ...options.requests, snapshot: received.data.observed !== undefined }, 'reconciled');
  // A refused child is retried with the bridge's backoff: the cause may go away (a port freed).
  if (refused) return run.answer({ result: 'requeue', message: ready.message });
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

/** One invocation's steps that runtime.ts holds, and what every step shares. */
class Invocation implements InvocationScope {
  readonly changes: Change[] = [];
  readonly log: Logger;
  readonly api: KubeApi;
  readonly now: () => Date;
  readonly primaryPath: string;
  readonly name: string;
  readonly reconciler: Reconciler;
  readonly children: Children;
  private readonly kind: Kind;
  private readonly received: ReceivedReconcile;
  private readonly options: InvocationOptions;
  private readonly signal: AbortSignal;
  /** Values of the primary's sensitive fields (Kind.sensitive), replaced in every message. */
  secrets: string[] = [];
  /** Contract 2: what the event holds of the primary and its children. */
  private readonly snapshot: Snapshot | undefined;
  /** Contract 2: objects of the snapshot found stale (a preconditioned write failed with 409). */
  private readonly stale: ObjectRef[] = [];
  /** Contract 2: the owned kinds' resources the event names (namedResources). */
  private readonly named: Map<string, ResourceInfo>;

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
    // The owned kinds' resources as the bridge discovered them: no discovery request of this
    // process's own for them (on a cold start, a TLS handshake and two requests saved).
    this.named = observed ? namedResources(observed.kinds, reconciler.owns) : new Map();
    this.children = new Children(this, this.snapshot, options.observer);
  }

  /** The resource of a kind: as the event names it (an owned kind), else from discovery. */
  async resource(apiVersion: string, kind: string): Promise<ResourceInfo> {
    const named = this.named.get(`${apiVersion}/${kind}`);
    if (!named) return this.api.resource(apiVersion, kind);
    this.api.tap?.resource?.(named); // an invocation record keeps it, as it keeps what discovery found
    return named;
  }

  async step<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      this.signal.throwIfAborted();
      return await inSpan(what, { 'kfn.step': what }, fn);
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
    const v2 = this.received.data.contract === 2 ? { children: this.children.states, ...(this.stale.length ? { stale: this.stale } : {}) } : {};
    return { result: 'done', changes: this.changes, ...v2, ...rest };
  }

  /**
   * 2. Current state: from the event (contract 2), else fresh from the apiserver; undefined
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

  /** The context the user's reconcile and finalize get; `owned` answers from what the children's observe found. */
  context(obj: KubeObject): ReconcileContext {
    const { api, now, reconciler, received, log, signal, children } = this;
    return {
      reason: received.reason,
      attempt: received.attempt,
      trigger: received.data.trigger,
      owned: <R extends KindRef>(r: R, n: string) => this.carried(children.controlled(r, n)) as Live<R> | undefined,
      get: async <R extends KindRef>(r: R, n: string, namespace = obj.metadata.namespace) => {
        checkDeclared(reconciler, r, 'get', n);
        // A child this object controls, held by the event: no request.
        const held = this.snapshot?.kind(r) ? children.controlled(r, n) : undefined;
        if (held && (held.metadata.namespace ?? obj.metadata.namespace) === namespace) return this.carried(held) as Live<R>;
        const resource = await this.resource(r.apiVersion, r.kind);
        try {
          return await api.request<Live<R>>('GET', objectPath(resource, n, resource.namespaced ? namespace : undefined));
        } catch (err) {
          if (err instanceof ApiError && err.status === 404) return undefined;
          throw err;
        }
      },
      list: async <R extends KindRef>(r: R, opts: { namespace?: string; labelSelector?: string; pageSize?: number } = {}) => {
        checkDeclared(reconciler, r, 'list');
        const resource = await this.resource(r.apiVersion, r.kind);
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
   * 5. The status, with observedGeneration and the Ready condition, written only when it
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
    let traceparent: string | undefined;
    try {
      written = await this.step('writing the status', () => {
        traceparent = activeTraceparent();
        return this.api.request<KubeObject | undefined>('PATCH', `${this.primaryPath}/status`, {
          body: { ...statusBody, metadata: { ...statusBody.metadata, ...precondition } },
          contentType: 'application/apply-patch+yaml',
          accept: metadataAccept,
          query: { fieldManager: this.reconciler.fieldManager, force: true },
        });
      });
    } catch (err) {
      const cause = (err as Error).cause;
      if (!(precondition.resourceVersion && cause instanceof ApiError && cause.status === 409)) throw err;
      this.log.info({ resourceVersion: precondition.resourceVersion }, 'the object changed since the event was built; its status is written at the next delivery');
      this.stale.push(refOf(obj));
      return undefined;
    }
    this.changes.push({ action: 'status', ref: refOf(written?.metadata ? { ...written, apiVersion: obj.apiVersion, kind: obj.kind } : obj), detail: `Ready=${condition.status} (${condition.reason})`, ...(traceparent ? { traceparent } : {}) });
    return condition;
  }
}
