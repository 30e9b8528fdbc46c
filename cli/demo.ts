// `kfn demo` (npm start): the whole system on one machine. A cluster ($KUBECONFIG if it
// answers, else the local one, built on first use), the CRDs and Reconcilers, the bridge and
// the functions — on the local cluster as pods (the bridge from manifests/, each function a
// Deployment under its own ServiceAccount), elsewhere or with --local as processes on this
// machine — sample objects, and a live account of every delivery until Ctrl-C stops what it
// started.
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { connectionFromKubeconfig, loadConnection } from '../kube/connection.ts';
import { applyObject, collectionPath, KubeApi, objectPath } from '../kube/api.ts';
import { clusterDown, clusterUp } from '../cluster/controlplane.ts';
import { clusterPaths, displayPath, repoRoot } from '../cluster/paths.ts';
import { readState } from '../cluster/state.ts';
import { deployFunctions } from './deploy.ts';
import { followBridgeJournal, installBridge } from './incluster.ts';
import { functionManifests } from '../functions/sdk/manifests.ts';
import { parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { applyFunction, functionDirs, loadFunction, startFunction } from './functions.ts';
import { isKfnFinalizer, managedByKfnSelector, reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import type { JournalEntry } from '../core/journal.ts';

const usage = `Usage: kfn demo [options]          (npm start)

Starts everything and shows it working: a cluster ($KUBECONFIG if it is reachable, otherwise
the local one, built on first run), the CRDs and Reconcilers, the bridge and the functions,
and each function's samples.yaml; then prints every delivery (event → function → what changed
→ status) until Ctrl-C, which stops everything the demo started.

On the local cluster the bridge and the functions run as pods: the bridge image is built and
the shipped manifests/ applied (2 replicas, one leader), each function is deployed as with
\`kfn deploy\`. On another cluster, or with --local, they run as processes on this machine
(faster to start; each function still under its own ServiceAccount token).

Options:
  --function NAME     only this example (default: every folder under functions/)
  --local             run the bridge and the functions as local processes
  --knative           on the local cluster, run each function as a Knative Service that scales
                      to zero (installs Knative Serving and Traefik first if needed)
  --exit-when-ready   stop once every sample reports Ready=True (for scripts and tests)
  -h, --help          show this help`;

const namespace = 'kfn-demo';
const systemNamespace = 'kfn-system';
const say = (line: string) => console.log(line);
const dim = (s: string) => (process.stdout.isTTY ? `\x1b[2m${s}\x1b[0m` : s);
const bold = (s: string) => (process.stdout.isTTY ? `\x1b[1m${s}\x1b[0m` : s);

async function reachable(api: KubeApi): Promise<boolean> {
  try {
    await api.request('GET', '/version', { signal: AbortSignal.timeout(3000) });
    return true;
  } catch {
    return false;
  }
}

/** One readable line per delivery: event → function → what changed → status. */
export function describeDelivery(l: JournalEntry): string {
  const time = l.time.slice(11, 19);
  const head = `${dim(time)} ${bold(`${l.primary.kind} ${l.key}`)} ${l.reason}${l.attempt > 1 ? ` (attempt ${l.attempt})` : ''} → ${l.reconciler}`;
  if (l.outcome === 'retry' || l.outcome === 'terminal') return `${head} → ${l.outcome === 'retry' ? 'will retry' : 'refused'}: ${l.why ?? ''}`;
  const changes = l.response?.changes ?? [];
  const applied = changes.filter((c) => c.action === 'applied' || c.action === 'pruned').map((c) => `${c.action === 'pruned' ? 'pruned ' : ''}${c.ref.kind}/${c.ref.name}`);
  const status = changes.find((c) => c.action === 'status')?.detail;
  const what = [applied.length ? `applied ${applied.join(', ')}` : '', status ? `status ${status}` : ''].filter(Boolean).join('; ') || 'no changes';
  return `${head} → ${l.status} in ${l.durationMs} ms: ${what}${l.outcome === 'requeue' ? ` (requeue${l.response?.message ? `: ${l.response.message}` : ''})` : ''}`;
}

export const demoCommand: Command = {
  name: 'demo',
  summary: 'start a cluster, the bridge, the functions and samples, and show deliveries live',
  usage,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values } = parseCommandArgs('demo', argv, { function: { type: 'string' }, 'exit-when-ready': { type: 'boolean' }, local: { type: 'boolean' }, knative: { type: 'boolean' } });
    if (values.knative && values.local) throw new UsageError('kfn demo: --knative runs the functions in the cluster; it cannot go with --local');
    const dirs = functionDirs().filter((d) => !values.function || d.endsWith(`/${values.function}`));
    if (dirs.length === 0) throw new UsageError(`kfn demo: no function named ${values.function} under functions/`);
    const children: ChildProcess[] = [];
    let startedCluster = false;
    const work = join(repoRoot, '.kfn', 'demo');
    rmSync(work, { recursive: true, force: true });
    mkdirSync(work, { recursive: true });

    const reconcilers: string[] = [];
    const plurals: string[] = [];
    let inCluster = false;
    let follow: AbortController | undefined;
    let api: KubeApi | undefined;
    const samples: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } }[] = [];
    const stopAll = async () => {
      // Delete the samples while the functions still run, so that finalizers can do their work,
      // then the Reconcilers, which point at processes that are about to stop.
      if (api && samples.length && (children.length || inCluster)) {
        say('Deleting the samples…');
        const paths = await Promise.all(samples.map(async (s) => `/apis/${s.apiVersion}/namespaces/${namespace}/${(await api!.resource(s.apiVersion, s.kind)).plural}/${s.metadata.name}`));
        for (const path of paths) await api.request('DELETE', path).catch(() => undefined);
        for (let i = 0; i < 80; i++) {
          const left = await Promise.all(paths.map((p) => api!.request('GET', p).then(() => 1, () => 0)));
          if (left.every((n) => n === 0)) break;
          await sleep(250);
        }
      }
      for (const name of reconcilers) await api?.request('DELETE', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`).catch(() => undefined);
      if (inCluster && api) {
        say('Removing the bridge and the functions from the cluster…');
        // The functions' admission webhooks first: once their pods go, a webhook with
        // failurePolicy Fail would refuse every write of its kind.
        for (const kind of ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations']) {
          await api.request('DELETE', `/apis/admissionregistration.k8s.io/v1/${kind}`, { query: { labelSelector: managedByKfnSelector } }).catch(() => undefined);
        }
        // Nothing is in flight any more (the samples are gone): the workloads need no graceful
        // stop, and waiting 30 s per pod for it is what made stopping slow.
        const ns = `/api/v1/namespaces/${systemNamespace}`;
        await api.request('DELETE', `/apis/apps/v1/namespaces/${systemNamespace}/deployments`, { body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background' } }).catch(() => undefined);
        await api.request('DELETE', `${ns}/pods`, { body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 1 } }).catch(() => undefined);
        await api.request('DELETE', `/api/v1/namespaces/${systemNamespace}`).catch(() => undefined);
        for (let i = 0; i < 240 && (await api.request('GET', ns).then(() => true, () => false)); i++) await sleep(250);
      }
      for (const c of children) c.kill('SIGTERM');
      await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
      if (startedCluster) {
        say('Stopping the local cluster the demo started…');
        await clusterDown({ log: () => {} });
      }
    };

    try {
      // 1. A cluster.
      let kubeconfig = process.env.KUBECONFIG?.split(':')[0];
      api = kubeconfig && existsSync(kubeconfig) ? new KubeApi(connectionFromKubeconfig(kubeconfig)) : undefined;
      if (api && (await reachable(api))) {
        say(`Using the cluster of KUBECONFIG (${kubeconfig}).`);
      } else {
        say(kubeconfig ? `KUBECONFIG (${kubeconfig}) does not answer; starting the local cluster instead.` : 'Starting the local cluster (the first run builds it from source: about 10 minutes).');
        const up = await clusterUp({ log: (l) => say(dim(`  ${l}`)) });
        startedCluster = !up.reused;
        kubeconfig = clusterPaths().kubeconfig;
        api = new KubeApi(loadConnection(kubeconfig));
        say(`Cluster ready at ${up.state.server} (kubeconfig ${displayPath(kubeconfig)}).`);
      }

      // 2. The Reconciler CRD and a fresh namespace for the samples.
      for (const doc of parseAllDocuments(readFileSync(join(repoRoot, 'manifests', 'crds', 'reconciler.yaml'), 'utf8'))) await applyObject(api, doc.toJS(), 'kfn-demo');
      await freshNamespace(api);
      const journal = join(work, 'journal.jsonl');
      const local = readState(clusterPaths());
      inCluster = !values.local && !!local && kubeconfig === clusterPaths().kubeconfig;
      if (values.knative && !inCluster) throw new UsageError('kfn demo --knative runs on the local cluster only (unset KUBECONFIG, or point it at .kfn/cluster/kubeconfig); on your own Knative cluster use `kfn deploy --target knative`.');
      if (inCluster) {
        // 3. In the cluster: the bridge from manifests/ (its journal on its output, which the
        // demo follows), each function as a Deployment + Service.
        await installBridge(api, local!.binDir, 'kfn-demo', (l) => say(dim(`  ${l}`)));
        say(`Bridge: Deployment ${systemNamespace}/kfn-bridge (2 replicas, leader election), from manifests/`);
        const target = values.knative ? 'knative' : 'deployment';
        if (values.knative) {
          const { knativeStatus } = await import('../cluster/knative.ts');
          if (!(await knativeStatus(api))?.every((s) => s.ready)) await (await import('./knative.ts')).installOnLocalCluster({ log: (l) => say(dim(`  ${l}`)) });
        }
        await deployFunctions(dirs, { namespace: systemNamespace, namespaces: [namespace], resyncPeriodSeconds: 60, target, log: (l) => say(dim(`  ${l}`)) });
        for (const dir of dirs) {
          const reconciler = await loadFunction(dir);
          reconcilers.push(reconciler.name);
          plurals.push(reconciler.for.plural);
          say(`Function ${bold(reconciler.name)} (${reconciler.for.kind}) as ${values.knative ? 'Knative Service' : 'Deployment'} ${systemNamespace}/kfn-fn-${reconciler.name}`);
        }
        follow = followBridgeJournal(api, systemNamespace, (entry) => appendFileSync(journal, `${JSON.stringify(entry)}\n`));
      } else {
        // 3. Local processes: each function under its ServiceAccount's token, then the bridge.
        let port = 18090;
        for (const dir of dirs) {
          const reconciler = await loadFunction(dir);
          const sinkUri = `http://127.0.0.1:${port}/`;
          const objects = functionManifests(reconciler, { namespace: systemNamespace, sinkUri, namespaces: [namespace], resyncPeriodSeconds: 60 });
          await applyFunction(api, reconciler.name, objects, systemNamespace);
          reconcilers.push(reconciler.name);
          plurals.push(reconciler.for.plural);
          const fn = await startFunction({ dir, name: reconciler.name, port, adminKubeconfig: kubeconfig!, namespace: systemNamespace, workDir: work });
          children.push(fn.process);
          say(`Function ${bold(reconciler.name)} (${reconciler.for.kind}) on ${fn.url} — log ${displayPath(fn.log)}`);
          port++;
        }
        const bridgeLog = openSync(join(work, 'bridge.log'), 'a');
        children.push(spawn(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'bridge', `--kubeconfig=${kubeconfig}`, `--journal=${journal}`, '--metrics-addr=127.0.0.1:18081'], { stdio: ['ignore', bridgeLog, bridgeLog] }));
        closeSync(bridgeLog);
        say(`Bridge running — metrics http://127.0.0.1:18081/metrics, log ${displayPath(join(work, 'bridge.log'))}, journal ${displayPath(journal)}`);
      }
      for (const dir of dirs) {
        const samplesFile = join(dir, 'samples.yaml');
        if (existsSync(samplesFile)) for (const doc of parseAllDocuments(readFileSync(samplesFile, 'utf8'))) samples.push({ ...doc.toJS(), metadata: { ...doc.toJS().metadata, namespace } });
      }

      // 4. Samples, then the live account.
      const appliedAt = new Map<string, number>();
      for (const sample of samples) {
        await applyObject(api, sample, 'kfn-demo');
        appliedAt.set(`${sample.kind}/${sample.metadata.name}`, Date.now());
      }
      const readyAt = new Map<string, number>();
      say(`Applied ${samples.length} samples in namespace ${namespace}. Try: kubectl --kubeconfig ${displayPath(kubeconfig!)} -n ${namespace} get all,${[...new Set(plurals)].join(',')}`);
      say(dim(values['exit-when-ready'] ? 'Stopping once every sample is Ready.' : 'Press Ctrl-C to stop everything the demo started.'));
      say('');
      let interrupted = false;
      const onSignal = () => (interrupted = true);
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      let offset = 0;
      while (!interrupted) {
        if (existsSync(journal)) {
          const text = readFileSync(journal, 'utf8');
          const fresh = text.slice(offset);
          const end = fresh.lastIndexOf('\n') + 1;
          for (const line of fresh.slice(0, end).split('\n').filter(Boolean)) say(describeDelivery(JSON.parse(line) as JournalEntry));
          offset += end;
        }
        for (const c of children) if (c.exitCode !== null) throw new Error(`a demo process exited (status ${c.exitCode}); see the logs in ${displayPath(work)}`);
        if (readyAt.size < samples.length && (await allReady(api, samples, readyAt))) {
          say(bold(`All ${samples.length} samples are Ready. From apply to Ready:`));
          for (const [key, at] of readyAt) say(`  ${key.padEnd(44)} ${((at - appliedAt.get(key)!) / 1000).toFixed(1)} s`);
          if (values['exit-when-ready']) break;
        }
        await sleep(300);
      }
      return 0;
    } finally {
      follow?.abort();
      await stopAll();
    }
  },
};

/**
 * Follows the log of the bridge that holds the Lease and appends its journal lines (the
 * bridge writes them to its output) to `journal`, which the live account reads. Follows the
 * new leader after a takeover; stops when aborted.
 */
/** The demo namespace, emptied of a previous run's objects so the show starts from nothing. */
async function freshNamespace(api: KubeApi): Promise<void> {
  const path = `/api/v1/namespaces/${namespace}`;
  const exists = await api.request('GET', path).then(
    () => true,
    () => false,
  );
  if (exists) {
    say(`Removing the previous demo's namespace ${namespace}…`);
    await api.request('DELETE', path).catch(() => undefined);
    const started = Date.now();
    let said = '';
    for (;;) {
      if (!(await api.request('GET', path).then(() => true, () => false))) break;
      const held = await heldByFinalizers(api);
      const waited = Date.now() - started;
      // A previous run stopped before its functions could finalize their objects (killed, or
      // crashed): nobody is left to run that cleanup, and the namespace would stay terminating
      // forever. Its objects are demo data inside the namespace being deleted: let them go.
      if (held.length && waited > 10_000) {
        say(`  The previous run stopped before its functions finalized ${held.length} object(s); letting them go: ${held.map((h) => `${h.kind} ${h.name} (${h.finalizers.join(', ')})`).join(', ')}`);
        for (const h of held) await api.request('PATCH', h.path, { body: { metadata: { finalizers: h.finalizers.length === h.all.length ? null : h.all.filter((f) => !isKfnFinalizer(f)) } }, contentType: 'application/merge-patch+json' }).catch(() => undefined);
      } else {
        const what = held.length ? `waiting for ${held.length} object(s) with kfn finalizers: ${held.map((h) => `${h.kind} ${h.name}`).join(', ')}` : 'waiting for its objects to be deleted';
        if (what !== said) say(dim(`  ${what}…`));
        said = what;
      }
      if (waited > 120_000) throw new Error(`namespace ${namespace} is still being deleted after 2 minutes; see: kubectl get all -n ${namespace}, and remove what holds it`);
      await sleep(500);
    }
  }
  await applyObject(api, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }, 'kfn-demo');
}

/** Objects in the demo namespace that carry a kfn.dev finalizer (any served kind that lists). */
async function heldByFinalizers(api: KubeApi): Promise<{ kind: string; name: string; path: string; finalizers: string[]; all: string[] }[]> {
  const out: { kind: string; name: string; path: string; finalizers: string[]; all: string[] }[] = [];
  const kinds: { apiVersion: string; kind: string }[] = [{ apiVersion: 'v1', kind: 'ConfigMap' }];
  for (const dir of functionDirs()) {
    const reconciler = await loadFunction(dir).catch(() => undefined);
    if (reconciler) kinds.push({ apiVersion: reconciler.for.apiVersion, kind: reconciler.for.kind });
  }
  for (const k of kinds) {
    const resource = await api.resource(k.apiVersion, k.kind).catch(() => undefined);
    if (!resource) continue;
    const list = await api.request<{ items: { metadata: { name: string; finalizers?: string[] } }[] }>('GET', collectionPath(resource, namespace)).catch(() => ({ items: [] }));
    for (const item of list.items) {
      const all = item.metadata.finalizers ?? [];
      const ours = all.filter(isKfnFinalizer);
      if (ours.length) out.push({ kind: k.kind, name: item.metadata.name, path: objectPath(resource, item.metadata.name, namespace), finalizers: ours, all });
    }
  }
  return out;
}

/** Records in `readyAt` when each sample is first seen Ready; true once all are. */
async function allReady(api: KubeApi, samples: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } }[], readyAt: Map<string, number>): Promise<boolean> {
  for (const s of samples) {
    const key = `${s.kind}/${s.metadata.name}`;
    if (readyAt.has(key)) continue;
    const resource = await api.resource(s.apiVersion, s.kind);
    const obj = await api.request<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', `/apis/${s.apiVersion}/namespaces/${s.metadata.namespace}/${resource.plural}/${s.metadata.name}`).catch(() => undefined);
    if (obj?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) readyAt.set(key, Date.now());
  }
  return readyAt.size === samples.length;
}
