// The function as a Node HTTP server (its deliveries answered directly, the rest through Hono's
// Node adapter: ../listener.ts): what Knative, a Deployment and `kfn serve` run, with the
// webhooks' HTTPS listener beside it when the function has webhooks; and several functions as
// one server (a shared host, `kfn deploy --host`).
import type { ServerType } from '@hono/node-server';
import type { Server as HttpServer, ServerResponse } from 'node:http';
import type { Server as HttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Hono } from 'hono';
import { createApp, type FunctionOptions } from '../app.ts';
import { createHostApp, hostPath, type HostOptions } from '../host.ts';
import type { Reconciler } from '../reconciler.ts';
import { CertificateRenewer, functionRenewal, type RenewalOptions } from '../renewal.ts';
import { servesHttps, serveWebhooks } from '../webhooks.ts';
import { defaultsAsPolicies, defaultsAsPoliciesEnv } from '../policies.ts';
import { KubeApi } from '../../../kube/api.ts';
import { kubeconfigParserReady, loadConnection } from '../../../kube/kubeconfig.ts';
import { startTracing } from '../../../core/tracing.ts';
import { batchedStdout, flushServerLogs } from './log.ts';
import { requestListener } from '../listener.ts';
import { nodeHttp } from '../../../core/node-http.ts';

export interface ServeOptions extends FunctionOptions {
  port?: number;
  hostname?: string;
  /**
   * Webhooks over HTTPS (the apiserver calls webhooks on TLS only), and deliveries too: the port
   * and the folder holding tls.crt and tls.key. Default: $KFN_WEBHOOK_CERT_DIR and
   * $KFN_WEBHOOK_PORT (9443) when the reconciler has webhooks (`default`, `validate`, or a kind
   * with previous versions) or `deliveryTls`.
   */
  webhooks?: { port: number; certDir: string };
  /**
   * Renewing the listener's certificate before it ends (renewal.ts), as a Deployment that kfn's
   * own CA signs for does. Default: when $KFN_TLS_SECRET names the Secret (`<namespace>/<name>`,
   * as `kfn deploy` sets it) and the HTTPS listener runs; false: never.
   */
  renewal?: RenewalOptions | false;
}

/** The renewal a deployed function's environment asks for: $KFN_TLS_SECRET, the Secret its listener serves from. */
function renewalFromEnv(reconciler: Reconciler, options: ServeOptions): RenewalOptions | undefined {
  const secret = process.env.KFN_TLS_SECRET;
  if (!secret) return undefined;
  const [namespace, name] = secret.split('/');
  if (!namespace || !name) {
    console.error(`kfn: KFN_TLS_SECRET must be <namespace>/<name>, not "${secret}": the serving certificate is not renewed`);
    return undefined;
  }
  return functionRenewal(reconciler, { namespace, name }, () => options.api ?? (options.connect ? options.connect() : new KubeApi(loadConnection())));
}

/**
 * Runs the function as an HTTP server (Knative, `kfn serve`): port from options or $PORT; and,
 * for a reconciler with webhooks or deliveryTls, an HTTPS listener, whose certificate it
 * renews itself when its environment says which Secret holds it. Closing the
 * HTTP server closes both, and each connection ends once its answer in flight is out.
 */
export async function serve(declared: Reconciler, options: ServeOptions = {}): Promise<ServerType> {
  // A bundle loads the YAML parser only if the kubeconfig it will read needs it (kube/kubeconfig.ts).
  if (!options.api && !options.connect) await kubeconfigParserReady();
  // Deployed where the apiserver runs its declared defaults itself: no webhook (nor certificate) for them here.
  const reconciler = process.env[defaultsAsPoliciesEnv] ? defaultsAsPolicies(declared) : declared;
  const app = createApp(reconciler, serverLog(options));
  const hostname = options.hostname ?? '0.0.0.0';
  const webhooks = options.webhooks ?? (servesHttps(reconciler) && process.env.KFN_WEBHOOK_CERT_DIR ? { port: Number(process.env.KFN_WEBHOOK_PORT ?? 9443), certDir: process.env.KFN_WEBHOOK_CERT_DIR } : undefined);
  const tls = webhooks ? await serveWebhooks(app, { ...webhooks, hostname, onReload: (err) => (err ? console.error(`kfn: the webhook certificate could not be reloaded: ${err.message}`) : console.error('kfn: webhook certificate reloaded')) }) : undefined;
  const renewal = tls && options.renewal !== false ? (options.renewal ?? renewalFromEnv(reconciler, options)) : undefined;
  const renewer = renewal && new CertificateRenewer(renewal);
  if (tls) endConnectionsOnClose(tls);
  return listen(app, { port: portOf(options), hostname }, {
    started: () => renewer?.start(),
    closing: () => {
      renewer?.stop();
      tls?.close();
    },
  });
}

/**
 * Runs several functions as one HTTP server (a shared host, ../host.ts): each on `/<name>/`,
 * one /healthz, each function's key from $KFN_AUTH_SECRET_DIR/<name>. No HTTPS listener: a
 * function with webhooks or deliveryTls is refused.
 */
export async function serveHost(reconcilers: Reconciler[], options: HostServeOptions = {}): Promise<ServerType> {
  if (!options.api && !options.connect) await kubeconfigParserReady();
  return listen(createHostApp(reconcilers, serverLog(options)), { port: portOf(options), hostname: options.hostname ?? '0.0.0.0' });
}

export interface HostServeOptions extends HostOptions {
  port?: number;
  hostname?: string;
}

/** A server's options with its log's lines batched to stdout (log.ts), unless they say where the log goes. */
const serverLog = <T extends { log?: unknown; logDestination?: unknown }>(options: T): T => (options.log || options.logDestination ? options : { ...options, logDestination: batchedStdout() });

const portOf = (options: { port?: number }) => options.port ?? Number(process.env.PORT ?? 8080);

/** Serves `app` over HTTP: `started` runs once it listens, `closing` when it is closed, and each connection then ends once its answer in flight is out. */
function listen(app: Hono, address: { port: number; hostname: string }, hooks: { started?: () => void; closing?: () => void } = {}): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const server = nodeHttp.createServer(requestListener(app));
    server.once('error', reject);
    endConnectionsOnClose(server, hooks.closing);
    server.listen(address.port, address.hostname, () => {
      hooks.started?.();
      resolve(server);
    });
  });
}

/**
 * Node's close() stops accepting connections and closes idle ones, but goes on serving a
 * kept-alive connection that was busy at that moment, request after request, for as long as its
 * client keeps it busy (the bridge's pool, the apiserver calling a webhook): a draining function
 * would keep starting reconciles and never finish closing. Here close() also makes every
 * connection end with its answer in flight: an answer not yet begun says `Connection: close`, one
 * already begun ends its socket when it finishes; requests that still arrive on such a
 * connection are answered the same way. `alsoClose` runs at the same moment.
 */
function endConnectionsOnClose(server: HttpServer | HttpsServer, alsoClose?: () => void): void {
  const open = new Map<ServerResponse, Socket>();
  let closing = false;
  const endAfter = (res: ServerResponse, socket: Socket) => {
    if (!res.headersSent) res.setHeader('Connection', 'close');
    else if (res.writableFinished) socket.end();
    else res.once('finish', () => socket.end());
  };
  server.prependListener('request', (req, res: ServerResponse) => {
    if (closing) return endAfter(res, req.socket);
    open.set(res, req.socket);
    res.once('close', () => open.delete(res));
  });
  const close = server.close.bind(server);
  server.close = (done?: (err?: Error) => void) => {
    closing = true;
    for (const [res, socket] of open) endAfter(res, socket);
    alsoClose?.();
    return close(done);
  };
}

/**
 * The function as its container runs it (`kfn deploy`): HTTP on $PORT on every interface, the
 * in-cluster API connection. On SIGTERM (a rollout, a Knative scale-down, a node drain) it stops
 * taking connections at once and exits once the reconciles in flight have answered: a reconcile
 * is never cut mid-write (the pod's grace period, which `kfn deploy` sets above the
 * Reconciler's timeoutSeconds, bounds the wait). A delivery refused meanwhile is retried by the
 * bridge, to another pod or to this function's next start.
 */
export async function runInContainer(reconciler: Reconciler, options: ServeOptions = {}): Promise<void> {
  // Spans over OTLP when the environment says where (`kfn deploy` passes OTEL_* on).
  const tracing = await startTracing(`kfn-fn-${reconciler.name}`);
  const server = await serve(reconciler, { hostname: '0.0.0.0', ...options });
  await runUntilStopped(server, `kfn function ${reconciler.name}`, `(${reconciler.for.apiVersion} ${reconciler.for.kind}) listening on :${portOf(options)}`);
  await tracing?.shutdown();
}

/** A shared host as its container runs it (`kfn deploy --host`): as runInContainer, for every function it serves. */
export async function runHostInContainer(host: string, reconcilers: Reconciler[], options: HostServeOptions = {}): Promise<void> {
  const tracing = await startTracing(`kfn-host-${host}`);
  const server = await serveHost(reconcilers, { hostname: '0.0.0.0', ...options });
  await runUntilStopped(server, `kfn host ${host}`, `listening on :${portOf(options)}, serving ${reconcilers.map((r) => `${r.name} (${r.for.kind}) on ${hostPath(r.name)}`).join(', ')}`);
  await tracing?.shutdown();
}

/** Says the server listens, then on SIGTERM or SIGINT closes it and resolves once what was in flight has answered. */
async function runUntilStopped(server: ServerType, who: string, listening: string): Promise<void> {
  console.error(`${who} ${listening}`);
  const signal = await new Promise<NodeJS.Signals>((done) => {
    for (const s of ['SIGTERM', 'SIGINT'] as const) process.once(s, () => done(s));
  });
  console.error(`${who}: ${signal}: taking no new requests, finishing those in flight`);
  flushServerLogs();
  await new Promise<void>((done) => server.close(() => done()));
  flushServerLogs();
  console.error(`${who}: stopped`);
}
