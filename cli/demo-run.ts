// One run of `kfn demo`, step by step: a cluster, the Reconciler CRD and a fresh namespace, the
// bridge and the functions (in the local cluster as pods, elsewhere as processes on this
// machine), the samples, the live account of every delivery; and stop(), which takes down
// exactly what the run started.
import { ownChild } from './signals.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { applyObject, KubeApi } from '../kube/api.ts';
import { clusterDown } from '../cluster/controlplane.ts';
import { clusterPaths, codePath, displayPath, repoRoot, workRoot } from '../cluster/paths.ts';
import { readState } from '../cluster/state.ts';
import { followBridgeJournal, installBridge } from './incluster.ts';
import { functionManifests } from '../functions/sdk/manifests.ts';
import { UsageError } from './command.ts';
import { chooseCluster, writeClusterKubeconfig, type ChosenCluster, type ClusterFlags } from './cluster-choice.ts';
import { admissionPolicyKinds, applyFunction, defaultsForCluster, loadFunction, servedMutatingPolicies, startFunction } from './functions.ts';
import { managedByKfnSelector, reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import type { JournalEntry } from '../core/journal.ts';
import { waitFor } from '../core/clock.ts';
import { bold, describeDelivery, dim, say } from './demo-print.ts';
import { demoNamespace as namespace, freshNamespace } from './demo-namespace.ts';

const systemNamespace = 'kfn-system';

/**
 * What the demo takes from other commands to run in the cluster, handed in by `kfn demo` (a
 * module of steps imports no command): kfn deploy's whole deploy, and kfn knative's install.
 */
export interface DemoSteps {
  deploy(dirs: string[], options: { api: KubeApi; namespace: string; namespaces: string[]; resyncPeriodSeconds: number; target: 'knative' | 'deployment'; log: (line: string) => void }): Promise<void>;
  installKnative(options: { log: (line: string) => void }): Promise<void>;
}

/** kubectl's flags for the chosen cluster, as the user would type them. */
function kubectlFlags(c: ChosenCluster): string {
  if (c.via === 'in-cluster') return '';
  const file = c.via === '--kubeconfig' || (c.local && c.via === '~/.kube/config') ? `--kubeconfig ${displayPath(c.file!)} ` : '';
  return `${file}--context ${c.context} `;
}

type Sample = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } };

/** One run of the demo: what it started, so that stop() takes down exactly that. */
export class Demo {
  inCluster = false;
  private readonly dirs: string[];
  private readonly options: { local: boolean; knative: boolean; steps: DemoSteps };
  private readonly work = join(workRoot, 'demo');
  private readonly journal = join(this.work, 'journal.jsonl');
  private readonly children: ChildProcess[] = [];
  private readonly reconcilers: string[] = [];
  private readonly plurals: string[] = [];
  private readonly samples: Sample[] = [];
  private readonly appliedAt = new Map<string, number>();
  private startedCluster = false;
  private kubeconfig: string | undefined;
  private cluster: ChosenCluster | undefined;
  private api: KubeApi | undefined;
  private follow: AbortController | undefined;

  constructor(dirs: string[], options: { local: boolean; knative: boolean; steps: DemoSteps }) {
    this.dirs = dirs;
    this.options = options;
    rmSync(this.work, { recursive: true, force: true });
    mkdirSync(this.work, { recursive: true });
  }

  /** 1. A cluster: kubectl's when it answers, else (in kfn's checkout) the local one, built on first use. */
  async connect(flags: ClusterFlags): Promise<KubeApi> {
    const cluster = await chooseCluster(flags, { log: say, startLocalInCheckout: 'when-none-or-silent' });
    this.startedCluster = cluster.started;
    this.cluster = cluster;
    // The bridge and the functions, as processes, are handed the chosen context as a file.
    this.kubeconfig = writeClusterKubeconfig(cluster, join(this.work, 'admin.kubeconfig'));
    this.api = cluster.api;
    return cluster.api;
  }

  /** 2. The Reconciler CRD, a fresh namespace for the samples, and where the rest will run. */
  async prepare(api: KubeApi): Promise<void> {
    // The CRD, and the policy that makes naming an identity a right over it (as manifests/ installs them).
    for (const file of [join('crds', 'reconciler.yaml'), join('policies', 'reconciler-identity.yaml')]) {
      for (const doc of parseAllDocuments(readFileSync(join(repoRoot, 'manifests', file), 'utf8'))) await applyObject(api, doc.toJS(), 'kfn-demo');
    }
    await freshNamespace(api);
    this.inCluster = !this.options.local && !!this.cluster?.local;
    if (this.options.knative && !this.inCluster) throw new UsageError('kfn demo --knative runs on the local cluster only (--local-cluster); on your own Knative cluster use `kfn deploy --target knative`.');
    for (const dir of this.dirs) {
      const samplesFile = join(dir, 'samples.yaml');
      if (existsSync(samplesFile)) for (const doc of parseAllDocuments(readFileSync(samplesFile, 'utf8'))) this.samples.push({ ...doc.toJS(), metadata: { ...doc.toJS().metadata, namespace } });
    }
  }

  /**
   * 3. In the local cluster: the bridge from manifests/ (its journal on its output, which the
   * demo follows), each function as a Deployment + Service (or a Knative Service).
   */
  async startInCluster(api: KubeApi): Promise<void> {
    await installBridge(api, readState(clusterPaths())!.binDir, 'kfn-demo', (l) => say(dim(`  ${l}`)));
    say(`Bridge: Deployment ${systemNamespace}/kfn-bridge (1 replica, leader election), from manifests/`);
    const knative = this.options.knative;
    if (knative) {
      const { knativeStatus } = await import('../cluster/knative.ts');
      if (!(await knativeStatus(api))?.every((s) => s.ready)) await this.options.steps.installKnative({ log: (l) => say(dim(`  ${l}`)) });
    }
    await this.options.steps.deploy(this.dirs, { api, namespace: systemNamespace, namespaces: [namespace], resyncPeriodSeconds: 60, target: knative ? 'knative' : 'deployment', log: (l) => say(dim(`  ${l}`)) });
    for (const dir of this.dirs) {
      const reconciler = await loadFunction(dir);
      this.reconcilers.push(reconciler.name);
      this.plurals.push(reconciler.for.plural);
      say(`Function ${bold(reconciler.name)} (${reconciler.for.kind}) as ${knative ? 'Knative Service' : 'Deployment'} ${systemNamespace}/kfn-fn-${reconciler.name}`);
    }
    this.follow = followBridgeJournal(api, systemNamespace, (entry) => appendFileSync(this.journal, `${JSON.stringify(entry)}\n`));
  }

  /** 3. Elsewhere: each function as a local process under its ServiceAccount's token, then the bridge. */
  async startLocally(api: KubeApi): Promise<void> {
    let port = 18090;
    const policyVersion = await servedMutatingPolicies(api);
    for (const dir of this.dirs) {
      // Declared defaults: the apiserver's policies where it serves them (a local process has no webhooks).
      const { reconciler, policies } = defaultsForCluster(policyVersion, await loadFunction(dir), [namespace]);
      const objects = functionManifests(reconciler, { namespace: systemNamespace, sinkUri: `http://127.0.0.1:${port}/`, namespaces: [namespace], resyncPeriodSeconds: 60 });
      await applyFunction(api, reconciler.name, [...objects, ...policies], systemNamespace);
      this.reconcilers.push(reconciler.name);
      this.plurals.push(reconciler.for.plural);
      const fn = await startFunction({ dir, name: reconciler.name, port, adminKubeconfig: this.kubeconfig!, namespace: systemNamespace, workDir: this.work });
      this.children.push(fn.process);
      say(`Function ${bold(reconciler.name)} (${reconciler.for.kind}) on ${fn.url} — log ${displayPath(fn.log)}`);
      port++;
    }
    const bridgeLog = openSync(join(this.work, 'bridge.log'), 'a');
    // Owned: ended with the CLI however it ends (a signal before the demo's own handlers too).
    this.children.push(ownChild(spawn(process.execPath, [codePath('cli', 'kfn.ts'), 'bridge', `--kubeconfig=${this.kubeconfig}`, `--journal=${this.journal}`, '--metrics-addr=127.0.0.1:18081'], { stdio: ['ignore', bridgeLog, bridgeLog] })));
    closeSync(bridgeLog);
    say(`Bridge running — metrics http://127.0.0.1:18081/metrics, log ${displayPath(join(this.work, 'bridge.log'))}, journal ${displayPath(this.journal)}`);
  }

  /** 4. The samples. */
  async applySamples(api: KubeApi): Promise<void> {
    for (const sample of this.samples) {
      await applyObject(api, sample, 'kfn-demo');
      this.appliedAt.set(`${sample.kind}/${sample.metadata.name}`, Date.now());
    }
    say(`Applied ${this.samples.length} samples in namespace ${namespace}. Try: kubectl ${kubectlFlags(this.cluster!)}-n ${namespace} get all,${[...new Set(this.plurals)].join(',')}`);
  }

  /** 5. The live account: every delivery as it is journaled, until Ctrl-C (or every sample is Ready). */
  async showDeliveries(api: KubeApi, exitWhenReady: boolean): Promise<void> {
    say(dim(exitWhenReady ? 'Stopping once every sample is Ready.' : 'Press Ctrl-C to stop everything the demo started.'));
    say('');
    let interrupted = false;
    const onSignal = () => (interrupted = true);
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const readyAt = new Map<string, number>();
    let offset = 0;
    while (!interrupted) {
      if (existsSync(this.journal)) {
        const fresh = readFileSync(this.journal, 'utf8').slice(offset);
        const end = fresh.lastIndexOf('\n') + 1;
        for (const line of fresh.slice(0, end).split('\n').filter(Boolean)) say(describeDelivery(JSON.parse(line) as JournalEntry));
        offset += end;
      }
      for (const c of this.children) if (c.exitCode !== null) throw new Error(`a demo process exited (status ${c.exitCode}); see the logs in ${displayPath(this.work)}`);
      if (readyAt.size < this.samples.length && (await allReady(api, this.samples, readyAt))) {
        say(bold(`All ${this.samples.length} samples are Ready. From apply to Ready:`));
        for (const [key, at] of readyAt) say(`  ${key.padEnd(44)} ${((at - this.appliedAt.get(key)!) / 1000).toFixed(1)} s`);
        if (exitWhenReady) break;
      }
      await sleep(300);
    }
  }

  /**
   * Takes down what the demo started: the samples first, while the functions still run (so that
   * finalizers do their work), then the Reconcilers, the in-cluster bridge and functions or the
   * local processes, and the local cluster if the demo started it.
   */
  async stop(): Promise<void> {
    this.follow?.abort();
    const api = this.api;
    if (api && this.samples.length && (this.children.length || this.inCluster)) await this.deleteSamples(api);
    for (const name of this.reconcilers) await api?.request('DELETE', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${name}`).catch(() => undefined);
    if (this.inCluster && api) await this.removeFromCluster(api);
    for (const c of this.children) c.kill('SIGTERM');
    await Promise.all(this.children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
    if (this.startedCluster) {
      say('Stopping the local cluster the demo started…');
      await clusterDown({ log: () => {} });
    }
  }

  private async deleteSamples(api: KubeApi): Promise<void> {
    say('Deleting the samples…');
    const paths = await Promise.all(this.samples.map(async (s) => `/apis/${s.apiVersion}/namespaces/${namespace}/${(await api.resource(s.apiVersion, s.kind)).plural}/${s.metadata.name}`));
    for (const path of paths) await api.request('DELETE', path).catch(() => undefined);
    await waitFor('the samples to be gone', async () => (await Promise.all(paths.map((p) => api.request('GET', p).then(() => 1, () => 0)))).every((n) => n === 0), { timeoutMs: 20_000 }).catch(() => undefined);
  }

  private async removeFromCluster(api: KubeApi): Promise<void> {
    say('Removing the bridge and the functions from the cluster…');
    // The functions' admission webhooks first: once their pods go, a webhook with
    // failurePolicy Fail would refuse every write of its kind.
    for (const kind of ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations']) {
      await api.request('DELETE', `/apis/admissionregistration.k8s.io/v1/${kind}`, { query: { labelSelector: managedByKfnSelector } }).catch(() => undefined);
    }
    // And the policies of their declared defaults and guards (not served by every cluster: a 404 is nothing to remove).
    for (const { apiVersion, plural } of admissionPolicyKinds) await api.request('DELETE', `/apis/${apiVersion}/${plural}`, { query: { labelSelector: managedByKfnSelector } }).catch(() => undefined);
    // Nothing is in flight any more (the samples are gone): the workloads need no graceful
    // stop, and waiting 30 s per pod for it is what made stopping slow.
    const ns = `/api/v1/namespaces/${systemNamespace}`;
    await api.request('DELETE', `/apis/apps/v1/namespaces/${systemNamespace}/deployments`, { body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background' } }).catch(() => undefined);
    await api.request('DELETE', `${ns}/pods`, { body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 1 } }).catch(() => undefined);
    await api.request('DELETE', ns).catch(() => undefined);
    await waitFor(`namespace ${systemNamespace} to be gone`, () => api.request('GET', ns).then(() => false, () => true), { timeoutMs: 60_000 }).catch(() => undefined);
  }
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
