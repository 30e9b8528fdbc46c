// What a user writes: one reconcile function per kind, returning what should exist.
//
//   export default defineReconciler({
//     for: MyWeb,
//     owns: [ConfigMap, Deployment, Service],
//     reconcile(web, ctx) {
//       return { children: [page(web), deployment(web), service(web)], ready: isAvailable(ctx) };
//     },
//   });
//
// The SDK (runtime.ts) does the rest for every event: reads the object fresh, adds or removes
// the finalizer, server-side-applies the children, prunes the ones no longer returned,
// writes the status with observedGeneration and a Ready condition — and writes nothing when
// nothing would change.
import type { Logger } from 'pino';
import type { KubeApi } from '../../kube/api.ts';
import type { ObjectRef } from '../../core/objects.ts';
import type { ReconcileReason } from '../../core/event.ts';
import type { Kind, ObjectOf } from './kind.ts';
import type { ChildOf, Live } from './types.ts';
import type { KindRef } from '../../core/objects.ts';
import { fieldManagerName, finalizerName } from '../../core/names.ts';


/**
 * An error that retrying will not fix (an invalid spec, a reference that can never resolve):
 * thrown from reconcile, it is not retried. The object gets Ready=False with this reason and
 * message (at its current generation) and a Warning Event; its children are left as they are.
 * The next change of the object reconciles it again. Any other error is retried with backoff.
 */
export class Terminal extends Error {
  readonly reason: string;
  constructor(message: string, options: { reason?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'Terminal';
    this.reason = options.reason ?? 'ReconcileFailed';
  }
}

/** A desired child, untyped: any Kubernetes object; namespace defaults to the parent's. Typed children: `Desired<typeof Deployment>`. */
export interface Child {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string>; [field: string]: unknown };
  [field: string]: unknown;
}

export type Readiness = boolean | { ready: boolean; reason: string; message?: string };

/** A condition besides Ready: its type, whether it holds, why. */
export interface ConditionResult {
  type: string;
  status: boolean;
  reason: string;
  message?: string;
}

export interface ReconcileResult<Status = Record<string, unknown>, C = Child> {
  /** Everything the object should own now; owned objects not listed are deleted. Each of a kind in `owns`, typed by it. */
  children?: C[];
  /** Status fields (observedGeneration and the Ready condition are added by the SDK). */
  status?: Partial<Status>;
  /** Ready condition: true/false, or with a reason and message. Default: true. */
  ready?: Readiness;
  /** More conditions to report besides Ready (same shape in status.conditions). */
  conditions?: ConditionResult[];
  /** Reconcile again after this long even if nothing changes. */
  requeueAfterSeconds?: number;
}

export interface ReconcileContext {
  reason: ReconcileReason;
  attempt: number;
  /** The child or watched object that caused this event, if any. */
  trigger?: ObjectRef;
  /** An owned object as it is now (listed before reconcile), by kind and name; typed by the kind (`ctx.owned(Deployment, n)?.status?.readyReplicas`). */
  owned<R extends KindRef>(ref: R, name: string): Live<R> | undefined;
  /** Reads any object, fresh from the apiserver (undefined if it does not exist). */
  get<R extends KindRef>(ref: R, name: string, namespace?: string): Promise<Live<R> | undefined>;
  /** Lists objects of a kind, optionally in a namespace and by label selector: every one, fetched `pageSize` (default 500) at a time. */
  list<R extends KindRef>(ref: R, options?: { namespace?: string; labelSelector?: string; pageSize?: number }): Promise<Live<R>[]>;
  /**
   * The time, from the SDK's clock: use it rather than `new Date()` — a test sets it
   * (`testReconcile({now})`), and an offline replay gives back the times the invocation read.
   */
  now(): Date;
  /** Records a Kubernetes Event on the object being reconciled. */
  event(type: 'Normal' | 'Warning', reason: string, message: string): Promise<void>;
  /** The API client, for imperative work the declarative result cannot express. Its requests are bound to `signal`. */
  api: KubeApi;
  log: Logger;
  /**
   * Aborted when the delivery's deadline passes (the Reconciler's timeoutSeconds): the bridge
   * has stopped waiting and will deliver again. Pass it to your own slow work (fetch, loops).
   */
  signal: AbortSignal;
}

export interface WatchSpec extends KindRef {
  /**
   * Which primaries an event of this kind reconciles — worked out by the bridge, from indexes
   * of the primaries it already holds, so a watched object's change costs no invocation unless
   * it names a primary:
   * - `{label: key}`: the primary named by the object's label `key`;
   * - `{selectorField: 'spec.selector'}`: the primaries whose label selector there matches it;
   * - `{referenceField: 'spec.issuerRef.name'}`: the primaries naming it in that field (a
   *   list on the path names each item: `spec.volumes.secretName`).
   */
  mapping: { label: string } | { selectorField: string } | { referenceField: string };
  /**
   * The function lists objects of this kind (`ctx.list`): its RBAC grants list. Without it a
   * watched kind is only read by name (`ctx.get`): a function that reads the Secret its object
   * names cannot list every Secret of the cluster.
   */
  list?: boolean;
}

export interface ReconcilerDefinition<K extends Kind = Kind, O extends KindRef = KindRef> {
  /** The Reconciler's name and field manager suffix (default: the kind's plural). */
  name?: string;
  for: K;
  /** The kinds of its children; each child returned must be of one of them, and is typed by it. */
  owns?: readonly O[];
  /**
   * What each event carries of an owned kind's children besides their metadata (name,
   * namespace, uid, resourceVersion, generation, labels, controller owner): dotted paths such
   * as `status` or `spec.selector`; `[]` for metadata alone; `['*']` for the whole object. A kind
   * not named here is carried with its annotations and status (`defaultObservedFields`). The
   * bridge keeps no more of these objects than declared, so its memory follows what functions
   * read; reading a field not carried (`ctx.owned(...)`) throws an error naming this list.
   */
  observe?: { kind: O; fields: string[] }[];
  watches?: WatchSpec[];
  /**
   * Other kinds the function reads or writes imperatively (through ctx.get or ctx.api), for its
   * RBAC. `names` limits the rights to those objects (RBAC resourceNames) in every namespace it
   * serves: only for get, update, patch and delete, which name one object (a list, a watch or a
   * create cannot be limited by name).
   */
  uses?: Use[];
  reconcile(obj: ObjectOf<K>, ctx: ReconcileContext): ReconcileResult<NonNullable<ObjectOf<K>["status"]>, ChildOf<O>> | Promise<ReconcileResult<NonNullable<ObjectOf<K>["status"]>, ChildOf<O>>>;
  /**
   * Runs before a deleted object may go; the finalizer is removed once it succeeds. A failing
   * finalize is retried with backoff (each failure a `FinalizeFailed` Warning Event, counted
   * on one Event while the error is the same), but never blocks deletion forever: once
   * `finalizeTimeoutSeconds` have passed since its first failure (noted on the object as the
   * annotation `kfn.dev/finalize-failing-since`), the SDK records a `FinalizerGaveUp` Warning
   * Event and lets the object go. The annotation
   * `kfn.dev/skip-finalizer: "true"` lets it go at once, without cleanup.
   */
  finalize?(obj: ObjectOf<K>, ctx: ReconcileContext): void | Promise<void>;
  /**
   * Admission: sets the fields a user left out, before the object is stored (a mutating
   * webhook; the apiserver calls the function at /admission/default). Change `obj` in place or
   * return the object to store. Runs on create and update.
   */
  default?(obj: ObjectOf<K>): void | ObjectOf<K> | Promise<void | ObjectOf<K>>;
  /**
   * Admission: refuses an object before it is stored (a validating webhook at
   * /admission/validate), on create (`old` undefined) and update. Return the problems, each
   * `"spec.replicas: must be ≤ 10"` or `{field, message}`: the apiserver refuses the write and
   * the user sees each one (kubectl prints them). Nothing returned: allowed.
   */
  validate?(obj: ObjectOf<K>, old: ObjectOf<K> | undefined): Problem[] | void | Promise<Problem[] | void>;
  /**
   * Rules on requests for other kinds (or for its own, where a rule needs `oldObject` or the
   * request), in CEL: the apiserver runs them itself as a ValidatingAdmissionPolicy and its
   * binding, which `kfn deploy` and `kfn manifests` write; no webhook, so they hold with the
   * function at zero. `checkAdmission` (kfn/sdk/testing) evaluates them in a unit test.
   */
  guards?: Guard[];
  /**
   * Defaults of its kind in CEL, which the apiserver writes itself before it stores an object (a
   * MutatingAdmissionPolicy, where the cluster serves one: `kfn deploy` discovers it); elsewhere
   * the function's defaulting webhook applies the same. `applyDefaults` (kfn/sdk/testing) gives
   * the defaulted object in a unit test. Runs before `default()`, on create and update.
   */
  defaults?: Defaults[];
  /** How the apiserver calls the webhooks: failurePolicy (default Fail: no write while the function cannot answer) and timeoutSeconds (default 10). */
  admission?: { failurePolicy?: 'Fail' | 'Ignore'; timeoutSeconds?: number };
  /**
   * Deliveries over HTTPS, on a Deployment (`kfn deploy`): the function's Service serves its
   * reconcile endpoint on 443 with the certificate its webhooks use (kfn's own CA, which the
   * function renews itself), and its Reconciler's sink is
   * `https://kfn-fn-<name>.<namespace>.svc.cluster.local/` with that CA as `caBundle`: the bridge
   * trusts no other. For a pod network that tenants share, where an event in plain HTTP could be
   * read or a Service's address taken over (docs/deploy.md, "Deliveries over TLS").
   */
  deliveryTls?: boolean;
  /** How long a failing finalize is retried after its first failure (default 600 s). */
  finalizeTimeoutSeconds?: number;
  /**
   * The most reconciles the bridge runs at once for this function (default 8; never two for one
   * object): it starts at one and adapts to the function's answers up to this. 1 for one at a
   * time. On Knative it is also the Service's containerConcurrency.
   */
  maxConcurrentReconciles?: number;
  /** Seconds one reconcile may take before the bridge retries it (default 30); Knative's timeoutSeconds too. */
  timeoutSeconds?: number;
}

/**
 * A defined reconciler. Unparameterised (`Reconciler`) it is any reconciler, whatever its kind
 * and children: what the runtime, the server and the tools take.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export interface Reconciler<K extends Kind = any, O extends KindRef = any> extends ReconcilerDefinition<K, O> {
  name: string;
  /** `kfn-<name>`: the one field manager of everything this reconciler writes. */
  fieldManager: string;
  /** `kfn.dev/<name>`, when `finalize` is defined. */
  finalizer?: string;
}

export type UseVerb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete';

/** A kind the function uses beyond what it owns and watches (see `uses`). */
export interface Use {
  kind: KindRef;
  verbs: UseVerb[];
  subresource?: string;
  /** Only these objects, by name (RBAC resourceNames); get, update, patch and delete only. */
  names?: string[];
}

/** Verbs RBAC cannot limit to named objects. */
const unnameable: UseVerb[] = ['list', 'watch', 'create'];

// Admission, as a function declares it: the problems validate() returns, its guards on requests
// (policies.ts makes their ValidatingAdmissionPolicies) and its declared defaults (a
// MutatingAdmissionPolicy, or its defaulting webhook: admission.ts, policy-cel.ts).

/** A problem validate() found: "spec.replicas: must be ≤ 10", or the field and message apart. */
export type Problem = string | { field: string; message: string };

export type Operation = 'CREATE' | 'UPDATE' | 'DELETE';

/** One validation: a CEL expression that is true when the request may go on. */
export interface GuardRule {
  expression: string;
  /** What the refusal says (default: "failed expression: <expression>"). */
  message?: string;
  /** CEL giving what the refusal says; wins over message when it gives a non-empty string. */
  messageExpression?: string;
  /** The refusal's HTTP reason (default Invalid, 422). */
  reason?: 'Invalid' | 'Forbidden' | 'Unauthorized' | 'RequestEntityTooLarge';
}

/** Rules on requests for one kind. */
export interface Guard {
  kind: KindRef & { plural?: string };
  /** The requests they apply to (default: CREATE and UPDATE). */
  operations?: Operation[];
  rules: GuardRule[];
}

/**
 * Defaults of the function's own kind, in CEL, that the apiserver writes itself before it stores
 * an object (a MutatingAdmissionPolicy, where the cluster serves one): when `when` holds, each
 * field of `set` gets its value, as a JSON Patch `add` (set when missing, replaced when there).
 * Where the cluster does not serve the policies, the function's defaulting webhook applies the
 * same declarations. On create and update — of an object being deleted too — never on an update
 * that leaves the spec as it was (as the webhooks: ownWritesPass).
 */
export interface Defaults {
  /** CEL over `object`, `oldObject` and `request`: these defaults apply only when it is true (default: always). */
  when?: string;
  /** A field's JSON Pointer → CEL giving its value: `{ '/spec/image': "object.spec.image + ':latest'" }`. */
  set: Record<string, string>;
}

export function defineReconciler<K extends Kind, O extends KindRef = KindRef>(definition: ReconcilerDefinition<K, O>): Reconciler<K, O> {
  const name = definition.name ?? definition.for.plural;
  for (const use of definition.uses ?? []) {
    if (!use.names) continue;
    const refused = use.verbs.filter((v) => unnameable.includes(v));
    if (use.names.length === 0) throw new Error(`${name}: uses of ${use.kind.kind} gives \`names: []\`, which allows no object; leave names out to allow every ${use.kind.kind}`);
    if (refused.length) throw new Error(`${name}: uses of ${use.kind.kind} limits ${refused.join(', ')} to names, which RBAC cannot do (a ${refused[0]} names no one object); declare ${refused.join(', ')} in a separate entry without names`);
  }
  const problems = defaultsShapeProblems(definition.defaults ?? []);
  if (problems.length) throw new Error(`${name}: ${problems.join('; ')}`);
  return { ...definition, name, fieldManager: fieldManagerName(name), finalizer: definition.finalize ? finalizerName(name) : undefined };
}

/**
 * What is wrong with the shape of declared defaults, without evaluating CEL: a declaration that
 * sets nothing, a path that is not a JSON Pointer to a field a default may set. defineReconciler
 * refuses these; whether each expression is CEL, kfn says when it loads the function
 * (expressionProblems in policy-cel.ts), so a function's start does not load the CEL library.
 */
function defaultsShapeProblems(defaults: Defaults[]): string[] {
  const problems: string[] = [];
  defaults.forEach((d, i) => {
    if (!Object.keys(d.set).length) problems.push(`defaults[${i}].set names no field`);
    for (const path of Object.keys(d.set)) {
      if (!/^(\/([^~/]|~[01])+)+$/.test(path) || /^\/(apiVersion|kind)$|^\/metadata\/(name|namespace|uid|resourceVersion)$/.test(path)) problems.push(`defaults[${i}].set: ${JSON.stringify(path)} is not a JSON Pointer to a field of the object that a default may set (/spec/image)`);
    }
  });
  return problems;
}
