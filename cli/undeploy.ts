// `kfn undeploy`: removes from the cluster what `kfn deploy` (and `kfn manifests --apply`)
// created for a function — its Reconciler first, so the bridge stops delivering, then its
// webhook configurations, workload, identity, grants and Secrets — or for a shared host and
// every function it serves. Its CRD and the objects of its kind are the user's data: they stay
// unless --crds is given.
import { ApiError, collectionPath, deleteIfPresent, listAll, type KubeApi } from '../kube/api.ts';
import { admissionPolicyKinds, functionInFolder, labelled, removeLabelled, webhookConfigurationKinds } from './functions.ts';
import { hostFunctions, hostName, servingHost } from './hosts.ts';
import { hostResourceName } from '../functions/sdk/manifests.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster } from './cluster-choice.ts';
import { isKfnFinalizer, reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import { pluralOf } from '../functions/sdk/kind.ts';
import { groupOf, objectKey, type KindRef } from '../core/objects.ts';

const usage = `Usage: kfn undeploy <function dir | name> … [options]
       kfn undeploy --host H [options]

Removes what \`kfn deploy\` created for each function: its Reconciler (the bridge stops
delivering), its admission webhook configurations, its Deployment and Service or Knative
Service, its ServiceAccount, RBAC and the bridge's grant, its auth and webhook Secrets.
The CRD of its kind and the objects of that kind stay: they are your data. A function that a
shared host serves goes with its host (--host), or once the host is deployed again without it.

Options:
  --host H           remove the shared host H (\`kfn deploy --host\`): every function its
                     ServiceAccount serves, as above, then its Deployment, Service and
                     ServiceAccount kfn-host-H
  -n, --namespace N  where the function was deployed (default kfn-system)
  --crds             also delete the CRD of its kind, and with it every object of that kind;
                     refused while objects still carry kfn's finalizer (nothing would remove it)
${clusterFlagsUsage(17)}
  -h, --help         show this help`;

interface Named {
  metadata: { name: string; namespace?: string; finalizers?: string[] };
}

export interface UndeployOptions {
  namespace: string;
  crds?: boolean;
  /** The function's kind, when known from its folder (else read from its Reconciler). */
  kind?: KindRef;
  /** The shared host being removed with the function (undeployHost); a function a host still serves is otherwise refused. */
  host?: string;
  log?: (line: string) => void;
}

/** What a note or refusal says of the objects still carrying kfn's finalizer. */
const stillFinalized = (objects: string[], kind: KindRef) => `${objects.length} ${kind.kind} object(s) still carry kfn's finalizer (${objects.slice(0, 3).join(', ')}${objects.length > 3 ? ', …' : ''})`;

/** Removes everything `kfn deploy` created for the function `name`; answers what it removed. */
export async function undeployFunction(api: KubeApi, name: string, options: UndeployOptions): Promise<string[]> {
  const log = options.log ?? ((line: string) => console.error(line));
  const ns = options.namespace;
  const account = `kfn-fn-${name}`;
  const reconcilerPath = `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`;
  const reconciler = await api.request<{ spec: { for: KindRef; serviceAccount?: { name: string } } }>('GET', reconcilerPath).catch((err) => {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  });
  // A host mounts the auth Secret of every function it serves: without it, the host would not start again.
  const host = options.host === undefined ? await servingHost(api, ns, reconciler?.spec.serviceAccount?.name, name) : undefined;
  if (host) {
    throw new UsageError(`kfn undeploy: ${name} is served by the shared host ${host}, which mounts its auth Secret and would not start again without it. Deploy the host without it first (\`kfn deploy --host ${host}\` with its other functions), then undeploy ${name}; or remove the whole host: \`kfn undeploy --host ${host}\``, 1);
  }
  const kind = options.kind ?? reconciler?.spec.for;
  // Objects that carry kfn's finalizer would wait for a function that is gone.
  const finalized = kind ? await objectsWithFinalizer(api, kind) : [];
  if (options.crds && finalized.length) {
    throw new UsageError(`kfn undeploy --crds: ${stillFinalized(finalized, kind!)}; deleting the CRD would leave them Terminating for ever. Delete them while ${name} is deployed (its finalizer runs), then undeploy.`, 1);
  }
  const removed: string[] = [];
  const did = (what: string) => (removed.push(what), log(`removed ${what}`));
  if (await deleteIfPresent(api, reconcilerPath)) did(`Reconciler ${name}`);
  // Its webhooks, and its guards and defaults (policies the apiserver runs).
  for (const what of await removeLabelled(api, name, [...webhookConfigurationKinds, ...admissionPolicyKinds])) did(what);
  const namespaced: [string, string][] = [
    ['Knative Service', `/apis/serving.knative.dev/v1/namespaces/${ns}/services/${account}`],
    ['Deployment', `/apis/apps/v1/namespaces/${ns}/deployments/${account}`],
    ['Service', `/api/v1/namespaces/${ns}/services/${account}`],
    ['ServiceAccount', `/api/v1/namespaces/${ns}/serviceaccounts/${account}`],
    ['Secret', `/api/v1/namespaces/${ns}/secrets/${account}`],
    ['Secret', `/api/v1/namespaces/${ns}/secrets/${account}-webhook-tls`],
  ];
  for (const [what, path] of namespaced) if (await deleteIfPresent(api, path)) did(`${what} ${ns}/${path.split('/').at(-1)}`);
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  for (const o of await labelled(api, `${rbac}/rolebindings`, name)) if (await deleteIfPresent(api, `${rbac}/namespaces/${o.metadata.namespace}/rolebindings/${encodeURIComponent(o.metadata.name)}`)) did(`RoleBinding ${o.metadata.namespace}/${o.metadata.name}`);
  const clusterRbac = [
    { apiVersion: 'rbac.authorization.k8s.io/v1', plural: 'clusterrolebindings', kind: 'ClusterRoleBinding' },
    { apiVersion: 'rbac.authorization.k8s.io/v1', plural: 'clusterroles', kind: 'ClusterRole' },
  ];
  for (const what of await removeLabelled(api, name, clusterRbac)) did(what);
  if (kind && options.crds) {
    const crd = `${(kind as { plural?: string }).plural ?? pluralOf(kind.kind)}.${groupOf(kind.apiVersion)}`;
    if (await deleteIfPresent(api, `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd}`)) did(`CustomResourceDefinition ${crd} (and every ${kind.kind})`);
  } else if (finalized.length) {
    log(`note: ${stillFinalized(finalized, kind!)}: deleting one now waits until ${name} is deployed again, or until the finalizer is removed by hand.`);
  }
  if (!removed.length) log(`nothing of ${name} was found in the cluster (namespace ${ns})`);
  return removed;
}

/**
 * Removes a shared host: each function it serves (its ServiceAccount says which), as
 * undeployFunction does, then the host's own Deployment, Service and ServiceAccount.
 */
export async function undeployHost(api: KubeApi, host: string, options: Omit<UndeployOptions, 'kind' | 'host'>): Promise<string[]> {
  const log = options.log ?? ((line: string) => console.error(line));
  const ns = options.namespace;
  const removed: string[] = [];
  for (const name of await hostFunctions(api, ns, host)) removed.push(...(await undeployFunction(api, name, { ...options, host, log: (line) => log(`${name}: ${line}`) })));
  const account = hostResourceName(host);
  const own: [string, string][] = [
    ['Deployment', `/apis/apps/v1/namespaces/${ns}/deployments/${account}`],
    ['Service', `/api/v1/namespaces/${ns}/services/${account}`],
    ['ServiceAccount', `/api/v1/namespaces/${ns}/serviceaccounts/${account}`],
  ];
  for (const [what, path] of own) {
    if (!(await deleteIfPresent(api, path))) continue;
    removed.push(`${what} ${ns}/${account}`);
    log(`removed ${what} ${ns}/${account}`);
  }
  if (!removed.length) log(`nothing of host ${host} was found in the cluster (namespace ${ns})`);
  return removed;
}

/** `namespace/name` of the objects of `kind` that carry a kfn finalizer. */
async function objectsWithFinalizer(api: KubeApi, kind: KindRef): Promise<string[]> {
  let resource;
  try {
    resource = await api.resource(kind.apiVersion, kind.kind);
  } catch {
    return []; // not served: no objects
  }
  const items = await listAll<Named>(api, collectionPath(resource));
  return items.filter((o) => o.metadata.finalizers?.some(isKfnFinalizer)).map((o) => objectKey(o.metadata));
}

const flags = { host: { type: 'string' }, namespace: { type: 'string', short: 'n' }, crds: { type: 'boolean' }, ...clusterFlags } as const;

export const undeployCommand: Command = {
  name: 'undeploy',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('undeploy', argv, flags, true);
    const host = values.host === undefined ? undefined : hostName('undeploy', values.host);
    if (host && positionals.length) throw new UsageError(`kfn undeploy --host ${host} removes the host and every function it serves; it takes no function names (${positionals.join(' ')})`);
    if (!host && !positionals.length) throw new UsageError(`kfn undeploy: name the functions (a folder such as functions/myweb, or a function's name), or --host\n\n${usage}`);
    const { api } = await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context }, { actsIn: () => values.namespace ?? 'kfn-system' });
    if (host) {
      await undeployHost(api, host, { namespace: values.namespace ?? 'kfn-system', crds: values.crds, log: (line) => console.error(`host ${host}: ${line}`) });
      return 0;
    }
    for (const target of positionals) {
      const reconciler = await functionInFolder(target);
      const name = reconciler?.name ?? target;
      if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name)) throw new UsageError(`kfn undeploy: "${target}" is neither a function folder nor a function's name`);
      await undeployFunction(api, name, { namespace: values.namespace ?? 'kfn-system', crds: values.crds, kind: reconciler?.for, log: (line) => console.error(`${name}: ${line}`) });
    }
    return 0;
  },
};
