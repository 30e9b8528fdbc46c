// An example function deployed as in production, for end-to-end tests: its CRD and RBAC from
// `kfn manifests`, the function as its own process under its ServiceAccount token, and a
// bridge process delivering to it, for objects in a namespace of the test's own.
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import type { TestContext } from 'node:test';
import { stringify } from 'yaml';
import type { KubeApi } from '../../kube/api.ts';
import { applyFunction, loadFunction, startFunction } from '../../cli/functions.ts';
import { authForAnnotation, identityForAnnotation } from '../../core/names.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { webhookConfigurations } from '../../functions/sdk/webhooks.ts';
import { generateServingPki } from '../../core/certificates.ts';
import { buildLambdaPackage } from '../../cli/build.ts';
import { lambdaEnvironment, startLambda, unzipPackage, type LambdaOptions, type LocalLambda } from './lambda.ts';
import { freePort, spawnBridge, type BridgeProcess } from './bridge.ts';
import { kubeApi, testNamespace, uniqueName, type TestCluster } from './cluster.ts';
import type { JournalEntry } from '../../core/journal.ts';

export interface FunctionStack {
  ns: string;
  dir: string;
  journal: string;
  api: KubeApi;
  /** The collection path of the function's kind in the test namespace. */
  objects: string;
  /** What the function printed so far (its process log, or the Lambda's logs). */
  output(): string;
  /** The function's process (runtime `process`). */
  process?: ChildProcess;
  /** The bridge's process. */
  bridge: BridgeProcess;
}

/** What a stack did, for a failed wait's message: the journal's last deliveries and the function's last lines. */
export function stackReport(stack: FunctionStack, lines = 15): string {
  const deliveries = journalLines(stack.journal).slice(-lines).map((l) => `  ${l.time} ${l.reason} ${l.key} attempt ${l.attempt}: ${l.outcome}${l.status ? ` ${l.status}` : ''}${l.why ? ` — ${l.why}` : ''} (${l.durationMs} ms)`);
  const out = stack.output().trimEnd().split('\n').slice(-lines).map((l) => `  ${l}`);
  return `journal (${deliveries.length ? `last ${deliveries.length}` : 'no deliveries'}):\n${deliveries.join('\n')}\nfunction output (last lines):\n${out.join('\n') || '  (none)'}`;
}

export function journalLines(path: string): JournalEntry[] {
  try {
    return readFileSync(path, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as JournalEntry);
  } catch {
    return [];
  }
}

/** How the function runs: its own process (`kfn serve`), or a Lambda under AWS's runtime client. */
export type FunctionRuntime = 'process' | 'lambda';

export interface StackOptions {
  resyncPeriodSeconds?: number;
  /** The Reconciler's event contract, instead of the function's own (2): 1 sends references only. */
  contract?: 1 | 2;
  /** The Reconciler's maxConcurrentReconciles, instead of the function's own. */
  maxConcurrentReconciles?: number;
  /** The Reconciler's timeoutSeconds, instead of the function's own. */
  timeoutSeconds?: number;
  namespace?: string;
  runtime?: FunctionRuntime;
  /** Lambda only: the Function URL's options (IAM auth, injected faults). */
  lambda?: Pick<LambdaOptions, 'iam' | 'failFirst' | 'concurrency'>;
  /** The bridge's AWS credentials (environment), for sinks with awsIam. */
  bridgeEnv?: Record<string, string>;
  /**
   * Process only: serve the function's admission webhooks over HTTPS (a fresh CA and serving
   * certificate for 127.0.0.1) and register them with the apiserver for the test namespace
   * alone, removed afterwards.
   */
  webhooks?: boolean;
  /** Process only: Node's own flags for the bridge's and the function's processes (V8's, as a Deployment's command gives them). */
  bridgeNodeOptions?: string[];
  functionNodeOptions?: string[];
}

/**
 * Lets the function `fn` (applied in `ns`) serve a Reconciler named `reconcilerName` beside its
 * own: its auth Secret (kfn.dev/auth-for) and its ServiceAccount (kfn.dev/identity-for) name
 * both, as the bridge requires before delivering for it.
 */
export async function serveReconcilerNamed(api: KubeApi, ns: string, fn: string, reconcilerName: string): Promise<void> {
  const names = `${fn},${reconcilerName}`;
  const merge = { contentType: 'application/merge-patch+json' };
  await api.request('PATCH', `/api/v1/namespaces/${ns}/secrets/kfn-fn-${fn}`, { body: { metadata: { annotations: { [authForAnnotation]: names } } }, ...merge });
  await api.request('PATCH', `/api/v1/namespaces/${ns}/serviceaccounts/kfn-fn-${fn}`, { body: { metadata: { annotations: { [identityForAnnotation]: names } } }, ...merge });
}

export async function functionStack(t: TestContext, cluster: TestCluster, function_: string, options: StackOptions = {}): Promise<FunctionStack & { lambda?: LocalLambda }> {
  const { namespace, runtime, lambda: lambdaOptions, bridgeEnv, webhooks, maxConcurrentReconciles, timeoutSeconds, contract, bridgeNodeOptions, functionNodeOptions, ...extra } = options;
  // An example by its name (functions/<name>), or a function's directory from the repository's root.
  const fnDir = join(repoRoot, function_.includes('/') ? function_ : join('functions', function_));
  const name = basename(fnDir);
  const api = kubeApi(cluster.kc);
  const ns = namespace ?? (await testNamespace(t, cluster, name));
  const dir = mkdtempSync(join(tmpdir(), `kfn-${name}-`));
  const reconciler = await loadFunction(fnDir);
  const port = await freePort();
  // The function's identity and Secret live in the test namespace; the Reconciler goes into
  // the bridge's file under a name of the test's own (the CRD is shared by the kind's tests).
  const objects = functionManifests(reconciler, { namespace: ns, sinkUri: `http://127.0.0.1:${port}/`, namespaces: [ns], ...extra });
  const reconcilerObj = objects.find((o) => o.kind === 'Reconciler')! as { spec: { sink: { uri: string; awsIam?: { region: string } }; maxConcurrentReconciles?: number; timeoutSeconds?: number; contract?: number } };
  if (contract !== undefined) reconcilerObj.spec.contract = contract;
  if (maxConcurrentReconciles !== undefined) reconcilerObj.spec.maxConcurrentReconciles = maxConcurrentReconciles;
  if (timeoutSeconds !== undefined) reconcilerObj.spec.timeoutSeconds = timeoutSeconds;
  let lambda: LocalLambda | undefined;
  let output = () => '';
  let process_: ChildProcess | undefined;
  await applyFunction(api, reconciler.name, objects.filter((o) => o.kind !== 'Reconciler'), ns);
  // The Reconciler has a name of the test's own: the function's Secret and identity must name it too.
  const reconcilerName = uniqueName(name);
  await serveReconcilerNamed(api, ns, reconciler.name, reconcilerName);
  if (runtime === 'lambda') {
    // The function as Lambda runs it: its deployment package, AWS's runtime client, a Function
    // URL; the ServiceAccount's kubeconfig and the auth secret in its environment.
    const pkg = await buildLambdaPackage(fnDir, join(dir, 'build'));
    const code = join(dir, 'task');
    unzipPackage(pkg.zip, code);
    const env = await lambdaEnvironment(cluster, reconciler.name, ns);
    const started = await startLambda({ codeDir: code, env, functionName: `kfn-fn-${reconciler.name}`, concurrency: 4, ...lambdaOptions });
    lambda = started;
    output = () => started.logs();
    t.after(async () => {
      t.diagnostic(`lambda ${reconciler.name}: ${started.invocations} invocations, ${started.coldStarts} cold starts, ${started.throttles} throttled`);
      mkdirSync(join(repoRoot, '.kfn', 'logs'), { recursive: true });
      writeFileSync(join(repoRoot, '.kfn', 'logs', `lambda-${ns}-${reconciler.name}.log`), started.logs());
      await started.stop();
    });
    reconcilerObj.spec.sink.uri = started.url;
    if (lambdaOptions?.iam) reconcilerObj.spec.sink.awsIam = { region: lambdaOptions.iam.region };
  } else {
    let tls: { port: number; certDir: string; caCert: string } | undefined;
    if (webhooks) {
      const pki = generateServingPki(reconciler.name, ['localhost'], { ips: ['127.0.0.1'] });
      tls = { port: await freePort(), certDir: join(dir, 'webhook-tls'), caCert: pki.caCert };
      mkdirSync(tls.certDir);
      writeFileSync(join(tls.certDir, 'tls.crt'), pki.cert);
      writeFileSync(join(tls.certDir, 'tls.key'), pki.key, { mode: 0o600 });
    }
    const fn = await startFunction({ dir: fnDir, name: reconciler.name, port, adminKubeconfig: cluster.paths.kubeconfig, namespace: ns, workDir: dir, webhooks: tls, nodeOptions: functionNodeOptions });
    t.after(() => void fn.process.kill('SIGKILL'));
    output = () => readFileSync(fn.log, 'utf8');
    process_ = fn.process;
    if (tls) {
      for (const config of webhookConfigurations(reconciler, { client: { url: `https://127.0.0.1:${tls.port}` }, caBundle: tls.caCert, namespaces: [ns], name: uniqueName(`kfn-fn-${reconciler.name}`) })) {
        const collection = `/apis/admissionregistration.k8s.io/v1/${(config.kind as string).toLowerCase()}s`;
        const created = await api.request<{ metadata: { name: string } }>('POST', collection, { body: config });
        t.after(() => api.request('DELETE', `${collection}/${created.metadata.name}`).catch(() => undefined));
      }
    }
  }

  const config = join(dir, 'bridge.yaml');
  writeFileSync(config, stringify({ ...reconcilerObj, metadata: { name: reconcilerName } }));
  const journal = join(dir, 'journal.jsonl');
  const bridge = await spawnBridge(t, dir, 'bridge', [`--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${config}`, `--journal=${journal}`], bridgeEnv, bridgeNodeOptions);
  // After hooks run in the order they were added: the function and the bridge are killed
  // before their directory goes (a bridge still journaling made the removal fail).
  t.after(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const kind = reconciler.for;
  return { ns, dir, journal, api, objects: `/apis/${kind.apiVersion}/namespaces/${ns}/${kind.plural}`, lambda, process: process_, bridge, output: () => { try { return output(); } catch { return ''; } } };
}
