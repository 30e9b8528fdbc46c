// A deployed function's webhooks in the cluster (`kfn deploy`, `kfn manifests --apply`): the
// Secret of the certificate they serve with (cli/webhook-tls.ts makes and judges it), and the
// Reconciler that owns their configurations, so that deleting the function deletes them.
import { ApiError, applyObject, type KubeApi } from '../kube/api.ts';
import { webhookTlsSecretName } from '../functions/sdk/manifests.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import type { WebhookOwner } from '../functions/sdk/webhooks.ts';
import { functionLabels, reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../core/names.ts';
import { webhookDnsNames, webhookTls } from './webhook-tls.ts';

/** The function's webhook certificate Secret in `namespace`; undefined when there is none yet. */
export async function webhookTlsSecret(api: KubeApi, reconciler: Reconciler, namespace: string): Promise<{ data?: Record<string, string> } | undefined> {
  return api.request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${namespace}/secrets/${webhookTlsSecretName(reconciler)}`).catch((err) => {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  });
}

/** Creates or renews a deployed function's webhook certificate Secret; returns the CA bundle to register. */
export async function ensureWebhookTls(api: KubeApi, reconciler: Reconciler, namespace: string, log: (line: string) => void): Promise<string> {
  const secretName = webhookTlsSecretName(reconciler);
  const service = `kfn-fn-${reconciler.name}`;
  const existing = await webhookTlsSecret(api, reconciler, namespace);
  const tls = webhookTls(existing?.data, service, webhookDnsNames(service, namespace));
  if (tls.renewed) {
    log(`${existing ? 'Renewing' : 'Creating'} the webhook certificate of ${reconciler.name} (Secret ${namespace}/${secretName}): ${tls.why}`);
    await applyObject(api, { apiVersion: 'v1', kind: 'Secret', metadata: { name: secretName, namespace, labels: functionLabels(reconciler.name) }, type: 'kubernetes.io/tls', data: tls.data } as Parameters<typeof applyObject>[1], 'kfn-deploy');
  }
  return tls.caBundle;
}

/** The owner reference to the function's Reconciler `name`, as it is in the cluster now (its uid). */
export async function reconcilerOwner(api: KubeApi, name: string): Promise<WebhookOwner> {
  const reconciler = await api.request<{ metadata: { uid: string } }>('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`);
  return { apiVersion: reconcilerApiVersion, kind: reconcilerKind, name, uid: reconciler.metadata.uid };
}
