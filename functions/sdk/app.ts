// The function as an HTTP endpoint: one Hono app, whatever runs it — the Node server of
// ./node (Knative, a Deployment, `kfn serve`) or the Lambda handler of ./lambda. Nothing here is
// runtime-specific.
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import pino, { type DestinationStream, type Logger } from 'pino';
import { loadConnection } from '../../kube/kubeconfig.ts';
import { ClockSkewError, ContractError, maxDeliveryMs, maxEventBytes, parseReconcileRequest } from '../../core/event.ts';
import { clockSkewReason, functionTimeHeader } from '../../core/response.ts';
import { systemClock, type Clock } from '../../core/clock.ts';
import { NewestVersions, ReplayGuard } from './replays.ts';
import { type Credentials } from '../../core/authentication.ts';
import { KubeApi } from '../../kube/api.ts';
import { admit, MalformedReview, parseAdmissionReview } from './admission.ts';
import { keyFileCredentials } from './keys.ts';
import { convertReview, parseConversionReview } from './conversion.ts';
import type { Reconciler } from './reconciler.ts';
import { capturingLogger, Recorder, recordSinkFromEnv, type RecordSink } from './record.ts';
import { reconcileEvent, writesOf } from './runtime.ts';
import { groupOf } from '../../core/objects.ts';
import { metricsContentType, processMetrics, type FunctionMetrics } from './metrics.ts';
import { contextFromHeaders, inSpan, SpanKind } from '../../core/tracing.ts';
import { SpanStatusCode, type Attributes, type Span } from '@opentelemetry/api';
import type { ReceivedReconcile } from '../../core/event.ts';

export interface FunctionOptions {
  /** Fixed, or a getter asked on every request (a key file that the kubelet refreshes). */
  credentials?: Credentials | (() => Credentials);
  api?: KubeApi;
  /** Makes the Kubernetes client on the first reconcile (default: --kubeconfig/$KUBECONFIG/in-cluster). */
  connect?: () => KubeApi;
  log?: Logger;
  /** Where the default log's lines go (default: stdout, line by line; a server batches them, node/log.ts). */
  logDestination?: DestinationStream;
  /** The clock the runtime reads (finalizer timeouts, condition times); tests pass a fake one. */
  now?: () => Date;
  /** Where each invocation's record goes (default: as $KFN_RECORD says; none when unset). */
  record?: RecordSink | false;
  /** The largest request bodies taken; a larger one is refused with 413 before it is read whole. */
  maxBodyBytes?: Partial<BodyLimits>;
  /** The monotonic clock a delivery's time is counted on (tests pass a fake one). */
  clock?: Clock;
  /** Where its reconciles are counted for GET /metrics (default: the process' own, which a shared host's functions share). */
  metrics?: FunctionMetrics;
}

export interface BodyLimits {
  /** A reconcile event: references, and in contract 2 what the bridge's watches hold, which the bridge keeps under 1 MiB (the default). */
  event: number;
  /** An admission or conversion review: whole objects, a conversion several (default 32 MiB). */
  review: number;
}

export const defaultBodyLimits: BodyLimits = { event: maxEventBytes, review: 32 << 20 };

/** The 413 for a body over `maxSize` bytes, logged. */
function tooLarge(maxSize: number, what: string, log: Logger, path: string): DirectAnswer {
  log.warn({ path, maxBytes: maxSize }, `refused a ${what} over the size limit`);
  return { status: 413, json: { error: `the request body is larger than ${maxSize} bytes, the limit for a ${what}` } };
}

/** Refuses a body over `maxSize` bytes with 413, counting as it reads (a chunked body has no length to trust). */
function limited(maxSize: number, what: string, log: Logger) {
  return bodyLimit({ maxSize, onError: (c) => honoAnswer(c, tooLarge(maxSize, what, log, c.req.path)) });
}

/**
 * An answer as data, for the Hono app to send as a web Response or for the Node server to write
 * itself (node/index.ts): JSON, or text of a content type.
 */
export interface DirectAnswer {
  status: number;
  json?: unknown;
  text?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** A request's headers as Node gives them (lower-case names). */
export type RequestHeaders = Record<string, string | string[] | undefined>;

/**
 * A route the Node server answers without the Hono app (node/index.ts): those a function is
 * busiest with, a delivery, /healthz and /metrics. Hono's Node adapter makes a web Request and
 * Response of every request, and loading it loads Node's fetch (undici), about 15 ms of a cold
 * start before the first answer. `answer` reads the body through `body`, which fails with
 * BodyTooLarge past `maxBodyBytes`; the server then sends `tooLarge()`.
 */
export interface DirectRoute {
  maxBodyBytes: number;
  answer(headers: RequestHeaders, body: () => Promise<string>): Promise<DirectAnswer>;
  tooLarge(path: string): DirectAnswer;
}

/** The routes of an app the Node server may answer itself, by method and path (no query); undefined: through the app. */
export type DirectRoutes = (method: string, path: string) => DirectRoute | undefined;

const directRoutes = new WeakMap<Hono, DirectRoutes>();

/** The routes of an app made by createApp or createHostApp that a server may answer itself. */
export function directRoutesOf(app: Hono): DirectRoutes | undefined {
  return directRoutes.get(app);
}

export function setDirectRoutes(app: Hono, routes: DirectRoutes): void {
  directRoutes.set(app, routes);
}

/** A body over a DirectRoute's limit: the server answers its tooLarge(). */
export class BodyTooLarge extends Error {}

/** The content type an answer is sent with, by the Hono app and the Node server alike. */
export const contentTypeOf = (a: DirectAnswer): string => (a.json !== undefined ? 'application/json' : (a.contentType ?? 'text/plain; charset=UTF-8'));

/** A DirectAnswer as the Hono app sends it. */
export function honoAnswer(c: Context, a: DirectAnswer): Response {
  if (a.json !== undefined) return c.json(a.json, a.status as 200, a.headers);
  return c.body(a.text ?? '', a.status as 200, { 'content-type': contentTypeOf(a), ...a.headers });
}

const ok: DirectAnswer = { status: 200, text: 'ok' };

/**
 * How requests are authenticated, from the environment: KFN_AUTH_SECRET_FILE (HMAC with the
 * key in that file, re-read as it changes: the auth Secret mounted as a volume, what `kfn
 * deploy` sets), KFN_AUTH_SECRET (HMAC, the key itself), KFN_AUTH_TOKEN (bearer), or
 * KFN_INSECURE=1 for local development only. With none of them the function refuses to start
 * rather than accept anyone's events.
 */
export function credentialsFromEnv(env: NodeJS.ProcessEnv = process.env): Credentials | (() => Credentials) {
  if (env.KFN_AUTH_SECRET_FILE) return keyFileCredentials(env.KFN_AUTH_SECRET_FILE);
  if (env.KFN_AUTH_SECRET) return { kind: 'hmac', secret: env.KFN_AUTH_SECRET };
  if (env.KFN_AUTH_TOKEN) return { kind: 'bearer', token: env.KFN_AUTH_TOKEN };
  if (env.KFN_INSECURE === '1' || env.KFN_INSECURE === 'true') return { kind: 'none' };
  throw new Error(
    'no authentication configured: set KFN_AUTH_SECRET to the secret of the Reconciler\'s spec.auth Secret (or KFN_AUTH_TOKEN for bearer auth); for local development only, KFN_INSECURE=1 accepts unsigned events',
  );
}

/**
 * The function's HTTP app. `reconciler` may be a getter: the dev server swaps in the new code on
 * each save, and the next delivery runs it.
 */
export function createApp(reconcilerOrGetter: Reconciler | (() => Reconciler), options: FunctionOptions = {}): Hono {
  const current = typeof reconcilerOrGetter === 'function' ? reconcilerOrGetter : () => reconcilerOrGetter;
  const logOptions = { base: { component: `kfn-fn-${current().name}` } };
  const log = options.log ?? (options.logDestination ? pino(logOptions, options.logDestination) : pino(logOptions));
  const given = options.credentials ?? credentialsFromEnv();
  const credentials = typeof given === 'function' ? given : () => given;
  if (credentials().kind === 'none') log.warn({}, 'KFN_INSECURE: accepting unsigned events; never run like this in a cluster');
  const limits = { ...defaultBodyLimits, ...options.maxBodyBytes };
  const app = new Hono();
  app.get('/healthz', (c) => honoAnswer(c, ok));
  const metrics = options.metrics ?? processMetrics;
  metrics.serving(current().name, current().for.kind);
  const metricsAnswer = (): DirectAnswer => ({ status: 200, text: metrics.text(), contentType: metricsContentType });
  app.get('/metrics', (c) => honoAnswer(c, metricsAnswer()));
  app.use('/convert', limited(limits.review, 'conversion review', log));
  app.use('/admission/*', limited(limits.review, 'admission review', log));
  const reconcile: DirectRoute = {
    maxBodyBytes: limits.event,
    answer: reconcileHandler(current, credentials, log, options),
    tooLarge: (path) => tooLarge(limits.event, 'reconcile event', log, path),
  };
  app.post('/', limited(limits.event, 'reconcile event', log), async (c) => honoAnswer(c, await reconcile.answer(Object.fromEntries(c.req.raw.headers), () => c.req.text())));
  webhookRoutes(app, current, log);
  const healthz = { maxBodyBytes: 0, answer: async () => ok, tooLarge: reconcile.tooLarge };
  const metricsRoute = { maxBodyBytes: 0, answer: async () => metricsAnswer(), tooLarge: reconcile.tooLarge };
  // HEAD as GET, as Hono answers it (Node's response sends no body to a HEAD).
  setDirectRoutes(app, (method, path) => (method === 'POST' ? (path === '/' ? reconcile : undefined) : method !== 'GET' && method !== 'HEAD' ? undefined : path === '/healthz' ? healthz : path === '/metrics' ? metricsRoute : undefined));
  return app;
}

/**
 * The webhooks, called by the apiserver over TLS (the listener of serveWebhooks): /convert for a
 * kind with previous versions, /admission/default and /admission/validate. They compute an
 * answer and write nothing; a body that is not the review expected is a 400 saying why.
 */
function webhookRoutes(app: Hono, current: () => Reconciler, log: Logger): void {
  const webhook = <R>(path: string, name: string, parse: (body: string) => R, answer: (review: R) => Promise<Response>) =>
    app.post(path, async (c) => {
      let review: R;
      try {
        review = parse(await c.req.text());
      } catch (err) {
        if (!(err instanceof MalformedReview)) throw err;
        log.warn({ webhook: name, error: err.message }, 'refused a malformed review');
        return c.json({ error: err.message }, 400);
      }
      return answer(review);
    });
  webhook('/convert', 'convert', parseConversionReview, async (review) => {
    const answer = convertReview(current().for, review);
    const result = answer.response!.result;
    if (result.status === 'Failure') log.warn({ webhook: 'convert', error: result.message }, 'conversion failed');
    else log.debug({ webhook: 'convert', to: review.request.desiredAPIVersion, objects: review.request.objects.length }, 'converted');
    return Response.json(answer);
  });
  for (const mode of ['default', 'validate'] as const) {
    webhook(`/admission/${mode}`, mode, parseAdmissionReview, async (review) => {
      try {
        const answer = await admit(current(), mode, review);
        const r = review.request;
        log.info({ webhook: mode, operation: r.operation, object: `${r.namespace ? `${r.namespace}/` : ''}${r.name ?? ''}`, allowed: answer.response!.allowed, patched: Boolean(answer.response!.patch) }, 'admission');
        return Response.json(answer);
      } catch (err) {
        log.error({ webhook: mode, error: (err as Error).message }, `${mode} failed`);
        return Response.json({ error: `${mode} failed: ${(err as Error).message}` }, { status: 500 });
      }
    });
  }
}

/**
 * POST /: a reconcile event, checked (authentication, shape, kind), run, recorded when records
 * are kept, answered with the response the contract defines (a 4xx refusal, a 500 failure).
 */
function reconcileHandler(current: () => Reconciler, credentials: () => Credentials, log: Logger, options: FunctionOptions) {
  const record = options.record === false ? undefined : (options.record ?? recordSinkFromEnv());
  const now = options.now ?? (() => new Date());
  const clock = options.clock ?? systemClock;
  const replays = new ReplayGuard(clock);
  const versions = new NewestVersions(clock);
  const metrics = options.metrics ?? processMetrics;
  let api = options.api;
  return async (headers: RequestHeaders, readBody: () => Promise<string>): Promise<DirectAnswer> => {
    // The event's time (kfntimeleft) runs from here, on this machine's monotonic clock.
    const arrivedAt = clock.now();
    const body = await readBody();
    let received;
    const using = credentials();
    try {
      received = parseReconcileRequest(headers, body, using, now().getTime());
      // A signed event is taken once: a captured request sent again is refused. 409 tells the
      // bridge the function has this delivery already (it may still be at work on it).
      if (using.kind !== 'none' && !replays.admit(received.event.id, received.attempt, received.timeLeftMs ?? maxDeliveryMs)) {
        throw new ContractError(409, `event ${received.event.id} (attempt ${received.attempt}) was already received: a replayed or duplicated request is not run again`);
      }
      if (using.kind !== 'none') checkNewest(versions, received);
    } catch (err) {
      if (err instanceof ContractError) {
        metrics.refusedRequest(current().name, err.status);
        log.warn({ status: err.status, error: err.message }, 'refused a request');
        // Refused for its time alone: the function's clock goes with it, so that the bridge can
        // tell a clock to fix from a refused event, retry, and say how far the clocks are apart.
        if (err instanceof ClockSkewError) return { status: 400, json: { error: err.message, reason: clockSkewReason, skewMs: err.skewMs }, headers: { [functionTimeHeader]: new Date(err.at).toISOString() } };
        return { status: err.status, json: { error: err.message } };
      }
      throw err;
    }
    const reconciler = current();
    const kind = received.data.primary;
    if (kind.kind !== reconciler.for.kind || groupOf(kind.apiVersion) !== reconciler.for.group) {
      metrics.refusedRequest(reconciler.name, 400);
      return { status: 400, json: { error: `this function reconciles ${reconciler.for.apiVersion} ${reconciler.for.kind}, not ${kind.apiVersion} ${kind.kind}` } };
    }
    const recorder = record ? new Recorder(reconciler, received, now()) : undefined;
    const invocationLog = recorder ? capturingLogger(log, (entry) => recorder.log(entry)) : log;
    const reconcile = async (span?: Span): Promise<DirectAnswer> => {
      try {
        api ??= options.connect ? options.connect() : new KubeApi(loadConnection());
        const result = await reconcileEvent(reconciler, received, { api: recorder ? api.withTap(recorder.tap) : api, log: invocationLog, now: recorder ? recorder.clock(now) : options.now, observer: recorder?.observer, clock, arrivedAt });
        if (recorder) record!(recorder.finish({ result }));
        // As the bridge counts it (core/response.ts): a later look asked for is requeue_after, whatever the result says.
        const outcome = result.requeueAfterSeconds ? 'requeue_after' : result.result === 'requeue' ? 'requeue' : 'success';
        metrics.reconciled(reconciler.name, reconciler.for.kind, outcome, (clock.now() - arrivedAt) / 1000, result.changes.length);
        span?.setAttributes({ 'kfn.result': outcome, 'kfn.writes': result.changes.length });
        return { status: 200, json: result };
      } catch (err) {
        invocationLog.error({ error: (err as Error).message }, 'reconcile failed');
        if (recorder) record!(recorder.finish({ error: err }));
        // What it wrote before failing: the bridge's retry waits until its watches have seen it.
        const changes = writesOf(err);
        metrics.reconciled(reconciler.name, reconciler.for.kind, 'error', (clock.now() - arrivedAt) / 1000, changes.length);
        span?.setAttributes({ 'kfn.result': 'error', 'kfn.writes': changes.length });
        span?.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
        return { status: 500, json: { error: (err as Error).message, ...(changes.length ? { changes } : {}) } };
      }
    };
    // The bridge's delivery span is the parent (its traceparent header): one trace from the watch event to the writes.
    return inSpan(`reconcile ${kind.kind}`, () => reconcileAttributes(reconciler.name, received), reconcile, { parent: contextFromHeaders(headers), kind: SpanKind.SERVER });
  };
}

/**
 * Refuses (409) an event that carries the primary at an older version than one this process has
 * taken an event for: a captured request sent again would reconcile, and apply children from, an
 * older spec. The bridge, should its own delivery be the older one (its watch behind another
 * replica's), retries with the object as its watch holds it then.
 */
function checkNewest(versions: NewestVersions, received: ReceivedReconcile): void {
  const { primary, observed } = received.data;
  const version = observed?.primary.metadata.resourceVersion ?? primary.resourceVersion;
  const newer = versions.take(primary.uid ?? `${primary.namespace ?? ''}/${primary.name}`, version, observed !== undefined);
  if (newer !== undefined) {
    throw new ContractError(409, `event ${received.event.id} carries ${primary.kind} ${primary.namespace ? `${primary.namespace}/` : ''}${primary.name} at resourceVersion ${version}, older than ${newer}, which this function has already taken: a replayed or out-of-date request is not run`);
  }
}

/** A reconcile span's attributes, after OpenTelemetry's CloudEvents conventions and kfn's own. */
function reconcileAttributes(reconciler: string, received: ReceivedReconcile): Attributes {
  const { event, data } = received;
  return {
    'cloudevents.event_id': event.id,
    'cloudevents.event_type': event.type,
    'cloudevents.event_source': event.source,
    ...(event.subject ? { 'cloudevents.event_subject': event.subject } : {}),
    'kfn.reconciler': reconciler,
    'kfn.reason': received.reason,
    'kfn.attempt': received.attempt,
    'kfn.object.kind': data.primary.kind,
    'kfn.object.name': data.primary.name,
    ...(data.primary.namespace ? { 'k8s.namespace.name': data.primary.namespace } : {}),
  };
}
