// The kfn functions SDK: everything a reconcile function imports.
//
//   import { defineKind, defineReconciler, t, ConfigMap } from '../sdk/index.ts';
export { Type as t, type Static } from '@sinclair/typebox';
export { containerResources, crdOf, defineKind, quantity, resourceRequirements, type Kind, type ObjectMeta, type ObjectOf, type Rule } from './kind.ts';
export { Terminal, defineReconciler, type Child, type ConditionResult, type Defaults, type Guard, type GuardRule, type ReconcileContext, type ReconcileResult, type Reconciler } from './reconciler.ts';
export {
  ConfigMap,
  Deployment,
  HorizontalPodAutoscaler,
  HorizontalPodAutoscalerV1,
  Job,
  Namespace,
  Pod,
  Secret,
  Service,
  ServiceAccount,
  StatefulSet,
  child,
  type AnyObject,
  type ChildMeta,
  type ChildOf,
  type Desired,
  type Live,
  type TypedKind,
  type Wire,
} from './types.ts';
export { explainedFields, explainWorkload, whyNotAvailable } from './workloads.ts';
export { defaultObservedFields } from '../../core/reconciler-spec.ts';
export { createApp } from './app.ts';
export { createHostApp } from './host.ts';
/** For a bundled program that builds its server from createApp itself: await it before the first reconcile if its kubeconfig may be YAML. */
export { kubeconfigParserReady } from '../../kube/kubeconfig.ts';
export { serve, serveHost } from './node/index.ts';
export { lambdaHandler } from './lambda/index.ts';
export { parseQuantity } from '../../kube/quantity.ts';
export { objectKey, type KindRef } from '../../core/objects.ts';
export type { Condition } from '../../core/conditions.ts';
export { labelSelectorMatches, selectorMatches, type LabelSelector } from '../../kube/selectors.ts';
