// What every integration and end-to-end test needs from the real local cluster.
//
//   const cluster = await testCluster();          // starts it if needed (npm test already has)
//   const ns = await testNamespace(t, cluster);   // a fresh namespace, deleted after the test
//   await applyYaml(cluster.kc, yamlText, ns);    // server-side apply, multi-document
//   await waitFor('3 ready replicas', async () => …);   // poll with a useful timeout message
//   await compactEtcd(); await restartApiserver();       // faults (serial tests only)
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { CoreV1Api, KubeConfig, KubernetesObjectApi, type KubernetesObject, type V1CustomResourceDefinition } from '@kubernetes/client-node';
import { connectionFromOptions } from '../../kube/connection.ts';
import { applyObject, KubeApi, servedResource } from '../../kube/api.ts';
import { parseAllDocuments } from 'yaml';
import { clusterPaths, repoRoot, type ClusterPaths } from '../../cluster/paths.ts';
import { clusterUp, restartApiserver as restartApiserverProcess } from '../../cluster/controlplane.ts';
import { type ClusterState } from '../../cluster/state.ts';
import { waitFor } from '../../core/clock.ts';


export interface TestCluster {
  kc: KubeConfig;
  paths: ClusterPaths;
  state: ClusterState;
  core: CoreV1Api;
  objects: KubernetesObjectApi;
}

/** How tests start the cluster: the real node, and fake nodes for the tests that need many pods. */
export const testClusterOptions = { fakeNodes: 2 };

let shared: Promise<TestCluster> | undefined;

/**
 * The local cluster, started (and built) if it is not running. Under `npm test` the runner
 * has already started it; a test file run on its own starts it here and leaves it running.
 */
export function testCluster(): Promise<TestCluster> {
  shared ??= (async () => {
    const paths = clusterPaths();
    const { state } = await clusterUp({ paths, ...testClusterOptions, log: (line) => console.error(`[cluster] ${line}`) });
    const kc = new KubeConfig();
    kc.loadFromFile(paths.kubeconfig);
    return { kc, paths, state, core: kc.makeApiClient(CoreV1Api), objects: KubernetesObjectApi.makeApiClient(kc) };
  })();
  return shared;
}

/** The bridge's API client for the cluster and credentials a client-node KubeConfig names. */
export function kubeApi(kc: KubeConfig): KubeApi {
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  return new KubeApi(
    connectionFromOptions({
      server: cluster.server,
      ca: cluster.caData ? Buffer.from(cluster.caData, 'base64').toString('utf8') : undefined,
      insecureSkipTlsVerify: cluster.skipTLSVerify,
      token: user?.token,
    }),
  );
}

/**
 * Restarts kube-apiserver, then waits until the controllers have recovered too: clients that
 * reconnect before the new apiserver's authorizer has synced get 403s and back off (client-go
 * reflectors up to 30 s), so "the API answers" is not yet "the cluster works". The proof used:
 * a new namespace gets its default ServiceAccount from kube-controller-manager.
 */
export async function restartApiserver(options: { downtimeMs?: number } = {}): Promise<void> {
  const cluster = await testCluster();
  await restartApiserverProcess({ paths: cluster.paths, ...options });
  const name = uniqueName('kfn-settle');
  await waitFor('the apiserver to accept writes after its restart', () => cluster.core.createNamespace({ body: { metadata: { name } } }), { timeoutMs: 60_000 });
  try {
    await waitFor('kube-controller-manager to recover after the apiserver restart', () => cluster.core.readNamespacedServiceAccount({ name: 'default', namespace: name }), { timeoutMs: 120_000, intervalMs: 500 });
  } finally {
    await cluster.core.deleteNamespace({ name }).catch(() => undefined);
  }
}

/** A name for test objects: the prefix plus a short random suffix, valid as a DNS label. */
export function uniqueName(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 40);
  return `${clean}-${randomBytes(3).toString('hex')}`;
}

/**
 * Creates a namespace for one test and deletes it when the test ends. Waits for its default
 * ServiceAccount, without which the apiserver rejects pods.
 */
export async function testNamespace(t: TestContext, cluster: TestCluster, prefix = t.name): Promise<string> {
  const name = uniqueName(`kfn-test-${prefix}`);
  await cluster.core.createNamespace({ body: { metadata: { name, labels: { 'kfn.dev/test': 'true' } } } });
  t.after(async () => {
    await cluster.core.deleteNamespace({ name }).catch(() => undefined);
  });
  await waitFor(`default ServiceAccount in namespace ${name}`, async () => {
    await cluster.core.readNamespacedServiceAccount({ name: 'default', namespace: name });
    return true;
  });
  return name;
}

/**
 * Installs the Reconciler CRD (manifests/crds/reconciler.yaml) and the policy on the identities
 * Reconcilers name (manifests/policies/), as manifests/ does, and waits until the apiserver serves
 * the kind: a test that writes Reconcilers needs it whatever ran before.
 */
export async function installReconcilerCrd(cluster: TestCluster): Promise<void> {
  await applyYaml(cluster.kc, readFileSync(join(repoRoot, 'manifests', 'crds', 'reconciler.yaml'), 'utf8'));
  await applyYaml(cluster.kc, readFileSync(join(repoRoot, 'manifests', 'policies', 'reconciler-identity.yaml'), 'utf8'));
  const api = kubeApi(cluster.kc);
  await waitFor('the Reconciler CRD to be served', () => api.resource('kfn.dev/v1alpha1', 'Reconciler'));
}

/**
 * Server-side applies every document of `yamlText` (field manager `kfn-test`, forced),
 * putting objects without a namespace into `namespace` (cluster-scoped kinds ignore it).
 * Returns what the apiserver answered, in order. Objects go over the wire as written: no
 * typed model in between that could drop fields it does not know (x-kubernetes-*, say).
 */
export async function applyYaml(kc: KubeConfig, yamlText: string, namespace?: string): Promise<KubernetesObject[]> {
  const api = kubeApi(kc);
  const applied: KubernetesObject[] = [];
  for (const doc of parseAllDocuments(yamlText)) {
    if (doc.errors.length) throw new Error(`invalid YAML: ${doc.errors[0]!.message}`);
    const obj = doc.toJS() as KubernetesObject | null;
    if (!obj) continue;
    if (!obj.apiVersion || !obj.kind || !obj.metadata?.name) throw new Error(`every document needs apiVersion, kind and metadata.name: ${JSON.stringify(obj)}`);
    if (namespace && !obj.metadata.namespace) obj.metadata.namespace = namespace;
    applied.push(await applyObject<KubernetesObject>(api, obj as Parameters<typeof applyObject>[1], 'kfn-test'));
  }
  return applied;
}

/**
 * Installs a namespaced CRD `<kind>s.<group>` (version v1, status subresource) with `specSchema`
 * as the schema of `spec`, waits until it is Established and discovery serves its kind, and
 * deletes it after the test. Established alone is not enough: the apiserver lists the kind in
 * discovery a moment later, and a write through discovery (applyYaml) in that moment is refused
 * as "not served".
 */
export async function installCrd(t: TestContext, cluster: TestCluster, group: string, kind: string, specSchema: object): Promise<V1CustomResourceDefinition> {
  const plural = `${kind.toLowerCase()}s`;
  const name = `${plural}.${group}`;
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name },
    spec: {
      group,
      scope: 'Namespaced',
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: { openAPIV3Schema: { type: 'object', properties: { spec: specSchema, status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } } },
        },
      ],
    },
  };
  await applyYaml(cluster.kc, JSON.stringify(crd));
  t.after(() => cluster.objects.delete({ apiVersion: crd.apiVersion, kind: crd.kind, metadata: { name } }).catch(() => undefined));
  const established = await waitFor(`CRD ${name} to be Established`, async () => {
    const got = (await cluster.objects.read({ apiVersion: crd.apiVersion, kind: crd.kind, metadata: { name } })) as V1CustomResourceDefinition;
    return got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? got : undefined;
  });
  await servedResource(kubeApi(cluster.kc), `${group}/v1`, kind, { timeoutMs: 30_000 });
  return established;
}

/**
 * Waits until the apiserver calls a newly registered webhook — for a moment after registration
 * it lets writes through unchecked — by creating `probe(n)` in `collection` until one is denied;
 * answers that refusal.
 */
export async function untilWebhookRefuses(api: KubeApi, collection: string, probe: (n: number) => object, what = 'the apiserver to call the webhook'): Promise<Error> {
  let n = 0;
  return waitFor(what, async () => {
    const err = await api.request('POST', collection, { body: probe(n++) }).then(() => undefined, (e: Error) => e);
    return err?.message.includes('denied the request') ? err : undefined;
  }, { timeoutMs: 30_000 });
}

/**
 * Waits until the apiserver applies new defaults, from a mutating webhook or a
 * MutatingAdmissionPolicy: a dry-run create of `probe(n)` comes back as `defaulted` says (until
 * the apiserver has loaded the webhook or policy, writes go through as they are). Nothing is stored.
 */
export async function untilDefaultsApply<T>(api: KubeApi, collection: string, probe: (n: number) => object, defaulted: (stored: T) => boolean, what = 'the apiserver to call the defaulting webhook'): Promise<void> {
  let n = 0;
  await waitFor(what, async () => defaulted(await api.request<T>('POST', collection, { query: { dryRun: 'All' }, body: probe(n++) })) || undefined, { timeoutMs: 30_000 });
}

/** An ApiException's status code and the apiserver's message, or any error's message. */
export function describeError(err: unknown): string {
  const e = err as { code?: number; body?: unknown; message?: string };
  if (typeof e.code === 'number' && e.body !== undefined) {
    const body = typeof e.body === 'string' ? safeJson(e.body) : e.body;
    const message = (body as { message?: string } | undefined)?.message;
    return `HTTP ${e.code}: ${message ?? JSON.stringify(body)}`;
  }
  return e.message ?? String(err);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Runs `fn` expecting an ApiException; returns its status code and the apiserver's message. */
export async function expectApiError(fn: () => Promise<unknown>): Promise<{ code: number; message: string; reason?: string }> {
  try {
    await fn();
  } catch (err) {
    const e = err as { code?: number; body?: unknown };
    if (typeof e.code !== 'number') throw err;
    const body = (typeof e.body === 'string' ? safeJson(e.body) : e.body) as { message?: string; reason?: string } | undefined;
    return { code: e.code, message: body?.message ?? String(e.body), reason: body?.reason };
  }
  throw new Error('expected the API call to fail, but it succeeded');
}
