// Identities for things that should run under their own RBAC (a function, the bridge, a test):
// a TokenRequest for any ServiceAccount, and a kubeconfig that uses that token.
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';

export interface ServiceAccountRef {
  namespace: string;
  name: string;
}

/** Parses `namespace/name` (or `name` in namespace `default`). */
export function parseServiceAccountRef(text: string): ServiceAccountRef {
  const parts = text.split('/');
  const [namespace, name] = parts.length === 2 ? parts : ['default', parts[0]];
  const dns1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
  if (parts.length > 2 || !namespace || !name || !dns1123.test(namespace) || !dns1123.test(name)) {
    throw new Error(`"${text}" is not a ServiceAccount reference; write it as <namespace>/<name>, e.g. kfn-system/bridge`);
  }
  return { namespace, name };
}

/**
 * Asks the apiserver (TokenRequest API) for a bound token of the ServiceAccount, valid for
 * `expirationSeconds` (the apiserver enforces a minimum of 600).
 */
export async function requestServiceAccountToken(admin: KubeConfig, ref: ServiceAccountRef, expirationSeconds = 3600): Promise<string> {
  const core = admin.makeApiClient(CoreV1Api);
  try {
    const res = await core.createNamespacedServiceAccountToken({
      namespace: ref.namespace,
      name: ref.name,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: [], expirationSeconds } },
    });
    const token = res.status?.token;
    if (!token) throw new Error('the TokenRequest response carried no token');
    return token;
  } catch (err) {
    const code = (err as { code?: number }).code;
    if (code === 404) throw new Error(`ServiceAccount ${ref.namespace}/${ref.name} does not exist; create it first (kubectl -n ${ref.namespace} create serviceaccount ${ref.name})`);
    throw new Error(`TokenRequest for ServiceAccount ${ref.namespace}/${ref.name} failed: ${(err as Error).message}`);
  }
}

/** A kubeconfig for the same cluster as `base` that authenticates with `token` only. */
export function kubeConfigForToken(base: KubeConfig, token: string, user = 'serviceaccount'): KubeConfig {
  const cluster = base.getCurrentCluster();
  if (!cluster) throw new Error('the base kubeconfig has no current cluster');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: user, token }],
    contexts: [{ name: 'kfn', cluster: cluster.name, user }],
    currentContext: 'kfn',
  });
  return kc;
}
