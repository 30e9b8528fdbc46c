// Where a Reconciler's events go, and with what: the sink's URL (given, or the address of the
// object its ref names, once that is Ready), the CA an https sink is trusted by (its caBundle),
// the credentials from the Reconciler's auth Secret (read again after a 401, for key rotation),
// the SigV4 signer of a Lambda Function URL, and the sink's health as the Reconciler's Ready
// condition shows it. Events go in the clear only to a host inside the cluster (or on this
// machine) unless plain http is allowed explicitly, and never with a bearer token in contract 2.
import { isIP } from 'node:net';
import { Agent, type Dispatcher } from '../kube/undici.ts';
import type { Logger } from './log.ts';
import type { ReconcilerConfig } from './config.ts';
import { sendReconcileEvent, type DeliveryResult } from './delivery.ts';
import type { RequestSigner } from './sigv4.ts';
import type { Credentials, HttpMessage } from '../core/authentication.ts';
import { whyNotReady, type ReadCondition } from '../core/conditions.ts';
import { ApiError, objectPath, type KubeApi } from '../kube/api.ts';
import { authForAnnotation, secretServes } from '../core/names.ts';

/** The sink cannot take deliveries now, for a reason a person can act on. */
export class SinkError extends Error {}

export interface SinkOptions {
  /**
   * Plain `http://` to a host outside the cluster: its events (a contract 2 event carries the
   * objects themselves) can be read by anyone on the way. Refused unless allowed here.
   */
  allowPlainHttp?: boolean;
}

/**
 * Whether a host is reached without leaving the cluster's network, or this machine: a Service's
 * name as the cluster's DNS answers it (a single label, resolved in the bridge's namespace;
 * `….svc`; `….cluster.local`), or this machine's (a loopback name or address). Anything else — a public name,
 * an IP address that may be anyone's — is outside.
 */
export function clusterLocalHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/\.$/, '').replace(/^\[(.*)\]$/, '$1');
  // 0.0.0.0 and :: as a destination are this machine.
  if (isIP(host) === 4) return host.startsWith('127.') || host === '0.0.0.0';
  if (isIP(host) === 6) return host === '::1' || host === '::';
  return !host.includes('.') || host.endsWith('.svc') || host.endsWith('.cluster.local') || host === 'localhost' || host.endsWith('.localhost');
}

export class Sink {
  private readonly config: ReconcilerConfig;
  private readonly api: KubeApi;
  private readonly log: Logger;
  private readonly report: (problem: string | undefined) => void;
  private credentials: Credentials | undefined;
  private url: string | undefined;
  private problem: string | undefined;
  private sigv4: RequestSigner | undefined;
  private tls: Agent | undefined;
  private warnedUnsigned = false;
  private readonly options: SinkOptions;

  /** `report` is told when the sink's health changes: a problem, or undefined once it works again. */
  constructor(config: ReconcilerConfig, api: KubeApi, log: Logger, report: (problem: string | undefined) => void, options: SinkOptions = {}) {
    this.config = config;
    this.api = api;
    this.log = log;
    this.report = report;
    this.options = options;
  }

  /** Sends one event; never throws: a sink or credentials that cannot be resolved is a retry. */
  /**
   * Looks up what a delivery needs before it is timed: the sink's address, the credentials and
   * the signer (each kept after the first time). A delivery's deadline and hold start after this,
   * so a slow lookup cannot eat into the time the function is told it has. Never throws: what
   * fails here fails again in send(), which reports it.
   */
  async prepare(): Promise<void> {
    try {
      await this.resolve();
      await this.resolveCredentials();
      await this.signer();
    } catch {
      // send() says what it is.
    }
  }

  async send(message: HttpMessage, timeoutMs: number): Promise<{ result: DeliveryResult; sink: string }> {
    let result: DeliveryResult;
    let sink = '';
    try {
      sink = await this.resolve();
      this.checkTransport(sink);
      const credentials = await this.resolveCredentials();
      result = await sendReconcileEvent({ url: sink, message, credentials, timeoutMs, signer: await this.signer(), dispatcher: this.dispatcher() });
    } catch (err) {
      if (err instanceof SinkError) this.setProblem(err.message);
      result = { outcome: { kind: 'retry', why: (err as Error).message }, durationMs: 0 };
    }
    if (result.status === 401 && this.config.auth && this.credentials) result = await this.afterUnauthorized(result);
    // A sink ref is looked up again after a failed delivery: it may have moved, or stopped being Ready.
    if (result.outcome.kind === 'retry') this.url = undefined;
    if (result.outcome.kind === 'retry' && result.outcome.sinkProblem) this.setProblem(result.outcome.sinkProblem);
    else if (result.status !== undefined && (result.outcome.kind !== 'retry' || result.outcome.clockSkewMs !== undefined)) this.setProblem(undefined);
    return { result, sink };
  }

  private async resolve(): Promise<string> {
    if (this.config.sink.uri) return this.config.sink.uri;
    if (this.url) return this.url;
    const ref = this.config.sink.ref!;
    const what = `sink ${ref.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name} (${ref.apiVersion})`;
    let obj: { status?: { url?: string; address?: { url?: string }; conditions?: ReadCondition[] } };
    try {
      const resource = await this.api.resource(ref.apiVersion, ref.kind);
      obj = await this.api.request('GET', objectPath(resource, ref.name, ref.namespace));
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) throw new SinkError(`${what} does not exist; create it, or correct the Reconciler's spec.sink.ref`);
      if (err instanceof ApiError && err.status === 403) throw new SinkError(`${what} cannot be read by the bridge (${err.message}); grant it get on that object`);
      if (/does not serve/.test((err as Error).message)) throw new SinkError(`${what}: the API server does not serve that kind (is Knative Serving installed?)`);
      throw err;
    }
    const why = whyNotReady(obj.status?.conditions);
    if (why) throw new SinkError(`${what} is not Ready: ${why}`);
    const url = obj.status?.address?.url ?? obj.status?.url;
    if (!url) throw new SinkError(`${what} has no address yet (status.address.url and status.url are empty)`);
    this.url = url;
    return url;
  }

  /**
   * Plain http leaves the request readable on the way: fine on the cluster's network (or with a
   * mesh's mTLS over it, docs/bridge.md), not across networks nobody here controls.
   */
  private checkTransport(sink: string): void {
    const url = new URL(sink);
    if (url.protocol !== 'http:' || this.options.allowPlainHttp || clusterLocalHost(url.hostname)) return;
    throw new SinkError(
      `the sink ${sink} is plain http to a host outside the cluster (${url.hostname}): whoever is on the way could read every event, and a contract 2 event carries the objects themselves. Use https:// (with spec.sink.caBundle for the function's own CA), a Service's name inside the cluster (name.namespace.svc), or allow plain http explicitly (spec.sink.allowPlainHttp)`,
    );
  }

  /**
   * The function refused the event's authentication. If the auth Secret holds another key than
   * the one used (a rotation), retry with it. If not, the function has not picked up the key
   * yet (its mounted Secret is refreshed within about a minute) or holds another one: never
   * terminal — retried with backoff, and the Reconciler's Ready says so until it passes.
   */
  private async afterUnauthorized(result: DeliveryResult): Promise<DeliveryResult> {
    const used = this.credentials;
    this.credentials = undefined;
    const current = await this.resolveCredentials().catch(() => undefined);
    const { name, namespace } = this.config.auth!.secretRef;
    if (!current || JSON.stringify(current) === JSON.stringify(used)) {
      const sinkProblem = `the function refuses the key of the auth Secret ${namespace}/${name} (HTTP 401): it has not picked up a rotated key yet, or it was given another Secret; retrying`;
      return { ...result, outcome: { kind: 'retry', why: sinkProblem, sinkProblem } };
    }
    return { ...result, outcome: { kind: 'retry', why: `HTTP 401 with the previous key of the auth Secret ${namespace}/${name}, which has been rotated; retrying with the new one` } };
  }

  /** The SigV4 signer of a sink with awsIam, made once (its credentials chain caches and refreshes). */
  private async signer(): Promise<RequestSigner | undefined> {
    const aws = this.config.sink.awsIam;
    if (!aws) return undefined;
    // The AWS SDK is loaded only by a bridge that signs: about a megabyte of code the others
    // would parse and keep for nothing.
    if (!this.sigv4) {
      const { sigv4Signer } = await import('./sigv4.ts');
      this.sigv4 ??= sigv4Signer(aws);
    }
    return this.sigv4;
  }

  /**
   * A sink with a caBundle is reached through connections of its own that trust those CAs and
   * no other (not the system's roots, not another sink's CA): the function's own certificate,
   * which a tenant on the pod network cannot present. Made once; a Reconciler whose bundle
   * changes gets a new Sink.
   */
  private dispatcher(): Dispatcher | undefined {
    const ca = this.config.sink.caBundle;
    if (!ca) return undefined;
    this.tls ??= new Agent({ connect: { ca } });
    return this.tls;
  }

  /** Tells the owner when the sink's health changes (the Reconciler's status shows it). */
  private setProblem(problem: string | undefined): void {
    if (problem === this.problem) return;
    this.problem = problem;
    this.report(problem);
  }

  private async resolveCredentials(): Promise<Credentials> {
    if (this.credentials) return this.credentials;
    const auth = this.config.auth;
    if (!auth) {
      if (!this.warnedUnsigned) this.log.warn({ reconciler: this.config.name }, 'no spec.auth: events are sent unsigned, and functions refuse them unless run in insecure development mode');
      this.warnedUnsigned = true;
      this.credentials = { kind: 'none' };
      return this.credentials;
    }
    if (auth.type === 'bearer' && this.config.contract === 2) {
      // A bearer token signs nothing: a captured event could be sent again, or another sent in its
      // name, and a contract 2 event is what the function applies. The function refuses it too.
      throw new SinkError(`the Reconciler's spec.auth.type is bearer, and a bearer token signs neither the body nor the time: a captured contract 2 event, which carries the objects themselves, could be sent again or altered. For contract 2 use hmac (spec.auth.type hmac, the default)`);
    }
    const { name, namespace, key = 'secret' } = auth.secretRef;
    let secret: { metadata?: { annotations?: Record<string, string> }; data?: Record<string, string> };
    try {
      secret = await this.api.request('GET', `/api/v1/namespaces/${namespace}/secrets/${name}`);
    } catch (err) {
      throw new SinkError(`cannot read the auth Secret ${namespace}/${name}: ${(err as Error).message}`);
    }
    // A Reconciler names its Secret, but the Secret must name the Reconciler too.
    if (!secretServes(secret.metadata?.annotations, this.config.name)) {
      throw new SinkError(
        `the auth Secret ${namespace}/${name} is not marked for Reconciler ${this.config.name}, so the bridge does not send its key: if it is this function's key, annotate it (kubectl annotate secret -n ${namespace} ${name} ${authForAnnotation}=${this.config.name})`,
      );
    }
    const value = secret.data?.[key];
    if (!value) throw new SinkError(`the auth Secret ${namespace}/${name} has no key "${key}"`);
    const text = Buffer.from(value, 'base64').toString('utf8');
    this.credentials = auth.type === 'bearer' ? { kind: 'bearer', token: text } : { kind: 'hmac', secret: text };
    return this.credentials;
  }
}
