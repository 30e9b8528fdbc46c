// The webhook half of a function: the configurations that make the apiserver call its
// `default` and `validate` (Mutating/ValidatingWebhookConfiguration, with the CA bundle its
// serving certificate is signed by), and the TLS listener that answers them — the apiserver
// calls webhooks over HTTPS only.
import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { join } from 'node:path';
import type { Hono } from 'hono';
import type { Reconciler } from './reconciler.ts';
import { requestListener } from './listener.ts';
import { functionLabels } from '../../core/names.ts';
import { injectCaAnnotation } from './kind.ts';
import { hasDefaulting, ownWritesPass } from './policies.ts';

export { ownWritesPass };

/** Where the apiserver reaches the function: a URL (a function on the apiserver's host) or a Service in the cluster. */
export type WebhookClient = { url: string } | { service: { namespace: string; name: string; port?: number } };

/** What the configurations belong to (the function's Reconciler): its deletion deletes them. */
export interface WebhookOwner {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
}

/**
 * The webhook configurations of a reconciler that has `default` and/or `validate`: one
 * MutatingWebhookConfiguration and one ValidatingWebhookConfiguration named kfn-fn-<name>, for
 * creates and updates of its kind (every version: matchPolicy Equivalent), sideEffects None,
 * the reconciler's failurePolicy (default Fail) and timeoutSeconds (default 10), never for an
 * update of its metadata alone (ownWritesPass: kfn's finalizer removal is never refused). An
 * object being deleted is asked about as any other: its spec can still change.
 */
export function webhookConfigurations(reconciler: Reconciler, options: { client: WebhookClient; caBundle?: string; injectCaFrom?: string; namespaces?: string[]; name?: string; owner?: WebhookOwner }): Record<string, unknown>[] {
  const kind = reconciler.for;
  const name = options.name ?? `kfn-fn-${reconciler.name}`;
  // Limited to namespaces, as a Reconciler can be: the webhook sees only objects there.
  const namespaceSelector = options.namespaces?.length ? { namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: options.namespaces }] } } : {};
  const labels = functionLabels(reconciler.name);
  // Owned by the function's Reconciler (both cluster-scoped): deleting the function's Reconciler
  // deletes them, so no webhook with failurePolicy Fail outlives the function it calls.
  const ownerReferences = options.owner ? { ownerReferences: [{ apiVersion: options.owner.apiVersion, kind: options.owner.kind, name: options.owner.name, uid: options.owner.uid }] } : {};
  // The CA: given, or injected by cert-manager from the Certificate the annotation names.
  const annotations = options.injectCaFrom ? { annotations: { [injectCaAnnotation]: options.injectCaFrom } } : {};
  const clientConfig = (path: string) => ({
    ...(options.caBundle ? { caBundle: Buffer.from(options.caBundle).toString('base64') } : {}),
    ...('url' in options.client ? { url: `${options.client.url.replace(/\/$/, '')}${path}` } : { service: { ...options.client.service, port: options.client.service.port ?? 443, path } }),
  });
  const webhook = (mode: 'default' | 'validate') => ({
    // A webhook's name must be a fully qualified domain name: <mode>.<plural>.<group>.
    name: `${mode}.${kind.plural}.${kind.group}`,
    clientConfig: clientConfig(`/admission/${mode}`),
    rules: [{ apiGroups: [kind.group], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: [kind.plural], scope: kind.namespaced ? 'Namespaced' : 'Cluster' }],
    admissionReviewVersions: ['v1'],
    sideEffects: 'None',
    failurePolicy: reconciler.admission?.failurePolicy ?? 'Fail',
    timeoutSeconds: reconciler.admission?.timeoutSeconds ?? 10,
    matchPolicy: 'Equivalent',
    matchConditions: ownWritesPass,
    ...namespaceSelector,
    ...(mode === 'default' ? { reinvocationPolicy: 'Never' } : {}),
  });
  const out: Record<string, unknown>[] = [];
  if (hasDefaulting(reconciler)) out.push({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name, labels, ...annotations, ...ownerReferences }, webhooks: [webhook('default')] });
  if (reconciler.validate) out.push({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingWebhookConfiguration', metadata: { name, labels, ...annotations, ...ownerReferences }, webhooks: [webhook('validate')] });
  return out;
}


/**
 * True when the reconciler has webhooks to serve: admission (default, declared defaults, validate)
 * or conversion (a kind with previous versions). Declared defaults that the apiserver runs as
 * policies are no webhook: see defaultsAsPolicies.
 */
export const hasWebhooks = (reconciler: Reconciler) => Boolean(hasDefaulting(reconciler) || reconciler.validate || reconciler.for.options.previousVersions?.length);

/** True when the function runs an HTTPS listener (serveWebhooks): for its webhooks, or for deliveries over TLS (`deliveryTls`). */
export const servesHttps = (reconciler: Reconciler) => hasWebhooks(reconciler) || Boolean(reconciler.deliveryTls);

/**
 * Serves `app` (its webhooks, and the reconcile endpoint too) over HTTPS with the certificate in `certDir` (tls.crt, tls.key — a mounted
 * Secret, or files `kfn` wrote). A rotated certificate is picked up without a restart: the files
 * are checked every 2 s and a change swaps the TLS context for new connections.
 */
export function serveWebhooks(app: Hono, options: { port: number; hostname?: string; certDir: string; onReload?: (error?: Error) => void }): Promise<Server> {
  const read = () => ({ cert: readFileSync(join(options.certDir, 'tls.crt')), key: readFileSync(join(options.certDir, 'tls.key')) });
  const server = createServer(read(), requestListener(app));
  const reload = () => {
    try {
      server.setSecureContext(read());
      options.onReload?.();
    } catch (err) {
      // A half-written pair (key updated before cert) is retried at the next change.
      options.onReload?.(err as Error);
    }
  };
  const files = ['tls.crt', 'tls.key'].map((f) => join(options.certDir, f));
  for (const f of files) watchFile(f, { interval: 2000 }, (cur, prev) => cur.mtimeMs !== prev.mtimeMs && reload());
  server.once('close', () => files.forEach((f) => unwatchFile(f)));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.hostname ?? '0.0.0.0', () => resolve(server));
  });
}
