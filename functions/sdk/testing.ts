// Unit tests of a reconcile function without a cluster: the runtime runs exactly as it does in
// the cluster (read, finalizer, apply, prune, status, events), against a small in-memory
// apiserver holding the primary, its live children and whatever else the test puts there.
//
//   const out = await testReconcile(MyWebFunction, { object: web, children: [liveDeployment] });
//   assert.equal(out.child(Deployment, 'site')?.spec?.replicas, 1);   // typed by the kind
//   assert.equal(out.ready?.status, 'True');
//   assert.deepEqual(checkSamples(MyWeb, readFileSync('samples.yaml', 'utf8')), []);
//   assert.deepEqual(checkRules(MyApp, { spec: { replicas: 11, image: 'nginx' } }), ['spec.replicas: …']);
//   assert.equal(applyDefaults(MyAppFunction, { operation: 'CREATE', object: app })?.spec.image, 'nginx:latest');
//   assert.ok((await replayOffline(MyWebFunction, record)).same);  // a record (kfn replay) as a test
//
// The primary is held to its kind as the apiserver holds it on a create: the spec's schema
// defaults applied, its types, bounds and CEL rules checked, and an object the apiserver would
// refuse rejected before the reconcile runs.
//
// What it does not do: admission webhooks and policies (a reconciler's declared defaults
// applyDefaults evaluates, its guards checkAdmission), the status schema, and server-side apply's field ownership (every desired child counts as
// written; "no write when nothing changed" is tested against the real apiserver).
import { randomUUID } from 'node:crypto';
import { Kind as TypeKind, Type, type TSchema } from '@sinclair/typebox';
import { Value, ValueErrorType, type ValueError } from '@sinclair/typebox/value';
import pino from 'pino';
import { parseAllDocuments } from 'yaml';
import { encodeReconcileEvent as eventFor, projectObject, type ObservedObject, type ObservedState, type ReconcileReason } from '../../core/event.ts';
import { controllerUid, groupOf, isClusterScopedKind, objectId, sameKind, type KindRef, type ObjectRef } from '../../core/objects.ts';
import { type ReconcileResponse } from '../../core/response.ts';
import { observedFields } from '../../core/reconciler-spec.ts';
import { pointerAsField, pointerTokens } from '../../core/json.ts';
import type { Connection } from '../../kube/connection.ts';
import { apiError, KubeApi, type Exchange, type KubeObject, type Method, type RequestOptions, type ResourceInfo, type Tap } from '../../kube/api.ts';
import type { Condition } from '../../core/conditions.ts';
import { pluralOf, type Kind } from './kind.ts';
import { readRecords, Recorder, type InvocationRecord, type ReadRecords } from './record.ts';
import type { Reconciler } from './reconciler.ts';
import type { Live } from './types.ts';
import { labelSelectorMatches } from '../../kube/selectors.ts';
import { checkRules } from './rules.ts';
import { applyDefaults, checkAdmission } from './policy-cel.ts';

export { applyDefaults, checkAdmission, checkRules, labelSelectorMatches };
import { receivedFrom, replayOffline, type ReplayOutcome } from './replay.ts';
// A record of a reconcile (from `kfn dev`, or a deployed function's log) replayed with no cluster:
// the function as it is now against the reads recorded then (docs/debugging.md, "Keep the record as a test").
export { readRecords, replayOffline, type InvocationRecord, type ReadRecords, type ReplayOutcome };
import { reconcileEvent } from './runtime.ts';
import { childLabels, isKfnFinalizer } from '../../core/names.ts';

/** Kinds the apiserver serves cluster-wide (everything else here is namespaced). */

const memoryConnection: Connection = { server: 'http://memory.invalid', send: () => Promise.reject(new Error('no apiserver here')), reset() {}, headers: () => ({}), source: 'kfn testing (in memory)' };

type Obj = KubeObject & { metadata: KubeObject['metadata'] & { deletionTimestamp?: string; finalizers?: string[]; ownerReferences?: { uid: string }[] }; status?: unknown };

/** A write the test wants refused: the apiserver's status and message. */
export type Refusal = { status: number; message: string } | undefined;

interface MemoryState {
  objects: Map<string, Obj>;
  kinds: ResourceInfo[];
  refuse?: (write: { method: Method; path: string; body: unknown }) => Refusal;
  version: number;
  now: () => Date;
}

const keyOf = (apiVersion: string, kind: string, namespace: string | undefined, name: string) => objectId({ apiVersion, kind, namespace, name });

/** Which kind, namespace and name a request's path names (MemoryApi.parsePath). */
type Where = { apiVersion: string; kind: string; namespace?: string; name?: string; sub?: string };
/** Answers a request with a status and a response body (MemoryApi.answer). */
type Answer = (status: number, response: unknown) => string;

/** An apiserver in memory: objects by kind and name, label-selected lists, apply as replace-and-merge. */
class MemoryApi extends KubeApi {
  private readonly state: MemoryState;

  constructor(state: MemoryState, options: { signal?: AbortSignal; tap?: Tap } = {}) {
    super(memoryConnection, options);
    this.state = state;
  }

  protected override derive(options: { signal?: AbortSignal; tap?: Tap }): KubeApi {
    return new MemoryApi(this.state, options);
  }

  override async resource(apiVersion: string, kind: string): Promise<ResourceInfo> {
    const known = this.state.kinds.find((k) => groupOf(k.apiVersion) === groupOf(apiVersion) && k.kind === kind);
    const info = known ? { ...known, apiVersion } : { apiVersion, kind, plural: pluralOf(kind), namespaced: !isClusterScopedKind({ apiVersion, kind }), verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'] };
    // A kind the reconciler did not declare is served too (as the apiserver would), and its
    // paths are known from now on.
    if (!known) this.state.kinds.push(info);
    this.tap?.resource?.(info);
    return info;
  }

  /** Which kind, namespace and name a path names (`/apis/g/v/namespaces/ns/plural/name/status`). */
  parsePath(path: string): Where {
    const parts = path.split('?')[0]!.split('/').filter(Boolean).map(decodeURIComponent);
    let i = 0;
    const apiVersion = parts[i] === 'api' ? ((i += 2), parts[1]!) : ((i += 3), `${parts[1]}/${parts[2]}`);
    let namespace: string | undefined;
    if (parts[i] === 'namespaces' && parts.length > i + 2) {
      namespace = parts[i + 1];
      i += 2;
    }
    const plural = parts[i]!;
    const info = this.state.kinds.find((k) => groupOf(k.apiVersion) === groupOf(apiVersion) && k.plural === plural);
    const kind = info?.kind ?? plural;
    return { apiVersion, kind, namespace, name: parts[i + 1], sub: parts[i + 2] };
  }

  override async text(method: Method, path: string, options: RequestOptions = {}): Promise<string> {
    const body = options.body;
    const answer: Answer = (status, response) => this.answer({ method, path, options }, status, response);
    this.signal?.throwIfAborted();
    const where = this.parsePath(path);
    if (method !== 'GET') {
      const refused = this.state.refuse?.({ method, path, body });
      if (refused) return answer(refused.status, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: refused.status === 422 ? 'Invalid' : 'Refused', code: refused.status, message: refused.message });
    }
    if (method === 'GET' && !where.name) return this.list(where, options, answer);
    if (method === 'POST') return this.create(where, body, answer);
    const key = keyOf(where.apiVersion, where.kind, where.namespace, where.name!);
    const existing = this.state.objects.get(key);
    const notFound = () => answer(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404, message: `${where.kind} "${where.name}" not found` });
    if (method === 'GET') return existing ? answer(200, existing) : notFound();
    if (method === 'DELETE') return existing ? this.remove(key, existing, answer) : notFound();
    if (options.contentType === 'application/json-patch+json') return existing ? this.patchByJsonPatch(key, existing, body as JsonPatchOp[], answer) : notFound();
    // PATCH or PUT: an apply (or update) of the object or its status; a merge patch otherwise.
    const patch = (typeof body === 'string' ? JSON.parse(body) : body) as Obj;
    if (!existing) {
      if (where.sub || patch.metadata?.uid || options.contentType !== 'application/apply-patch+yaml') return notFound();
      return answer(201, this.store(key, { ...patch, apiVersion: patch.apiVersion ?? where.apiVersion, kind: patch.kind ?? where.kind, metadata: { ...patch.metadata, name: where.name!, ...(where.namespace ? { namespace: where.namespace } : {}) } }));
    }
    if (patch.metadata?.uid && patch.metadata.uid !== existing.metadata.uid) return answer(409, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Conflict', code: 409, message: 'Precondition failed: UID in precondition does not match the object' });
    return this.written(key, patched(existing, patch, where.sub, options.contentType), answer);
  }

  /** The apiserver's answer to a request: shown to the tap as the exchange, thrown as the API error it is when not 2xx. */
  private answer(request: { method: Method; path: string; options: RequestOptions }, status: number, response: unknown): string {
    const { method, path, options } = request;
    const body = options.body;
    const exchange: Exchange = {
      method,
      path,
      ...(options.query ? { query: Object.fromEntries(Object.entries(options.query).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)])) } : {}),
      ...(body !== undefined ? { body, contentType: options.contentType ?? 'application/json' } : {}),
      status,
      response,
    };
    this.tap?.request(exchange);
    const text = JSON.stringify(response);
    if (status < 200 || status > 299) throw apiError(status, text, `${method} ${path}`);
    return text;
  }

  /** A list of a kind, label-selected, in pages as the apiserver gives them: `limit` items, and a continue token while more remain. */
  private list(where: Where, options: RequestOptions, answer: Answer): string {
    const items = [...this.state.objects.values()].filter((o) => groupOf(o.apiVersion!) === groupOf(where.apiVersion) && o.kind === where.kind && (!where.namespace || o.metadata.namespace === where.namespace) && labelSelectorMatches(options.query?.labelSelector as string | undefined, o.metadata.labels));
    const from = Number(options.query?.continue ?? 0);
    const limit = Number(options.query?.limit ?? 0) || items.length;
    const rest = from + limit < items.length ? { continue: String(from + limit) } : {};
    return answer(200, { apiVersion: where.apiVersion, kind: `${where.kind}List`, metadata: { resourceVersion: String(this.state.version), ...rest }, items: items.slice(from, from + limit) });
  }

  /** A POST: the object stored under its name (or one made from its generateName), unless one has it already. */
  private create(where: Where, body: unknown, answer: Answer): string {
    const o = structuredClone(body) as Obj;
    o.metadata.namespace ??= where.namespace;
    if (!o.metadata.name && (o.metadata as { generateName?: string }).generateName) o.metadata.name = `${(o.metadata as { generateName?: string }).generateName}${randomUUID().slice(0, 5)}`;
    const key = keyOf(o.apiVersion ?? where.apiVersion, o.kind ?? where.kind, o.metadata.namespace, o.metadata.name);
    if (this.state.objects.has(key)) return answer(409, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'AlreadyExists', code: 409, message: `${where.kind} "${o.metadata.name}" already exists` });
    return answer(201, this.store(key, o));
  }

  /** A DELETE: an object with finalizers is only marked for deletion, and goes when they are gone. */
  private remove(key: string, existing: Obj, answer: Answer): string {
    if (existing.metadata.finalizers?.length) {
      existing.metadata.deletionTimestamp ??= this.state.now().toISOString();
      return answer(200, existing);
    }
    this.state.objects.delete(key);
    return answer(200, existing);
  }

  /** A JSON Patch: its operations on the object, or a 422 saying which failed. */
  private patchByJsonPatch(key: string, existing: Obj, ops: JsonPatchOp[], answer: Answer): string {
    const next = jsonPatch(existing, ops);
    if (typeof next === 'string') return answer(422, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Invalid', code: 422, message: next });
    return this.written(key, next, answer);
  }

  /** The object as written: stored, or gone when it was being deleted and its last finalizer is off. */
  private written(key: string, next: Obj, answer: Answer): string {
    if (next.metadata.deletionTimestamp && !next.metadata.finalizers?.length) {
      this.state.objects.delete(key);
      return answer(200, next);
    }
    return answer(200, this.store(key, next));
  }

  private store(key: string, o: Obj): Obj {
    this.state.version += 1;
    o.metadata.uid ??= randomUUID();
    o.metadata.resourceVersion = String(this.state.version);
    o.metadata.creationTimestamp ??= this.state.now().toISOString();
    this.state.objects.set(key, o);
    return o;
  }
}

/** An existing object with an apply, update or merge patch taken in: of its status (`sub`), or of the object. */
function patched(existing: Obj, patch: Obj, sub: string | undefined, contentType: string | undefined): Obj {
  const next = structuredClone(existing);
  if (sub === 'status') next.status = patch.status;
  // A strategic merge patch is taken as a JSON merge patch: lists are replaced, not merged by key.
  else if (contentType === 'application/merge-patch+json' || contentType === 'application/strategic-merge-patch+json') Object.assign(next, mergePatch(next, patch));
  else {
    const { metadata, ...rest } = patch;
    Object.assign(next, rest);
    if (metadata?.labels) next.metadata.labels = { ...next.metadata.labels, ...metadata.labels };
    if (metadata?.annotations) next.metadata.annotations = { ...next.metadata.annotations, ...metadata.annotations };
    if (metadata?.ownerReferences) next.metadata.ownerReferences = metadata.ownerReferences;
    // A finalizer apply (kfn's own field manager) sets kfn's finalizers; others are kept.
    if (metadata?.finalizers) next.metadata.finalizers = [...(next.metadata.finalizers ?? []).filter((f) => !isKfnFinalizer(f)), ...metadata.finalizers];
  }
  return next;
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

export interface TestReconcileOptions {
  /** The primary as it is in the cluster. Name required; uid, namespace (`default`), generation and apiVersion/kind are filled in. */
  object: { metadata: { name: string; namespace?: string; [k: string]: unknown }; spec?: unknown; status?: unknown; [k: string]: unknown };
  /** Its live children: stored with the labels and owner reference kfn gives its children, so the runtime finds them. */
  children?: object[];
  /** Anything else in the cluster (watched objects, what `ctx.get`/`ctx.list` read), stored as given. */
  existing?: object[];
  reason?: ReconcileReason;
  attempt?: number;
  trigger?: ObjectRef;
  /** The clock the runtime reads (condition times, finalizer timeouts). Default: now. */
  now?: Date | (() => Date);
  /** Makes the fake apiserver refuse a write (e.g. a 422 for a child). */
  refuse?: (write: { method: Method; path: string; body: unknown }) => Refusal;
  /**
   * The event contract (default 2, as the bridge speaks to functions of this kfn): the event
   * carries the primary and its children as the bridge would, each owned kind cut to what
   * `observe` declares; 1 sends references only, and the runtime reads everything.
   */
  contract?: 1 | 2;
}

export interface TestOutcome {
  /** What the function answered the bridge (`done`/`requeue`, its changes, `requeueAfterSeconds`). Undefined when it failed. */
  result?: ReconcileResponse;
  /** Thrown by the reconcile or the runtime (the bridge would retry with backoff). */
  error?: Error;
  /** The children the function returned, as the runtime applies them (namespace, owner reference and labels added). */
  children: Obj[];
  /** One of them by kind and name, typed by the kind (`out.child(Deployment, 'site')?.spec?.replicas`), or as the type argument says. */
  child<R extends KindRef>(kind: R, name: string): Live<R> | undefined;
  child<T>(kind: KindRef, name: string): T | undefined;
  /** The children the runtime deleted because the function no longer returns them. */
  pruned: { apiVersion: string; kind: string; namespace?: string; name: string }[];
  /** The status the runtime wants (including observedGeneration and conditions); undefined if it never got that far. */
  status?: Record<string, unknown> & { conditions?: Condition[] };
  /** The Ready condition, and any condition by type. */
  ready?: Condition;
  condition(type: string): Condition | undefined;
  /** Kubernetes Events the invocation recorded on the object. */
  events: { type: string; reason: string; message: string }[];
  /** The event as the invocation's record holds it (contract 2: with what it observed; sensitive fields hashed). */
  event: InvocationRecord['event'];
  /** Every request, as the invocation's record holds them. */
  reads: Exchange[];
  writes: Exchange[];
  /** The in-memory cluster afterwards (the primary, its children, its finalizers; gone once deleted), typed by the kind or as the type argument says. */
  get<R extends KindRef>(kind: R, name: string, namespace?: string): Live<R> | undefined;
  get<T>(kind: KindRef, name: string, namespace?: string): T | undefined;
  /** The logs the invocation wrote. */
  logs: Record<string, unknown>[];
}

/** Runs `reconcile` (or, for an object being deleted, `finalize`) as the runtime does, against an in-memory cluster. */
export async function testReconcile(reconciler: Reconciler, options: TestReconcileOptions): Promise<TestOutcome> {
  const now = typeof options.now === 'function' ? options.now : options.now ? () => options.now as Date : () => new Date();
  const world = seedWorld(reconciler, options, now);
  const { primary, namespace } = world;
  const kind = reconciler.for;
  const ref: ObjectRef = { apiVersion: kind.apiVersion, kind: kind.kind, ...(namespace ? { namespace } : {}), name: primary.metadata.name, uid: primary.metadata.uid, resourceVersion: primary.metadata.resourceVersion };
  const observed = (options.contract ?? 2) === 2 ? observedOf(reconciler, world) : undefined;
  const { event } = eventFor({ reconciler: reconciler.name, primary: ref, reason: options.reason ?? 'updated', ...(options.trigger ? { trigger: options.trigger } : {}), observedAt: now().getTime() }, options.attempt ?? 1, 'kfn://test', undefined, observed);
  const received = receivedFrom({ id: event.id, source: event.source, reason: options.reason ?? 'updated', attempt: options.attempt ?? 1, data: event.data! });
  const recorder = new Recorder(reconciler, received, now());
  const log = pino({ level: 'debug' }, { write: (line: string) => recorder.log(JSON.parse(line) as Record<string, unknown>) });
  let result: ReconcileResponse | undefined;
  let error: Error | undefined;
  const children: Obj[] = [];
  try {
    // The children as the function returned them: the record hashes Secret data, a test wants the values.
    const observer = { ...recorder.observer, child: (...args: Parameters<typeof recorder.observer.child>) => (children.push(structuredClone(args[0]) as Obj), recorder.observer.child(...args)) };
    result = await reconcileEvent(reconciler, received, { api: world.api.withTap(recorder.tap), log, now, observer });
  } catch (err) {
    error = err as Error;
  }
  return outcomeOf(recorder.finish(result ? { result } : { error }), { result, error, children, world });
}

/** What the bridge's event would carry (contract 2): the primary, and each owned kind's children of it, cut to `observe`. */
function observedOf(reconciler: Reconciler, world: World): ObservedState {
  const uid = world.primary.metadata.uid;
  const owned = reconciler.owns ?? [];
  const fieldsOf = (k: KindRef) => observedFields((reconciler.observe ?? []).find((o) => sameKind(o.kind, k))?.fields);
  const children = [...world.state.objects.values()]
    .filter((o) => controllerUid(o) === uid)
    .flatMap((o) => {
      const kind = owned.find((k) => sameKind(k, { apiVersion: o.apiVersion!, kind: o.kind! }));
      return kind ? [projectObject(structuredClone(o) as ObservedObject, fieldsOf(kind))] : [];
    });
  return {
    primary: structuredClone(world.primary) as ObservedObject,
    kinds: owned.map((k) => ({ apiVersion: k.apiVersion, kind: k.kind, resourceVersion: String(world.state.version), ...(fieldsOf(k) ? { fields: fieldsOf(k) } : {}) })),
    children,
  };
}

/**
 * An apiserver in memory holding `object` (the primary), its children and the other objects
 * given, as testReconcile starts from: for running a function's server (`serve`) without a cluster.
 */
export function memoryApi(reconciler: Reconciler, options: Pick<TestReconcileOptions, 'object' | 'children' | 'existing'>): KubeApi {
  return seedWorld(reconciler, options, () => new Date()).api;
}

/** What a test's reconcile starts from: an apiserver in memory holding the primary, its children and the other objects given. */
interface World {
  api: MemoryApi;
  state: MemoryState;
  primary: Obj;
  namespace: string | undefined;
}

function seedWorld(reconciler: Reconciler, options: Pick<TestReconcileOptions, 'object' | 'children' | 'existing' | 'refuse'>, now: () => Date): World {
  const kind = reconciler.for;
  const kinds: ResourceInfo[] = [kind, ...(reconciler.owns ?? []), ...(reconciler.watches ?? []), ...(reconciler.uses ?? []).map((u) => u.kind)].map((k) => ({
    apiVersion: k.apiVersion,
    kind: k.kind,
    plural: (k as { plural?: string }).plural ?? pluralOf(k.kind),
    namespaced: (k as { namespaced?: boolean }).namespaced ?? !isClusterScopedKind(k),
    verbs: [],
  }));
  kinds.push({ apiVersion: 'v1', kind: 'Event', plural: 'events', namespaced: true, verbs: [] }, { apiVersion: 'events.k8s.io/v1', kind: 'Event', plural: 'events', namespaced: true, verbs: [] });
  const state: MemoryState = { objects: new Map(), kinds, refuse: options.refuse, version: 1, now };
  const namespace = kind.namespaced ? (options.object.metadata.namespace ?? 'default') : undefined;
  const primary = structuredClone({
    ...admitted(kind, options.object),
    apiVersion: kind.apiVersion,
    kind: kind.kind,
    metadata: { generation: 1, uid: `uid-of-${options.object.metadata.name}`, ...options.object.metadata, ...(namespace ? { namespace } : {}) },
  }) as Obj;
  const put = (o: Obj) => {
    state.version += 1;
    o.metadata.resourceVersion ??= String(state.version);
    o.metadata.uid ??= randomUUID();
    state.objects.set(keyOf(o.apiVersion!, o.kind!, o.metadata.namespace, o.metadata.name), o);
  };
  put(primary);
  for (const c of options.children ?? []) {
    const child = structuredClone(c) as Obj;
    child.metadata.namespace ??= namespace;
    child.metadata.labels = { ...child.metadata.labels, ...childLabels(primary.metadata.uid!, reconciler.name) };
    child.metadata.ownerReferences ??= [{ apiVersion: kind.apiVersion, kind: kind.kind, name: primary.metadata.name, uid: primary.metadata.uid!, controller: true, blockOwnerDeletion: true } as never];
    put(child);
  }
  for (const e of options.existing ?? []) {
    const o = structuredClone(e) as Obj;
    const k = kinds.find((x) => x.kind === o.kind && groupOf(x.apiVersion) === groupOf(o.apiVersion!));
    if ((k?.namespaced ?? !isClusterScopedKind({ apiVersion: o.apiVersion!, kind: o.kind! })) && !o.metadata.namespace) o.metadata.namespace = namespace ?? 'default';
    put(o);
  }
  return { api: new MemoryApi(state), state, primary, namespace };
}

/** The test's view of one invocation: what it returned, applied, pruned, wrote as status and Events, read and logged. */
function outcomeOf(record: InvocationRecord, run: { result?: ReconcileResponse; error?: Error; children: Obj[]; world: World }): TestOutcome {
  const { api, state, namespace } = run.world;
  const status = (record.status?.desired as { status?: TestOutcome['status'] } | undefined)?.status;
  const conditionOf = (type: string) => status?.conditions?.find((c) => c.type === type);
  const succeeded = (w: { status: number }) => w.status >= 200 && w.status < 300;
  const pruned = record.writes
    .filter((w) => w.method === 'DELETE' && succeeded(w))
    .map((w) => {
      const p = api.parsePath(w.path);
      return { apiVersion: p.apiVersion, kind: p.kind, ...(p.namespace ? { namespace: p.namespace } : {}), name: p.name! };
    });
  const events = record.writes
    .filter((w) => w.method === 'POST' && /\/events$/.test(w.path) && succeeded(w))
    .map((w) => {
      const e = w.body as { type: string; reason: string; message?: string; note?: string };
      return { type: e.type, reason: e.reason, message: e.message ?? e.note ?? '' };
    });
  return {
    ...(run.result ? { result: run.result } : {}),
    ...(run.error ? { error: run.error } : {}),
    children: run.children,
    child: ((k: KindRef, name: string) => run.children.find((c) => c.kind === k.kind && groupOf(c.apiVersion!) === groupOf(k.apiVersion) && c.metadata.name === name)) as TestOutcome['child'],
    pruned,
    ...(status ? { status } : {}),
    ...(conditionOf('Ready') ? { ready: conditionOf('Ready') } : {}),
    condition: conditionOf,
    events,
    event: record.event,
    reads: record.reads,
    writes: record.writes,
    get: ((k: KindRef, name: string, ns?: string) => {
      const info = state.kinds.find((x) => x.kind === k.kind && groupOf(x.apiVersion) === groupOf(k.apiVersion));
      const scoped = info?.namespaced ?? !isClusterScopedKind(k);
      return state.objects.get(keyOf(k.apiVersion, k.kind, scoped ? (ns ?? namespace ?? 'default') : undefined, name));
    }) as TestOutcome['get'],
    logs: record.logs,
  };
}

interface JsonPatchOp {
  op: 'test' | 'replace' | 'add' | 'remove';
  path: string;
  value?: unknown;
}

/** A JSON patch (RFC 6902) of plain object paths, as the apiserver applies one: the patched copy, or why it failed. */
function jsonPatch(obj: Obj, ops: JsonPatchOp[]): Obj | string {
  const next = structuredClone(obj) as unknown as Record<string, unknown>;
  for (const { op, path, value } of ops) {
    const parts = pointerTokens(path);
    const last = parts.pop()!;
    let parent: Record<string, unknown> | undefined = next;
    for (const part of parts) parent = parent?.[part] as Record<string, unknown> | undefined;
    if (!parent) return `the path ${path} does not exist`;
    if (op === 'test' && JSON.stringify(parent[last]) !== JSON.stringify(value)) return `the test of ${path} failed: it is ${JSON.stringify(parent[last])}`;
    if (op === 'replace' || op === 'add') parent[last] = structuredClone(value);
    if (op === 'remove') delete parent[last];
  }
  return next as unknown as Obj;
}

/**
 * What the apiserver would refuse of the samples of `kind` in a samples.yaml: for each object of
 * the kind, its apiVersion (a version the kind serves), its name, and its spec against that
 * version's schema, defaults applied first as the apiserver applies them. A field the schema
 * does not have is a problem too: the apiserver would drop it, and kubectl refuses it. Objects
 * of other kinds (a Secret a sample names) are left alone. Each problem names the object and the
 * field (`Greeting first spec.message: …`); none is an empty list, so
 * `assert.deepEqual(checkSamples(Kind, text), [])` shows every problem at once.
 */
export function checkSamples(kind: Kind, yamlText: string): string[] {
  const served = new Map([[kind.version, kind.options.spec], ...(kind.options.previousVersions ?? []).map((p) => [p.version, p.spec] as const)]);
  const problems: string[] = [];
  let found = 0;
  for (const [i, doc] of parseAllDocuments(yamlText).entries()) {
    if (doc.errors.length) {
      const [error] = doc.errors;
      problems.push(`samples: invalid YAML (line ${error!.linePos?.[0].line ?? '?'}): ${error!.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')}`);
      continue;
    }
    const obj = doc.toJS() as { apiVersion?: string; kind?: string; metadata?: { name?: string }; spec?: unknown } | null;
    if (!obj || typeof obj.apiVersion !== 'string' || !sameKind({ apiVersion: obj.apiVersion, kind: String(obj.kind) }, kind)) continue;
    found += 1;
    const name = typeof obj.metadata?.name === 'string' && obj.metadata.name ? obj.metadata.name : undefined;
    const which = `${kind.kind} ${name ?? `#${i + 1}`}`;
    if (!name) problems.push(`${which}: metadata.name is required`);
    const version = obj.apiVersion.slice(obj.apiVersion.indexOf('/') + 1);
    const schema = served.get(version);
    if (!schema) {
      const names = [...served.keys()].map((v) => `${kind.group}/${v}`);
      problems.push(`${which}: apiVersion ${obj.apiVersion} is not served (${names.join(', ')} ${names.length > 1 ? 'are' : 'is'})`);
      continue;
    }
    if (obj.spec === undefined) {
      problems.push(`${which}: spec is required`);
      continue;
    }
    const wrong = specProblems(kind.kind, checkable(schema), obj.spec);
    problems.push(...wrong.map((p) => `${which} ${p}`));
    // The kind's CEL rules too, on the spec as stored (defaults applied), as the apiserver checks them.
    if (!wrong.length && version === kind.version) problems.push(...checkRules(kind, { spec: Value.Default(schema, structuredClone(obj.spec)) }).map((p) => `${which} ${p}`));
  }
  if (!found && !problems.length) problems.push(`no ${kind.kind} (${kind.apiVersion}) among the samples`);
  return problems;
}

/** The spec's problems, one per field (the first the schema finds), each as `spec.path: what is wrong`. */
function specProblems(kindName: string, schema: TSchema, spec: unknown): string[] {
  return specAdmission(kindName, schema, spec).problems;
}

/** The spec with the schema's defaults applied (a copy), and its problems against the schema after them, one per field. */
function specAdmission(kindName: string, schema: TSchema, spec: unknown): { spec: unknown; problems: string[] } {
  const defaulted = Value.Default(schema, structuredClone(spec));
  const byField = new Map<string, string>();
  for (const error of Value.Errors(schema, defaulted)) {
    const field = pointerAsField('spec', error.path);
    if (!byField.has(field)) byField.set(field, `${field}: ${describeError(kindName, field, error)}`);
  }
  return { spec: defaulted, problems: [...byField.values()] };
}

/**
 * The object the apiserver would store for `object` of `kind` (a create): the spec with its
 * schema's defaults, held to the schema's types and bounds and to the kind's CEL rules. An object
 * the apiserver would refuse throws, with the refusal as the apiserver words it
 * (`Box.test.kfn.dev "b" is invalid: spec.size: …`), so a test cannot start from an object no
 * cluster could hold, nor miss a default the reconcile relies on.
 */
function admitted<T extends { metadata: { name: string }; spec?: unknown }>(kind: Kind, object: T): T {
  const refused = (problems: string[]) =>
    new Error(`${kind.kind}.${kind.group} "${object.metadata.name}" is invalid: ${problems.length > 1 ? `[${problems.join(', ')}]` : problems[0]} (the apiserver would refuse this object: testReconcile holds it to ${kind.kind}'s schema and rules)`);
  if (object.spec === undefined) throw refused(['spec: Required value']);
  const { spec, problems } = specAdmission(kind.kind, checkable(kind.options.spec), object.spec);
  if (problems.length) throw refused(problems);
  const broken = checkRules(kind, { spec });
  if (broken.length) throw refused(broken);
  return { ...object, spec };
}

/** What is wrong at `field`, in the apiserver's words where it has them (`Required value`, `… in body should be less than or equal to 10`). */
function describeError(kindName: string, field: string, error: ValueError): string {
  const s = error.schema as TSchema & { expected?: string; properties?: Record<string, TSchema>; anyOf?: TSchema[]; minimum?: number; maximum?: number; exclusiveMinimum?: number; exclusiveMaximum?: number; multipleOf?: number; minLength?: number; maxLength?: number; pattern?: string; minItems?: number; maxItems?: number };
  if (error.value === undefined) return 'Required value';
  if (error.message === 'Unexpected property') {
    const parent = error.path.split('/').slice(0, -1).join('/');
    return `not a field of ${parent ? pointerAsField('spec', parent) : `${kindName}'s spec`} (known: ${Object.keys(s.properties ?? {}).join(', ')})`;
  }
  const value = JSON.stringify(error.value);
  const invalid = (why: string) => `Invalid value: ${value}: ${field} in body ${why}`;
  const consts = s.anyOf?.every((a) => 'const' in a) ? s.anyOf.map((a) => JSON.stringify(a.const)) : undefined;
  if (consts) return `Unsupported value: ${value}: supported values: ${consts.join(', ')}`;
  if (s.expected) return invalid(`must be ${s.expected}`);
  const T = ValueErrorType;
  switch (error.type) {
    case T.Integer: case T.Number: case T.String: case T.Boolean: case T.Object: case T.Array: {
      const type = Array.isArray(error.value) ? 'array' : error.value === null ? 'null' : typeof error.value;
      return `Invalid value: "${type}": ${field} in body must be of type ${s.type}: ${value}`;
    }
    case T.IntegerMaximum: case T.NumberMaximum: return invalid(`should be less than or equal to ${s.maximum}`);
    case T.IntegerMinimum: case T.NumberMinimum: return invalid(`should be greater than or equal to ${s.minimum}`);
    case T.IntegerExclusiveMaximum: case T.NumberExclusiveMaximum: return invalid(`should be less than ${s.exclusiveMaximum}`);
    case T.IntegerExclusiveMinimum: case T.NumberExclusiveMinimum: return invalid(`should be greater than ${s.exclusiveMinimum}`);
    case T.IntegerMultipleOf: case T.NumberMultipleOf: return invalid(`should be a multiple of ${s.multipleOf}`);
    case T.StringMinLength: return invalid(`should be at least ${s.minLength} chars long`);
    case T.StringMaxLength: return invalid(`should be at most ${s.maxLength} chars long`);
    case T.StringPattern: return invalid(`should match '${s.pattern}'`);
    case T.ArrayMinItems: return `Invalid value: ${(error.value as unknown[]).length}: ${field} in body should have at least ${s.minItems} items`;
    case T.ArrayMaxItems: return `Too many: ${(error.value as unknown[]).length}: must have at most ${s.maxItems} items`;
    default: return `Invalid value: ${value}: ${error.message.replace(/^Expected/, 'expected')}`;
  }
}

/**
 * The schema as the apiserver checks objects against it, in a form TypeBox's checker takes:
 * kfn's int-or-string marker as a string-or-integer union (the checker knows no `Unsafe`
 * type), other raw schemas as anything, and objects closed to fields they do not declare.
 */
function checkable(schema: TSchema): TSchema {
  const s = schema as TSchema & Record<string, unknown>;
  if (s['x-kubernetes-int-or-string']) {
    const { [TypeKind]: _unsafe, ...rest } = s;
    return Type.Union([Type.String(), Type.Integer()], { ...rest, expected: 'a string or an integer' });
  }
  if (s[TypeKind] === 'Unsafe') return Type.Unknown();
  const out: Record<string | symbol, unknown> = { ...s };
  if (s.properties) out.properties = Object.fromEntries(Object.entries(s.properties as Record<string, TSchema>).map(([k, v]) => [k, checkable(v)]));
  if (s.type === 'object' && s.additionalProperties === undefined && !s.patternProperties && !s['x-kubernetes-preserve-unknown-fields']) out.additionalProperties = false;
  if (typeof s.additionalProperties === 'object') out.additionalProperties = checkable(s.additionalProperties as TSchema);
  if (s.patternProperties) out.patternProperties = Object.fromEntries(Object.entries(s.patternProperties as Record<string, TSchema>).map(([k, v]) => [k, checkable(v)]));
  if (s.items && !Array.isArray(s.items)) out.items = checkable(s.items as TSchema);
  for (const key of ['anyOf', 'allOf', 'oneOf'] as const) if (Array.isArray(s[key])) out[key] = (s[key] as TSchema[]).map(checkable);
  return out as unknown as TSchema;
}
