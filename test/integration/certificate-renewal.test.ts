// A function renews its own serving certificate on the real apiserver: its TLS Secret holds a
// certificate with ten days left (within the 30-day window), its webhook configurations and its
// CRD's conversion webhook trust that certificate's CA, and the function starts — under its own
// ServiceAccount, with exactly the RBAC `kfn manifests` and `kfn deploy` give it. It writes the new
// CA beside the old one into every bundle, then a new certificate into the Secret; the test puts
// the Secret's files where the listener reads them (as the kubelet does for a pod's mounted
// Secret), and the apiserver's admission and conversion calls still succeed over the new one.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from 'node:tls';
import pino from 'pino';
import { applyObject, KubeApi } from '../../kube/api.ts';
import { connectionFromOptions } from '../../kube/connection.ts';
import { requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { generateServingPki } from '../../core/certificates.ts';
import { waitFor } from '../../core/clock.ts';
import { defineReconciler, serve } from '../../functions/sdk/index.ts';
import { pemCertificates, secretPem, tlsSecretData } from '../../functions/sdk/certificate.ts';
import { functionManifests, functionServiceUrl, webhookTlsSecretName } from '../../functions/sdk/manifests.ts';
import { CertificateRenewer, functionRenewal } from '../../functions/sdk/renewal.ts';
import { webhookConfigurations } from '../../functions/sdk/webhooks.ts';
import { shirtKind } from '../../functions/sdk/testdata/shirt.ts';
import { freePort } from '../support/bridge.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';

const day = 24 * 3600_000;

/** The certificate a TLS listener serves, as a client meets it (its SHA-256 fingerprint, colon-separated). */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.once('error', reject);
  });
}

const fingerprintOf = (pem: string) =>
  createHash('sha256')
    .update(Buffer.from(pem.replace(/-----(BEGIN|END) CERTIFICATE-----|\s/g, ''), 'base64'))
    .digest('hex')
    .toUpperCase()
    .match(/../g)!
    .join(':');

test('a function whose certificate is near its end renews it at start: the bundles trust the new CA, the Secret holds the new certificate, admission and conversion still succeed', async (t) => {
  const cluster = await testCluster();
  const admin = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'certificate-renewal');
  const group = `${uniqueName('renewal')}.kfn.test`;
  const Shirt = shirtKind(group);
  const reconciler = defineReconciler({
    name: uniqueName('shirts'),
    for: Shirt,
    default: () => undefined,
    validate: (shirt) => (shirt.spec.chest.value > 300 ? ['spec.chest.value: no shirt is that big'] : []),
    reconcile: () => ({}),
  });
  const dir = mkdtempSync(join(tmpdir(), 'kfn-certificate-renewal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const webhookPort = await freePort();
  const client = { url: `https://127.0.0.1:${webhookPort}` };

  // The Secret ten days before its certificate ends (a short-lived one: the same as a year-old one).
  const old = generateServingPki(`kfn-fn-${reconciler.name}`, ['localhost'], { ips: ['127.0.0.1'], now: new Date(Date.now() - day), validityMs: 11 * day });
  const secretName = webhookTlsSecretName(reconciler);
  await admin.request('POST', `/api/v1/namespaces/${ns}/secrets`, { body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: secretName, namespace: ns }, type: 'kubernetes.io/tls', data: tlsSecretData(old) } });
  // As the kubelet mounts it into the pod.
  const project = (data: Record<string, string>) => {
    writeFileSync(join(dir, 'tls.crt'), secretPem(data, 'tls.crt')!);
    writeFileSync(join(dir, 'tls.key'), secretPem(data, 'tls.key')!, { mode: 0o600 });
  };
  project(tlsSecretData(old));

  // Its CRD (conversion through the function), identity and RBAC as `kfn deploy` writes them
  // (its Service the sink: the function renews its own certificate); its Reconciler is not
  // needed here. Then its webhook configurations, trusting the old CA.
  const objects = functionManifests(reconciler, { namespace: ns, sinkUri: functionServiceUrl(reconciler, ns), namespaces: [ns], conversion: { client, caBundle: old.caCert } });
  const wanted = objects.filter((o) => ['CustomResourceDefinition', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind as string) && !(o.metadata as { name: string }).name.startsWith('kfn-bridge-'));
  assert.deepEqual(
    wanted.filter((o) => (o.metadata as { name: string }).name.startsWith(`kfn-fn-${reconciler.name}-certificate`)).map((o) => o.kind),
    ['ClusterRole', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'],
    'the rights to renew it',
  );
  for (const obj of wanted) {
    await applyObject(admin, obj as never, 'kfn-test');
    const { name } = obj.metadata as { name: string };
    const path = {
      CustomResourceDefinition: `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
      ClusterRole: `/apis/rbac.authorization.k8s.io/v1/clusterroles/${name}`,
      ClusterRoleBinding: `/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${encodeURIComponent(name)}`,
    }[obj.kind as string];
    if (path) t.after(() => admin.request('DELETE', path).catch(() => undefined));
  }
  const configPaths: string[] = [];
  for (const config of webhookConfigurations(reconciler, { client, caBundle: old.caCert, namespaces: [ns] })) {
    const path = `/apis/admissionregistration.k8s.io/v1/${(config.kind as string).toLowerCase()}s/${(config.metadata as { name: string }).name}`;
    await applyObject(admin, config as never, 'kfn-test');
    configPaths.push(path);
    t.after(() => admin.request('DELETE', path).catch(() => undefined));
  }
  const crdPath = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/shirts.${group}`;
  await waitFor('both versions of Shirt to be served', async () => (await admin.resource(`${group}/v1`, 'Shirt')) && (await admin.resource(`${group}/v1alpha1`, 'Shirt')));

  // The function, under its own ServiceAccount's token.
  const cc = cluster.kc.getCurrentCluster()!;
  const token = await requestServiceAccountToken(admin, { namespace: ns, name: `kfn-fn-${reconciler.name}` });
  const own = new KubeApi(connectionFromOptions({ server: cc.server, ca: cc.caData ? Buffer.from(cc.caData, 'base64').toString() : undefined, insecureSkipTlsVerify: cc.skipTLSVerify, token }));
  // RBAC takes a moment to reach the authorizer: a pod would find out at its next check, the test
  // waits until the identity may do what a renewal does.
  const may = (verb: string, apiGroup: string, resource: string, name: string, namespace?: string) =>
    own
      .request<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', { body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: { verb, group: apiGroup, resource, name, namespace } } } })
      .then((r) => r.status.allowed);
  await waitFor('the function\'s rights to renew its certificate', async () =>
    (await may('update', '', 'secrets', secretName, ns)) && (await may('patch', 'admissionregistration.k8s.io', 'validatingwebhookconfigurations', `kfn-fn-${reconciler.name}`)) && (await may('patch', 'apiextensions.k8s.io', 'customresourcedefinitions', `shirts.${group}`)),
  );
  assert.equal(await may('update', '', 'secrets', `kfn-fn-${reconciler.name}`, ns), false, 'not its auth Secret');
  assert.equal(await may('patch', 'admissionregistration.k8s.io', 'validatingwebhookconfigurations', 'kfn-fn-other'), false, 'not another function\'s configuration');
  const lines: string[] = [];
  const renewal = { ...functionRenewal(reconciler, { namespace: ns, name: secretName }, () => own), names: { dnsNames: ['localhost'], ips: ['127.0.0.1'] }, log: (line: string) => lines.push(line) };
  const server = await serve(reconciler, { port: await freePort(), hostname: '127.0.0.1', webhooks: { port: webhookPort, certDir: dir }, renewal, api: own, credentials: { kind: 'none' }, log: pino({ level: 'silent' }), record: false });
  t.after(() => new Promise<void>((r) => server.close(() => r())));

  const secretPath = `/api/v1/namespaces/${ns}/secrets/${secretName}`;
  const renewed = await waitFor(
    'the function to renew its certificate',
    async () => {
      // Its one line is written once the update has been answered.
      if (!lines.some((l) => l.startsWith('kfn: renewed'))) return undefined;
      const secret = await admin.request<{ data: Record<string, string> }>('GET', secretPath);
      return secretPem(secret.data, 'tls.crt') !== old.cert ? secret.data : undefined;
    },
    { timeoutMs: 60_000, context: () => lines.join('\n') },
  );
  assert.equal(lines.length, 1, lines.join('\n'));
  assert.match(lines[0]!, new RegExp(`^kfn: renewed the serving certificate in Secret ${ns}/${secretName} because it expires .*: the new one is valid until .*; MutatingWebhookConfiguration kfn-fn-${reconciler.name}, ValidatingWebhookConfiguration kfn-fn-${reconciler.name}, CustomResourceDefinition shirts\\.${group.replace(/\./g, '\\.')} trust the new CA beside the previous one$`));
  const newCa = secretPem(renewed, 'ca.crt')!;
  const cert = secretPem(renewed, 'tls.crt')!;
  const bundle = (b64: string) => pemCertificates(Buffer.from(b64, 'base64').toString());
  for (const path of configPaths) {
    const config = await admin.request<{ webhooks: { clientConfig: { caBundle: string } }[] }>('GET', path);
    assert.deepEqual(bundle(config.webhooks[0]!.clientConfig.caBundle), [newCa.trim(), old.caCert.trim()], `${path}: the new CA, and the old one while pods serve the old files`);
  }
  const crd = await admin.request<{ spec: { conversion: { webhook: { clientConfig: { caBundle: string } } } } }>('GET', crdPath);
  assert.deepEqual(bundle(crd.spec.conversion.webhook.clientConfig.caBundle), [newCa.trim(), old.caCert.trim()], 'the CRD\'s conversion webhook too');

  // The kubelet brings the new files to the pod; the listener takes them without a restart.
  project(renewed);
  await waitFor('the listener to serve the new certificate', async () => (await servedFingerprint(webhookPort)) === fingerprintOf(cert) || undefined, { timeoutMs: 20_000 });

  // The apiserver calls the webhooks over the new certificate: validation still refuses, a good
  // shirt is admitted, and a read at the old version goes through the conversion webhook.
  const shirts = (version: string, name = '') => `/apis/${group}/${version}/namespaces/${ns}/shirts${name ? `/${name}` : ''}`;
  await assert.rejects(
    admin.request('POST', shirts('v1'), { body: { apiVersion: `${group}/v1`, kind: 'Shirt', metadata: { name: 'tent' }, spec: { chest: { value: 400, unit: 'cm' } } } }),
    /denied the request: .*spec\.chest\.value: no shirt is that big/,
  );
  await admin.request('POST', shirts('v1'), { body: { apiVersion: `${group}/v1`, kind: 'Shirt', metadata: { name: 'fits' }, spec: { chest: { value: 40, unit: 'in' } } } });
  const converted = await admin.request<{ apiVersion: string; spec: unknown }>('GET', shirts('v1alpha1', 'fits'));
  assert.deepEqual([converted.apiVersion, converted.spec], [`${group}/v1alpha1`, { chestCm: 102 }]);

  // Started again (another pod), the function finds the certificate good and writes nothing.
  const again = await new CertificateRenewer(renewal).check();
  assert.equal(again.kind, 'kept');
  assert.equal(lines.length, 1);
});
