// Why a workload a function owns is not available, in words its user can act on: the reasons
// its pods give (an image that cannot be pulled, a container that keeps crashing, a pod no node
// can take) and the ones its controller gives (pods it may not create: a quota; a rollout past
// its deadline; a Job out of retries). For a Ready=False message:
//
//   const why = await explainWorkload(ctx, Deployment, ctx.owned(Deployment, name));
//   ready: available || { ready: false, reason: 'DeploymentNotAvailable', message: why ?? '…' }
//
// explainWorkload lists the workload's pods, so the function declares it may list Pods:
// `uses: [{ kind: Pod, verbs: ['list'] }]` (or a watch of Pods with `list: true`).
import { defaultObservedFields } from '../../core/reconciler-spec.ts';
import type { KindRef } from '../../core/objects.ts';
import type { ReconcileContext } from './reconciler.ts';
import { Pod } from './types.ts';

interface StatusCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

interface ContainerState {
  waiting?: { reason?: string; message?: string };
  terminated?: { reason?: string; exitCode?: number; message?: string };
  running?: unknown;
}

interface ContainerStatus {
  name: string;
  image?: string;
  restartCount?: number;
  state?: ContainerState;
  lastState?: ContainerState;
}

/** The part of a Pod this reads. */
export interface PodView {
  metadata: { name?: string };
  spec?: { containers?: { name: string; image?: string }[] };
  status?: { phase?: string; conditions?: StatusCondition[]; containerStatuses?: ContainerStatus[]; initContainerStatuses?: ContainerStatus[] };
}

/** The part of a Deployment, StatefulSet, ReplicaSet or Job this reads. */
export interface WorkloadView {
  kind?: string;
  metadata: { name?: string; namespace?: string };
  spec?: { selector?: { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] } };
  status?: { conditions?: StatusCondition[] };
}

/** Waiting reasons that mean the container will not start until someone changes something. */
const stuck = new Set(['ImagePullBackOff', 'ErrImagePull', 'InvalidImageName', 'ErrImageNeverPull', 'CrashLoopBackOff', 'CreateContainerConfigError', 'CreateContainerError', 'RunContainerError', 'PreCreateHookError', 'PostStartHookError']);

const pullFailures = new Set(['ImagePullBackOff', 'ErrImagePull', 'InvalidImageName', 'ErrImageNeverPull']);

function firstLine(text: string | undefined): string {
  return (text ?? '').split('\n')[0]!.trim();
}

/** One cause for one container, or undefined when it is starting or running as it should. */
function containerCause(c: ContainerStatus, imageOf: (name: string) => string | undefined): string | undefined {
  const waiting = c.state?.waiting;
  const image = c.image || imageOf(c.name);
  if (waiting?.reason && pullFailures.has(waiting.reason)) {
    // The kubelet alternates ErrImagePull (the runtime's error) and ImagePullBackOff ("Back-off
    // pulling image "x": <that error>"): both say the same, so that the message stays put.
    const detail = firstLine(waiting.message).replace(/^Back-off pulling image "[^"]*": ?/, '').replace(/^ErrImagePull: ?/, '');
    const reason = waiting.reason === 'ImagePullBackOff' ? 'ErrImagePull' : waiting.reason;
    return `container ${c.name} cannot pull image ${image} (${reason}${detail ? `: ${detail}` : ''})`;
  }
  // A crash loop, whichever phase of it the pod is seen in: waiting out the back-off, or just
  // ended again (the kubelet alternates the two; a container that exits 0 is ended with no
  // error at all). Not the restart count or the back-off: they change on every restart, the
  // cause does not.
  const ended = c.state?.terminated;
  const restarted = (c.restartCount ?? 0) > 0;
  if (waiting?.reason === 'CrashLoopBackOff' || (ended && restarted)) {
    const last = waiting ? c.lastState?.terminated : ended;
    const exit = last ? `; last exit code ${last.exitCode ?? '?'}${last.reason && last.reason !== 'Error' ? ` (${last.reason})` : ''}` : '';
    return `container ${c.name} keeps crashing (CrashLoopBackOff${exit})`;
  }
  if (waiting?.reason && stuck.has(waiting.reason)) {
    const detail = firstLine(waiting.message);
    return `container ${c.name} cannot start (${waiting.reason}${detail ? `: ${detail}` : ''})`;
  }
  if (ended && ended.exitCode !== 0) return `container ${c.name} ended with exit code ${ended.exitCode ?? '?'}${ended.reason && ended.reason !== 'Error' ? ` (${ended.reason})` : ''}`;
  return undefined;
}

/** What keeps each pod from running, one line each, with the pod's name. */
export function podCauses(pods: PodView[]): string[] {
  const causes: string[] = [];
  for (const pod of pods) {
    const name = pod.metadata.name ?? '?';
    const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
    if (scheduled?.status === 'False' && scheduled.reason === 'Unschedulable') {
      causes.push(`pod ${name} cannot be scheduled: ${firstLine(scheduled.message) || 'no node fits it'}`);
      continue;
    }
    const imageOf = (container: string) => pod.spec?.containers?.find((c) => c.name === container)?.image;
    for (const c of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
      const cause = containerCause(c, imageOf);
      if (cause) causes.push(`pod ${name}: ${cause}`);
    }
  }
  return causes;
}

/** What the workload's own controller reports: pods it may not create, a rollout past its deadline, a Job out of retries. */
export function controllerCauses(workload: WorkloadView): string[] {
  const conditions = workload.status?.conditions ?? [];
  const causes: string[] = [];
  const failure = conditions.find((c) => c.type === 'ReplicaFailure' && c.status === 'True');
  if (failure) causes.push(`cannot create its pods (${failure.reason ?? 'ReplicaFailure'}: ${firstLine(failure.message)})`);
  const progressing = conditions.find((c) => c.type === 'Progressing' && c.status === 'False');
  if (progressing) causes.push(`its rollout stopped (${progressing.reason ?? 'Progressing=False'}: ${firstLine(progressing.message)})`);
  const failed = conditions.find((c) => c.type === 'Failed' && c.status === 'True');
  if (failed) causes.push(`failed (${failed.reason ?? 'Failed'}: ${firstLine(failed.message)})`);
  return causes;
}

/**
 * Why `workload` is not available, from its conditions and its pods: one sentence naming the
 * workload and each distinct cause (pods with the same cause counted once); undefined when
 * nothing explains it (still starting, or scaling).
 */
export function whyNotAvailable(workload: WorkloadView, pods: PodView[]): string | undefined {
  // The same cause in several pods is one cause: drop the pod's name to compare.
  const seen = new Map<string, { text: string; pods: number }>();
  for (const cause of podCauses(pods)) {
    const key = cause.replace(/^pod \S+(: | )/, '');
    const entry = seen.get(key);
    if (entry) entry.pods++;
    else seen.set(key, { text: cause, pods: 1 });
  }
  const fromPods = [...seen.values()].map((e) => (e.pods > 1 ? `${e.text} (and ${e.pods - 1} more pod${e.pods > 2 ? 's' : ''})` : e.text));
  const causes = [...controllerCauses(workload), ...fromPods];
  if (!causes.length) return undefined;
  const shown = causes.slice(0, 3).join('; ') + (causes.length > 3 ? `; and ${causes.length - 3} more` : '');
  return `${workload.kind ?? 'workload'} ${workload.metadata.name}: ${shown}`;
}

/** A label selector as the API takes it in `labelSelector=`. */
export function selectorString(selector: NonNullable<WorkloadView['spec']>['selector']): string {
  const parts = Object.entries(selector?.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const e of selector?.matchExpressions ?? []) {
    const values = (e.values ?? []).join(',');
    if (e.operator === 'In') parts.push(`${e.key} in (${values})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${values})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}

/**
 * What a function that explains its workloads declares it observes of their kind
 * (`observe: [{ kind: Deployment, fields: explainedFields }]`): the default (annotations and
 * status) and the pod selector explainWorkload lists pods by.
 */
export const explainedFields: string[] = [...defaultObservedFields, 'spec.selector'];

/**
 * whyNotAvailable for a workload the function owns, listing its pods by its selector in its
 * namespace (the function declares list on Pods). undefined for no workload, or no cause.
 */
export async function explainWorkload(ctx: Pick<ReconcileContext, 'list'>, kind: KindRef, workload: WorkloadView | undefined): Promise<string | undefined> {
  if (!workload) return undefined;
  const selector = selectorString(workload.spec?.selector);
  const pods = selector ? await ctx.list(Pod, { namespace: workload.metadata.namespace, labelSelector: selector }) : [];
  return whyNotAvailable({ ...workload, kind: kind.kind }, pods as PodView[]);
}
