// A function's webhook TLS and registrations, wherever they are made: `kfn deploy` (which
// keeps the certificate in the cluster, made or renewed as it deploys; the running function
// renews it in between: functions/sdk/renewal.ts) and `kfn manifests` (which writes them for a
// user to apply, with kfn's own certificate or cert-manager's).
import { generateServingPki } from '../core/certificates.ts';
import { caBundleAfter, renewalDue, secretPem, serviceDnsNames, tlsSecretData } from '../functions/sdk/certificate.ts';
import type { ConversionClient } from '../functions/sdk/kind.ts';
import { webhookTlsSecretName } from '../functions/sdk/manifests.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { servesHttps, webhookConfigurations, type WebhookOwner } from '../functions/sdk/webhooks.ts';
import { functionLabels } from '../core/names.ts';

/**
 * The webhook certificate of a deployed function, from its Secret's data: kept while it names
 * `dnsNames` and has 30 days left (the rule the running function renews it by, too:
 * functions/sdk/certificate.ts), else a new CA and certificate. The CA bundle to register holds
 * the current CA and, right after a renewal, the previous one too: until the kubelet has put the
 * new files in the pod (up to a minute), the apiserver still meets the old certificate.
 */
export function webhookTls(existing: Record<string, string> | undefined, name: string, dnsNames: string[], now = new Date()): { data: Record<string, string>; caBundle: string; renewed: boolean; why?: string } {
  const why = renewalDue(existing, { dnsNames }, now);
  const ca = secretPem(existing, 'ca.crt');
  if (!why) return { data: existing!, caBundle: ca!, renewed: false };
  const pki = generateServingPki(name, dnsNames, { now });
  return { data: tlsSecretData(pki), caBundle: caBundleAfter(pki.caCert, ca, now), renewed: true, why };
}

/** The DNS names of a function's Service, which its webhook certificate must name (`kfn deploy` asks here). */
export const webhookDnsNames = (service: string, namespace: string) => serviceDnsNames(service, namespace);

/** Who signs a function's webhook certificate in the manifests `kfn manifests` writes. */
export type WebhookCa =
  /** kfn: a CA and certificate made now (or kept from `existing`: the Secret's data in the cluster), the CA bundle written into the configurations. */
  | { kind: 'kfn'; existing?: Record<string, string> }
  /** cert-manager: a Certificate from `issuer` (default: a self-signed Issuer written beside it), the CA injected by cert-manager's cainjector. */
  | { kind: 'cert-manager'; issuer?: { kind: 'Issuer' | 'ClusterIssuer'; name: string } };

export interface WebhookSet {
  /** The certificate's objects: the TLS Secret (kfn), or the Issuer and Certificate (cert-manager). */
  tls: Record<string, unknown>[];
  /** The CRD's conversion webhook, for a kind with previous versions. */
  conversion?: ConversionClient;
  /** The Mutating/ValidatingWebhookConfigurations (none for a function without default/validate). */
  configurations: Record<string, unknown>[];
  /** With kfn's CA: true when the certificate was made now (not kept from `existing`). */
  renewed: boolean;
  /** With kfn's CA: the bundle its clients trust (for a function with deliveryTls, its Reconciler's sink: ManifestOptions.deliveryCaBundle). */
  caBundle?: string;
}

/**
 * Everything the apiserver needs to call a function's webhooks at its Service kfn-fn-<name> in
 * `namespace` (port 443, as `functionWorkload` serves them): the certificate, the CRD's
 * conversion client and the admission configurations. undefined for a function without an
 * HTTPS listener (no webhooks, no deliveryTls).
 */
export function webhookSet(reconciler: Reconciler, options: { namespace: string; ca: WebhookCa; namespaces?: string[]; owner?: WebhookOwner }): WebhookSet | undefined {
  if (!servesHttps(reconciler)) return undefined;
  const service = `kfn-fn-${reconciler.name}`;
  const client = { service: { namespace: options.namespace, name: service } };
  const secretName = webhookTlsSecretName(reconciler);
  const labels = functionLabels(reconciler.name);
  const previous = reconciler.for.options.previousVersions?.length;
  if (options.ca.kind === 'kfn') {
    const tls = webhookTls(options.ca.existing, service, webhookDnsNames(service, options.namespace));
    const secret = { apiVersion: 'v1', kind: 'Secret', metadata: { name: secretName, namespace: options.namespace, labels }, type: 'kubernetes.io/tls', data: tls.data };
    return {
      tls: [secret],
      ...(previous ? { conversion: { client, caBundle: tls.caBundle } } : {}),
      configurations: webhookConfigurations(reconciler, { client, caBundle: tls.caBundle, namespaces: options.namespaces, owner: options.owner }),
      renewed: tls.renewed,
      caBundle: tls.caBundle,
    };
  }
  const issuer = options.ca.issuer ?? { kind: 'Issuer' as const, name: 'kfn-selfsigned' };
  const certificate = `${service}-webhook`;
  const injectCaFrom = `${options.namespace}/${certificate}`;
  return {
    tls: [
      ...(options.ca.issuer ? [] : [{ apiVersion: 'cert-manager.io/v1', kind: 'Issuer', metadata: { name: issuer.name, namespace: options.namespace, labels }, spec: { selfSigned: {} } }]),
      {
        apiVersion: 'cert-manager.io/v1',
        kind: 'Certificate',
        metadata: { name: certificate, namespace: options.namespace, labels },
        spec: { secretName, dnsNames: webhookDnsNames(service, options.namespace), issuerRef: { group: 'cert-manager.io', kind: issuer.kind, name: issuer.name } },
      },
    ],
    ...(previous ? { conversion: { client, injectCaFrom } } : {}),
    configurations: webhookConfigurations(reconciler, { client, injectCaFrom, namespaces: options.namespaces, owner: options.owner }),
    renewed: false,
  };
}
