// A function under kfn dev: loaded, its CRD and RBAC put in the cluster, served under its own
// ServiceAccount's token at <server>/fn/<name>, and reloaded on save — the running version kept
// when the new code does not build, type-check or load.
import { createHash, randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import pino from 'pino';
import { parseReconciler, type ReconcilerConfig } from '../bridge/config.ts';
import { connectionFromKubeconfigText } from '../kube/kubeconfig.ts';
import { KubeApi } from '../kube/api.ts';
import { functionManifests, functionReconciler } from '../functions/sdk/manifests.ts';
import { defaultsManifests, type MutatingPolicyVersion } from '../functions/sdk/policies.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { createApp } from '../functions/sdk/app.ts';
import { UsageError } from './command.ts';
import { DeliveryLog, stateOf, type DevFunction } from './dev-app.ts';
import { buildError, loadBundle } from './dev-bundle.ts';
import { applyFunction, functionCredentials } from './functions.ts';
import { reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import { isReconcilerObject } from '../core/reconciler-spec.ts';

/** What the dev server needs to know to set a function up in the cluster. */
export interface DevCluster {
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
export function reconcilerConfig(cluster: DevCluster, reconciler: Reconciler): ReconcilerConfig {
  return parseReconciler(functionReconciler(reconciler, { namespace: cluster.systemNamespace, sinkUri: `${cluster.base}/fn/${reconciler.name}`, namespaces: cluster.namespaces, resyncPeriodSeconds: cluster.resyncPeriodSeconds }));
}

/** The CRD and RBAC of the function as its code defines them now (not its Reconciler: the bridge here delivers). */
function clusterObjects(cluster: DevCluster, reconciler: Reconciler): Record<string, unknown>[] {
  const policies = cluster.mutatingPolicies ? defaultsManifests(reconciler, cluster.mutatingPolicies, cluster.namespaces) : [];
  return [...functionManifests(reconciler, { namespace: cluster.systemNamespace, sinkUri: `${cluster.base}/fn/${reconciler.name}`, namespaces: cluster.namespaces }).filter((o) => !isReconcilerObject(o)), ...policies];
}

const hashOf = (objects: unknown[]) => createHash('sha256').update(JSON.stringify(objects)).digest('hex');

/** Loads a function folder, puts its CRD and RBAC in the cluster, and gives it an endpoint. */
export async function prepareFunction(cluster: DevCluster, dir: string, log: DeliveryLog, say: (line: string) => void, typecheck: boolean): Promise<DevFunction> {
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
  if (existing) say(`warning: a Reconciler named ${name} exists in the cluster; a bridge running there delivers the same objects to another copy of ${name} (stop it, or run kfn dev with --watch-namespace on a namespace of your own)`);
  return fn;
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
