// A deployed function keeps its serving certificate current itself, as Knative's webhooks do:
// `kfn deploy` writes the first one into the function's TLS Secret, and the running function
// looks at it when it starts and every 12 hours after, and renews it once it is due (30 days
// before its end: certificate.ts). A renewal, in this order:
//
//   1. the objects whose clients trust the certificate — the webhook configurations, the CRD's
//      conversion webhook, the Reconciler's sink — are given the new CA beside the old one;
//   2. the Secret is updated with the new certificate, on the resourceVersion it was read at: of
//      two replicas renewing at once one wins, and the other reads the Secret again, keeps the
//      winner's certificate and gives the clients the winner's CA beside the old one;
//   3. the kubelet brings the new files to every pod, whose listener takes them without a
//      restart (webhooks.ts, serveWebhooks).
//
// Step 1 before 2: a client never meets a certificate it does not trust. A failure is logged and
// tried again 10 minutes later; it never stops the function. Only kfn's own CA is renewed here:
// a Secret cert-manager writes (its annotation on it) is left to cert-manager.
import { ApiError, type Method, type RequestOptions } from '../../kube/api.ts';
import { systemClock, type Clock } from '../../core/clock.ts';
import { reconcilerApiVersion, reconcilerKind, reconcilerPlural } from '../../core/names.ts';
import { caBundleAfter, certificateEnd, pemCertificates, renewalDue, secretPem, serviceDnsNames, tlsSecretData, type CertificateNames } from './certificate.ts';
import type { Reconciler } from './reconciler.ts';
import { hasDefaulting } from './policies.ts';

/** What the renewal asks of the apiserver: KubeApi's `request` (unit tests pass a fake). */
export interface RenewalApi {
  request<T = unknown>(method: Method, path: string, options?: RequestOptions): Promise<T>;
}

/** An object holding a CA bundle that a client of the function's listener trusts. */
export type CaBundleHolder =
  /** Admission webhooks: every webhook's clientConfig.caBundle. */
  | { kind: 'MutatingWebhookConfiguration' | 'ValidatingWebhookConfiguration'; name: string }
  /** The CRD's conversion webhook: written, never read (the function may only patch its CRD). */
  | { kind: 'CustomResourceDefinition'; name: string }
  /** The function's Reconciler: its sink's caBundle, which the bridge trusts for deliveries over TLS. */
  | { kind: typeof reconcilerKind; name: string };

/** The holders of a function's CA bundle, as `kfn deploy` registers them; its Reconciler with deliveryTls. */
export function caBundleHolders(reconciler: Reconciler): CaBundleHolder[] {
  const name = `kfn-fn-${reconciler.name}`;
  const kind = reconciler.for;
  const holders: CaBundleHolder[] = [];
  if (hasDefaulting(reconciler)) holders.push({ kind: 'MutatingWebhookConfiguration', name });
  if (reconciler.validate) holders.push({ kind: 'ValidatingWebhookConfiguration', name });
  if (kind.options.previousVersions?.length) holders.push({ kind: 'CustomResourceDefinition', name: `${kind.plural}.${kind.group}` });
  if (reconciler.deliveryTls) holders.push({ kind: reconcilerKind, name: reconciler.name });
  return holders;
}

/** The RBAC rules a function needs on `holders`, each object by name: read and patch; the CRD patch only. */
export function holderRules(holders: CaBundleHolder[]): { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames: string[] }[] {
  return holders.map((h) => {
    const { group, resource } = resourceOf(h);
    return { apiGroups: [group], resources: [resource], verbs: h.kind === 'CustomResourceDefinition' ? ['patch'] : ['get', 'patch'], resourceNames: [h.name] };
  });
}

function resourceOf(holder: CaBundleHolder): { group: string; resource: string; path: string } {
  const at = (group: string, version: string, resource: string) => ({ group, resource, path: `/apis/${group}/${version}/${resource}/${holder.name}` });
  switch (holder.kind) {
    case 'MutatingWebhookConfiguration':
      return at('admissionregistration.k8s.io', 'v1', 'mutatingwebhookconfigurations');
    case 'ValidatingWebhookConfiguration':
      return at('admissionregistration.k8s.io', 'v1', 'validatingwebhookconfigurations');
    case 'CustomResourceDefinition':
      return at('apiextensions.k8s.io', 'v1', 'customresourcedefinitions');
    case reconcilerKind: {
      const [group, version] = reconcilerApiVersion.split('/') as [string, string];
      return at(group, version, reconcilerPlural);
    }
  }
}

const holderName = (h: CaBundleHolder) => `${h.kind} ${h.name}`;

export interface RenewalOptions {
  /** The TLS Secret the function's listener serves from (mounted into its pods). */
  secret: { namespace: string; name: string };
  /** What the certificate must name: the function's Service. One that names less is renewed too. */
  names: CertificateNames;
  /** The name a new CA is made under (`<issuer>-webhook-ca`): the function's Service, as `kfn deploy` names it. */
  issuer: string;
  holders: CaBundleHolder[];
  /** The apiserver, asked for on the first check (a pod's in-cluster connection). */
  connect: () => RenewalApi;
  /** Wall time decides whether a certificate is due; the monotonic time spaces the checks. */
  clock?: Clock;
  /** Between checks (default 12 h). */
  intervalMs?: number;
  /** After a failed check (default 10 min). */
  retryMs?: number;
  /** Where the one line per renewal, or per failure, goes (default stderr). */
  log?: (line: string) => void;
}

/**
 * The renewal of a function deployed by `kfn deploy`: the certificate in `secret` names its
 * Service kfn-fn-<name> in the Secret's namespace, and is trusted by what caBundleHolders lists.
 */
export function functionRenewal(reconciler: Reconciler, secret: { namespace: string; name: string }, connect: () => RenewalApi): RenewalOptions {
  const service = `kfn-fn-${reconciler.name}`;
  return { secret, names: { dnsNames: serviceDnsNames(service, secret.namespace) }, issuer: service, holders: caBundleHolders(reconciler), connect };
}

export type RenewalOutcome =
  /** Still good (and its CA is in every bundle that can be read). */
  | { kind: 'kept'; validTo?: Date }
  | { kind: 'renewed'; why: string }
  /** Another replica renewed it first: its certificate is kept, its CA trusted. */
  | { kind: 'taken'; why: string }
  /** cert-manager writes this Secret and renews it. */
  | { kind: 'managed' }
  | { kind: 'failed'; error: Error };

/** Between checks: twice a day, so a certificate due in 30 days gets 60 attempts. */
const defaultIntervalMs = 12 * 3600_000;
/** After a failed check. */
const defaultRetryMs = 10 * 60_000;

/** What cert-manager writes on the Secrets of its Certificates. */
const certManagerAnnotation = 'cert-manager.io/certificate-name';

/** The field manager of what the function writes for its certificate. */
const fieldManager = 'kfn-certificate';

interface SecretObject {
  metadata: { name: string; namespace: string; resourceVersion?: string; annotations?: Record<string, string>; managedFields?: unknown };
  data?: Record<string, string>;
  [field: string]: unknown;
}

export class CertificateRenewer {
  private readonly options: RenewalOptions;
  private readonly clock: Clock;
  private readonly log: (line: string) => void;
  private readonly intervalMs: number;
  private readonly retryMs: number;
  private api: RenewalApi | undefined;
  // Invariant: at most one check runs at a time (`running`); `cancel` is the next check's timer
  // while started and no check runs.
  private running: Promise<RenewalOutcome> | undefined;
  private cancel: (() => void) | undefined;
  private stopped = true;

  constructor(options: RenewalOptions) {
    this.options = options;
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? ((line) => console.error(line));
    this.intervalMs = options.intervalMs ?? defaultIntervalMs;
    this.retryMs = options.retryMs ?? defaultRetryMs;
  }

  private get where(): string {
    return `Secret ${this.options.secret.namespace}/${this.options.secret.name}`;
  }

  /** Checks now, then every 12 hours (10 minutes after a failure), until stop(). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  stop(): void {
    this.stopped = true;
    this.cancel?.();
    this.cancel = undefined;
  }

  /** Resolves once no check is running (tests that move a fake clock). */
  async idle(): Promise<void> {
    await this.running;
  }

  private schedule(ms: number): void {
    this.cancel = this.clock.setTimer(() => {
      this.cancel = undefined;
      void this.check().then((outcome) => {
        if (!this.stopped && !this.cancel) this.schedule(outcome.kind === 'failed' ? this.retryMs : this.intervalMs);
      });
    }, ms);
  }

  /** One check, and a renewal when due; never throws (a failure is its outcome, and logged). */
  check(): Promise<RenewalOutcome> {
    this.running ??= this.checkOnce().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async checkOnce(): Promise<RenewalOutcome> {
    try {
      this.api ??= this.options.connect();
      const secret = await this.readSecret(this.api);
      if (secret.metadata.annotations?.[certManagerAnnotation]) return { kind: 'managed' };
      const now = new Date(this.clock.wall());
      const why = renewalDue(secret.data, this.options.names, now);
      if (!why) {
        await this.keepTrusted(this.api, secret, now);
        return { kind: 'kept', validTo: certificateEnd(secret.data) };
      }
      return await this.renew(this.api, secret, why, now);
    } catch (err) {
      const error = err as Error;
      this.log(`kfn: the serving certificate in ${this.where} could not be checked or renewed: ${error.message}; trying again in ${Math.round(this.retryMs / 60_000)} min`);
      return { kind: 'failed', error };
    }
  }

  private async readSecret(api: RenewalApi): Promise<SecretObject> {
    const { namespace, name } = this.options.secret;
    try {
      return await api.request<SecretObject>('GET', `/api/v1/namespaces/${namespace}/secrets/${name}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) throw new Error(`the ${this.where} does not exist (kfn deploy writes it)`);
      throw err;
    }
  }

  /** Steps 1 and 2 (above); the loser of a race keeps the winner's certificate. */
  private async renew(api: RenewalApi, secret: SecretObject, why: string, now: Date): Promise<RenewalOutcome> {
    const previousCa = secretPem(secret.data, 'ca.crt');
    // node-forge is loaded only when a certificate is due: a function's start does not parse it.
    const { generateServingPki } = await import('../../core/certificates.ts');
    const pki = generateServingPki(this.options.issuer, this.options.names.dnsNames, { ips: this.options.names.ips, now });
    const trusted = await this.trust(api, caBundleAfter(pki.caCert, previousCa, now));
    const data = tlsSecretData(pki);
    // Sent without managedFields, which the apiserver then keeps as they were.
    const { managedFields: _managedFields, ...metadata } = secret.metadata;
    try {
      await api.request('PUT', `/api/v1/namespaces/${metadata.namespace}/secrets/${metadata.name}`, { body: { ...secret, metadata, data }, query: { fieldManager } });
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 409)) throw err;
      const current = await this.readSecret(api);
      const still = renewalDue(current.data, this.options.names, now);
      if (still) throw new Error(`the Secret changed while its certificate was being renewed, and ${still}`);
      await this.trust(api, caBundleAfter(secretPem(current.data, 'ca.crt')!, previousCa, now));
      this.log(`kfn: another replica renewed the serving certificate in ${this.where} first (${why}); this one keeps it, valid until ${certificateEnd(current.data)?.toISOString()}`);
      return { kind: 'taken', why };
    }
    const holders = trusted.length ? `; ${trusted.map(holderName).join(', ')} trust the new CA beside the previous one` : '';
    this.log(`kfn: renewed the serving certificate in ${this.where} because ${why}: the new one is valid until ${certificateEnd(data)?.toISOString()}${holders}`);
    return { kind: 'renewed', why };
  }

  /** Gives every holder this bundle; answers those that exist (one not registered yet is left). */
  private async trust(api: RenewalApi, bundle: string): Promise<CaBundleHolder[]> {
    const done: CaBundleHolder[] = [];
    for (const holder of this.options.holders) if (await this.write(api, holder, bundle)) done.push(holder);
    return done;
  }

  /**
   * Between renewals: each bundle that can be read must hold the Secret's CA — a replica that
   * lost a race and stopped before it put the winner's CA back, or a Reconciler written before
   * the function first ran, is mended here. The CAs it held are kept while valid.
   */
  private async keepTrusted(api: RenewalApi, secret: SecretObject, now: Date): Promise<void> {
    const ca = secretPem(secret.data, 'ca.crt')!;
    const [wanted] = pemCertificates(ca);
    for (const holder of this.options.holders) {
      const held = await this.read(api, holder);
      if (held === undefined || held.every((bundle) => pemCertificates(bundle).includes(wanted!))) continue;
      await this.write(api, holder, caBundleAfter(ca, held, now));
      this.log(`kfn: ${holderName(holder)} did not trust the CA of the serving certificate in ${this.where}; it does now`);
    }
  }

  /** The bundles a holder has (one per webhook); undefined when it cannot be read or does not exist. */
  private async read(api: RenewalApi, holder: CaBundleHolder): Promise<string[] | undefined> {
    if (holder.kind === 'CustomResourceDefinition') return undefined;
    const object = await this.get<{ webhooks?: { clientConfig?: { caBundle?: string } }[]; spec?: { sink?: { caBundle?: string } } }>(api, holder);
    if (!object) return undefined;
    if (holder.kind === reconcilerKind) return [object.spec?.sink?.caBundle ?? ''];
    return (object.webhooks ?? []).map((w) => Buffer.from(w.clientConfig?.caBundle ?? '', 'base64').toString());
  }

  private async get<T>(api: RenewalApi, holder: CaBundleHolder): Promise<T | undefined> {
    try {
      return await api.request<T>('GET', resourceOf(holder).path);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /** Writes the bundle into a holder; false when it does not exist. */
  private async write(api: RenewalApi, holder: CaBundleHolder, bundle: string): Promise<boolean> {
    const b64 = Buffer.from(bundle).toString('base64');
    let patch: { body: unknown; contentType: string };
    switch (holder.kind) {
      case 'MutatingWebhookConfiguration':
      case 'ValidatingWebhookConfiguration': {
        const object = await this.get<{ webhooks?: { name: string }[] }>(api, holder);
        if (!object) return false;
        // Webhooks merge by name (a strategic merge patch): only their caBundle changes.
        patch = { body: { webhooks: (object.webhooks ?? []).map((w) => ({ name: w.name, clientConfig: { caBundle: b64 } })) }, contentType: 'application/strategic-merge-patch+json' };
        break;
      }
      case 'CustomResourceDefinition':
        patch = { body: { spec: { conversion: { webhook: { clientConfig: { caBundle: b64 } } } } }, contentType: 'application/merge-patch+json' };
        break;
      case reconcilerKind:
        patch = { body: { spec: { sink: { caBundle: bundle } } }, contentType: 'application/merge-patch+json' };
        break;
    }
    try {
      await api.request('PATCH', resourceOf(holder).path, { ...patch, query: { fieldManager } });
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return false;
      throw new Error(`${holderName(holder)}: its CA bundle could not be written: ${(err as Error).message}`);
    }
  }
}
