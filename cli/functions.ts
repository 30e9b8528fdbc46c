// The steps every command takes with a function, written once: find its folder
// (functionEntry, functionDirs, functionInFolder, functionNamed), load it (loadFunction), put what
// it needs in a cluster (applyFunction, or applyHostFunctions for a shared host's functions, with
// discoveredScopes for its grants), and run it as a process of its own under its ServiceAccount
// (functionCredentials, startFunction). The commands (kfn serve, manifests, deploy, dev, demo,
// diff, replay, undeploy, build, image) are thin shells over these.
import { ownChild } from './signals.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildSync } from 'esbuild';
import { loadConnection } from '../kube/kubeconfig.ts';
import { ApiError, applyObject, deleteIfPresent, KubeApi, listAll, servedResource } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../kube/serviceaccount.ts';
import { codePath, compiled, displayPath, repoRoot } from '../cluster/paths.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import type { Kind } from '../functions/sdk/kind.ts';
import { ruleProblems } from '../functions/sdk/rules.ts';
import { expressionProblems } from '../functions/sdk/policy-cel.ts';
import { defaultsAsPolicies, defaultsManifests, mutatingPolicyVersions, type MutatingPolicyVersion } from '../functions/sdk/policies.ts';
import { UsageError } from './command.ts';
import { authForAnnotation, functionLabel, functionLabels, secretServes } from '../core/names.ts';
import { describeLoadError } from './load-errors.ts';
import { groupKind, objectKey, type KindRef } from '../core/objects.ts';

/**
 * A function folder's entry: its index.ts (a user's function, or an example in a checkout), or
 * index.js (an example compiled into kfn's package); undefined when it has neither.
 */
export function functionEntry(dir: string): string | undefined {
  return ['index.ts', 'index.js'].map((f) => join(resolve(dir), f)).find((f) => existsSync(f));
}

/** A function folder's entry, or the error that says the folder is none (loadFunction's and kfn dev's). */
export function requireFunctionEntry(dir: string): string {
  const entry = functionEntry(dir);
  if (!entry) throw new UsageError(`${dir} is not a function folder: it has no index.ts`);
  return entry;
}

/** The reconciler a function's module exports by default, or the error that says what to write. */
export function defaultReconciler(mod: { default?: Reconciler }, entry: string): Reconciler {
  if (!mod.default?.reconcile || !mod.default.for) throw new UsageError(`${entry} must export default defineReconciler({...})`);
  return mod.default;
}

/**
 * Loads the reconciler a function folder exports by default. A module that does not load is
 * said where (cli/load-errors.ts): file, line and column, the line, what to write instead.
 */
export async function loadFunction(dir: string): Promise<Reconciler> {
  const entry = requireFunctionEntry(dir);
  let mod: { default?: Reconciler };
  try {
    mod = (await import(pathToFileURL(entry).href)) as { default?: Reconciler };
  } catch (err) {
    throw new UsageError(`kfn: ${dir} does not load\n${await describeLoadError(err, entry)}`, 1);
  }
  const reconciler = defaultReconciler(mod, entry);
  checkExpressions(reconciler, entry);
  return reconciler;
}

/**
 * Refuses, with the file, a function whose CEL the apiserver would not take: its kind's rules,
 * its declared defaults (defineReconciler checks their shape, not their CEL, so that a function's
 * start does not load the CEL library). Every command that loads a function runs it: this
 * module's loadFunction, and kfn dev's loader at each save.
 */
export function checkExpressions(reconciler: Reconciler, entry: string): void {
  const kind = reconciler.for as Partial<Kind>;
  const problems = kind.options ? ruleProblems(kind as Kind) : [];
  if (problems.length) throw new UsageError(`kfn: ${entry}: the rules of ${reconciler.for.kind} are not what the apiserver takes:\n  ${problems.join('\n  ')}`, 1);
  const expressions = expressionProblems(reconciler);
  if (expressions.length) throw new UsageError(`kfn: ${entry}: ${reconciler.name}'s declared defaults are not CEL:\n  ${expressions.join('\n  ')}`, 1);
}

/**
 * Every function folder under `root`: in a checkout, the examples (functions/ of the
 * repository); with kfn installed, functions/ of the project it runs in. The SDK's is none, and
 * neither is a folder whose module exports no default: a module of kinds that other functions
 * import (docs/functions.md's functions/shop), passed over with a note (by default on stderr,
 * once a process) rather than failing each command that takes every function.
 */
export function functionDirs(root = compiled ? join(process.cwd(), 'functions') : join(repoRoot, 'functions'), note: (line: string) => void = noteOnce): string[] {
  if (!existsSync(root)) return [];
  const entries = readdirSync(root, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'sdk')
    .flatMap((d) => functionEntry(join(root, d.name)) ?? []);
  const defaults = exportsDefault(entries);
  return entries
    .filter((entry, i) => {
      if (defaults[i] !== false) return true;
      note(`kfn: ${displayPath(entry)} exports no Reconciler (no export default): passed over, as a module other functions import. To make it a function: export default defineReconciler({...})`);
      return false;
    })
    .map((entry) => dirname(entry))
    .sort();
}

const noted = new Set<string>();
const noteOnce = (line: string) => {
  if (!noted.has(line)) console.error(line);
  noted.add(line);
};

/**
 * Whether each module exports a default, read from its syntax by esbuild without running it
 * (one esbuild run for all: about 0.1 s for a dozen, most of it esbuild's start); undefined for one that does not parse (loading
 * it then says where it is wrong).
 */
function exportsDefault(entries: string[]): (boolean | undefined)[] {
  const read = (files: string[]) => {
    const { metafile } = buildSync({ entryPoints: files, bundle: false, write: false, metafile: true, outdir: 'out', outbase: '/', format: 'esm', logLevel: 'silent' });
    const exported = new Map(Object.values(metafile.outputs).map((output) => [output.entryPoint && resolve(output.entryPoint), output.exports.includes('default')]));
    return files.map((file) => exported.get(file));
  };
  try {
    return entries.length ? read(entries) : [];
  } catch {
    // One that does not parse fails the run: each on its own, then.
    return entries.map((entry) => {
      try {
        return read([entry])[0];
      } catch {
        return undefined;
      }
    });
  }
}

/** The function in `dir` when it is a function folder; undefined when it is not (an argument that may be a name instead). */
export async function functionInFolder(dir: string): Promise<Reconciler | undefined> {
  return functionEntry(dir) ? loadFunction(dir) : undefined;
}

/** The function named `name`: the first of functionDirs() whose reconciler has it (a folder that does not load is passed over). */
export async function functionNamed(name: string): Promise<Reconciler | undefined> {
  for (const d of functionDirs()) {
    const r = await loadFunction(d).catch(() => undefined);
    if (r?.name === name) return r;
  }
  return undefined;
}

/**
 * The scope of each kind the functions name, as the cluster's API discovery answers it (for
 * functionManifests' `scopeOf`): a cluster-scoped CRD one owns or watches is then granted
 * cluster-wide. A kind the cluster does not serve (yet) is left to kfn's own knowledge.
 */
export async function discoveredScopes(api: KubeApi, ...reconcilers: Reconciler[]): Promise<(ref: KindRef) => 'Namespaced' | 'Cluster' | undefined> {
  const refs: KindRef[] = reconcilers.flatMap((r) => [r.for, ...(r.owns ?? []), ...(r.watches ?? []), ...(r.uses ?? []).map((u) => u.kind)]);
  const scopes = new Map<string, 'Namespaced' | 'Cluster'>();
  for (const ref of refs) {
    const resource = await api.resource(ref.apiVersion, ref.kind).catch(() => undefined);
    if (resource) scopes.set(groupKind(ref), resource.namespaced ? 'Namespaced' : 'Cluster');
  }
  return (ref) => scopes.get(groupKind(ref));
}

/** The newest MutatingAdmissionPolicy version the cluster serves (GA in 1.36, beta in 1.34–1.35 when turned on), or undefined. */
export async function servedMutatingPolicies(api: KubeApi): Promise<MutatingPolicyVersion | undefined> {
  for (const version of mutatingPolicyVersions) {
    if (await api.resource(version, 'MutatingAdmissionPolicy').then(() => true, () => false)) return version;
  }
  return undefined;
}

/**
 * A function's declared defaults for a cluster that serves MutatingAdmissionPolicy at `version`
 * (servedMutatingPolicies, asked once per command), or none: as the apiserver's policies where it
 * does (it writes them, function up or not), else from the function's defaulting webhook. The
 * reconciler to build the rest from (without the defaults the policies run), the policies, and a
 * line saying which.
 */
export function defaultsForCluster(version: MutatingPolicyVersion | undefined, reconciler: Reconciler, namespaces?: string[]): { reconciler: Reconciler; policies: Record<string, unknown>[]; note?: string } {
  if (!reconciler.defaults?.length) return { reconciler, policies: [] };
  if (!version) return { reconciler, policies: [], note: `${reconciler.name}: the cluster serves no MutatingAdmissionPolicy (Kubernetes 1.36, or 1.34–1.35 with its beta on), so its defaults are applied by its defaulting webhook` };
  const policies = defaultsManifests(reconciler, version, namespaces);
  return { reconciler: defaultsAsPolicies(reconciler), policies, note: `${reconciler.name}: its defaults are written by the apiserver itself (MutatingAdmissionPolicy ${policies.filter((p) => p.kind === 'MutatingAdmissionPolicy').map((p) => (p.metadata as { name: string }).name).join(', ')}), with the function at zero too` };
}

/** Applies a function's manifests and makes sure its auth Secret exists (first: a workload among them may use it). */
export async function applyFunction(api: KubeApi, name: string, objects: Record<string, unknown>[], namespace: string): Promise<void> {
  await applyFunctions(api, [name], objects, namespace);
  console.error(`applied ${objects.length} objects for ${name}`);
}

/**
 * Applies the manifests of several functions that run together (a shared host's, hostManifests)
 * and makes sure each one's auth Secret exists: the host mounts every one of them.
 */
export async function applyHostFunctions(api: KubeApi, host: string, names: string[], objects: Record<string, unknown>[], namespace: string): Promise<void> {
  await applyFunctions(api, names, objects, namespace);
  console.error(`applied ${objects.length} objects for host ${host} (${names.join(', ')})`);
}

/** The namespace there, each function's auth Secret, the objects in order, then each function's grants no longer written removed. */
async function applyFunctions(api: KubeApi, names: string[], objects: Record<string, unknown>[], namespace: string): Promise<void> {
  const manager = 'kfn-manifests';
  await namespaceReady(api, namespace, { fieldManager: manager, say: (line) => console.error(line) });
  for (const name of names) await ensureAuthSecret(api, name, namespace);
  for (const obj of objects) {
    const o = obj as { apiVersion: string; kind: string; metadata: { name: string } };
    // Its CRD may have just been installed: wait until discovery serves it.
    if (o.kind === 'Reconciler') await servedResource(api, o.apiVersion, o.kind, { timeoutMs: 10_000 });
    await applyObject(api, o, manager);
  }
  for (const name of names) {
    await removeStaleGrants(api, name, objects, namespace);
    await removeStalePolicies(api, name, objects);
  }
}

/** A cluster-scoped kind a function's objects may include, by its API path. */
export interface ClusterScopedKind {
  apiVersion: string;
  plural: string;
  kind: string;
}

/** The kinds of the webhook configurations that register a function's own webhooks. */
export const webhookConfigurationKinds: ClusterScopedKind[] = [
  { apiVersion: 'admissionregistration.k8s.io/v1', plural: 'mutatingwebhookconfigurations', kind: 'MutatingWebhookConfiguration' },
  { apiVersion: 'admissionregistration.k8s.io/v1', plural: 'validatingwebhookconfigurations', kind: 'ValidatingWebhookConfiguration' },
];

/** The kinds of the apiserver's own admission policies a function may have: its guards and its declared defaults. */
export const admissionPolicyKinds: ClusterScopedKind[] = [
  { apiVersion: 'admissionregistration.k8s.io/v1', plural: 'validatingadmissionpolicies', kind: 'ValidatingAdmissionPolicy' },
  { apiVersion: 'admissionregistration.k8s.io/v1', plural: 'validatingadmissionpolicybindings', kind: 'ValidatingAdmissionPolicyBinding' },
  ...mutatingPolicyVersions.flatMap((apiVersion) => [
    { apiVersion, plural: 'mutatingadmissionpolicies', kind: 'MutatingAdmissionPolicy' },
    { apiVersion, plural: 'mutatingadmissionpolicybindings', kind: 'MutatingAdmissionPolicyBinding' },
  ]),
];

/**
 * Deletes the cluster-scoped objects of `kinds` labelled as function `name`'s, but those `keep`
 * says to keep (a version the cluster does not serve has none); returns each one removed, as
 * "Kind name".
 */
export async function removeLabelled(api: KubeApi, name: string, kinds: ClusterScopedKind[], keep: (kind: string, objectName: string) => boolean = () => false): Promise<string[]> {
  const removed: string[] = [];
  for (const { apiVersion, plural, kind } of kinds) {
    for (const o of await labelled(api, `/apis/${apiVersion}/${plural}`, name)) {
      if (keep(kind, o.metadata.name)) continue;
      if (await deleteIfPresent(api, `/apis/${apiVersion}/${plural}/${encodeURIComponent(o.metadata.name)}`)) removed.push(`${kind} ${o.metadata.name}`);
    }
  }
  return removed;
}

/** The function's policies its manifests no longer name (a guard or a default taken out, defaults now from its webhook): removed. */
async function removeStalePolicies(api: KubeApi, name: string, objects: Record<string, unknown>[]): Promise<void> {
  const kept = new Set(objects.map((o) => `${String(o.kind)}/${(o.metadata as { name: string }).name}`));
  for (const what of await removeLabelled(api, name, admissionPolicyKinds, (kind, objectName) => kept.has(`${kind}/${objectName}`))) console.error(`removed ${what} (no longer part of ${name})`);
}

/** The function's auth Secret `kfn-fn-<name>`: created with a fresh key, or marked for its Reconciler when it is not. */
async function ensureAuthSecret(api: KubeApi, name: string, namespace: string): Promise<void> {
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

/**
 * A function's own credentials, as applyFunction made them: a kubeconfig for the cluster of
 * `adminKubeconfig` with its ServiceAccount's token (kfn-fn-<name> in `namespace`, from
 * TokenRequest, valid a day), so that RBAC is what it will be in the cluster; and its auth key.
 */
export async function functionCredentials(api: KubeApi, adminKubeconfig: string, namespace: string, name: string): Promise<{ kubeconfig: string; key: Buffer }> {
  const secret = await api.request<{ data: { secret: string } }>('GET', `/api/v1/namespaces/${namespace}/secrets/kfn-fn-${name}`);
  const token = await requestServiceAccountToken(api, { namespace, name: `kfn-fn-${name}` }, 86400);
  return { kubeconfig: kubeconfigForToken(adminKubeconfig, token, `kfn-fn-${name}`), key: Buffer.from(secret.data.secret, 'base64') };
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
export async function startFunction(options: { dir: string; name: string; port: number; adminKubeconfig: string; namespace: string; workDir: string; webhooks?: { port: number; certDir: string }; /** Node's own options, before the CLI (e.g. --import of a test's preload). */ nodeOptions?: string[] }): Promise<StartedFunction> {
  const { dir, name, port, namespace, workDir } = options;
  const credentials = await functionCredentials(new KubeApi(loadConnection(options.adminKubeconfig)), options.adminKubeconfig, namespace, name);
  const kubeconfig = join(workDir, `${name}.kubeconfig`);
  writeFileSync(kubeconfig, credentials.kubeconfig, { mode: 0o600 });
  const keyFile = join(workDir, `${name}.key`);
  writeFileSync(keyFile, credentials.key, { mode: 0o600 });
  const log = join(workDir, `${name}.log`);
  const fd = openSync(log, 'a');
  const webhookArgs = options.webhooks ? [`--webhook-port=${options.webhooks.port}`, `--webhook-cert-dir=${options.webhooks.certDir}`] : [];
  // Owned: ended with the CLI however it ends (cli/signals.ts).
  const child = ownChild(spawn(process.execPath, [...(options.nodeOptions ?? []), codePath('cli', 'kfn.ts'), 'serve', dir, `--port=${port}`, `--kubeconfig=${kubeconfig}`, ...webhookArgs], {
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
