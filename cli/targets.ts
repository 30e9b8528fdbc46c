// A deployed function's workload on one of its two targets — a Deployment and Service, or a
// Knative Service — and moving it from one to the other, or into a shared host. Both use the
// name kfn-fn-<name>, and so does the Kubernetes Service Knative makes for each Knative Service
// (owned by its Route). Only what kfn made for the other target is removed: a redeploy to the
// same target finds nothing of kfn's on the other and changes nothing.
import { ApiError, type KubeApi, type KubeObject } from '../kube/api.ts';
import { waitFor, type Clock } from '../core/clock.ts';
import { functionLabel, managedByKfn, managedByLabel } from '../core/names.ts';

export type DeployTarget = 'deployment' | 'knative';

/** One object a function has on a target, by the name kfn gives it. */
export interface TargetObject {
  kind: string;
  path: string;
}

/** The objects `kfn deploy` makes for the function `name` on `target`. */
export function targetObjects(target: DeployTarget, namespace: string, name: string): TargetObject[] {
  const account = `kfn-fn-${name}`;
  return target === 'knative'
    ? [{ kind: 'Knative Service', path: `/apis/serving.knative.dev/v1/namespaces/${namespace}/services/${account}` }]
    : [
        { kind: 'Deployment', path: `/apis/apps/v1/namespaces/${namespace}/deployments/${account}` },
        { kind: 'Service', path: `/api/v1/namespaces/${namespace}/services/${account}` },
      ];
}

/**
 * True when `obj`, found under one of the function's names, is kfn's own for function `name`:
 * it carries kfn's labels for it, and nothing owns it. Labels alone do not tell: Knative copies
 * a Knative Service's labels to its Route and on to the Kubernetes Service the Route makes under
 * the same name — that Service is the Route's (its ownerReference), and goes with it.
 */
export function isKfnsOwn(obj: KubeObject, name: string): boolean {
  const labels = obj.metadata.labels ?? {};
  return labels[functionLabel] === name && labels[managedByLabel] === managedByKfn && !obj.metadata.ownerReferences?.length;
}

const otherTarget = (target: DeployTarget): DeployTarget => (target === 'knative' ? 'deployment' : 'knative');
const targetName = (target: DeployTarget) => (target === 'knative' ? 'Knative' : 'a Deployment');

/**
 * The object at `path`, or undefined when there is none, its kind is not served (Knative not
 * installed) or this client may not read it (then kfn cannot have made it with this client either).
 */
async function readIfPresent(api: KubeApi, path: string): Promise<KubeObject | undefined> {
  try {
    return await api.request<KubeObject>('GET', path);
  } catch (err) {
    if (err instanceof ApiError && (err.status === 404 || err.status === 403)) return undefined;
    throw err;
  }
}

/**
 * Before the function `name` is deployed to `target`: removes what kfn made for it on the other
 * target, and waits (bounded) until it is gone, since the new workload takes the same name.
 */
export async function removeOtherTarget(api: KubeApi, namespace: string, name: string, target: DeployTarget, log: (line: string) => void, options: { clock?: Clock; timeoutMs?: number } = {}): Promise<TargetObject[]> {
  const from = otherTarget(target);
  const removing = await removeKfnsOwn(api, name, targetObjects(from, namespace, name), `first (it moves to ${targetName(target)})`, log);
  if (!removing.length) return [];
  const what = `${name}'s ${removing.map((r) => r.kind).join(' and ')}`;
  // Leaving Knative, the Service Knative made under the function's name goes with the Knative
  // Service; the Deployment target's own Service takes that name, so it is waited for too.
  const awaited = from === 'knative' ? [...removing.map((r) => r.path), ...targetObjects('deployment', namespace, name).filter((r) => r.kind === 'Service').map((r) => r.path)] : removing.map((r) => r.path);
  const timeoutMs = options.timeoutMs ?? 60_000;
  // Bounded: a pod slow to terminate must not fail the deploy. The new workload takes the name over once the old one is gone.
  await waitFor(`${what} to be gone`, async () => (await Promise.all(awaited.map((p) => readIfPresent(api, p)))).every((o) => !o), { timeoutMs, clock: options.clock }).catch(() =>
    log(`${what} is still being removed after ${Math.round(timeoutMs / 1000)} s; going on (the new one takes the name once it is gone)`),
  );
  return removing;
}

/**
 * When the function `name` joins a shared host: removes the workload kfn made for it on either
 * target, and its own ServiceAccount, which nothing uses any more (the host runs it under its
 * own). Nothing waits for them: the host's objects have names of their own.
 */
export async function removeOwnWorkload(api: KubeApi, namespace: string, name: string, host: string, log: (line: string) => void): Promise<TargetObject[]> {
  const own = [...targetObjects('deployment', namespace, name), ...targetObjects('knative', namespace, name), { kind: 'ServiceAccount', path: `/api/v1/namespaces/${namespace}/serviceaccounts/kfn-fn-${name}` }];
  return removeKfnsOwn(api, name, own, `(it runs in host ${host} now)`, log);
}

/** Deletes those of `refs` that are kfn's own for the function `name` (isKfnsOwn), saying so and `why`; answers them. */
async function removeKfnsOwn(api: KubeApi, name: string, refs: TargetObject[], why: string, log: (line: string) => void): Promise<TargetObject[]> {
  const removing: TargetObject[] = [];
  for (const ref of refs) {
    const obj = await readIfPresent(api, ref.path);
    if (obj && isKfnsOwn(obj, name)) removing.push(ref);
  }
  if (!removing.length) return [];
  const kinds = removing.map((r) => r.kind);
  log(`Removing ${name}'s ${kinds.length > 1 ? `${kinds.slice(0, -1).join(', ')} and ${kinds.at(-1)}` : kinds[0]} ${why}`);
  for (const ref of removing) await api.request('DELETE', ref.path, { query: { propagationPolicy: 'Foreground' } }).catch((err: unknown) => {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
  });
  return removing;
}
