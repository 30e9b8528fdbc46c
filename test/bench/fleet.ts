// P7 of bench:compare — a fleet at rest, measured from outside as a cluster's operator would: the
// kubelet's figures for each pod (working set, CPU used) over an idle period, after the fleet has
// settled. Five sides, each alone on the cluster in its turn:
//
//   controller-runtime ×12   the MyWeb peer run twelve times (twelve Deployments, each with its
//                            own cluster-wide caches), operator i reconciling team i's MyWeb
//   controller-runtime 1×12  one manager running twelve such controllers over one cache
//   kfn, Deployments         the bridge (as manifests/ runs it: one replica) and the twelve
//                            examples' functions, each its own Deployment, as `kfn deploy --all`
//                            runs them
//   kfn, shared host         the same, the functions without webhooks served by one process
//                            (`kfn deploy --host`), those with webhooks by their own
//   kfn, Deployments at zero the Deployments side with `kfn deploy --scale-to-zero`: the bridge
//                            scales each function to zero when idle (those with webhooks stay up)
//   kfn, shared host at zero the shared host side, the host scaled to zero by the bridge
//   kfn on Knative           the bridge, the functions as Knative Services, Knative Serving and
//                            its ingress (Traefik), as `kfn deploy --all --target knative`
//
// Each kfn side has the twelve examples' samples; each controller-runtime side one MyWeb per team.
// The samples' own workloads (nginx, redis …) are not counted on either side.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { deployFunctions, deployHost } from '../../cli/deploy.ts';
import { functionDirs, loadFunction } from '../../cli/functions.ts';
import { followBridgeJournal, installBridge, bridgeNamespace } from '../../cli/incluster.ts';
import type { JournalEntry } from '../../core/journal.ts';
import { installOnLocalCluster } from '../../cli/knative.ts';
import { ensureBinaries } from '../../cluster/build.ts';
import { buildImage, importImages, nonRootUid } from '../../cluster/images.ts';
import { knativeNamespace } from '../../cluster/knative.ts';
import { nodePaths } from '../../cluster/node.ts';
import { clusterPaths, repoRoot } from '../../cluster/paths.ts';
import { ingressNamespace } from '../../cluster/traefik.ts';
import { waitFor } from '../../core/clock.ts';
import { servesHttps } from '../../functions/sdk/webhooks.ts';
import { undeployFunction, undeployHost } from '../../cli/undeploy.ts';
import { applyObject, objectPath, type KubeApi, type KubeObject } from '../../kube/api.ts';
import { applyYaml, type TestCluster } from '../support/cluster.ts';

/** A pod's part of a side: what it is counted as. */
export type Part = 'operators' | 'bridge' | 'functions' | 'host' | 'knative' | 'ingress';

/** One look at the node: each pod's working set (bytes) and CPU used so far (s), from the kubelet. */
export type Look = Map<string, { memory: number; cpu: number }>;

/** The kubelet's resource metrics (`/metrics/resource`), by `namespace/pod`. */
export function parseResourceMetrics(text: string): Look {
  const look: Look = new Map();
  for (const m of text.matchAll(/^pod_(memory_working_set_bytes|cpu_usage_seconds_total)\{namespace="([^"]+)",pod="([^"]+)"\} (\S+)/gm)) {
    const key = `${m[2]}/${m[3]}`;
    const entry = look.get(key) ?? { memory: 0, cpu: 0 };
    if (m[1] === 'memory_working_set_bytes') entry.memory = Number(m[4]);
    else entry.cpu = Number(m[4]);
    look.set(key, entry);
  }
  return look;
}

export interface PartFigures {
  /** Mean over the looks of the part's pods' working sets (MiB). */
  memoryMiB: number;
  /** CPU seconds the part used, per idle minute. */
  cpuPerMinute: number;
  /** Mean number of the part's pods up. */
  pods: number;
  /** Share of the looks in which the part had no pod up. */
  atZero: number;
}

/**
 * The figures of each part over a series of looks `seconds` long: memory and pods are means over
 * the looks; CPU is each pod's last figure less its first (a pod that came up during the period
 * counts from zero; one gone during it keeps what its last look saw).
 */
export function figuresOf(looks: Look[], partOf: (key: string) => Part | undefined, seconds: number): Map<Part, PartFigures> {
  const parts = new Map<Part, PartFigures>();
  const part = (p: Part) => parts.get(p) ?? (parts.set(p, { memoryMiB: 0, cpuPerMinute: 0, pods: 0, atZero: 0 }), parts.get(p)!);
  const first = looks[0] ?? new Map();
  const last = new Map<string, number>();
  const upIn: Set<Part>[] = [];
  for (const look of looks) {
    const up = new Set<Part>();
    upIn.push(up);
    for (const [key, { memory, cpu }] of look) {
      const p = partOf(key);
      if (!p) continue;
      up.add(p);
      part(p).memoryMiB += memory / 2 ** 20 / looks.length;
      part(p).pods += 1 / looks.length;
      last.set(key, cpu);
    }
  }
  // After all looks: a part first seen late was at zero in the looks before.
  for (const [p, figures] of parts) figures.atZero = upIn.filter((up) => !up.has(p)).length / looks.length;
  for (const [key, cpu] of last) part(partOf(key)!).cpuPerMinute += ((cpu - (first.get(key)?.cpu ?? 0)) * 60) / seconds;
  return parts;
}

export interface FleetSide {
  side: string;
  parts: Partial<Record<Part, PartFigures>>;
  memoryMiB: number;
  cpuPerMinute: number;
  pods: number;
  /** Memory one more operator adds (MiB), as the side's figures give it. */
  marginalMiB: number;
  /** kfn: the deliveries the bridge made during the idle period, by `reconciler reason` (what woke the functions). */
  idleDeliveries?: Record<string, number>;
  /** kfn: every delivery the leading bridge's journal held by the end (the idle ones among them): that it was read at all. */
  journalled?: number;
  /** How long the side settled before the idle period (s): the settling time, longer on a kfn side still delivering. */
  settledSeconds?: number;
  /** Knative: the share of the looks in which each function had a pod up. */
  functionsUp?: Record<string, number>;
}

/**
 * What kfn adds on top of a platform: a side's figures less its `platform` parts (on Knative,
 * Knative Serving and its ingress), which a cluster that runs Knative already pays for.
 */
export function beyond(side: FleetSide, platform: Part[]): { memoryMiB: number; cpuPerMinute: number } {
  const left = (of: (p: PartFigures) => number, total: number) => platform.reduce((sum, part) => sum - (side.parts[part] ? of(side.parts[part]!) : 0), total);
  return { memoryMiB: left((p) => p.memoryMiB, side.memoryMiB), cpuPerMinute: left((p) => p.cpuPerMinute, side.cpuPerMinute) };
}

/**
 * How long a kfn side's bridge must have delivered nothing before its idle period starts:
 * Knative's default stable window (60 s) and grace period to zero (30 s), after which a function
 * its last delivery woke is back at zero.
 */
export const quietSeconds = 90;
// (Resyncs are not counted: at rest they go on, spread over the period on Deployments.)

/** When the last delivery of `entries` was answered (ms), or 0 for none. */
export function lastAnswer(entries: readonly JournalEntry[]): number {
  return entries.reduce((last, e) => Math.max(last, Date.parse(e.time)), 0);
}

/** P7's sides, in the order they run; `--fleet-sides` picks some (the ratios need `operators`). */
export const fleetSideNames = ['operators', 'manager', 'deployment', 'host', 'zero', 'host-zero', 'knative'] as const;
export type FleetSideName = (typeof fleetSideNames)[number];

export interface FleetOptions {
  api: KubeApi;
  cluster: TestCluster;
  /** The controller-runtime MyWeb peer's binary. */
  operator: string;
  settleSeconds: number;
  idleSeconds: number;
  /** Seconds between two looks at the kubelet. */
  everySeconds?: number;
  log: (line: string) => void;
  /** Where each side goes as it is measured (the caller keeps those measured should a later one fail). */
  into?: FleetSide[];
  /** The sides to measure (default all). The marginal figures of `manager` and `host` use `operators`' and `deployment`'s. */
  sides?: readonly FleetSideName[];
}

/** A Knative function pod's Service (`kfn-fn-myweb-00001-deployment-…` → `kfn-fn-myweb`), or undefined. */
export function knativeServiceOf(pod: string): string | undefined {
  return /^(.+)-\d{5}-deployment-/.exec(pod)?.[1];
}

/** The share of `looks` in which each Knative function had a pod up, by Service. */
export function functionsUpIn(looks: Look[], partOf: (key: string) => Part | undefined): Record<string, number> {
  const up: Record<string, number> = {};
  for (const look of looks) {
    const services = new Set<string>();
    for (const key of look.keys()) {
      const service = partOf(key) === 'functions' ? knativeServiceOf(key.split('/')[1]!) : undefined;
      if (service) services.add(service);
    }
    for (const service of services) up[service] = (up[service] ?? 0) + 1 / looks.length;
  }
  return up;
}

/**
 * The deliveries sent in [from, to) (ms; a journal entry's `time` is when the answer came, so the
 * send is `durationMs` before it), counted by `reconciler reason`.
 */
export function deliveriesIn(entries: readonly JournalEntry[], from: number, to: number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const e of entries) {
    const sent = Date.parse(e.time) - e.durationMs;
    if (sent < from || sent >= to) continue;
    const what = `${e.reconciler} ${e.reason}`;
    counts[what] = (counts[what] ?? 0) + 1;
  }
  return counts;
}

const teams = 12;
const benchNs = 'kfn-bench-fleet';
const samplesNs = 'kfn-bench-fleet-samples';

export async function fleetAtRest(o: FleetOptions): Promise<FleetSide[]> {
  const { api, log } = o;
  // What a run stopped midway left behind.
  await fleetCleanup(api);
  const node = await realNode(api);
  const look = async (): Promise<Look> => parseResourceMetrics(await api.text('GET', `/api/v1/nodes/${node}/proxy/metrics/resource`));
  const want = (name: FleetSideName) => (o.sides ?? fleetSideNames).includes(name);
  const measure = async (side: string, partOf: (key: string) => Part | undefined, marginal: (parts: Map<Part, PartFigures>) => number, kfn?: 'deployment' | 'host' | 'knative'): Promise<FleetSide> => {
    log(`P7 ${side}: settling ${o.settleSeconds} s, then ${o.idleSeconds} s idle`);
    // On a kfn side, the leading bridge's journal: which deliveries came during the idle period.
    const journal: JournalEntry[] = [];
    const following = kfn ? followBridgeJournal(api, bridgeNamespace, (e) => journal.push(e)) : undefined;
    const looks: Look[] = [];
    let idleFrom = 0;
    let end = 0;
    const settleFrom = Date.now();
    try {
      await sleep(o.settleSeconds * 1000);
      // A kfn side has settled once its bridge has delivered nothing for quietSeconds too (a
      // function woken by the samples' last changes is then back at zero on Knative), or after
      // twice the settling time at most.
      if (following) {
        // Resyncs go on at rest (spread over the period on Deployments): only changes count.
        const changes = () => journal.filter((e) => e.reason !== 'resync');
        while (Date.now() - lastAnswer(changes()) < quietSeconds * 1000 && Date.now() - settleFrom < 2 * o.settleSeconds * 1000) await sleep(5000);
      }
      idleFrom = Date.now();
      end = idleFrom + o.idleSeconds * 1000;
      for (;;) {
        looks.push(await look());
        if (Date.now() >= end) break;
        await sleep(Math.min((o.everySeconds ?? 5) * 1000, Math.max(0, end - Date.now())));
      }
      // The journal's lines come through the pod's log: give the last ones a moment to arrive.
      if (following) await sleep(2000);
    } finally {
      following?.abort();
    }
    const parts = figuresOf(looks, partOf, o.idleSeconds);
    const sum = (f: (p: PartFigures) => number) => [...parts.values()].reduce((s, p) => s + f(p), 0);
    const result: FleetSide = { side, parts: Object.fromEntries(parts), memoryMiB: sum((p) => p.memoryMiB), cpuPerMinute: sum((p) => p.cpuPerMinute), pods: sum((p) => p.pods), marginalMiB: marginal(parts) };
    result.settledSeconds = Math.round((idleFrom - settleFrom) / 1000);
    if (following) {
      result.idleDeliveries = deliveriesIn(journal, idleFrom, end);
      result.journalled = journal.length;
      const before = journal.filter((e) => Date.parse(e.time) < idleFrom && e.reason !== 'resync');
      if (journal.length === 0) log(`P7 ${side}: the leading bridge's journal could not be read: its deliveries are not known, and it settled ${result.settledSeconds} s`);
      else log(`P7 ${side}: settled ${result.settledSeconds} s; ${before.length ? `the last delivery for a change answered ${Math.round((idleFrom - lastAnswer(before)) / 1000)} s before the idle period` : 'no delivery for a change before the idle period'}`);
    }
    if (kfn === 'knative') result.functionsUp = functionsUpIn(looks, partOf);
    log(`P7 ${side}: ${result.memoryMiB.toFixed(0)} MiB, ${result.cpuPerMinute.toFixed(2)} CPU s per idle minute, ${result.pods.toFixed(1)} pods`);
    if (result.idleDeliveries) log(`P7 ${side}: deliveries during the idle period: ${describeCounts(result.idleDeliveries)} (of ${result.journalled} in the leading bridge's journal)`);
    return result;
  };
  const sides: FleetSide[] = o.into ?? [];

  // controller-runtime: the peer's binary as an image on the node, one MyWeb per team.
  const operatorImage = async () => {
    const binaries = await ensureBinaries({ log });
    const image = buildImage({ name: 'myweb-operator', tag: 'bench', files: [[o.operator, '/operator']], config: { Entrypoint: ['/operator'], User: String(nonRootUid) } }, binaries, log);
    importImages(nodePaths(clusterPaths().dir).containerdSocket, [image.tarball]);
    return image.ref;
  };
  let image: string | undefined;
  // The operators' pods, not the MyWebs' nginx pods beside them.
  const operatorsOf = (key: string): Part | undefined => (key.startsWith(`${benchNs}/myweb-`) ? 'operators' : undefined);
  const perOperator = (parts: Map<Part, PartFigures>) => (parts.get('operators')?.memoryMiB ?? 0) / teams;
  // The manager's and the shared host's marginal figures lean on a side before them: NaN without it.
  let single = Number.NaN;
  for (const manager of [false, true]) {
    if (!want(manager ? 'manager' : 'operators')) continue;
    image ??= await operatorImage();
    await operatorsUp(api, image, manager, log);
    const side = await measure(manager ? 'controller-runtime, one manager ×12 controllers' : 'controller-runtime ×12 operators', operatorsOf, manager ? (p) => ((p.get('operators')?.memoryMiB ?? 0) - single) / (teams - 1) : perOperator);
    if (!manager) single = side.memoryMiB / teams;
    sides.push(side);
    await namespaceGone(api, benchNs, log);
  }

  // kfn: the bridge in the cluster, the examples' functions and their samples.
  const dirs = functionDirs(join(repoRoot, 'functions'));
  const perFunction = (parts: Map<Part, PartFigures>) => (parts.get('functions')?.memoryMiB ?? 0) / dirs.length;
  // One more function on a shared host: the host's memory less one function's own process (the
  // Deployment side's mean), over the functions it serves beyond the first.
  let oneProcess = Number.NaN;
  let hostedCount = 0;
  const hostMarginal = (parts: Map<Part, PartFigures>) => ((parts.get('host')?.memoryMiB ?? 0) - oneProcess) / Math.max(1, hostedCount - 1);
  for (const side of ['deployment', 'host', 'zero', 'host-zero', 'knative'] as const) {
    if (!want(side)) continue;
    const how = side === 'zero' ? 'deployment' : side === 'host-zero' ? 'host' : side;
    // Scaled to zero by the bridge after its idle window (Knative's 90 s by default): the settling's quiet period covers it.
    const scaleToZero = side === 'zero' || side === 'host-zero' ? { scaleToZero: {} } : {};
    if (how === 'knative') await installOnLocalCluster({ log });
    await installBridge(api, o.cluster.state.binDir, 'kfn-bench', log);
    await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: samplesNs } } });
    const options = { api, namespace: bridgeNamespace, namespaces: [samplesNs], log, ...scaleToZero };
    if (how === 'host') {
      const own: string[] = [];
      const hosted: string[] = [];
      for (const dir of dirs) (servesHttps(await loadFunction(dir)) ? own : hosted).push(dir);
      hostedCount = hosted.length;
      await deployFunctions(own, options);
      await deployHost('fleet', hosted, options);
    } else {
      await deployFunctions(dirs, { ...options, target: how });
    }
    const samples: KubeObject[] = [];
    for (const dir of dirs) samples.push(...((await applyYaml(o.cluster.kc, readFileSync(join(dir, 'samples.yaml'), 'utf8'), samplesNs)) as KubeObject[]));
    const titles = { deployment: 'kfn, functions as Deployments', host: 'kfn, shared host (+ own pods for webhooks)', zero: 'kfn, Deployments scaled to zero by the bridge', 'host-zero': 'kfn, shared host scaled to zero by the bridge', knative: 'kfn on Knative' };
    const measured = await measure(titles[side], kfnPartOf(how), how === 'host' ? hostMarginal : perFunction, how);
    if (side === 'deployment') oneProcess = measured.marginalMiB;
    sides.push(measured);
    await samplesGone(api, samples, log);
    await kfnGone(api, log);
  }
  return sides;
}

/** `{ "a x": 2, "b y": 1 }` as `3 (a x 2, b y 1)`, the most first; `none` when empty. */
export function describeCounts(counts: Record<string, number>): string {
  const entries = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  if (entries.length === 0) return 'none';
  return `${entries.reduce((n, [, c]) => n + c, 0)} (${entries.map(([what, c]) => `${what} ${c}`).join(', ')})`;
}

/**
 * What a pod is part of on a kfn side. Knative Serving and its ingress stay installed once the
 * Knative side has run (a second run on the same cluster finds them): they count only there.
 */
export function kfnPartOf(how: 'deployment' | 'host' | 'knative'): (key: string) => Part | undefined {
  return (key) => {
    const [ns, pod] = key.split('/') as [string, string];
    if (ns === bridgeNamespace) return pod.startsWith('kfn-bridge') ? 'bridge' : pod.startsWith('kfn-host-') ? 'host' : 'functions';
    if (how !== 'knative') return undefined;
    if (ns === knativeNamespace) return 'knative';
    if (ns === ingressNamespace) return 'ingress';
    return undefined;
  };
}

/** The node that runs containers (not one of kwok's fake nodes). */
async function realNode(api: KubeApi): Promise<string> {
  const nodes = await api.request<{ items: { metadata: { name: string; labels?: Record<string, string> } }[] }>('GET', '/api/v1/nodes');
  const real = nodes.items.find((n) => n.metadata.labels?.type !== 'kwok');
  if (!real) throw new Error('P7 needs the local cluster\'s real node');
  return real.metadata.name;
}

/** Twelve operators (or one manager of twelve controllers), their rights, and one MyWeb per team; waits until each MyWeb is Ready. */
async function operatorsUp(api: KubeApi, image: string, manager: boolean, log: (line: string) => void): Promise<void> {
  const apply = (obj: object) => applyObject(api, obj as Parameters<typeof applyObject>[1], 'kfn-bench');
  await apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: benchNs } });
  await apply({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'myweb-operator', namespace: benchNs } });
  await apply({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: 'kfn-bench-myweb-operator' },
    rules: [
      { apiGroups: ['operator.k8s-summit.org'], resources: ['mywebs', 'mywebs/status'], verbs: ['get', 'list', 'watch', 'update', 'patch'] },
      { apiGroups: [''], resources: ['configmaps', 'services'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch'] },
      { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get', 'list', 'watch', 'create', 'update', 'patch'] },
      { apiGroups: ['', 'events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
    ],
  });
  await apply({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'kfn-bench-myweb-operator' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'kfn-bench-myweb-operator' },
    subjects: [{ kind: 'ServiceAccount', name: 'myweb-operator', namespace: benchNs }],
  });
  const workloads = manager ? [{ name: 'myweb-manager', args: [`--controllers=${teams}`] }] : Array.from({ length: teams }, (_, i) => ({ name: `myweb-operator-${i}`, args: [`--team=${i}`] }));
  for (const w of workloads) {
    const labels = { app: w.name };
    await apply({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: w.name, namespace: benchNs },
      spec: {
        selector: { matchLabels: labels },
        template: { metadata: { labels }, spec: { serviceAccountName: 'myweb-operator', containers: [{ name: 'operator', image, imagePullPolicy: 'Never', args: w.args }] } },
      },
    });
  }
  for (let i = 0; i < teams; i++) {
    await apply({ apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: `team-${i}`, namespace: benchNs, labels: { 'kfn.bench/team': String(i) } }, spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: 30700 + i, pageContentHtml: `<h1>team ${i}</h1>` } });
  }
  await waitFor(`the ${teams} teams' MyWebs to be Ready`, async () => {
    const list = await api.request<{ items: { status?: { conditions?: { type: string; status: string }[] } }[] }>('GET', `/apis/operator.k8s-summit.org/v1/namespaces/${benchNs}/mywebs`);
    return list.items.filter((w) => w.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')).length === teams || undefined;
  }, { timeoutMs: 300_000 });
  log(`P7: ${workloads.length} controller-runtime ${manager ? 'manager' : 'operators'} up, ${teams} MyWebs Ready`);
}

async function namespaceGone(api: KubeApi, ns: string, log: (line: string) => void): Promise<void> {
  await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  await waitFor(`namespace ${ns} to be gone`, () => api.request('GET', `/api/v1/namespaces/${ns}`).then(() => undefined, () => true), { timeoutMs: 300_000 });
  log(`P7: namespace ${ns} removed`);
}

/**
 * The samples, one by one, while the functions run: their finalizers need them, and the rights of
 * the functions and the bridge are RoleBindings in the samples' namespace, which deleting the
 * namespace would take away before the finalizers ran.
 */
async function samplesGone(api: KubeApi, samples: KubeObject[], log: (line: string) => void): Promise<void> {
  const paths: string[] = [];
  for (const o of samples) {
    const resource = await api.resource(o.apiVersion!, o.kind!);
    paths.push(objectPath(resource, o.metadata.name, resource.namespaced ? o.metadata.namespace : undefined));
  }
  for (const path of paths) await api.request('DELETE', path).catch(() => undefined);
  await waitFor('the samples to be gone (their finalizers run)', async () => {
    for (const path of paths) if (await api.request('GET', path).then(() => true, () => false)) return undefined;
    return true;
  }, { timeoutMs: 300_000 });
  log(`P7: ${samples.length} samples deleted`);
}

/** The samples first (their finalizers need the functions), then all kfn deployed (webhook configurations and rights are cluster-wide) and kfn-system. */
async function kfnGone(api: KubeApi, log: (line: string) => void): Promise<void> {
  await namespaceGone(api, samplesNs, log);
  const quiet = () => undefined;
  await undeployHost(api, 'fleet', { namespace: bridgeNamespace, log: quiet });
  const reconcilers = await api.request<{ items: { metadata: { name: string } }[] }>('GET', '/apis/kfn.dev/v1alpha1/reconcilers');
  for (const r of reconcilers.items) await undeployFunction(api, r.metadata.name, { namespace: bridgeNamespace, log: quiet });
  await namespaceGone(api, bridgeNamespace, log);
}

/** Removes what P7 leaves in the cluster should it stop midway. */
export async function fleetCleanup(api: KubeApi): Promise<void> {
  const quiet = () => undefined;
  await namespaceGone(api, benchNs, quiet);
  await api.request('DELETE', '/apis/rbac.authorization.k8s.io/v1/clusterroles/kfn-bench-myweb-operator').catch(quiet);
  await api.request('DELETE', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kfn-bench-myweb-operator').catch(quiet);
  await kfnGone(api, quiet).catch(quiet);
}

