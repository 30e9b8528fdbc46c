// Identities for things that should run under their own RBAC (a function, the bridge, a test):
// a TokenRequest for any ServiceAccount, and a kubeconfig that uses that token.
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { ApiError, type KubeApi } from './api.ts';
import { kubeconfigCluster, kubeconfigText } from './kubeconfig.ts';

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
export async function requestServiceAccountToken(api: KubeApi, ref: ServiceAccountRef, expirationSeconds = 3600): Promise<string> {
  let res: { status?: { token?: string } };
  try {
    res = await api.request('POST', `/api/v1/namespaces/${ref.namespace}/serviceaccounts/${ref.name}/token`, {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: [], expirationSeconds } },
    });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) throw new Error(`ServiceAccount ${ref.namespace}/${ref.name} does not exist; create it first (kubectl -n ${ref.namespace} create serviceaccount ${ref.name})`);
    throw new Error(`TokenRequest for ServiceAccount ${ref.namespace}/${ref.name} failed: ${(err as Error).message}`);
  }
  if (!res.status?.token) throw new Error('the TokenRequest response carried no token');
  return res.status.token;
}

/**
 * A kubeconfig for the current cluster of the kubeconfig at `basePath` that authenticates with
 * `token` only. The cluster's CA is written inline (read from its file if the base names one),
 * so the result works wherever it is put. JSON on one line (kubeconfigText): the shortest form,
 * for a Lambda's $KFN_KUBECONFIG, where all its environment variables together hold 4 KB.
 */
export function kubeconfigForToken(basePath: string, token: string, user = 'serviceaccount'): string {
  const { server, ca, insecureSkipTlsVerify } = kubeconfigCluster(readFileSync(basePath, 'utf8'), basePath, dirname(basePath));
  const cluster = { server, ...(ca ? { 'certificate-authority-data': Buffer.from(ca).toString('base64') } : {}), ...(insecureSkipTlsVerify ? { 'insecure-skip-tls-verify': true } : {}) };
  return kubeconfigText({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'kfn', cluster }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: 'kfn', context: { cluster: 'kfn', user } }],
    'current-context': 'kfn',
  }, 0);
}
