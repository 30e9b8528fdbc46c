// A function's serving certificate — the HTTPS listener that answers the apiserver's webhook
// calls and, when asked for, the bridge's deliveries — as its TLS Secret holds it: when it is due
// for renewal, and the CA bundle its clients trust around a renewal. Pure, so that both writers
// of the Secret decide alike: `kfn deploy` and `kfn manifests` (cli/webhook-tls.ts) when they
// write it, and the deployed function (renewal.ts) while it runs.
import { X509Certificate } from 'node:crypto';

/** A certificate is renewed when it has less than this left: 30 days, room for a month of failed attempts. */
export const renewBeforeMs = 30 * 24 * 3600_000;

/** What a serving certificate must name: a function's Service (its DNS names), or loopback (IPs). */
export interface CertificateNames {
  dnsNames: string[];
  ips?: string[];
}

/** The DNS names of a function's Service, which its serving certificate must name. */
export const serviceDnsNames = (service: string, namespace: string) => [`${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`];

/** A PEM value of a TLS Secret's data (base64, as the API gives it): `tls.crt`, `tls.key` or `ca.crt`. */
export function secretPem(data: Record<string, string> | undefined, key: 'tls.crt' | 'tls.key' | 'ca.crt'): string | undefined {
  const value = data?.[key];
  return value ? Buffer.from(value, 'base64').toString() : undefined;
}

/** A TLS Secret's data for this key material. */
export function tlsSecretData(pki: { cert: string; key: string; caCert: string }): Record<string, string> {
  const b64 = (v: string) => Buffer.from(v).toString('base64');
  return { 'tls.crt': b64(pki.cert), 'tls.key': b64(pki.key), 'ca.crt': b64(pki.caCert) };
}

/**
 * Why the certificate in a TLS Secret's `data` must be renewed at `now`, or undefined while it
 * is good: there is none, it cannot be read, it does not name every one of `names`, or it has
 * less than 30 days left.
 */
export function renewalDue(data: Record<string, string> | undefined, names: CertificateNames, now: Date): string | undefined {
  const [cert, key, ca] = [secretPem(data, 'tls.crt'), secretPem(data, 'tls.key'), secretPem(data, 'ca.crt')];
  if (!cert || !key || !ca) return 'no certificate yet';
  try {
    const x = new X509Certificate(cert);
    const named = (x.subjectAltName ?? '').split(', ');
    const wanted = [...names.dnsNames.map((n) => [n, `DNS:${n}`]), ...(names.ips ?? []).map((ip) => [ip, `IP Address:${ip}`])];
    const missing = wanted.find(([, entry]) => !named.includes(entry!));
    if (missing) return `it does not name ${missing[0]}`;
    if (Date.parse(x.validTo) - now.getTime() < renewBeforeMs) return `it expires ${new Date(x.validTo).toISOString()}`;
    new X509Certificate(ca);
    return undefined;
  } catch (err) {
    return `it cannot be read (${(err as Error).message})`;
  }
}

/** When the certificate in a TLS Secret's data ends; undefined when there is none to read. */
export function certificateEnd(data: Record<string, string> | undefined): Date | undefined {
  const cert = secretPem(data, 'tls.crt');
  try {
    return cert ? new Date(new X509Certificate(cert).validTo) : undefined;
  } catch {
    return undefined;
  }
}

/** The PEM certificates of a bundle, in order. */
export const pemCertificates = (bundle: string | undefined): string[] => bundle?.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];

/** Whether a PEM certificate can be read and is valid at `now`. */
function stillValid(pem: string, now: Date): boolean {
  try {
    return Date.parse(new X509Certificate(pem).validTo) > now.getTime();
  } catch {
    return false;
  }
}

/**
 * The CA bundle the clients of a renewed certificate trust: the new CA, then `previous` ones
 * still valid. Until every pod serves the new certificate (the kubelet brings a changed Secret
 * to the pods within about a minute), clients still meet the old one.
 */
export function caBundleAfter(current: string, previous: string[] | string | undefined, now: Date): string {
  const wanted = pemCertificates(current);
  const kept = [...new Set(pemCertificates(Array.isArray(previous) ? previous.join('\n') : previous))].filter((pem) => stillValid(pem, now) && !wanted.includes(pem));
  return kept.length ? `${current.trimEnd()}\n${kept.join('\n')}\n` : current;
}
