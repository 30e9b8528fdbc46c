// A shared host's steps (several functions in one process, functions/sdk/host.ts), written once
// for `kfn deploy --host`, `kfn manifests --host` and `kfn undeploy --host`: its name checked,
// its functions loaded and checked, the functions it serves in a cluster (its ServiceAccount's
// kfn.dev/identity-for) and the host serving a function, and the rights of a function that left
// it taken back from its identity.
import { ApiError, deleteIfPresent, type KubeApi } from '../kube/api.ts';
import { identityFor } from '../core/names.ts';
import { hostResourceName } from '../functions/sdk/manifests.ts';
import { sharedHostProblem } from '../functions/sdk/host.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { UsageError } from './command.ts';
import { labelled, loadFunction } from './functions.ts';

/** `--host H`: a name for the host's objects (kfn-host-H: a DNS label, as a Service's name must be). */
export function hostName(command: string, value: string): string {
  if (!/^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(value) || hostResourceName(value).length > 63) {
    throw new UsageError(`kfn ${command}: --host must be a lowercase name of letters, digits and '-', starting with a letter, at most ${63 - hostResourceName('').length} characters (its objects are named ${hostResourceName('<host>')}), not "${value}"`);
  }
  return value;
}

/** The functions of the folders `dirs`, loaded, that can share one host; else the error that says why not (before anything is built or applied). */
export async function loadHostFunctions(command: string, host: string, dirs: string[]): Promise<Reconciler[]> {
  const reconcilers: Reconciler[] = [];
  for (const dir of dirs) reconcilers.push(await loadFunction(dir));
  const problem = sharedHostProblem(reconcilers);
  if (problem) throw new UsageError(`kfn ${command} --host ${host}: ${problem}`, 1);
  return reconcilers;
}

/** The functions the host serves in the cluster, as its ServiceAccount names them; none when it has no account there. */
export async function hostFunctions(api: KubeApi, namespace: string, host: string): Promise<string[]> {
  try {
    const account = await api.request<{ metadata: { annotations?: Record<string, string> } }>('GET', `/api/v1/namespaces/${namespace}/serviceaccounts/${hostResourceName(host)}`);
    return identityFor(account.metadata.annotations);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return [];
    throw err;
  }
}

/** The shared host in `namespace` that serves the function `name`: the one whose account (`kfn-host-<host>`) its Reconciler names, while that account lists it. */
export async function servingHost(api: KubeApi, namespace: string, account: string | undefined, name: string): Promise<string | undefined> {
  const prefix = hostResourceName('');
  if (!account?.startsWith(prefix)) return undefined;
  const host = account.slice(prefix.length);
  return (await hostFunctions(api, namespace, host)).includes(name) ? host : undefined;
}

/**
 * A function the host served before and does not now: its rights, bound to the host's account,
 * are no longer the host's (the bindings kfn made for it in `namespace`, to that account, are
 * removed). Its Reconciler, auth Secret and CRD stay: it runs again once deployed again, on its
 * own or in a host, and `kfn undeploy` removes the rest.
 */
export async function releaseFromHost(api: KubeApi, namespace: string, host: string, name: string, log: (line: string) => void): Promise<void> {
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  const account = hostResourceName(host);
  type Binding = { metadata: { name: string; namespace?: string }; subjects?: { kind: string; name: string; namespace?: string }[] };
  for (const plural of ['rolebindings', 'clusterrolebindings']) {
    for (const o of (await labelled(api, `${rbac}/${plural}`, name)) as Binding[]) {
      const toHost = o.subjects?.some((s) => s.kind === 'ServiceAccount' && s.name === account && s.namespace === namespace);
      if (o.metadata.name !== `kfn-fn-${name}:${namespace}` || !toHost) continue;
      const path = o.metadata.namespace ? `${rbac}/namespaces/${o.metadata.namespace}/${plural}/${encodeURIComponent(o.metadata.name)}` : `${rbac}/${plural}/${encodeURIComponent(o.metadata.name)}`;
      await deleteIfPresent(api, path);
    }
  }
  log(`${name} is no longer served by host ${host}: its rights were taken from the host's identity; its Reconciler gets no deliveries until ${name} is deployed again (or \`kfn undeploy ${name}\` removes it)`);
}
