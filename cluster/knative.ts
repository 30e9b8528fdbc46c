// Knative Serving on the local cluster, built from Go modules like the rest of it: the
// controller, webhook, activator, autoscaler and queue-proxy of `knative.dev/serving` (pinned in
// knative/go.mod) and Traefik (traefik/go.mod) as the ingress, through Traefik's Knative
// provider (it implements Knative's networking Ingress, class traefik.ingress.networking.knative.dev).
//
// The manifests are the ones Knative ships inside its modules (config/ of serving, networking and
// caching), copied into the build's cache entry, with the images kfn builds put where `ko://`
// references stand and a few settings a one-node local cluster needs (below, `localSettings`).
import { cpSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { systemClock, waitFor } from '../core/clock.ts';
import type { ReadCondition } from '../core/conditions.ts';
import { ApiError, applyObject, objectPath, type KubeApi, type Manifest } from '../kube/api.ts';
import { cachedBuild, ensureBuild, goOutput, type BuildOptions, type BuildSpec, type BinarySet } from './build.ts';
import { buildImage, imageRef, importImages, nonRootUid, type BuiltImage, type ImageRecipe } from './images.ts';
import { ingressNamespace, traefikManifests, traefikModuleDir } from './traefik.ts';
import { requiredVersion } from './versions.ts';

export const knativeModuleDir = join(import.meta.dirname, 'knative');
export const knativeNamespace = 'knative-serving';
export const ingressClass = 'traefik.ingress.networking.knative.dev';
export const knativeComponents = ['controller', 'webhook', 'activator', 'autoscaler', 'queue'] as const;
export type KnativeComponent = (typeof knativeComponents)[number];
const fieldManager = 'kfn-knative';

export interface KnativeVersions {
  serving: string;
  traefik: string;
}

export function knativeVersions(): KnativeVersions {
  return {
    serving: requiredVersion(readFileSync(join(knativeModuleDir, 'go.mod'), 'utf8'), 'knative.dev/serving', 'cluster/knative/go.mod'),
    traefik: requiredVersion(readFileSync(join(traefikModuleDir, 'go.mod'), 'utf8'), 'github.com/traefik/traefik/v3', 'cluster/traefik/go.mod'),
  };
}

export interface KnativeBinaries {
  dir: string;
  versions: KnativeVersions;
  path(name: KnativeComponent | 'traefik'): string;
  /** Knative's own manifests, as its modules ship them: serving/, networking/, caching/. */
  configDir: string;
}

/** The config folders copied out of the modules, by module. */
const shippedConfig: Record<string, string> = { 'knative.dev/serving': 'serving', 'knative.dev/networking': 'networking', 'knative.dev/caching': 'caching' };

function knativeSpec(): BuildSpec {
  const v = knativeVersions();
  return {
    label: `knative-${v.serving}-traefik-${v.traefik}`,
    title: 'Knative Serving and Traefik',
    intro: [`Knative Serving ${v.serving}, Traefik ${v.traefik}`, 'A first build downloads about 0.6 GiB of Go modules and takes about 10 minutes on 2 cores.'],
    moduleDirs: [knativeModuleDir, traefikModuleDir],
    inputs: [knativeModuleDir, traefikModuleDir].flatMap((d) => [join(d, 'go.mod'), join(d, 'go.sum')]),
    steps: [
      ...knativeComponents.map((c) => ({ name: c, pkg: `knative.dev/serving/cmd/${c}`, moduleDir: knativeModuleDir, ldflags: '-s -w' })),
      { name: 'traefik', pkg: 'github.com/traefik/traefik/v3/cmd/traefik', moduleDir: traefikModuleDir, ldflags: `-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=${v.traefik}` },
    ],
    finish(dir, go) {
      // Module folders are read-only and hold Go files too: copy only the YAML.
      for (const [module, name] of Object.entries(shippedConfig)) {
        const moduleDir = goOutput(go, ['list', '-m', '-f', '{{.Dir}}', module], knativeModuleDir).trim();
        cpSync(join(moduleDir, 'config'), join(dir, 'config', name), { recursive: true, filter: (src) => !src.endsWith('.go') });
      }
    },
  };
}

function knativeBinaries(dir: string): KnativeBinaries {
  return { dir, versions: knativeVersions(), path: (name) => join(dir, name), configDir: join(dir, 'config') };
}

export async function ensureKnativeBinaries(options: BuildOptions = {}): Promise<KnativeBinaries> {
  return knativeBinaries(await ensureBuild(knativeSpec(), options));
}

export function cachedKnativeBinaries(): KnativeBinaries | undefined {
  const dir = cachedBuild(knativeSpec());
  return dir ? knativeBinaries(dir) : undefined;
}

/** Static Go binaries alone in an image, as ko builds them: /ko-app/<name>, a numeric non-root user. */
export function knativeRecipes(k: KnativeBinaries): ImageRecipe[] {
  const tag = k.versions.serving;
  return [
    ...knativeComponents.map((c) => ({
      name: `knative-${c}`,
      tag,
      files: [[k.path(c), `/ko-app/${c}`]] as [string, string][],
      config: { Entrypoint: [`/ko-app/${c}`], User: String(nonRootUid) },
    })),
    { name: 'traefik', tag: k.versions.traefik, files: [[k.path('traefik'), '/usr/local/bin/traefik']], config: { Entrypoint: ['/usr/local/bin/traefik'], User: String(nonRootUid) } },
  ];
}

export function knativeImages(k: KnativeBinaries): Record<KnativeComponent | 'traefik', string> {
  const refs = Object.fromEntries(knativeRecipes(k).map((r) => [r.name.replace(/^knative-/, ''), imageRef(r)]));
  return refs as Record<KnativeComponent | 'traefik', string>;
}

export function buildKnativeImages(k: KnativeBinaries, binaries: BinarySet, log: (line: string) => void): BuiltImage[] {
  return knativeRecipes(k).map((r) => buildImage(r, binaries, log));
}


function readManifests(file: string): Manifest[] {
  const docs = parseAllDocuments(readFileSync(file, 'utf8'));
  const out: Manifest[] = [];
  for (const doc of docs) {
    if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0]!.message}`);
    const value = doc.toJS() as Manifest | null;
    if (value && typeof value === 'object' && value.kind) out.push(value);
  }
  return out;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => join(dir, f));
}

/**
 * What a one-node local cluster needs beyond Knative's defaults: Traefik as the ingress, images
 * under kfn.local used as they are (no registry to resolve tags against), small CPU requests
 * (Knative asks for 0.6 cores, a third of this node, before any function runs), a revision
 * that cannot start reported failed after 60 s rather than 10 minutes, and idle pods gone 10 s
 * after the autoscaler decides on zero (30 s by default), which is what development wants.
 */
export const localSettings = {
  network: { 'ingress-class': ingressClass },
  deployment: { 'registries-skipping-tag-resolving': 'kind.local,ko.local,dev.local,kfn.local', 'progress-deadline': '60s' },
  autoscaler: { 'scale-to-zero-grace-period': '10s' },
  cpuRequest: '25m',
};

function replaceKoImages(value: unknown, images: Record<string, string>): unknown {
  if (typeof value === 'string') {
    const m = value.match(/^ko:\/\/knative\.dev\/serving\/cmd\/([a-z-]+)$/);
    if (!m) return value;
    const image = images[m[1]!];
    if (!image) throw new Error(`no image built for ${value}`);
    return image;
  }
  if (Array.isArray(value)) return value.map((v) => replaceKoImages(v, images));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, replaceKoImages(v, images)]));
  return value;
}

/**
 * Knative Serving's objects in the order they can be applied: namespace, CRDs, RBAC, config
 * maps, webhooks, workloads. HorizontalPodAutoscalers are left out (nothing serves resource
 * metrics here), and so are post-install jobs and cert-manager certificates.
 */
export function knativeManifests(configDir: string, images: Record<string, string>): Manifest[] {
  const serving = join(configDir, 'serving', 'core');
  const networking = join(configDir, 'networking');
  const files = [
    join(serving, '100-namespace.yaml'),
    ...yamlFiles(join(serving, '300-resources')),
    ...['certificate', 'ingress', 'serverlessservice', 'domain-claim'].map((n) => join(networking, `${n}.yaml`)),
    join(configDir, 'caching', 'image.yaml'),
    join(serving, '200-serviceaccount.yaml'),
    ...yamlFiles(join(serving, '200-roles')),
    ...yamlFiles(join(serving, 'configmaps')),
    join(networking, 'config-network.yaml'),
    ...yamlFiles(join(serving, 'webhooks')),
    ...yamlFiles(join(serving, 'deployments')),
    join(serving, '999-cache.yaml'),
  ];
  for (const f of files) if (!existsSync(f)) throw new Error(`Knative's manifest ${f} is missing: rebuild with \`kfn knative install\` after removing that cache entry`);
  const objects = files.flatMap(readManifests).filter((o) => o.kind !== 'HorizontalPodAutoscaler');
  return objects.map((o) => {
    const obj = replaceKoImages(o, images) as Manifest;
    if (obj.kind === 'ConfigMap' && obj.metadata.name === 'config-network') obj.data = { ...(obj.data as object), ...localSettings.network };
    if (obj.kind === 'ConfigMap' && obj.metadata.name === 'config-autoscaler') obj.data = { ...(obj.data as object), ...localSettings.autoscaler };
    if (obj.kind === 'ConfigMap' && obj.metadata.name === 'config-deployment') obj.data = { ...(obj.data as object), ...localSettings.deployment, 'queue-sidecar-image': images.queue };
    if (obj.kind === 'Deployment') {
      const spec = obj.spec as { template: { spec: { containers: { resources?: { requests?: Record<string, string> } }[] } } };
      for (const c of spec.template.spec.containers) if (c.resources?.requests?.cpu) c.resources.requests.cpu = localSettings.cpuRequest;
    }
    return obj;
  });
}

const deployments = [
  ...['controller', 'webhook', 'activator', 'autoscaler'].map((name) => ({ namespace: knativeNamespace, name })),
  { namespace: ingressNamespace, name: 'traefik' },
];

export interface KnativeComponentStatus {
  namespace: string;
  name: string;
  ready: boolean;
  detail: string;
}

/** The Knative and ingress Deployments, each with whether it is available; undefined when Knative is not installed. */
export async function knativeStatus(api: KubeApi): Promise<KnativeComponentStatus[] | undefined> {
  const ns = await api.request('GET', `/api/v1/namespaces/${knativeNamespace}`).then(
    () => true,
    () => false,
  );
  if (!ns) return undefined;
  const out: KnativeComponentStatus[] = [];
  for (const d of deployments) {
    try {
      const dep = await api.request<{ spec: { replicas?: number }; status?: { availableReplicas?: number; replicas?: number } }>('GET', `/apis/apps/v1/namespaces/${d.namespace}/deployments/${d.name}`);
      const available = dep.status?.availableReplicas ?? 0;
      out.push({ ...d, ready: available >= 1, detail: `${available}/${dep.spec.replicas ?? 1} available` });
    } catch (err) {
      out.push({ ...d, ready: false, detail: (err as Error).message.split('\n')[0]! });
    }
  }
  return out;
}


function waitEstablished(api: KubeApi, name: string, deadline: number): Promise<true> {
  return waitFor(
    `the CRD ${name} to be established`,
    async () => (await api.request<{ status?: { conditions?: ReadCondition[] } }>('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)).status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'),
    { deadline, intervalMs: 200 },
  );
}

export interface InstallOptions {
  log?: (line: string) => void;
  timeoutSeconds?: number;
}

/**
 * Applies Knative Serving and Traefik (server-side apply, field manager kfn-knative) and waits
 * until every component is available and the webhook answers. Idempotent: a second install
 * changes nothing and returns once everything is available.
 */
export async function applyKnative(api: KubeApi, k: KnativeBinaries, options: InstallOptions = {}): Promise<void> {
  const log = options.log ?? (() => {});
  const deadline = systemClock.now() + (options.timeoutSeconds ?? 300) * 1000;
  const images = knativeImages(k);
  const objects = [...knativeManifests(k.configDir, images), ...traefikManifests(images.traefik, localSettings.cpuRequest)];
  log(`Applying Knative Serving ${k.versions.serving} (${objects.length - 6} objects) and Traefik ${k.versions.traefik}`);
  for (const obj of objects) {
    await applyObject(api, obj as Parameters<typeof applyObject>[1], fieldManager);
    if (obj.kind === 'CustomResourceDefinition') await waitEstablished(api, obj.metadata.name, deadline);
  }
  log('Waiting for the controller, webhook, activator, autoscaler and Traefik to be available');
  let waiting: KnativeComponentStatus[] = [];
  await waitFor(
    "Knative's controller, webhook, activator, autoscaler and Traefik to be available",
    async () => {
      waiting = ((await knativeStatus(api)) ?? []).filter((s) => !s.ready);
      return waiting.length === 0;
    },
    { deadline, intervalMs: 1000, context: () => `Still waiting for ${waiting.map((w) => `${w.namespace}/${w.name} (${w.detail})`).join(', ')}. See \`kubectl -n ${knativeNamespace} get pods\` and the pods' logs.` },
  );
  // The webhook is available before it has written its certificate and registered its rules,
  // and until then the API accepts what Knative would refuse: wait until a Service the webhook
  // rejects (a reserved variable) is rejected, in a server-side dry run.
  let verdict = '';
  await waitFor(
    "Knative's webhook to validate Services",
    async () => (verdict = await webhookVerdict(api, brokenService(images.queue))).startsWith('denied'),
    { deadline, intervalMs: 1000, context: () => `Its last answer: ${verdict}` },
  );
}

/** A Knative Service that Knative's validating webhook refuses: it sets the reserved K_SERVICE. */
export function brokenService(image: string, name = 'kfn-webhook-probe', namespace = knativeNamespace): Manifest {
  return {
    apiVersion: 'serving.knative.dev/v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: { template: { spec: { containers: [{ image, env: [{ name: 'K_SERVICE', value: 'mine' }] }] } } },
  };
}

/** 'accepted', or 'denied: <the webhook's message>', or 'error: …' for a server-side dry-run create of `obj`. */
export async function webhookVerdict(api: KubeApi, obj: Manifest): Promise<string> {
  const [group, version] = obj.apiVersion.split('/');
  try {
    await api.request('POST', `/apis/${group}/${version}/namespaces/${obj.metadata.namespace}/services`, { query: { dryRun: 'All' }, body: obj });
    return 'accepted';
  } catch (err) {
    const message = (err as Error).message;
    return /admission webhook .* denied/.test(message) ? `denied: ${message}` : `error: ${message}`;
  }
}

/**
 * `kfn knative install`: builds (or finds cached) Knative and Traefik, builds their images,
 * imports them into the local node and applies everything, waiting until it serves.
 */
export async function installKnative(options: InstallOptions & { binaries: BinarySet; containerdSocket: string; api: KubeApi }): Promise<KnativeBinaries> {
  const log = options.log ?? (() => {});
  const started = Date.now();
  const k = await ensureKnativeBinaries({ log });
  const images = buildKnativeImages(k, options.binaries, log);
  importImages(options.containerdSocket, images.map((i) => i.tarball));
  await applyKnative(options.api, k, options);
  log(`Knative Serving ${k.versions.serving} with Traefik ${k.versions.traefik} is ready (${((Date.now() - started) / 1000).toFixed(1)}s)`);
  return k;
}

/**
 * Removes what applyKnative applied (Knative Serving, its CRDs and so every Knative Service,
 * and Traefik), waiting until its namespaces are gone.
 */
export async function uninstallKnative(api: KubeApi, k: KnativeBinaries, options: { log?: (line: string) => void; timeoutSeconds?: number } = {}): Promise<void> {
  const log = options.log ?? (() => {});
  const images = knativeImages(k);
  const objects = [...knativeManifests(k.configDir, images), ...traefikManifests(images.traefik, localSettings.cpuRequest)].reverse();
  log(`Removing Knative Serving and Traefik (${objects.length} objects)`);
  // Webhooks first, so nothing is refused or held while the rest goes.
  const order = [...objects.filter((o) => /WebhookConfiguration$/.test(o.kind)), ...objects.filter((o) => !/WebhookConfiguration$/.test(o.kind))];
  for (const obj of order) {
    try {
      const resource = await api.resource(obj.apiVersion, obj.kind);
      await api.request('DELETE', objectPath(resource, obj.metadata.name, resource.namespaced ? obj.metadata.namespace : undefined));
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404) && !/does not serve/.test((err as Error).message)) throw err;
    }
  }
  const deadline = systemClock.now() + (options.timeoutSeconds ?? 180) * 1000;
  for (const ns of [knativeNamespace, ingressNamespace]) {
    await waitFor(`namespace ${ns} to be gone`, () => api.request('GET', `/api/v1/namespaces/${ns}`).then(() => false, (err) => err instanceof ApiError && err.status === 404), {
      deadline,
      intervalMs: 500,
      context: () => `See \`kubectl get ns ${ns} -o yaml\`.`,
    });
  }
}
