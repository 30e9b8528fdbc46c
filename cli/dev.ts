// `kfn dev`: the functions on a local Hono server that reloads them on save, a bridge in this
// process delivering to them, and a live web UI of every delivery — its event, reads, children
// (desired next to live), writes, status, logs, errors — with replay (live or dry-run).
//
//   browser ──SSE── /api/stream ◀── records ◀── /fn/<name> ◀── bridge (in process) ◀── watches
//                   /api/deliveries/:id/replay ──▶ /fn/<name> (live)  |  in process (dry-run)
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { serve as serveNode, type ServerType } from '@hono/node-server';
import { build } from 'esbuild';
import pino from 'pino';
import { startBridge } from '../bridge/main.ts';
import { parseReconciler, type ReconcilerConfig } from '../bridge/config.ts';
import { connectionFromKubeconfig, connectionFromKubeconfigText } from '../kube/connection.ts';
import { Journal } from '../core/journal.ts';
import { KubeApi } from '../kube/api.ts';
import { workRoot } from '../cluster/paths.ts';
import { functionManifests, functionReconciler } from '../functions/sdk/manifests.ts';
import { defaultsManifests, type MutatingPolicyVersion } from '../functions/sdk/policies.ts';
import type { InvocationRecord } from '../functions/sdk/record.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { createApp } from '../functions/sdk/app.ts';
import { clusterFlags, clusterFlagsUsage, localClusterFlag, parseCommandArgs, parsePort, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster, writeClusterKubeconfig } from './cluster-choice.ts';
import { DeliveryLog, devApp, stateOf, type DevFunction, type DevFunctionState } from './dev-app.ts';
import { applyFunction, checkExpressions, defaultReconciler, functionCredentials, functionDirs, functionEntry, requireFunctionEntry, servedMutatingPolicies } from './functions.ts';
import { describeBuildError, describeLoadError } from './load-errors.ts';
import { typecheckFlag, typecheckUsage, typeProblems } from './typecheck.ts';
import { reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import { isReconcilerObject } from '../core/reconciler-spec.ts';

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
const bundleDir = join(workRoot, 'dev', 'bundles');
let bundleAttempts = 0;

/**
 * Bundles a function folder (its own modules and the SDK; packages stay imports) and loads it.
 * With `typecheck`, its types are checked while it is bundled, and code with a type error is
 * refused as code that does not build is: esbuild removes types without reading them.
 */
async function loadBundle(dir: string, name: string, version: number, typecheck: boolean): Promise<{ reconciler: Reconciler; inputs: Set<string> }> {
  const entry = requireFunctionEntry(dir);
  // A name of its own for each attempt: Node keeps every module it imported by its URL, so a
  // second attempt at a version under the same name would get the first (the one refused).
  const file = join(bundleDir, `${name}.${version}.${++bundleAttempts}.mjs`);
  // An inline source map: stacks (and load errors) point at the function's files, not the bundle.
  // Built for the file it is written to, so the map's paths (relative to it) lead back to them.
  const [out, typeErrors] = await Promise.all([
    build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'esm', target: 'node24', packages: 'external', write: false, outfile: file, metafile: true, logLevel: 'silent', sourcemap: 'inline' }),
    typecheck ? typeProblems('dev', [dir]) : undefined,
  ]);
  if (typeErrors) throw new Error(`${typeErrors}\n(kfn dev --no-typecheck loads code without checking its types)`);
  mkdirSync(bundleDir, { recursive: true });
  writeFileSync(file, out.outputFiles[0]!.text);
  let mod: { default?: Reconciler };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: Reconciler };
  } catch (err) {
    throw new Error(await describeLoadError(err, entry));
  } finally {
    rmSync(file, { force: true });
  }
  const reconciler = defaultReconciler(mod, entry);
  checkExpressions(reconciler, entry);
  return { reconciler, inputs: new Set(Object.keys(out.metafile.inputs).map((i) => resolve(process.cwd(), i))) };
}

/** Why a function does not build or load, said where (cli/load-errors.ts), as kfn serve says it. */
const buildError = (err: unknown): string => describeBuildError(err);

/** What the dev server needs to know to set a function up in the cluster. */
interface DevCluster {
  adminApi: KubeApi;
  /** The admin kubeconfig's path: each function's own kubeconfig is made for its cluster. */
  adminKubeconfig: string;
  systemNamespace: string;
  /** The server's own URL: each function is served at <base>/fn/<name>. */
  base: string;
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  /** The MutatingAdmissionPolicy version the cluster serves: declared defaults are written by the apiserver, as once deployed. */
  mutatingPolicies?: MutatingPolicyVersion;
}

/** The Reconciler the in-process bridge runs for a function: it delivers to this server. */
function reconcilerConfig(cluster: DevCluster, reconciler: Reconciler): ReconcilerConfig {
  return parseReconciler(functionReconciler(reconciler, { namespace: cluster.systemNamespace, sinkUri: `${cluster.base}/fn/${reconciler.name}`, namespaces: cluster.namespaces, resyncPeriodSeconds: cluster.resyncPeriodSeconds }));
}

/** The CRD and RBAC of the function as its code defines them now (not its Reconciler: the bridge here delivers). */
function clusterObjects(cluster: DevCluster, reconciler: Reconciler): Record<string, unknown>[] {
  const policies = cluster.mutatingPolicies ? defaultsManifests(reconciler, cluster.mutatingPolicies, cluster.namespaces) : [];
  return [...functionManifests(reconciler, { namespace: cluster.systemNamespace, sinkUri: `${cluster.base}/fn/${reconciler.name}`, namespaces: cluster.namespaces }).filter((o) => !isReconcilerObject(o)), ...policies];
}

const hashOf = (objects: unknown[]) => createHash('sha256').update(JSON.stringify(objects)).digest('hex');

/** Loads a function folder, puts its CRD and RBAC in the cluster, and gives it an endpoint. */
async function prepareFunction(cluster: DevCluster, dir: string, log: DeliveryLog, say: (line: string) => void, typecheck: boolean): Promise<DevFunction> {
  const probe = await loadBundle(dir, `probe-${randomBytes(4).toString('hex')}`, 0, typecheck).catch((err) => {
    throw new UsageError(`kfn dev: ${dir} does not build:\n${buildError(err)}`);
  });
  const name = probe.reconciler.name;
  const objects = clusterObjects(cluster, probe.reconciler);
  await applyFunction(cluster.adminApi, name, objects, cluster.systemNamespace);
  // The function's own credentials: its ServiceAccount's token, so that RBAC is what it will be in the cluster.
  const credentials = await functionCredentials(cluster.adminApi, cluster.adminKubeconfig, cluster.systemNamespace, name);
  const secret = credentials.key.toString('utf8');
  const api = new KubeApi(connectionFromKubeconfigText(credentials.kubeconfig, `ServiceAccount ${cluster.systemNamespace}/kfn-fn-${name}`));
  const fn: DevFunction = {
    name,
    dir: resolve(dir),
    kind: `${probe.reconciler.for.apiVersion} ${probe.reconciler.for.kind}`,
    version: 1,
    loadedAt: new Date().toISOString(),
    reconciler: probe.reconciler,
    secret,
    api,
    inputs: probe.inputs,
    manifestsHash: hashOf(objects),
    app: undefined as never,
  };
  fn.app = createApp(() => fn.reconciler, { credentials: { kind: 'hmac', secret }, api, record: (r) => log.add(r), log: pino({ level: 'debug', base: { component: `kfn-fn-${name}` } }, { write: () => {} }) });
  const existing = await cluster.adminApi.request('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`).then(
    () => true,
    () => false,
  );
  if (existing) say(`warning: a Reconciler named ${name} exists in the cluster; a bridge running there delivers the same objects to another copy of ${name} (stop it, or run kfn dev with --namespace on a namespace of your own)`);
  return fn;
}

/**
 * Calls `changed(fn)` when an input of a function's bundle changes, or a new module appears
 * beside its index.ts (not its samples or notes), 150 ms after the last such change. One watch
 * per directory holding an input: a directory's watch outlives editors that save by writing a
 * new file and renaming it over the old one; a file's watch does not.
 */
function watchSources(fns: Map<string, DevFunction>, changed: (name: string) => Promise<void>, say: (line: string) => void): { rewatch(): void; close(): void } {
  const watchers = new Map<string, FSWatcher>();
  const pending = new Map<string, NodeJS.Timeout>();
  const onChange = (dir: string, file: string) => {
    const path = resolve(dir, file);
    for (const fn of fns.values()) {
      if (!fn.inputs.has(path) && !(dirname(path) === fn.dir && /\.(ts|mts|js|mjs|json)$/.test(path))) continue;
      clearTimeout(pending.get(fn.name));
      pending.set(
        fn.name,
        setTimeout(() => void changed(fn.name).then(rewatch).catch((err) => say(`reload of ${fn.name} failed: ${(err as Error).message}`)), 150),
      );
    }
  };
  function rewatch(): void {
    const dirs = new Set<string>();
    for (const fn of fns.values()) {
      dirs.add(fn.dir);
      for (const input of fn.inputs) if (!input.includes('/node_modules/')) dirs.add(dirname(input));
    }
    for (const dir of dirs) {
      if (watchers.has(dir)) continue;
      try {
        watchers.set(dir, watch(dir, (_event, file) => file && onChange(dir, file.toString())));
      } catch (err) {
        say(`cannot watch ${dir}: ${(err as Error).message}`);
      }
    }
  }
  rewatch();
  return {
    rewatch,
    close() {
      for (const w of watchers.values()) w.close();
      for (const t of pending.values()) clearTimeout(t);
    },
  };
}

/**
 * Builds a function's code anew and runs it from the next delivery; its CRD, RBAC and Reconciler
 * follow when they changed. Code that does not build, type-check or load is reported, and the
 * running version stays.
 */
export async function reloadFunction(fn: DevFunction, on: { cluster: DevCluster; log: DeliveryLog; say: (line: string) => void; setReconcilers(): Promise<Map<string, Error>>; typecheck: boolean }): Promise<void> {
  const { cluster, log, say } = on;
  const started = Date.now();
  let loaded;
  try {
    loaded = await loadBundle(fn.dir, fn.name, fn.version + 1, on.typecheck);
  } catch (err) {
    fn.loadError = buildError(err);
    say(`reload of ${fn.name} failed; version ${fn.version} keeps running:\n${fn.loadError}`);
    log.broadcast('function', stateOf(fn));
    return;
  }
  const before = reconcilerConfig(cluster, fn.reconciler);
  Object.assign(fn, { reconciler: loaded.reconciler, inputs: loaded.inputs, version: fn.version + 1, loadError: undefined, loadedAt: new Date().toISOString() });
  const objects = clusterObjects(cluster, loaded.reconciler);
  const hash = hashOf(objects);
  if (hash !== fn.manifestsHash) {
    await applyFunction(cluster.adminApi, fn.name, objects, cluster.systemNamespace).catch((err) => say(`could not apply ${fn.name}'s CRD and RBAC: ${(err as Error).message}`));
    fn.manifestsHash = hash;
    say(`${fn.name}: CRD and RBAC updated in the cluster`);
  }
  if (JSON.stringify(before) !== JSON.stringify(reconcilerConfig(cluster, fn.reconciler))) {
    const problems = await on.setReconcilers();
    for (const [n, err] of problems) say(`bridge: ${n} could not start: ${err.message}`);
  }
  say(`reloaded ${fn.name}: version ${fn.version} in ${Date.now() - started} ms; the next delivery runs it`);
  log.broadcast('function', stateOf(fn));
}

export async function startDevServer(options: DevServerOptions): Promise<DevServer> {
  const say = options.log ?? ((line: string) => console.error(line));
  const typecheck = options.typecheck ?? false;
  // The bundles' source maps apply to stacks: a reconcile that throws names the function's own lines.
  process.setSourceMapsEnabled(true);
  const host = options.host ?? '127.0.0.1';
  const base = `http://${host}:${options.port}`;
  const cluster: DevCluster = { adminApi: options.api ?? new KubeApi(connectionFromKubeconfig(options.kubeconfig)), adminKubeconfig: options.kubeconfig, systemNamespace: options.systemNamespace ?? 'kfn-system', base, namespaces: options.namespaces, resyncPeriodSeconds: options.resyncPeriodSeconds };
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

const usage = `Usage: kfn dev [function dir …] [options]

Runs the functions (default: every folder under functions/) on a local dev server, with a
bridge in this process delivering the cluster's events to them, and a live web UI of every
delivery. Saving a function's code reloads it: the next delivery runs the new code, nothing
restarts; code that does not build or type-check (the project's tsconfig.json, checked as
the code is bundled) is reported, and the version before keeps running. Its CRD and RBAC
follow the code. Each function works under its own ServiceAccount's token, so RBAC is what
it will be in the cluster.

The cluster is kubectl's (docs/kubeconfig.md): --kubeconfig, else $KUBECONFIG, else
~/.kube/config; --context picks a context. With --local-cluster, or when no kubeconfig is found
and it runs, it is kfn's own local cluster. Every invocation is recorded (to .kfn/dev/records.jsonl): \`kfn replay\` replays them.

Options:
  --port N          port of the dev server and its UI (default 8070)
  -n, --namespace N  deliver only objects in namespace N (repeatable; default: all namespaces)
${clusterFlagsUsage(16, true)}
  --records F       append the records to F instead (--records=off: none)
${typecheckUsage(16)}
  -h, --help        show this help`;

const flags = { port: { type: 'string' }, namespace: { type: 'string', short: 'n', multiple: true }, ...clusterFlags, ...localClusterFlag, records: { type: 'string' }, ...typecheckFlag } as const;

export const devCommand: Command = {
  name: 'dev',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('dev', argv, flags, true);
    const dirs = positionals.length ? positionals : functionDirs();
    for (const d of dirs) if (!functionEntry(d)) throw new UsageError(`kfn dev: ${d} is not a function folder (no index.ts)`);
    const cluster = await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context, 'local-cluster': values['local-cluster'] }, { startLocalInCheckout: 'when-none' });
    mkdirSync(join(workRoot, 'dev'), { recursive: true });
    const dev = await startDevServer({
      dirs,
      // The functions' own kubeconfigs are made for the chosen context's cluster.
      kubeconfig: writeClusterKubeconfig(cluster, join(workRoot, 'dev', 'admin.kubeconfig')),
      api: cluster.api,
      port: parsePort('--port', values.port) ?? 8070,
      namespaces: values.namespace,
      recordFile: values.records === 'off' ? false : values.records,
      typecheck: !values['no-typecheck'],
      log: (line) => console.error(line),
    });
    console.error(`\nkfn dev: UI at ${dev.url}/ — save a function to reload it; Ctrl-C to stop`);
    await new Promise<void>((done) => {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => done());
    });
    console.error('kfn dev: stopping');
    await dev.stop();
    return 0;
  },
};

