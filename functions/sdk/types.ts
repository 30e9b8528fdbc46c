// Types for the objects a function writes and reads. A kind reference carries the type of its
// objects (`Deployment` → the Deployment model of kubernetes-types, a `defineKind` kind → its
// TypeBox type), so children and reads are checked by tsc:
//
//   owns: [ConfigMap, Deployment],
//   reconcile(web, ctx) {
//     const live = ctx.owned(Deployment, web.metadata.name);   // Live<Deployment model> | undefined
//     return { children: [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata: {…}, spec: {…} }] };
//   }                       // a misspelled field, or a kind not in owns, is a compile error
//
// The models come from kubernetes-types: declarations only (under 1 MB, no code), so a project
// that installs kfn gets them without a Kubernetes client library.
import type { HorizontalPodAutoscaler as V1HorizontalPodAutoscaler } from 'kubernetes-types/autoscaling/v1.js';
import type { HorizontalPodAutoscaler as V2HorizontalPodAutoscaler } from 'kubernetes-types/autoscaling/v2.js';
import type { Deployment as V1Deployment, StatefulSet as V1StatefulSet } from 'kubernetes-types/apps/v1.js';
import type { Job as V1Job } from 'kubernetes-types/batch/v1.js';
import type {
  ConfigMap as V1ConfigMap,
  Namespace as V1Namespace,
  Pod as V1Pod,
  Secret as V1Secret,
  Service as V1Service,
  ServiceAccount as V1ServiceAccount,
} from 'kubernetes-types/core/v1.js';
import type { KindRef } from '../../core/objects.ts';


/**
 * An object as it travels in JSON: a model that says `Date` where the API sends an RFC 3339
 * string (creationTimestamp, lastTransitionTime…) is read as the string kfn hands over.
 */
export type Wire<T> = T extends Date
  ? string
  : T extends (infer U)[]
    ? Wire<U>[]
    : T extends object
      ? { [K in keyof T]: Wire<T[K]> }
      : T;

/** An untyped object: what a kind without a model gives. */
export interface AnyObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; uid?: string; labels?: Record<string, string>; annotations?: Record<string, string>; [field: string]: unknown };
  [field: string]: unknown;
}

type ModelOf<R> = R extends { readonly Object?: infer T } ? (unknown extends T ? undefined : NonNullable<T>) : undefined;

/** An object of kind `R` as read from the cluster (ctx.owned, ctx.get, ctx.list). */
export type Live<R> = ModelOf<R> extends undefined ? AnyObject : Wire<ModelOf<R>> & { metadata: { name: string } };

/** The metadata of a desired child: a name, labels and annotations; the SDK sets the rest. */
export interface ChildMeta {
  name: string;
  /** Default: the parent's. */
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * A desired child of kind `R`: its apiVersion and kind as the reference names them, metadata,
 * and the kind's fields but status (which a controller of the parent does not write).
 */
export type Desired<R> = R extends KindRef ? { apiVersion: R['apiVersion']; kind: R['kind']; metadata: ChildMeta } & FieldsOf<R> : never;

/** The fields of a kind's objects but apiVersion, kind, metadata and status; anything for a kind without a model. */
type FieldsOf<R> = ModelOf<R> extends undefined ? { [field: string]: unknown } : Omit<Wire<ModelOf<R>>, 'apiVersion' | 'kind' | 'metadata' | 'status'>;

/**
 * The children a reconciler owning the kinds `O` may return: one of those kinds each, typed by
 * it. (Spread over the kinds by a mapped type rather than a conditional one, so that TypeScript
 * keeps `apiVersion: 'v1'` a literal while it is still working out `O`.)
 */
export type ChildOf<O extends KindRef> = { [K in O['kind']]: { apiVersion: Extract<O, { readonly kind: K }>['apiVersion']; kind: K; metadata: ChildMeta } & FieldsOf<Extract<O, { readonly kind: K }>> }[O['kind']];

/**
 * A desired child of kind `ref`, its apiVersion and kind filled in: `child(Deployment, {metadata,
 * spec})`. Unlike an object literal returned from reconcile, an argument here is checked for
 * fields the kind does not have (a misspelled `replica`), so prefer it for children.
 */
export function child<R extends KindRef>(ref: R, body: Omit<Desired<R>, 'apiVersion' | 'kind'>): Desired<R> {
  return { apiVersion: ref.apiVersion, kind: ref.kind, ...body } as Desired<R>;
}

/** A kind whose objects have a model (kubernetes-types). */
export interface TypedKind<T, A extends string, K extends string> extends KindRef<T> {
  readonly apiVersion: A;
  readonly kind: K;
}

const typed = <T, A extends string, K extends string>(apiVersion: A, kind: K): TypedKind<T, A, K> => ({ apiVersion, kind });

export const ConfigMap = typed<V1ConfigMap, 'v1', 'ConfigMap'>('v1', 'ConfigMap');
export const Secret = typed<V1Secret, 'v1', 'Secret'>('v1', 'Secret');
export const Service = typed<V1Service, 'v1', 'Service'>('v1', 'Service');
export const ServiceAccount = typed<V1ServiceAccount, 'v1', 'ServiceAccount'>('v1', 'ServiceAccount');
export const Pod = typed<V1Pod, 'v1', 'Pod'>('v1', 'Pod');
export const Namespace = typed<V1Namespace, 'v1', 'Namespace'>('v1', 'Namespace');
export const Deployment = typed<V1Deployment, 'apps/v1', 'Deployment'>('apps/v1', 'Deployment');
export const StatefulSet = typed<V1StatefulSet, 'apps/v1', 'StatefulSet'>('apps/v1', 'StatefulSet');
export const Job = typed<V1Job, 'batch/v1', 'Job'>('batch/v1', 'Job');
export const HorizontalPodAutoscaler = typed<V2HorizontalPodAutoscaler, 'autoscaling/v2', 'HorizontalPodAutoscaler'>('autoscaling/v2', 'HorizontalPodAutoscaler');
/** autoscaling/v1 (CPU only); most want `HorizontalPodAutoscaler` (v2). */
export const HorizontalPodAutoscalerV1 = typed<V1HorizontalPodAutoscaler, 'autoscaling/v1', 'HorizontalPodAutoscaler'>('autoscaling/v1', 'HorizontalPodAutoscaler');
