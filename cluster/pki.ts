// Key material for one local cluster: a CA, the apiserver's serving certificate signed by it,
// and the key pair that signs and verifies ServiceAccount tokens. Everything is generated fresh
// for each `cluster up` and lives only in the cluster's state directory.
// Keys come from node:crypto (native, fast); node-forge only assembles and signs certificates.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';

export interface ClusterPki {
  caCert: string;
  caKey: string;
  servingCert: string;
  servingKey: string;
  serviceAccountKey: string;
  serviceAccountPublicKey: string;
  /** The apiserver's client certificate towards the kubelet (logs, exec, port-forward). */
  kubeletClientCert: string;
  kubeletClientKey: string;
}

interface PemKeyPair {
  privateKey: string;
  publicKey: string;
}

function rsaKeyPair(): PemKeyPair {
  // PKCS#1 PEM is what node-forge reads; Kubernetes reads it too.
  return generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
}

/** DNS names and IPs the apiserver answers to: loopback, and its in-cluster Service names. */
export function apiserverAltNames(serviceIp: string): { type: number; ip?: string; value?: string }[] {
  const dns = ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc', 'kubernetes.default.svc.cluster.local'];
  return [{ type: 7, ip: '127.0.0.1' }, { type: 7, ip: serviceIp }, ...dns.map((value) => ({ type: 2, value }))];
}

function certificate(options: {
  subject: string;
  organization?: string;
  issuer: string;
  publicKey: string;
  signingKey: string;
  now: Date;
  extensions: object[];
}): string {
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(options.publicKey);
  // A positive 16-byte serial: the high bit cleared so DER does not read it as negative.
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  cert.serialNumber = serial.toString('hex');
  cert.validity.notBefore = new Date(options.now.getTime() - 60_000);
  cert.validity.notAfter = new Date(options.now.getTime() + 365 * 24 * 3600_000);
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

/** The extensions of a TLS serving certificate for these names. */
const servingExtensions = (altNames: object[]) => [
  { name: 'basicConstraints', cA: false, critical: true },
  { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
  { name: 'extKeyUsage', serverAuth: true },
  { name: 'subjectAltName', altNames },
];

/** A CA of its own: a key pair and a certificate it signed for itself, named `name`. */
function selfSignedCa(name: string, now: Date): { ca: ReturnType<typeof rsaKeyPair>; caCert: ReturnType<typeof certificate> } {
  const ca = rsaKeyPair();
  return { ca, caCert: certificate({ subject: name, issuer: name, publicKey: ca.publicKey, signingKey: ca.privateKey, now, extensions: caExtensions() }) };
}

export function generateClusterPki(serviceIp: string, now = new Date()): ClusterPki {
  const { ca, caCert } = selfSignedCa('kfn-local-ca', now);
  const serving = rsaKeyPair();
  const servingCert = certificate({
    subject: 'kube-apiserver',
    issuer: 'kfn-local-ca',
    publicKey: serving.publicKey,
    signingKey: ca.privateKey,
    now,
    extensions: servingExtensions(apiserverAltNames(serviceIp)),
  });
  // The kubelet authorizes the apiserver's requests by SubjectAccessReview; system:masters may do all.
  const kubeletClient = rsaKeyPair();
  const kubeletClientCert = certificate({
    subject: 'kube-apiserver-kubelet-client',
    organization: 'system:masters',
    issuer: 'kfn-local-ca',
    publicKey: kubeletClient.publicKey,
    signingKey: ca.privateKey,
    now,
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', clientAuth: true },
    ],
  });
  // ServiceAccount tokens are signed RS256, the algorithm every Kubernetes client expects.
  const sa = rsaKeyPair();
  return {
    caCert,
    caKey: ca.privateKey,
    servingCert,
    servingKey: serving.privateKey,
    serviceAccountKey: sa.privateKey,
    serviceAccountPublicKey: sa.publicKey,
    kubeletClientCert,
    kubeletClientKey: kubeletClient.privateKey,
  };
}

/** A webhook's key material: its own CA (the caBundle of its webhook configurations) and a serving certificate signed by it. */
export interface WebhookPki {
  caCert: string;
  cert: string;
  key: string;
}

/**
 * Key material for a function's admission webhooks, valid a year: a CA of its own and a serving
 * certificate for `dnsNames` (the function's Service names) and `ips` (127.0.0.1 for a function
 * the apiserver calls on loopback).
 */
export function generateWebhookPki(name: string, dnsNames: string[], ips: string[] = [], now = new Date()): WebhookPki {
  const { ca, caCert } = selfSignedCa(`${name}-webhook-ca`, now);
  const serving = rsaKeyPair();
  const cert = certificate({
    subject: dnsNames[0] ?? ips[0] ?? name,
    issuer: `${name}-webhook-ca`,
    publicKey: serving.publicKey,
    signingKey: ca.privateKey,
    now,
    extensions: servingExtensions([...dnsNames.map((value) => ({ type: 2, value })), ...ips.map((ip) => ({ type: 7, ip }))]),
  });
  return { caCert, cert, key: serving.privateKey };
}
