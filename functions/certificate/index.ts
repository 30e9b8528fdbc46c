// Certificate (certs.kfn.dev/v1alpha1), after the seed's cert-manager case study: a TLS Secret
// holding a real X.509 key pair for spec.dnsNames, signed by the referenced Issuer, valid for
// spec.duration and renewed spec.renewBefore its expiry (the function asks to be called again
// then). A certificate that still fits the spec is kept as it is: no new key on every call.
import { X509Certificate, generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';
import { Secret, child, defineKind, defineReconciler, t, type KindRef, type ObjectOf, type ReconcileContext } from '../sdk/index.ts';

/**
 * The Issuer kind, as this function reads it: through its API (the issuer function owns the
 * kind and checks its CA; its Ready condition says the CA can sign), not through its code.
 */
interface IssuerObject {
  metadata: { name: string; namespace?: string };
  spec: { selfSigned?: object; ca?: { secretName: string } };
  status?: { conditions?: { type: string; status: string }[] };
}
const Issuer: KindRef<IssuerObject> = { apiVersion: 'certs.kfn.dev/v1alpha1', kind: 'Issuer' };

interface SigningCa {
  cert: string;
  key: string;
}

/** The CA a Ready Issuer signs with: undefined for a self-signed one; its Secret's pair for a CA issuer. */
async function signingCa(issuer: IssuerObject, ctx: ReconcileContext): Promise<SigningCa | undefined> {
  if (!issuer.spec.ca) return undefined;
  const secret = await ctx.get(Secret, issuer.spec.ca.secretName, issuer.metadata.namespace);
  const [cert, key] = [secret?.data?.['tls.crt'], secret?.data?.['tls.key']];
  if (!cert || !key) throw new Error(`the CA Secret ${issuer.spec.ca.secretName} of Issuer ${issuer.metadata.name} has no tls.crt and tls.key`);
  return { cert: Buffer.from(cert, 'base64').toString(), key: Buffer.from(key, 'base64').toString() };
}

const goDuration = { pattern: '^[0-9]+(h|m|s)$' };

export const Certificate = defineKind({
  group: 'certs.kfn.dev',
  version: 'v1alpha1',
  kind: 'Certificate',
  spec: t.Object({
    secretName: t.String({ minLength: 1 }),
    dnsNames: t.Array(t.String({ minLength: 1 }), { minItems: 1 }),
    issuerRef: t.Object({ name: t.String({ minLength: 1 }), kind: t.Optional(t.Literal('Issuer')) }),
    duration: t.String({ ...goDuration, default: '2160h' }),
    renewBefore: t.String({ ...goDuration, default: '360h' }),
  }),
  status: t.Object({ notBefore: t.Optional(t.String()), notAfter: t.Optional(t.String()), serialNumber: t.Optional(t.String()) }),
  printerColumns: [
    { name: 'Secret', type: 'string', jsonPath: '.spec.secretName' },
    { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
    { name: 'Expires', type: 'date', jsonPath: '.status.notAfter' },
  ],
});
type Cert = ObjectOf<typeof Certificate>;

export function durationMs(text: string): number {
  const m = text.match(/^([0-9]+)(h|m|s)$/);
  if (!m) throw new Error(`not a duration: ${text}`);
  return Number(m[1]) * { h: 3_600_000, m: 60_000, s: 1000 }[m[2] as 'h' | 'm' | 's'];
}

interface Pem {
  cert: string;
  key: string;
}

/** Issues a key pair and certificate for the names, signed by the CA (or by itself). */
function issue(cert: Cert, ca: SigningCa | undefined, now: Date): Pem {
  const keys = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs1', format: 'pem' } });
  const c = forge.pki.createCertificate();
  c.publicKey = forge.pki.publicKeyFromPem(keys.publicKey);
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  c.serialNumber = serial.toString('hex');
  c.validity.notBefore = new Date(now.getTime() - 60_000);
  c.validity.notAfter = new Date(now.getTime() + durationMs(cert.spec.duration));
  c.setSubject([{ name: 'commonName', value: cert.spec.dnsNames[0]! }]);
  const issuerCert = ca ? forge.pki.certificateFromPem(ca.cert) : undefined;
  c.setIssuer(issuerCert ? issuerCert.subject.attributes : [{ name: 'commonName', value: cert.spec.dnsNames[0]! }]);
  c.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: true, clientAuth: true },
    { name: 'subjectAltName', altNames: cert.spec.dnsNames.map((value) => ({ type: 2, value })) },
  ]);
  c.sign(forge.pki.privateKeyFromPem(ca ? ca.key : keys.privateKey), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(c), key: keys.privateKey };
}

/** True when the live certificate still serves the spec: same names, same signer, not due. */
function stillGood(pem: string, cert: Cert, ca: SigningCa | undefined, now: Date): boolean {
  try {
    const x = new X509Certificate(pem);
    const names = (x.subjectAltName ?? '').split(', ').map((n) => n.replace(/^DNS:/, '')).sort();
    if (names.join() !== [...cert.spec.dnsNames].sort().join()) return false;
    if (ca) {
      const signer = new X509Certificate(ca.cert);
      if (!x.checkIssued(signer) || !x.verify(signer.publicKey)) return false;
    } else if (x.issuer !== x.subject || !x.verify(x.publicKey)) {
      return false; // self-signed: it names itself as issuer and its own key signed it
    }
    return Date.parse(x.validTo) - durationMs(cert.spec.renewBefore) > now.getTime();
  } catch {
    return false;
  }
}

export default defineReconciler({
  name: 'certificate',
  for: Certificate,
  owns: [Secret],
  // Its events carry the Secret's data: a certificate still good is kept, not reissued.
  observe: [{ kind: Secret, fields: ['metadata.annotations', 'data'] }],
  // An Issuer's change (ready, or a new CA) reconciles the Certificates naming it: the bridge
  // keeps an index of spec.issuerRef.name, so nothing polls.
  watches: [{ ...Issuer, mapping: { referenceField: 'spec.issuerRef.name' } }],
  uses: [{ kind: Issuer, verbs: ['get'] }],
  async reconcile(cert, ctx) {
    const live = ctx.owned(Secret, cert.spec.secretName);
    const keep = live?.data ? [child(Secret, { metadata: { name: cert.spec.secretName }, type: 'kubernetes.io/tls', data: live.data })] : [];
    const issuer = await ctx.get(Issuer, cert.spec.issuerRef.name);
    const issuerReady = issuer?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    if (!issuer || !issuerReady) {
      // Keep what exists; the Issuer's next change brings this Certificate back.
      return { children: keep, ready: { ready: false, reason: 'IssuerNotReady', message: `Issuer ${cert.spec.issuerRef.name} ${issuer ? 'is not ready' : 'does not exist'}` } };
    }
    const ca = await signingCa(issuer, ctx);
    const now = ctx.now();
    const livePem = live?.data?.['tls.crt'] ? Buffer.from(live.data['tls.crt'], 'base64').toString() : undefined;
    let pem: Pem;
    if (livePem && live?.data?.['tls.key'] && stillGood(livePem, cert, ca, now)) {
      pem = { cert: livePem, key: Buffer.from(live.data['tls.key'], 'base64').toString() };
    } else {
      pem = issue(cert, ca, now);
      await ctx.event('Normal', 'Issued', `issued a certificate for ${cert.spec.dnsNames.join(', ')} signed by ${cert.spec.issuerRef.name}`);
    }
    const x = new X509Certificate(pem.cert);
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const renewAt = Date.parse(x.validTo) - durationMs(cert.spec.renewBefore);
    return {
      children: [{ apiVersion: 'v1', kind: 'Secret', metadata: { name: cert.spec.secretName }, type: 'kubernetes.io/tls', data: { 'tls.crt': b64(pem.cert), 'tls.key': b64(pem.key), 'ca.crt': b64(ca ? ca.cert : pem.cert) } }],
      status: { notBefore: new Date(x.validFrom).toISOString(), notAfter: new Date(x.validTo).toISOString(), serialNumber: x.serialNumber },
      ready: true,
      requeueAfterSeconds: Math.max(1, Math.ceil((renewAt - now.getTime()) / 1000)),
    };
  },
});
