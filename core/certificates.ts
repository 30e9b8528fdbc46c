// Certificates kfn makes itself: the local cluster's (cluster/pki.ts) and a function's serving
// certificate with a CA of its own — the one the apiserver trusts for its webhooks and the bridge
// for its deliveries over TLS. The CLI makes the first one; a deployed function renews it before
// it ends (functions/sdk/renewal.ts), so both import this. Keys come from node:crypto (native,
// fast); node-forge only assembles and signs certificates, which node:crypto cannot.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';

export interface PemKeyPair {
  privateKey: string;
  publicKey: string;
}

/** An RSA-2048 key pair; the private key as PKCS#1 PEM, which node-forge and Kubernetes both read. */
export function rsaKeyPair(): PemKeyPair {
  return generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
}

/** How long kfn's certificates last unless told otherwise: a year. */
export const defaultValidityMs = 365 * 24 * 3600_000;

/**
 * A certificate for `publicKey`, signed with `signingKey`, valid from a minute before `now`
 * (clocks a little behind still accept it) for `validityMs`.
 */
export function signCertificate(options: {
  subject: string;
  organization?: string;
  issuer: string;
  publicKey: string;
  signingKey: string;
  now: Date;
  validityMs?: number;
  extensions: object[];
}): string {
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(options.publicKey);
  // A positive 16-byte serial: the high bit cleared so DER does not read it as negative.
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  cert.serialNumber = serial.toString('hex');
  cert.validity.notBefore = new Date(options.now.getTime() - 60_000);
  cert.validity.notAfter = new Date(options.now.getTime() + (options.validityMs ?? defaultValidityMs));
  cert.setSubject([{ name: 'commonName', value: options.subject }, ...(options.organization ? [{ name: 'organizationName', value: options.organization }] : [])]);
  cert.setIssuer([{ name: 'commonName', value: options.issuer }]);
  cert.setExtensions(options.extensions);
  cert.sign(forge.pki.privateKeyFromPem(options.signingKey), forge.md.sha256.create());
  return forge.pki.certificateToPem(cert);
}

/** The extensions of a CA certificate (fresh objects each time: node-forge fills them in). */
const caExtensions = () => [
  { name: 'basicConstraints', cA: true, critical: true },
  { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
  { name: 'subjectKeyIdentifier' },
];

/** The subjectAltName entries of DNS names and IP addresses (node-forge's types 2 and 7). */
export const altNames = (dnsNames: string[], ips: string[] = []) => [...dnsNames.map((value) => ({ type: 2, value })), ...ips.map((ip) => ({ type: 7, ip }))];

/** The extensions of a TLS serving certificate for these subjectAltNames. */
export const servingExtensions = (names: object[]) => [
  { name: 'basicConstraints', cA: false, critical: true },
  { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
  { name: 'extKeyUsage', serverAuth: true },
  { name: 'subjectAltName', altNames: names },
];

/** A CA of its own: a key pair and a certificate it signed for itself, named `name`. */
export function selfSignedCa(name: string, now: Date, validityMs?: number): { ca: PemKeyPair; caCert: string } {
  const ca = rsaKeyPair();
  return { ca, caCert: signCertificate({ subject: name, issuer: name, publicKey: ca.publicKey, signingKey: ca.privateKey, now, validityMs, extensions: caExtensions() }) };
}

/** A serving certificate and the CA of its own it is signed by (what a client is told to trust). */
export interface ServingPki {
  caCert: string;
  cert: string;
  key: string;
}

export interface ServingPkiOptions {
  /** IP addresses it also names (127.0.0.1 for a function the apiserver calls on loopback). */
  ips?: string[];
  now?: Date;
  /** How long the CA and the certificate last (default a year; tests make short ones). */
  validityMs?: number;
}

/**
 * Key material for a function's HTTPS listener (its webhooks, its deliveries over TLS): a CA of
 * its own, `<name>-webhook-ca`, and a serving certificate for `dnsNames` (the function's Service names)
 * and `options.ips`, signed by it.
 */
export function generateServingPki(name: string, dnsNames: string[], options: ServingPkiOptions = {}): ServingPki {
  const now = options.now ?? new Date();
  const ips = options.ips ?? [];
  const issuer = `${name}-webhook-ca`;
  const { ca, caCert } = selfSignedCa(issuer, now, options.validityMs);
  const serving = rsaKeyPair();
  const cert = signCertificate({
    subject: dnsNames[0] ?? ips[0] ?? name,
    issuer,
    publicKey: serving.publicKey,
    signingKey: ca.privateKey,
    now,
    validityMs: options.validityMs,
    extensions: servingExtensions(altNames(dnsNames, ips)),
  });
  return { caCert, cert, key: serving.privateKey };
}
