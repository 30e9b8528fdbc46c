// A shared host: several functions of one project served by one process, as one
// controller-runtime manager runs several controllers. Each function is the app createApp makes
// for it, mounted on its own path (`/<name>/`), with its own auth key; the process has one
// /healthz and one Kubernetes connection, under one identity — the union of its functions'
// rights. Functions that need a TLS listener of their own (webhooks, deliveryTls) are refused.
import { join } from 'node:path';
import { Hono } from 'hono';
import pino from 'pino';
import type { Credentials } from '../../core/authentication.ts';
import { KubeApi } from '../../kube/api.ts';
import { loadConnection } from '../../kube/kubeconfig.ts';
import { createApp, directRoutesOf, setDirectRoutes, type DirectRoute, type DirectRoutes, type FunctionOptions } from './app.ts';
import { metricsContentType, processMetrics } from './metrics.ts';
import { keyFileCredentials } from './keys.ts';
import type { Reconciler } from './reconciler.ts';
import { servesHttps } from './webhooks.ts';
import { hasDefaulting } from './policies.ts';

export interface HostOptions extends Omit<FunctionOptions, 'credentials'> {
  /** Each function's credentials, by its name (default: hostCredentialsFromEnv()). */
  credentials?: (name: string) => Credentials | (() => Credentials);
}

/** The path a host serves the function `name` on; its Reconciler's sink ends with it. */
export const hostPath = (name: string) => `/${name}/`;

/**
 * Why these functions cannot share one host, or undefined when they can: none at all, a name
 * twice, or a function that needs a TLS listener of its own — the apiserver calls webhooks on
 * HTTPS only, and deliveryTls serves deliveries there — which one plain HTTP port cannot be.
 */
export function sharedHostProblem(reconcilers: Reconciler[]): string | undefined {
  if (!reconcilers.length) return 'a shared host needs at least one function';
  const names = reconcilers.map((r) => r.name);
  const twice = names.filter((n, i) => names.indexOf(n) !== i);
  if (twice.length) return `a shared host serves each function once, on its own path: ${[...new Set(twice)].join(', ')} named more than once`;
  const tls = reconcilers.filter(servesHttps);
  if (!tls.length) return undefined;
  const why = (r: Reconciler) => [hasDefaulting(r) && 'default', r.validate && 'validate', r.for.options.previousVersions?.length && 'conversion', r.deliveryTls && 'deliveryTls'].filter(Boolean).join(', ');
  return `${tls.map((r) => `${r.name} (${why(r)})`).join(', ')} need${tls.length === 1 ? 's' : ''} a TLS listener of ${tls.length === 1 ? 'its' : 'their'} own, which a shared host (one plain HTTP port for every function) does not give: deploy ${tls.length === 1 ? 'it' : 'them'} on ${tls.length === 1 ? 'its' : 'their'} own`;
}

/**
 * Each function's key, from the environment: KFN_AUTH_SECRET_DIR holds one file per function,
 * named by the function (its auth Secret mounted there, re-read as the kubelet refreshes it);
 * KFN_INSECURE=1 for local development only. One key for all is refused: a delivery signed for
 * one function must not be taken on another's path.
 */
export function hostCredentialsFromEnv(env: NodeJS.ProcessEnv = process.env): (name: string) => Credentials | (() => Credentials) {
  const dir = env.KFN_AUTH_SECRET_DIR;
  if (dir) return (name) => keyFileCredentials(join(dir, name), { setBy: 'KFN_AUTH_SECRET_DIR' });
  if (env.KFN_INSECURE === '1' || env.KFN_INSECURE === 'true') return () => ({ kind: 'none' });
  throw new Error('no authentication configured for the shared host: set KFN_AUTH_SECRET_DIR to a folder holding each function\'s key in a file named by the function (its Reconciler\'s spec.auth Secret); for local development only, KFN_INSECURE=1 accepts unsigned events');
}

/**
 * The host's HTTP app: GET /healthz for the process, and each function's app (createApp) under
 * `/<name>/`. The functions share one Kubernetes client (one identity) made on the first
 * reconcile; a path that names no function is a 404 that lists those it serves.
 */
export function createHostApp(reconcilers: Reconciler[], options: HostOptions = {}): Hono {
  const problem = sharedHostProblem(reconcilers);
  if (problem) throw new Error(problem);
  const credentials = options.credentials ?? hostCredentialsFromEnv();
  let api = options.api;
  const connect = () => (api ??= options.connect ? options.connect() : new KubeApi(loadConnection()));
  // Not strict: `/<name>` and `/<name>/` are the same function.
  const app = new Hono({ strict: false });
  app.get('/healthz', (c) => c.text('ok'));
  // Every function's reconciles, each by its name: one scrape for the process.
  const metrics = options.metrics ?? processMetrics;
  app.get('/metrics', (c) => c.body(metrics.text(), 200, { 'content-type': metricsContentType }));
  const base = options.log ?? (options.logDestination ? pino({}, options.logDestination) : pino());
  // The routes the Node server answers itself (app.ts, DirectRoute): each function's deliveries
  // at /<name>/ and /<name>, the host's /healthz and /metrics as its first function's app answers them.
  const direct = new Map<string, DirectRoute>();
  let ownRoutes: DirectRoutes | undefined;
  for (const reconciler of reconcilers) {
    const log = base.child({ component: `kfn-fn-${reconciler.name}` });
    const fnApp = createApp(reconciler, { ...options, api: undefined, connect, log, credentials: credentials(reconciler.name) });
    app.route(hostPath(reconciler.name).slice(0, -1), fnApp);
    const routes = directRoutesOf(fnApp)!;
    ownRoutes ??= routes;
    const delivery = routes('POST', '/')!;
    direct.set(hostPath(reconciler.name), delivery).set(hostPath(reconciler.name).slice(0, -1), delivery);
  }
  setDirectRoutes(app, (method, path) => (method === 'POST' ? direct.get(path) : path === '/healthz' || path === '/metrics' ? ownRoutes?.(method, path) : undefined));
  const served = reconcilers.map((r) => hostPath(r.name)).join(', ');
  app.notFound((c) => c.json({ error: `this host serves ${served}; nothing at ${new URL(c.req.url).pathname}` }, 404));
  return app;
}
