// A deployed function renewing its own serving certificate, on a fake clock against a fake API
// (the order of the writes, the resourceVersion race between two replicas, failures): the same
// sequence against a real apiserver is test/integration/certificate-renewal.test.ts.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { FakeClock } from '../../core/clock.ts';
import { generateServingPki } from '../../core/certificates.ts';
import { ApiError, type RequestOptions } from '../../kube/api.ts';
import { pemCertificates, secretPem, serviceDnsNames, tlsSecretData } from './certificate.ts';
import { caBundleHolders, CertificateRenewer, functionRenewal, holderRules, type RenewalOptions } from './renewal.ts';
import { shirtKind } from './testdata/shirt.ts';
import { defineReconciler } from './index.ts';

const day = 24 * 3600_000;
const made = Date.parse('2026-01-01T00:00:00Z');
const secretPath = '/api/v1/namespaces/shop/secrets/kfn-fn-shirts-webhook-tls';
const mutating = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kfn-fn-shirts';
const validating = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kfn-fn-shirts';
const crd = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/shirts.test.kfn.dev';

/** Both webhooks and a conversion: every holder of the CA bundle. */
const shirts = defineReconciler({ name: 'shirts', for: shirtKind('test.kfn.dev'), default: () => undefined, validate: () => [], reconcile: () => ({}) });

type Stored = Record<string, unknown> & { metadata: { resourceVersion: string } };

/**
 * The objects a renewal touches, kept as the apiserver keeps them for these requests: a PUT on
 * an older resourceVersion is a 409, webhooks merge by name, other patches merge.
 */
class FakeApi {
  readonly objects = new Map<string, Stored>();
  readonly writes: string[] = [];
  private rv = 100;
  /** Fails every request to this path with this status. */
  failing = new Map<string, number>();
  private waiting: { path: string; count: number; arrived: (() => void)[] } | undefined;

  put(path: string, object: Record<string, unknown>): void {
    this.objects.set(path, { ...structuredClone(object), metadata: { ...(object.metadata as object), resourceVersion: String(++this.rv) } } as Stored);
  }

  /** The next `count` GETs of `path` answer together: replicas that read the same version. */
  readTogether(path: string, count: number): void {
    this.waiting = { path, count, arrived: [] };
  }

  async request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    await Promise.resolve();
    const status = this.failing.get(path);
    if (status) throw new ApiError(status, `${method} ${path}: refused (${status})`);
    const stored = this.objects.get(path);
    if (!stored) throw new ApiError(404, `${path} not found`, 'NotFound');
    if (method === 'GET') {
      const w = this.waiting;
      if (w?.path === path) {
        await new Promise<void>((release) => {
          w.arrived.push(release);
          if (w.arrived.length === w.count) w.arrived.forEach((r) => r());
        });
        if (w.arrived.length >= w.count) this.waiting = undefined;
      }
      return structuredClone(stored) as T;
    }
    this.writes.push(`${method} ${path}`);
    const body = structuredClone(options.body) as Record<string, unknown>;
    if (method === 'PUT') {
      if ((body.metadata as { resourceVersion?: string }).resourceVersion !== stored.metadata.resourceVersion) throw new ApiError(409, 'the object has been modified', 'Conflict');
      this.put(path, body);
    } else if (options.contentType === 'application/strategic-merge-patch+json') {
      const webhooks = stored.webhooks as { name: string; clientConfig: Record<string, unknown> }[];
      for (const w of (body as { webhooks: { name: string; clientConfig: Record<string, unknown> }[] }).webhooks) Object.assign(webhooks.find((x) => x.name === w.name)!.clientConfig, w.clientConfig);
      this.put(path, stored);
    } else {
      this.put(path, merge(stored, body));
    }
    return structuredClone(this.objects.get(path)) as T;
  }

  /** The CAs an object's bundle holds (the first webhook's, the conversion's). */
  bundle(path: string): string[] {
    const o = this.objects.get(path) as { webhooks?: { clientConfig: { caBundle: string } }[]; spec?: { conversion: { webhook: { clientConfig: { caBundle: string } } } } };
    const b64 = o.webhooks?.[0]!.clientConfig.caBundle ?? o.spec!.conversion.webhook.clientConfig.caBundle;
    return pemCertificates(Buffer.from(b64, 'base64').toString());
  }

  secret(): { data: Record<string, string>; metadata: { resourceVersion: string } } {
    return this.objects.get(secretPath) as never;
  }
}

function merge(target: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out = { ...target };
  for (const [k, v] of Object.entries(patch)) out[k] = v && typeof v === 'object' && !Array.isArray(v) && out[k] && typeof out[k] === 'object' ? merge(out[k] as Record<string, unknown>, v as Record<string, unknown>) : v;
  return out;
}

/** The cluster as `kfn deploy` left it: the Secret with a certificate made at `made` lasting `validityMs`, every holder trusting its CA. */
function deployed(validityMs = 365 * day) {
  const api = new FakeApi();
  const pki = generateServingPki('kfn-fn-shirts', serviceDnsNames('kfn-fn-shirts', 'shop'), { now: new Date(made), validityMs });
  const caBundle = Buffer.from(pki.caCert).toString('base64');
  api.put(secretPath, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'kfn-fn-shirts-webhook-tls', namespace: 'shop', managedFields: [{ manager: 'kfn-deploy' }] }, type: 'kubernetes.io/tls', data: tlsSecretData(pki) });
  for (const [path, mode] of [[mutating, 'default'], [validating, 'validate']] as const) {
    api.put(path, { metadata: { name: 'kfn-fn-shirts' }, webhooks: [{ name: `${mode}.shirts.test.kfn.dev`, clientConfig: { caBundle, service: { name: 'kfn-fn-shirts', namespace: 'shop' } } }] });
  }
  api.put(crd, { metadata: { name: 'shirts.test.kfn.dev' }, spec: { conversion: { strategy: 'Webhook', webhook: { clientConfig: { caBundle } } } } });
  return { api, pki };
}

function renewer(api: FakeApi, clock: FakeClock, lines: string[], extra: Partial<RenewalOptions> = {}): CertificateRenewer {
  return new CertificateRenewer({ ...functionRenewal(shirts, { namespace: 'shop', name: 'kfn-fn-shirts-webhook-tls' }, () => api), clock, log: (line) => lines.push(line), ...extra });
}

const holders = [mutating, validating, crd];

test('the holders of the bundle, and exactly the rights on them: each by name, the CRD patched only', () => {
  assert.deepEqual(caBundleHolders(shirts).map((h) => `${h.kind} ${h.name}`), ['MutatingWebhookConfiguration kfn-fn-shirts', 'ValidatingWebhookConfiguration kfn-fn-shirts', 'CustomResourceDefinition shirts.test.kfn.dev']);
  assert.deepEqual(holderRules(caBundleHolders(shirts)), [
    { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], verbs: ['get', 'patch'], resourceNames: ['kfn-fn-shirts'] },
    { apiGroups: ['admissionregistration.k8s.io'], resources: ['validatingwebhookconfigurations'], verbs: ['get', 'patch'], resourceNames: ['kfn-fn-shirts'] },
    { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['patch'], resourceNames: ['shirts.test.kfn.dev'] },
  ]);
});

test('a certificate near its end is renewed at start: the bundles get the new CA beside the old one first, then the Secret, on the version read', async () => {
  const { api, pki } = deployed();
  // 20 days before its end: within the 30-day window.
  const clock = new FakeClock(made + 345 * day);
  const lines: string[] = [];
  const r = renewer(api, clock, lines);
  const readAt = api.secret().metadata.resourceVersion;
  r.start();
  clock.advance(0);
  await r.idle();

  assert.deepEqual(api.writes, [`PATCH ${mutating}`, `PATCH ${validating}`, `PATCH ${crd}`, `PUT ${secretPath}`], 'every client trusts the new CA before the certificate changes');
  const secret = api.secret();
  assert.notEqual(secret.metadata.resourceVersion, readAt);
  const cert = new X509Certificate(secretPem(secret.data, 'tls.crt')!);
  const ca = secretPem(secret.data, 'ca.crt')!;
  assert.ok(cert.verify(new X509Certificate(ca).publicKey), 'signed by the new CA');
  assert.notEqual(ca, pki.caCert);
  assert.equal(Date.parse(cert.validTo), clock.wall() + 365 * day, 'good for a year from now');
  assert.ok(cert.checkHost('kfn-fn-shirts.shop.svc') && cert.checkHost('kfn-fn-shirts.shop.svc.cluster.local'));
  assert.equal((secret as { type?: string }).type, 'kubernetes.io/tls');
  for (const path of holders) assert.deepEqual(api.bundle(path), [ca.trim(), pki.caCert.trim()], `${path}: the new CA, and the old one while pods still serve the old files`);
  assert.equal(lines.length, 1, lines.join('\n'));
  assert.match(lines[0]!, /^kfn: renewed the serving certificate in Secret shop\/kfn-fn-shirts-webhook-tls because it expires 2027-01-01T00:00:00\.000Z: the new one is valid until 2027-12-12T00:00:00\.000Z; MutatingWebhookConfiguration kfn-fn-shirts, ValidatingWebhookConfiguration kfn-fn-shirts, CustomResourceDefinition shirts\.test\.kfn\.dev trust the new CA beside the previous one$/);

  // 12 hours later: good for a year, nothing written.
  api.writes.length = 0;
  clock.advance(12 * 3600_000 - 1);
  assert.equal(api.writes.length, 0);
  clock.advance(1);
  assert.deepEqual(await r.check(), { kind: 'kept', validTo: new Date(cert.validTo) });
  assert.deepEqual(api.writes, []);
  assert.equal(clock.pendingTimers(), 1, 'the next check');
  r.stop();
  assert.equal(clock.pendingTimers(), 0);
});

test('kept with 31 days left, renewed at the first check within 30', async () => {
  const { api } = deployed();
  const clock = new FakeClock(made + 334 * day);
  const lines: string[] = [];
  const r = renewer(api, clock, lines);
  r.start();
  const outcomes: string[] = [];
  for (let i = 0; i < 4; i++) {
    clock.advance(i === 0 ? 0 : 12 * 3600_000);
    await r.idle();
    outcomes.push(api.writes.length ? 'renewed' : 'kept');
  }
  r.stop();
  assert.deepEqual(outcomes, ['kept', 'kept', 'kept', 'renewed'], 'day 334, 334.5, 335 (30 days left: not less), 335.5');
  assert.equal(lines.length, 1);
});

test('two replicas renew at once: one update wins, the other reads the Secret again, keeps the winner\'s certificate and trusts its CA', async () => {
  const { api, pki } = deployed();
  const clock = new FakeClock(made + 350 * day);
  const lines: string[] = [];
  const [a, b] = [renewer(api, clock, lines), renewer(api, clock, lines)];
  api.readTogether(secretPath, 2);
  const outcomes = await Promise.all([a.check(), b.check()]);

  assert.deepEqual(outcomes.map((o) => o.kind).sort(), ['renewed', 'taken']);
  assert.equal(api.writes.filter((w) => w.startsWith('PUT')).length, 2, 'both tried');
  const ca = secretPem(api.secret().data, 'ca.crt')!;
  for (const path of holders) assert.deepEqual(api.bundle(path), [ca.trim(), pki.caCert.trim()], `${path}: the winner's CA (the loser's own is gone), and the old one`);
  assert.equal(lines.length, 2);
  assert.ok(lines.some((l) => /^kfn: another replica renewed the serving certificate in Secret shop\/kfn-fn-shirts-webhook-tls first \(it expires 2027-01-01T00:00:00\.000Z\); this one keeps it, valid until 2027-12-17T00:00:00\.000Z$/.test(l)), lines.join('\n'));
  // Both replicas now see a good certificate.
  assert.deepEqual([(await a.check()).kind, (await b.check()).kind], ['kept', 'kept']);
});

test('a failure is logged and tried again 10 minutes later, never thrown; the Secret is not touched before every bundle is written', async () => {
  const { api } = deployed();
  const clock = new FakeClock(made + 350 * day);
  const lines: string[] = [];
  const r = renewer(api, clock, lines);
  api.failing.set(crd, 403);
  r.start();
  clock.advance(0);
  await r.idle();
  assert.deepEqual(api.writes, [`PATCH ${mutating}`, `PATCH ${validating}`], 'the CRD refused: no PUT of the Secret');
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /could not be checked or renewed: CustomResourceDefinition shirts\.test\.kfn\.dev: its CA bundle could not be written: .*refused \(403\); trying again in 10 min$/);

  api.failing.delete(crd);
  clock.advance(10 * 60_000 - 1);
  await r.idle();
  assert.equal(api.writes.length, 2, 'not before 10 minutes');
  clock.advance(1);
  await r.idle();
  assert.equal(api.writes.at(-1), `PUT ${secretPath}`);
  assert.match(lines.at(-1)!, /^kfn: renewed the serving certificate/);
  r.stop();
});

test('no Secret, no apiserver: a failure, not a crash', async () => {
  const clock = new FakeClock(made);
  const lines: string[] = [];
  const missing = await renewer(new FakeApi(), clock, lines).check();
  assert.equal(missing.kind, 'failed');
  assert.match(lines[0]!, /the Secret shop\/kfn-fn-shirts-webhook-tls does not exist \(kfn deploy writes it\)/);
  const unreachable = await renewer(new FakeApi(), clock, lines, { connect: () => { throw new Error('not in a cluster'); } }).check();
  assert.equal(unreachable.kind, 'failed');
  assert.match(lines[1]!, /not in a cluster/);
});

test('a Secret cert-manager writes is left to cert-manager', async () => {
  const { api } = deployed();
  const secret = api.objects.get(secretPath)!;
  (secret.metadata as { annotations?: Record<string, string> }).annotations = { 'cert-manager.io/certificate-name': 'kfn-fn-shirts-webhook' };
  const lines: string[] = [];
  assert.deepEqual(await renewer(api, new FakeClock(made + 350 * day), lines).check(), { kind: 'managed' });
  assert.deepEqual([api.writes, lines], [[], []]);
});

test('between renewals, a bundle that does not hold the Secret\'s CA gets it, keeping its other valid CAs; one not registered yet is left', async () => {
  const { api, pki } = deployed();
  const other = generateServingPki('other', ['other'], { now: new Date(made) });
  const validatingObject = api.objects.get(validating) as unknown as { webhooks: { clientConfig: { caBundle: string } }[] };
  validatingObject.webhooks[0]!.clientConfig.caBundle = Buffer.from(other.caCert).toString('base64');
  api.objects.delete(mutating);
  const lines: string[] = [];
  assert.equal((await renewer(api, new FakeClock(made + day), lines).check()).kind, 'kept');
  assert.deepEqual(api.writes, [`PATCH ${validating}`]);
  assert.deepEqual(api.bundle(validating), [pki.caCert.trim(), other.caCert.trim()]);
  assert.deepEqual(lines, ['kfn: ValidatingWebhookConfiguration kfn-fn-shirts did not trust the CA of the serving certificate in Secret shop/kfn-fn-shirts-webhook-tls; it does now']);
});

test('deliveryTls: the Reconciler\'s sink gets the new CA beside the old one before the Secret, and its CA when it has none', async () => {
  const tls = defineReconciler({ name: 'shirts', for: shirtKind('test.kfn.dev'), deliveryTls: true, reconcile: () => ({}) });
  const reconcilerPath = '/apis/kfn.dev/v1alpha1/reconcilers/shirts';
  assert.deepEqual(caBundleHolders(tls).map((h) => `${h.kind} ${h.name}`), ['CustomResourceDefinition shirts.test.kfn.dev', 'Reconciler shirts']);
  const { api, pki } = deployed();
  api.put(reconcilerPath, { metadata: { name: 'shirts' }, spec: { sink: { uri: 'https://kfn-fn-shirts.shop.svc.cluster.local/' } } });
  const lines: string[] = [];
  const options = { ...functionRenewal(tls, { namespace: 'shop', name: 'kfn-fn-shirts-webhook-tls' }, () => api), log: (l: string) => lines.push(l) };
  const sinkBundle = () => pemCertificates((api.objects.get(reconcilerPath) as unknown as { spec: { sink: { caBundle?: string } } }).spec.sink.caBundle);

  assert.equal((await new CertificateRenewer({ ...options, clock: new FakeClock(made + day) }).check()).kind, 'kept');
  assert.deepEqual(sinkBundle(), [pki.caCert.trim()], 'a Reconciler written without it gets the CA at the function\'s start');
  assert.deepEqual(api.writes, [`PATCH ${reconcilerPath}`]);

  api.writes.length = 0;
  assert.equal((await new CertificateRenewer({ ...options, clock: new FakeClock(made + 350 * day) }).check()).kind, 'renewed');
  assert.deepEqual(api.writes, [`PATCH ${crd}`, `PATCH ${reconcilerPath}`, `PUT ${secretPath}`]);
  assert.deepEqual(sinkBundle(), [secretPem(api.secret().data, 'ca.crt')!.trim(), pki.caCert.trim()]);
  assert.match(lines.at(-1)!, /; CustomResourceDefinition shirts\.test\.kfn\.dev, Reconciler shirts trust the new CA beside the previous one$/);
});
