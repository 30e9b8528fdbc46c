// `kfn serve` and `kfn manifests`: run one function locally; write (and apply) what functions
// need in a cluster.
import { ownChild } from './signals.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { stringify } from 'yaml';
import { connectCluster, connectionFromKubeconfig } from '../kube/connection.ts';
import { describeCluster } from '../kube/kubeconfig.ts';
import { ApiError, applyObject, deleteIfPresent, KubeApi, listAll, servedResource } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import { codePath, compiled, kfnVersion, repoRoot } from '../cluster/paths.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../cluster/serviceaccount.ts';
import { functionKnativeService, functionManifests, functionServiceUrl, functionWorkload, webhookTlsSecretName } from '../functions/sdk/manifests.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { serve } from '../functions/sdk/node/index.ts';
import { hasWebhooks } from '../functions/sdk/webhooks.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, parsePort, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster } from './cluster-choice.ts';
import { authForAnnotation, functionLabel, functionLabels, reconcilerApiVersion, reconcilerKind, reconcilerPlural, secretServes } from '../core/names.ts';
import { webhookSet, type WebhookCa } from './webhook-tls.ts';
import { describeLoadError } from './load-errors.ts';
import { groupKind, objectKey, type KindRef } from '../core/objects.ts';

/**
 * A function folder's entry: its index.ts (a user's function, or an example in a checkout), or
 * index.js (an example compiled into kfn's package); undefined when it has neither.
 */
export function functionEntry(dir: string): string | undefined {
  return ['index.ts', 'index.js'].map((f) => join(resolve(dir), f)).find((f) => existsSync(f));
}

/**
 * Loads the reconciler a function folder exports by default. A module that does not load is
 * said where (cli/load-errors.ts): file, line and column, the line, what to write instead.
 */
export async function loadFunction(dir: string): Promise<Reconciler> {
  const entry = functionEntry(dir);
  if (!entry) throw new UsageError(`${dir} is not a function folder: it has no index.ts`);
  let mod: { default?: Reconciler };
  try {
    mod = (await import(pathToFileURL(entry).href)) as { default?: Reconciler };
  } catch (err) {
    throw new UsageError(`kfn: ${dir} does not load\n${await describeLoadError(err, entry)}`, 1);
  }
  if (!mod.default?.reconcile || !mod.default.for) throw new UsageError(`${entry} must export default defineReconciler({...})`);
  return mod.default;
}

/**
 * Every function folder under `root`: in a checkout, the examples (functions/ of the
 * repository); with kfn installed, functions/ of the project it runs in. The SDK's is none.
 */
export function functionDirs(root = compiled ? join(process.cwd(), 'functions') : join(repoRoot, 'functions')): string[] {
  if (!existsSync(root)) return [];
  return readdirSync(root, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'sdk' && functionEntry(join(root, d.name)))
    .map((d) => join(root, d.name))
    .sort();
}

const serveUsage = `Usage: kfn serve <function dir> [options]

Runs one reconcile function as an HTTP server, as Knative would. It reads the cluster as
kubectl does (docs/kubeconfig.md), and authenticates events with $KFN_AUTH_SECRET (HMAC) or
$KFN_AUTH_TOKEN (bearer).

Options:
  --port N        port to listen on (default $PORT or 8080)
  --host H        address to listen on (default 127.0.0.1)
${clusterFlagsUsage(14)}
  --insecure      accept unsigned events (local development only)
  --webhook-cert-dir D  serve the function's webhooks (default, validate, conversion) over HTTPS
                  with D/tls.crt and D/tls.key (re-read when they change)
  --webhook-port N      port of the HTTPS listener (default 9443)
  -h, --help      show this help`;

const serveFlags = { port: { type: 'string' }, host: { type: 'string' }, ...clusterFlags, insecure: { type: 'boolean' }, 'webhook-port': { type: 'string' }, 'webhook-cert-dir': { type: 'string' } } as const;

export const serveCommand: Command = {
  name: 'serve',
  summary: 'run one reconcile function as an HTTP server',
  usage: serveUsage,
  options: serveFlags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(serveUsage), 0);
    const { values, positionals } = parseCommandArgs('serve', argv, serveFlags, true);
    if (positionals.length !== 1) throw new UsageError(`kfn serve: expected one function folder, e.g. functions/myweb\n\n${serveUsage}`);
    if (values.insecure) process.env.KFN_INSECURE = '1';
    const reconciler = await loadFunction(positionals[0]!);
    const port = parsePort('--port', values.port) ?? Number(process.env.PORT ?? 8080);
    // Its failures are the SDK's to judge and log, per reconcile: the connection is left plain.
    const cluster = connectCluster(values, { explain: false });
    console.error(`kfn serve: ${describeCluster(cluster)}`);
    const api = new KubeApi(cluster.connection);
    const certDir = values['webhook-cert-dir'];
    const webhookPort = parsePort('--webhook-port', values['webhook-port']) ?? 9443;
    if (certDir && !hasWebhooks(reconciler)) throw new UsageError(`kfn serve: ${reconciler.name} has no webhooks (no default(), validate() or previous versions of its kind); drop --webhook-cert-dir`);
    const server = await serve(reconciler, { port, hostname: values.host ?? '127.0.0.1', api, ...(certDir ? { webhooks: { port: webhookPort, certDir } } : {}) });
    console.error(`kfn serve: ${reconciler.name} (${reconciler.for.apiVersion} ${reconciler.for.kind}) listening on http://${values.host ?? '127.0.0.1'}:${port}/${certDir ? `, webhooks on https://${values.host ?? '127.0.0.1'}:${webhookPort}/` : ''}`);
    await new Promise<void>((done) => {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => server.close(() => done()));
    });
    return 0;
  },
};


const manifestsUsage = `Usage: kfn manifests [function dir …] [options]

Writes, for each function (default: every folder under functions/), its CRD, its Reconciler,
its ServiceAccount with least-privilege RBAC, and the bridge's list/watch grant; with --target,
the function's workload; for a function with webhooks (default/validate, or a kind with
previous versions), the Mutating/ValidatingWebhookConfigurations, the CRD's conversion webhook
and the certificate they trust.

Options:
  --out DIR          write one YAML file per function into DIR (default: print to stdout)
  --apply            apply them to the cluster, and create each function's auth Secret if missing
${clusterFlagsUsage(18)}
                     (the cluster for --apply)
  -n, --namespace N  namespace of the functions' ServiceAccounts and Secrets (default kfn-system)
  --sink-uri URL     deliver to this URL instead of the function's Service (or Knative Service)
  --target T         add the function's workload, the Reconciler's sink:
                       deployment  a Deployment and Service kfn-fn-<function> (serves webhooks)
                       knative     a Knative Service kfn-fn-<function>, scales to zero (no webhooks)
  --image-prefix P   where the workload pulls the function's image from: P/fn-<function>:<version>
                     (default kfn.local, the images \`kfn image build\` imports into the local node)
  --webhook-ca C     who signs the webhook certificate the apiserver trusts:
                       kfn           (default) a CA and certificate made here, in a TLS Secret, the
                                     CA bundle in the configurations (with --apply, the Secret in
                                     the cluster is kept while it is good for 30 more days)
                       cert-manager  a cert-manager Certificate, the CA injected by its cainjector
                                     (cert-manager.io/inject-ca-from)
  --issuer K/NAME    with --webhook-ca cert-manager: the Issuer or ClusterIssuer to sign with
                     (default: a self-signed Issuer kfn-selfsigned, written beside it)
  -h, --help         show this help

Webhooks with failurePolicy Fail (the default) refuse every write of their kind until the
function answers: apply the configurations once its workload is ready (\`kfn deploy\` waits).`;

const manifestsFlags = { out: { type: 'string' }, apply: { type: 'boolean' }, ...clusterFlags, namespace: { type: 'string', short: 'n' }, 'sink-uri': { type: 'string' }, target: { type: 'string' }, 'image-prefix': { type: 'string' }, 'webhook-ca': { type: 'string' }, issuer: { type: 'string' } } as const;

export const manifestsCommand: Command = {
  name: 'manifests',
  summary: 'write (and apply) CRDs, Reconcilers, RBAC, webhooks and workloads for the functions',
  usage: manifestsUsage,
  options: manifestsFlags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(manifestsUsage), 0);
    const { values, positionals } = parseCommandArgs(
      'manifests',
      argv,
      manifestsFlags,
      true,
    );
    const target = values.target;
    if (target !== undefined && target !== 'knative' && target !== 'deployment') throw new UsageError(`--target must be deployment or knative, not "${target}"`);
    if (target && values['sink-uri']) throw new UsageError(`--target ${target} delivers to the function's workload; it cannot go with --sink-uri`);
    const ca = webhookCaOption(values['webhook-ca'], values.issuer);
    const dirs = positionals.length ? positionals : functionDirs();
    const namespace = values.namespace ?? 'kfn-system';
    const api = values.apply ? (await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context })).api : undefined;
    const image = (reconciler: Reconciler) => `${(values['image-prefix'] ?? 'kfn.local').replace(/\/$/, '')}/fn-${reconciler.name}:${kfnVersion}`;
    for (const dir of dirs) {
      const reconciler = await loadFunction(dir);
      if (target === 'knative' && hasWebhooks(reconciler)) console.error(`${reconciler.name} has webhooks, which only a Deployment serves (Knative gives no TLS listener of the function's own): --target deployment`);
      // kfn's certificate is kept from the cluster's Secret while good: an apply does not rotate it.
      const existing =
        api && ca.kind === 'kfn'
          ? await api.request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${namespace}/secrets/${webhookTlsSecretName(reconciler)}`).then(
              (s) => s.data,
              (err) => (err instanceof ApiError && err.status === 404 ? undefined : Promise.reject(err)),
            )
          : undefined;
      const hooks = target === 'knative' ? undefined : webhookSet(reconciler, { namespace, ca: ca.kind === 'kfn' ? { kind: 'kfn', existing } : ca });
      const sinkUri = values['sink-uri'] ?? (target === 'deployment' ? functionServiceUrl(reconciler, namespace) : undefined);
      const objects = [
        ...functionManifests(reconciler, { namespace, sinkUri, ...(hooks?.conversion ? { conversion: hooks.conversion } : {}), ...(api ? { scopeOf: await discoveredScopes(api, reconciler) } : {}) }),
        ...(hooks?.tls ?? []),
      ];
      if (target === 'knative') objects.push(functionKnativeService(reconciler, { namespace, image: image(reconciler) }));
      if (target === 'deployment') objects.push(...functionWorkload(reconciler, { namespace, image: image(reconciler) }));
      const all = [...objects, ...(hooks?.configurations ?? [])];
      const text = all.map((o) => stringify(o, { aliasDuplicateObjects: false })).join('---\n');
      if (values.out) {
        mkdirSync(values.out, { recursive: true });
        writeFileSync(join(values.out, `${basename(dir)}.yaml`), text);
        console.error(`wrote ${join(values.out, `${basename(dir)}.yaml`)}`);
      } else if (!api) {
        process.stdout.write(`# ${reconciler.name}\n---\n${text}---\n`);
      }
      if (api) {
        await applyFunction(api, reconciler.name, objects, namespace);
        // Owned by the Reconciler, as kfn deploy registers them: deleting the function deletes them.
        const owner = hooks?.configurations.length ? await api.request<{ metadata: { uid: string } }>('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${reconciler.name}`) : undefined;
        for (const config of hooks?.configurations ?? []) {
          const metadata = config.metadata as Record<string, unknown>;
          metadata.ownerReferences = [{ apiVersion: reconcilerApiVersion, kind: reconcilerKind, name: reconciler.name, uid: owner!.metadata.uid }];
          await applyObject(api, config as Parameters<typeof applyObject>[1], 'kfn-manifests');
        }
      }
    }
    return 0;
  },
};

/** --webhook-ca and --issuer, checked. */
function webhookCaOption(ca: string | undefined, issuer: string | undefined): WebhookCa {
  if (ca === undefined || ca === 'kfn') {
    if (issuer) throw new UsageError('--issuer goes with --webhook-ca cert-manager');
    return { kind: 'kfn' };
  }
  if (ca !== 'cert-manager') throw new UsageError(`--webhook-ca must be kfn or cert-manager, not "${ca}"`);
  if (!issuer) return { kind: 'cert-manager' };
  const [kind, name, ...rest] = issuer.split('/');
  if ((kind !== 'Issuer' && kind !== 'ClusterIssuer') || !name || rest.length) throw new UsageError(`--issuer must be Issuer/<name> or ClusterIssuer/<name>, not "${issuer}"`);
  return { kind: 'cert-manager', issuer: { kind, name } };
}

/**
 * The scope of each kind the function names, as the cluster's API discovery answers it (for
 * functionManifests' `scopeOf`): a cluster-scoped CRD it owns or watches is then granted
 * cluster-wide. A kind the cluster does not serve (yet) is left to kfn's own knowledge.
 */
export async function discoveredScopes(api: KubeApi, reconciler: Reconciler): Promise<(ref: KindRef) => 'Namespaced' | 'Cluster' | undefined> {
  const refs: KindRef[] = [reconciler.for, ...(reconciler.owns ?? []), ...(reconciler.watches ?? []), ...(reconciler.uses ?? []).map((u) => u.kind)];
  const scopes = new Map<string, 'Namespaced' | 'Cluster'>();
  for (const ref of refs) {
    const resource = await api.resource(ref.apiVersion, ref.kind).catch(() => undefined);
    if (resource) scopes.set(groupKind(ref), resource.namespaced ? 'Namespaced' : 'Cluster');
  }
  return (ref) => scopes.get(groupKind(ref));
}

/** Applies a function's manifests and makes sure its auth Secret exists (first: a workload among them may use it). */
export async function applyFunction(api: KubeApi, name: string, objects: Record<string, unknown>[], namespace: string): Promise<void> {
  const manager = 'kfn-manifests';
  await namespaceReady(api, namespace, { fieldManager: manager, say: (line) => console.error(line) });
  const secret = `kfn-fn-${name}`;
  // Marked for the function's Reconciler: the bridge sends a Secret's key for no other.
  const metadata = { name: secret, namespace, labels: functionLabels(name), annotations: { [authForAnnotation]: name } };
  try {
    const existing = await api.request<{ metadata: { annotations?: Record<string, string> } }>('GET', `/api/v1/namespaces/${namespace}/secrets/${secret}`);
    if (!secretServes(existing.metadata.annotations, name)) {
      const annotations = { [authForAnnotation]: [existing.metadata.annotations?.[authForAnnotation], name].filter(Boolean).join(',') };
      await api.request('PATCH', `/api/v1/namespaces/${namespace}/secrets/${secret}`, { body: { metadata: { labels: metadata.labels, annotations } }, contentType: 'application/merge-patch+json' });
      console.error(`marked Secret ${namespace}/${secret} as the auth secret of Reconciler ${name} (${authForAnnotation})`);
    }
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    await api.request('POST', `/api/v1/namespaces/${namespace}/secrets`, {
      body: { apiVersion: 'v1', kind: 'Secret', metadata, stringData: { secret: randomBytes(32).toString('hex') } },
    });
    console.error(`created Secret ${namespace}/${secret} (the function's auth secret)`);
  }
  for (const obj of objects) {
    const o = obj as { apiVersion: string; kind: string; metadata: { name: string } };
    // Its CRD may have just been installed: wait until discovery serves it.
    if (o.kind === 'Reconciler') await servedResource(api, o.apiVersion, o.kind, { timeoutMs: 10_000 });
    await applyObject(api, o, manager);
  }
  await removeStaleGrants(api, name, objects, namespace);
  console.error(`applied ${objects.length} objects for ${name}`);
}

/**
 * The bindings of this function (deployed in `namespace`) — its own and the bridge's for it —
 * that this apply no longer writes: an earlier apply's grant must not outlive it
 * (`--watch-namespace` shrank, grew to every namespace, or was set where it was not). Only the
 * bindings named for this function in this namespace are touched.
 */
async function removeStaleGrants(api: KubeApi, name: string, objects: Record<string, unknown>[], namespace: string): Promise<void> {
  const rbac = '/apis/rbac.authorization.k8s.io/v1';
  const ours = new Set([`kfn-fn-${name}:${namespace}`, `kfn-bridge-${name}:${namespace}`]);
  const idOf = (kind: string, ns: string | undefined, n: string) => `${kind}/${ns ?? ''}/${n}`;
  const kept = new Set(objects.map((o) => o as { kind: string; metadata: { name: string; namespace?: string } }).map((o) => idOf(o.kind, o.metadata.namespace, o.metadata.name)));
  for (const [kind, plural] of [['RoleBinding', 'rolebindings'], ['ClusterRoleBinding', 'clusterrolebindings']] as const) {
    for (const o of await labelled(api, `${rbac}/${plural}`, name)) {
      if (!ours.has(o.metadata.name) || kept.has(idOf(kind, o.metadata.namespace, o.metadata.name))) continue;
      const path = o.metadata.namespace ? `${rbac}/namespaces/${o.metadata.namespace}/${plural}/${encodeURIComponent(o.metadata.name)}` : `${rbac}/${plural}/${encodeURIComponent(o.metadata.name)}`;
      if (await deleteIfPresent(api, path)) console.error(`removed ${kind} ${objectKey(o.metadata)} (no longer part of ${name}'s grants)`);
    }
  }
}

/** The objects at `path` carrying kfn's label for the function `name`; none when the kind is not served. */
export async function labelled(api: KubeApi, path: string, name: string): Promise<{ metadata: { name: string; namespace?: string; finalizers?: string[] } }[]> {
  try {
    return await listAll(api, path, { query: { labelSelector: `${functionLabel}=${name}` } });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return [];
    throw err;
  }
}

export interface StartedFunction {
  process: ChildProcess;
  url: string;
  log: string;
  /** The file the function reads its auth key from (KFN_AUTH_SECRET_FILE), as a pod reads its mounted Secret: rewriting it rotates the key. */
  keyFile: string;
}

/**
 * Starts a function as its own process (`kfn serve`) on 127.0.0.1:`port`, the way a deployment
 * runs it: under its ServiceAccount's token (kfn-fn-<name> in `namespace`, from TokenRequest)
 * and with its auth secret, both created by applyFunction. The key is in a file, as a pod has it
 * from its mounted Secret (the function takes a rewritten file without a restart). Resolves once
 * it answers /healthz.
 */
export async function startFunction(options: { dir: string; name: string; port: number; adminKubeconfig: string; namespace: string; workDir: string; webhooks?: { port: number; certDir: string } }): Promise<StartedFunction> {
  const { dir, name, port, namespace, workDir } = options;
  const api = new KubeApi(connectionFromKubeconfig(options.adminKubeconfig));
  const secret = await api.request<{ data: { secret: string } }>('GET', `/api/v1/namespaces/${namespace}/secrets/kfn-fn-${name}`);
  const token = await requestServiceAccountToken(api, { namespace, name: `kfn-fn-${name}` }, 86400);
  const kubeconfig = join(workDir, `${name}.kubeconfig`);
  writeFileSync(kubeconfig, kubeconfigForToken(options.adminKubeconfig, token, `kfn-fn-${name}`), { mode: 0o600 });
  const keyFile = join(workDir, `${name}.key`);
  writeFileSync(keyFile, Buffer.from(secret.data.secret, 'base64'), { mode: 0o600 });
  const log = join(workDir, `${name}.log`);
  const fd = openSync(log, 'a');
  const webhookArgs = options.webhooks ? [`--webhook-port=${options.webhooks.port}`, `--webhook-cert-dir=${options.webhooks.certDir}`] : [];
  // Owned: ended with the CLI however it ends (cli/signals.ts).
  const child = ownChild(spawn(process.execPath, [codePath('cli', 'kfn.ts'), 'serve', dir, `--port=${port}`, `--kubeconfig=${kubeconfig}`, ...webhookArgs], {
    stdio: ['ignore', fd, fd],
    env: { ...process.env, KFN_AUTH_SECRET_FILE: keyFile },
  }));
  closeSync(fd);
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; i < 150; i++) {
    if (child.exitCode !== null) break;
    if (await fetch(`${url}healthz`).then((r) => r.ok, () => false)) return { process: child, url, log, keyFile };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error(`function ${name} did not start listening on ${url}; see ${log}`);
}
