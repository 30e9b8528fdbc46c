// kfn dev's server, put together: each function loaded and set up in the cluster, the Hono
// server of the functions and the UI (dev-app.ts), the bridge in this process delivering to them
// (the same assembly as `kfn bridge`), and the watch that reloads a function on save.
//
//   browser ──SSE── /api/stream ◀── records ◀── /fn/<name> ◀── bridge (in process) ◀── watches
//                   /api/deliveries/:id/replay ──▶ /fn/<name> (live)  |  in process (dry-run)
import { rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { serve as serveNode, type ServerType } from '@hono/node-server';
import pino from 'pino';
import { startBridge } from '../bridge/main.ts';
import { loadConnection } from '../kube/kubeconfig.ts';
import { Journal } from '../core/journal.ts';
import { KubeApi } from '../kube/api.ts';
import { workRoot } from '../cluster/paths.ts';
import type { InvocationRecord } from '../functions/sdk/record.ts';
import { UsageError } from './command.ts';
import { DeliveryLog, devApp, stateOf, type DevFunction, type DevFunctionState } from './dev-app.ts';
import { bundleDir } from './dev-bundle.ts';
import { prepareFunction, reconcilerConfig, reloadFunction, type DevCluster } from './dev-function.ts';
import { watchSources } from './dev-watch.ts';
import { servedMutatingPolicies } from './functions.ts';

export interface DevServerOptions {
  dirs: string[];
  kubeconfig: string;
  /** The admin's client (default: one from `kubeconfig`). */
  api?: KubeApi;
  port: number;
  host?: string;
  /** Deliver only objects in these namespaces (default: all). */
  namespaces?: string[];
  /** Where the functions' ServiceAccounts and auth Secrets live (default kfn-system). */
  systemNamespace?: string;
  /** Records are also appended here (default .kfn/dev/records.jsonl; false: none). */
  recordFile?: string | false;
  resyncPeriodSeconds?: number;
  /** Check each function's types before it is loaded, at start and at each save (`kfn dev` does unless --no-typecheck; a program calling this, not unless asked). */
  typecheck?: boolean;
  log?: (line: string) => void;
}

export interface DevServer {
  url: string;
  functions(): DevFunctionState[];
  records(): InvocationRecord[];
  /** Reloads a function now (what a save does). */
  reload(name: string): Promise<void>;
  stop(): Promise<void>;
}
export async function startDevServer(options: DevServerOptions): Promise<DevServer> {
  const say = options.log ?? ((line: string) => console.error(line));
  const typecheck = options.typecheck ?? false;
  // The bundles' source maps apply to stacks: a reconcile that throws names the function's own lines.
  process.setSourceMapsEnabled(true);
  const host = options.host ?? '127.0.0.1';
  const base = `http://${host}:${options.port}`;
  const cluster: DevCluster = { adminApi: options.api ?? new KubeApi(loadConnection(options.kubeconfig)), adminKubeconfig: options.kubeconfig, systemNamespace: options.systemNamespace ?? 'kfn-system', base, namespaces: options.namespaces, resyncPeriodSeconds: options.resyncPeriodSeconds };
  cluster.mutatingPolicies = await servedMutatingPolicies(cluster.adminApi);
  rmSync(bundleDir, { recursive: true, force: true });
  const recordFile = options.recordFile === false ? undefined : new Journal<InvocationRecord>(options.recordFile ?? join(workRoot, 'dev', 'records.jsonl'), { redactSecretFields: false });
  const fns = new Map<string, DevFunction>();
  const log = new DeliveryLog(recordFile, say, (name) => fns.get(name)?.version ?? 0);
  const pinoLog = pino({ level: 'warn', base: { component: 'kfn-dev' } });

  // 1. Each function: loaded, its CRD and RBAC in the cluster, an endpoint.
  for (const dir of options.dirs) {
    const fn = await prepareFunction(cluster, dir, log, say, typecheck);
    if (fns.has(fn.name)) throw new UsageError(`kfn dev: two folders define function ${fn.name}`);
    fns.set(fn.name, fn);
    say(`function ${fn.name} (${fn.kind}) from ${relative(process.cwd(), fn.dir) || '.'} at ${base}/fn/${fn.name}`);
  }

  // 2. The server: the functions, the UI and its API.
  const app = devApp(fns, log, base);
  const server: ServerType = await new Promise((ok, fail) => {
    const s = serveNode({ fetch: app.fetch, port: options.port, hostname: host }, () => ok(s));
    s.once('error', (err: NodeJS.ErrnoException) => fail(err.code === 'EADDRINUSE' ? new UsageError(`kfn dev: port ${options.port} is in use; pass --port`) : err));
  });

  // 3. The bridge, in this process, delivering to them: the same assembly as `kfn bridge`, with
  // the functions' Reconcilers instead of the cluster's, and no health server or Lease.
  const configs = () => [...fns.values()].map((fn) => reconcilerConfig(cluster, fn.reconciler));
  const bridge = await startBridge({
    api: cluster.adminApi,
    reconcilers: configs(),
    source: 'kfn://dev/bridge',
    metricsAddr: '0',
    shutdownTimeoutMs: 5_000,
    logger: { info: (o, m) => pinoLog.info(o, m), warn: (o, m) => pinoLog.warn(o, m), error: (o, m) => pinoLog.error(o, m) },
    onProblem: (name, source, problem) => {
      if (problem) say(`bridge: ${name}: ${source}: ${problem}`);
      log.broadcast('problem', { function: name, source, problem: problem ?? null });
    },
  });

  // 4. Reload on save: rebuild the function whose inputs changed; keep the old code on an error.
  const reload = (name: string) => reloadFunction(fns.get(name)!, { cluster, log, say, setReconcilers: () => bridge.setReconcilers(configs()), typecheck });
  const sources = watchSources(fns, reload, say);

  return {
    url: base,
    functions: () => [...fns.values()].map(stateOf),
    records: () => [...log.records],
    reload,
    async stop() {
      sources.close();
      await bridge.stop();
      for (const send of log.subscribers) send('bye', {});
      // Open UIs hold their event streams: close them, or the server waits for them forever.
      const closed = new Promise<void>((done) => server.close(() => done()));
      (server as import('node:http').Server).closeAllConnections?.();
      await closed;
      await recordFile?.flush();
    },
  };
}
