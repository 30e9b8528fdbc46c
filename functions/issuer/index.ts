// Issuer (certs.kfn.dev/v1alpha1), after the seed's cert-manager case study: who signs
// Certificates. Self-signed, or a CA whose certificate and key are in a Secret (tls.crt,
// tls.key). Ready when it can sign. (The group is kfn's own, so that it never collides with a
// cert-manager installed in the same cluster.)
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { Secret, defineKind, defineReconciler, t, type ObjectOf, type ReconcileContext } from '../sdk/index.ts';

export const Issuer = defineKind({
  group: 'certs.kfn.dev',
  version: 'v1alpha1',
  kind: 'Issuer',
  spec: t.Object({
    selfSigned: t.Optional(t.Object({})),
    ca: t.Optional(t.Object({ secretName: t.String({ minLength: 1 }) })),
  }),
  status: t.Object({}),
  printerColumns: [{ name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' }],
});
export type IssuerObject = ObjectOf<typeof Issuer>;

export interface SigningCa {
  cert: string;
  key: string;
}

/** The CA of a `ca` issuer, read and checked; undefined for a self-signed one. Throws what is wrong. */
export async function signingCa(issuer: IssuerObject, ctx: ReconcileContext): Promise<SigningCa | undefined> {
  if (issuer.spec.selfSigned && !issuer.spec.ca) return undefined;
  if (!issuer.spec.ca || issuer.spec.selfSigned) throw new Error('spec needs exactly one of selfSigned or ca');
  const secret = await ctx.get(Secret, issuer.spec.ca.secretName, issuer.metadata.namespace);
  if (!secret?.data?.['tls.crt'] || !secret.data['tls.key']) throw new Error(`Secret ${issuer.spec.ca.secretName} needs tls.crt and tls.key`);
  const cert = Buffer.from(secret.data['tls.crt'], 'base64').toString();
  const key = Buffer.from(secret.data['tls.key'], 'base64').toString();
  const x509 = new X509Certificate(cert);
  if (!x509.ca) throw new Error(`the certificate in ${issuer.spec.ca.secretName} is not a CA`);
  if (!x509.checkPrivateKey(createPrivateKey(key))) throw new Error(`tls.key in ${issuer.spec.ca.secretName} does not match tls.crt`);
  return { cert, key };
}

export default defineReconciler({
  name: 'issuer',
  for: Issuer,
  // The CA's Secret appearing or changing reconciles the Issuers naming it (no polling).
  watches: [{ ...Secret, mapping: { referenceField: 'spec.ca.secretName' } }],
  uses: [{ kind: Secret, verbs: ['get'] }],
  async reconcile(issuer, ctx) {
    try {
      await signingCa(issuer, ctx);
      return { ready: true };
    } catch (err) {
      return { ready: { ready: false, reason: 'CannotSign', message: (err as Error).message } };
    }
  },
});
