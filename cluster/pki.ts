// Key material for one local cluster: a CA, the apiserver's serving certificate signed by it,
// and the key pair that signs and verifies ServiceAccount tokens. Everything is generated fresh
// for each `cluster up` and lives only in the cluster's state directory. The certificates are
// made as every kfn certificate is (core/certificates.ts).
import { altNames, rsaKeyPair, selfSignedCa, servingExtensions, signCertificate } from '../core/certificates.ts';

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

/** DNS names and IPs the apiserver answers to: loopback, and its in-cluster Service names. */
export function apiserverAltNames(serviceIp: string): { type: number; ip?: string; value?: string }[] {
  return altNames(['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc', 'kubernetes.default.svc.cluster.local'], ['127.0.0.1', serviceIp]);
}

export function generateClusterPki(serviceIp: string, now = new Date()): ClusterPki {
  const { ca, caCert } = selfSignedCa('kfn-local-ca', now);
  const serving = rsaKeyPair();
  const servingCert = signCertificate({
    subject: 'kube-apiserver',
    issuer: 'kfn-local-ca',
    publicKey: serving.publicKey,
    signingKey: ca.privateKey,
    now,
    extensions: servingExtensions(apiserverAltNames(serviceIp)),
  });
  // The kubelet authorizes the apiserver's requests by SubjectAccessReview; system:masters may do all.
  const kubeletClient = rsaKeyPair();
  const kubeletClientCert = signCertificate({
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
