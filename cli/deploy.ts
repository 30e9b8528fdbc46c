// `kfn deploy`: functions run in a cluster, each as a Deployment + Service (or a Knative
// Service) under its own ServiceAccount, its Reconciler delivering to it; its image built here
// and imported into the local cluster's node, or pushed to a registry. deployFunctions is the
// whole deploy, which `kfn demo` runs too; deployHost runs several functions as one shared host
// (`--host`). Their steps live in cli/functions.ts (load, apply), cli/hosts.ts,
// cli/artifacts/images.ts, cli/webhooks.ts and cli/rollout.ts.
import { loadConnection } from '../kube/kubeconfig.ts';
import { applyObject, KubeApi } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import { ensureBinaries } from '../cluster/build.ts';
import { clusterPaths } from '../cluster/paths.ts';
import { knativeStatus } from '../cluster/knative.ts';
import { functionKnativeService, functionManifests, functionServiceUrl, functionWorkload, hostManifests, hostResourceName, hostWorkload, type ScaleToZero } from '../functions/sdk/manifests.ts';
import { hostPath } from '../functions/sdk/host.ts';
import { hasWebhooks, servesHttps, webhookConfigurations } from '../functions/sdk/webhooks.ts';
import { hasDefaulting } from '../functions/sdk/policies.ts';
import { rulesOf } from '../functions/sdk/rules.ts';
import type { Kind } from '../functions/sdk/kind.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { defaultBase, defaultPlatform, type BaseChoice } from './artifacts/oci-image.ts';
import { buildingOn, ensurePullSecret, localNode, onBase, placeFunctionImage, placeHostImage, registryTarget, type ImagePlacement, type OnBase, type RegistryTarget } from './artifacts/images.ts';
import { removeOtherTarget, removeOwnWorkload } from './targets.ts';
import { applyFunction, applyHostFunctions, defaultsForCluster, discoveredScopes, functionDirs, functionEntry, loadFunction, removeLabelled, servedMutatingPolicies, webhookConfigurationKinds } from './functions.ts';
import { hostFunctions, hostName, loadHostFunctions, releaseFromHost } from './hosts.ts';
import { ensureWebhookTls, reconcilerOwner } from './webhooks.ts';
import { waitDeployment, waitHost, waitKnativeService } from './rollout.ts';
import { checkBridgeContract } from './incluster.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster } from './cluster-choice.ts';
import { kfnCommand, localBridgeInstall } from './invocation.ts';
import { checkFunctionTypes, typecheckFlag, typecheckUsage } from './typecheck.ts';
import { registryPlaceholder } from './project-template.ts';
import { systemClock } from '../core/clock.ts';
import { reconcilerLimits } from '../core/reconciler-spec.ts';

const say = (line: string) => console.error(line);

const deployUsage = `Usage: kfn deploy <function dir …> | --all [options]
       kfn deploy --host H <function dir …> | --all [options]

Runs functions in the local cluster: builds each one's image and imports it into the node,
applies its CRD, least-privilege RBAC, ServiceAccount and auth Secret (as \`kfn manifests
--apply\`), the workload running it, and its Reconciler delivering to it:
  --target deployment (default)  a Deployment + Service; the Reconciler's sink.uri is the Service
  --target knative               a Knative Service that scales to zero (needs \`kfn knative
                                 install\`); the Reconciler's sink.ref names it
With --host H, the functions run as one shared host instead: one process in one Deployment
and Service kfn-host-H, each function on its own path (/<function>/) with its own auth key,
under one ServiceAccount that holds the union of their rights. For many small functions: one
process at rest instead of one each. Deployment target only; functions with webhooks or
deliveryTls need a TLS listener of their own and are refused. See docs/deploy.md.

Waits until each function is available. The bridge must run in the cluster to deliver to it:
\`${localBridgeInstall()}\`.

Options:
  --target T       deployment or knative (default deployment)
  --host H         run the functions as one shared host kfn-host-H (Deployment target only)
  --all            every function under functions/
  -n, --namespace N  where the functions run (default kfn-system)
  --watch-namespace N   only objects in N are reconciled (repeatable; default: every namespace)
  --timeout S      seconds to wait for each function to be available (default 120)
  --scale-to-zero  the bridge scales the function's Deployment (or the host's) to zero when idle,
                   wakes it when a change is to be delivered (holding it while a pod starts) and
                   scales it out by the changes waiting: scale to zero without Knative. Not for a
                   function whose webhooks the apiserver calls (it must answer at any time)
  --idle-seconds S  with --scale-to-zero: idle this long before going to zero (default 90)
  --max-replicas N  with --scale-to-zero: the most replicas while changes wait (default 1)
  --record on|off  write an invocation record to the function's log for each reconcile that
                   wrote, failed or was not a resync, for \`kfn replay cluster:<function>\`
                   (default on; --record alone is on). Secret data and fields marked sensitive
                   are hashed first; the kubelet's log rotation bounds how many are kept
  --otlp-endpoint U  send the functions' traces over OTLP/HTTP to U (OTEL_EXPORTER_OTLP_ENDPOINT
                   in their containers; docs/operations.md); off by default
  --registry R     push the images to R and run them from it by digest, pulled by the node as
                   on any cluster, instead of importing them into the node: \`local\` (the local
                   cluster's registry, \`kfn cluster registry\`) or host[:port][/path], with
                   the credentials of the Docker config (~/.docker/config.json); a registry
                   that asks for them gets a pull Secret kfn-registry in the namespace
  --base REF       the image the function's bundle goes on, from any registry (default: the
                   "kfn": {"base": …} field of the project's package.json, else
                   ${defaultBase}; see \`kfn image --help\`)
  --platform P     the platform taken from a multi-arch base (default ${defaultPlatform})
${typecheckUsage(16)}
${clusterFlagsUsage(16)}
  -h, --help       show this help`;

const deployFlags = { all: { type: 'boolean' }, host: { type: 'string' }, namespace: { type: 'string', short: 'n' }, 'watch-namespace': { type: 'string', multiple: true }, timeout: { type: 'string' }, target: { type: 'string' }, record: { type: 'string' }, 'scale-to-zero': { type: 'boolean' }, 'idle-seconds': { type: 'string' }, 'max-replicas': { type: 'string' }, 'otlp-endpoint': { type: 'string' }, registry: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' }, ...typecheckFlag, ...clusterFlags } as const;

export const deployCommand: Command = {
  name: 'deploy',
  usage: deployUsage,
  options: deployFlags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(deployUsage), 0);
    const { values, positionals } = parseCommandArgs(
      'deploy',
      recordArgs(argv),
      deployFlags,
      true,
    );
    const record = recordOf(values.record);
    const dirs = values.all ? functionDirs() : positionals;
    if (!dirs.length) throw new UsageError(`kfn deploy: name the functions to deploy, or --all\n\n${deployUsage}`);
    for (const dir of dirs) if (!functionEntry(dir)) throw new UsageError(`kfn deploy: ${dir} is not a function folder (it has no index.ts)`);
    const timeoutSeconds = values.timeout === undefined ? 120 : Number(values.timeout);
    if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) throw new UsageError('--timeout must be a positive number of seconds');
    const namespace = values.namespace ?? 'kfn-system';
    const target = values.target ?? 'deployment';
    if (target !== 'deployment' && target !== 'knative') throw new UsageError(`--target must be deployment or knative, not "${target}"`);
    const host = values.host === undefined ? undefined : hostName('deploy', values.host);
    if (host && target === 'knative') throw new UsageError(`kfn deploy --host ${host}: a shared host is one always-up process serving several functions, so it runs on the Deployment target only; Knative scales each function on its own (to zero too): deploy them without --host for --target knative`);
    if (values.registry === registryPlaceholder) throw new UsageError(`kfn deploy: --registry ${registryPlaceholder} is a placeholder: put the registry your cluster pulls from in its place, in package.json's "deploy" script (kfn init wrote it there): host[:port][/path] (e.g. ghcr.io/you), or local for kfn's local cluster's registry (\`${kfnCommand('cluster registry')}\`); or give one for this run: npm run deploy -- --registry R`);
    const registry = values.registry === undefined ? undefined : registryTarget(values.registry);
    if (!values['no-typecheck']) await checkFunctionTypes('deploy', dirs, { log: say });
    const cluster = await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context }, { actsIn: () => namespace });
    if (!registry && !cluster.local) {
      throw new UsageError(`kfn deploy: without --registry the images are imported into kfn's local cluster's node, and ${cluster.where} (server ${cluster.server}) is another cluster: push them to a registry it pulls from with --registry R`, 1);
    }
    const on = onBase(values);
    const scaleToZero = scaleToZeroOf(values, target);
    const options = { api: cluster.api, namespace, namespaces: values['watch-namespace'], timeoutSeconds, record, ...(scaleToZero ? { scaleToZero } : {}), otlpEndpoint: values['otlp-endpoint'], registry, ...(on ? { base: on.base, platform: on.platform } : {}) };
    if (host) await deployHost(host, dirs, options);
    else await deployFunctions(dirs, { ...options, target });
    return 0;
  },
};

/**
 * `--record` alone is on, as when it was a switch; `--record on|off` and `--record=on|off` say
 * which. The word after a bare --record is its value only when it is on or off, so that
 * `kfn deploy --record functions/myweb` still deploys myweb, recorded.
 */
export function recordArgs(argv: string[]): string[] {
  const end = argv.indexOf('--');
  return argv.map((arg, i) => (arg === '--record' && (end < 0 || i < end) && !['on', 'off'].includes(argv[i + 1] ?? '') ? '--record=on' : arg));
}

/** Whether the functions record (default on). */
export function recordOf(value: string | undefined): boolean {
  if (value === undefined || value === 'on') return true;
  if (value === 'off') return false;
  throw new UsageError(`--record takes on or off, not ${JSON.stringify(value)}`);
}

/** --scale-to-zero and its settings, checked; undefined without it. */
function scaleToZeroOf(values: { 'scale-to-zero'?: boolean; 'idle-seconds'?: string; 'max-replicas'?: string }, target: string): ScaleToZero | undefined {
  const count = (flag: 'idle-seconds' | 'max-replicas', limits: { minimum: number; maximum: number }) => {
    const text = values[flag];
    if (text === undefined) return undefined;
    const n = Number(text);
    if (!Number.isInteger(n) || n < limits.minimum || n > limits.maximum) throw new UsageError(`--${flag} takes a whole number from ${limits.minimum} to ${limits.maximum}, not ${JSON.stringify(text)}`);
    return n;
  };
  const idleSeconds = count('idle-seconds', reconcilerLimits.idleSeconds);
  const maxReplicas = count('max-replicas', reconcilerLimits.maxReplicas);
  if (!values['scale-to-zero']) {
    if (idleSeconds !== undefined || maxReplicas !== undefined) throw new UsageError('--idle-seconds and --max-replicas go with --scale-to-zero');
    return undefined;
  }
  if (target === 'knative') throw new UsageError('--scale-to-zero is for the Deployment target: a Knative Service scales to zero by itself');
  return { ...(idleSeconds ? { idleSeconds } : {}), ...(maxReplicas ? { maxReplicas } : {}) };
}

export interface DeployOptions {
  /** The cluster to deploy to (default: kfn's local cluster). */
  api?: KubeApi;
  namespace: string;
  /** A Deployment + Service (default), or a Knative Service. */
  target?: 'deployment' | 'knative';
  /** Knative only: pods kept when idle (default 0, scale to zero). */
  minScale?: number;
  /** Knative only: seconds an idle last pod is kept before scaling to zero. */
  retentionSeconds?: number;
  /** Knative only: the autoscaler's window in seconds (idle this long → zero). */
  windowSeconds?: number;
  namespaces?: string[];
  resyncPeriodSeconds?: number;
  timeoutSeconds?: number;
  /** KFN_RECORD=stdout in the function's container (default true: records in its log). */
  record?: boolean;
  /** Deployment target: the bridge scales the function's Deployment to and from zero (bridge/activator.ts). */
  scaleToZero?: ScaleToZero;
  /** OTEL_EXPORTER_OTLP_ENDPOINT in the function's container: where its spans go (off by default). */
  otlpEndpoint?: string;
  /** Push the images to this registry and run them from it by digest, instead of importing them into the node. */
  registry?: RegistryTarget;
  /** Build the images on this base image (with the bundle as one more layer) rather than on kfn's own Node image. */
  base?: BaseChoice;
  /** The platform taken from a multi-arch base (default linux/amd64). */
  platform?: string;
  log?: (line: string) => void;
}

/** What every deploy does first: the bridges' contract checked, Knative there (for it), the namespace, the pull Secret, and how images are built. */
async function prepareDeploy(options: DeployOptions, log: (line: string) => void): Promise<{ api: KubeApi; pullSecrets: string[]; placement: ImagePlacement }> {
  const knative = options.target === 'knative';
  const socket = options.registry ? undefined : await localNode();
  const api = options.api ?? new KubeApi(loadConnection(clusterPaths().kubeconfig));
  await checkBridgeContract(api, log);
  if (knative && !(await knativeStatus(api))?.every((s) => s.ready)) {
    throw new UsageError(`kfn deploy --target knative: Knative is not installed or not ready on the local cluster; run \`${kfnCommand('knative install')}\` (see \`${kfnCommand('knative status')}\`).`, 1);
  }
  // Before anything goes into it: the pull and webhook Secrets come before the function's own objects.
  await namespaceReady(api, options.namespace, { fieldManager: 'kfn-deploy', say: log });
  const pullSecrets = options.registry ? await ensurePullSecret(api, options.namespace, options.registry) : [];
  const on: OnBase | undefined = options.base && { base: options.base, platform: options.platform ?? defaultPlatform };
  if (on) log(buildingOn(on));
  const binaries = on ? undefined : await ensureBinaries({ log });
  return { api, pullSecrets, placement: { on, binaries, registry: options.registry, socket, knative, log } };
}

/** Builds, imports and applies each function, then waits until it is available. */
export async function deployFunctions(dirs: string[], options: DeployOptions): Promise<void> {
  const log = options.log ?? say;
  const knative = options.target === 'knative';
  const { api, pullSecrets, placement } = await prepareDeploy(options, log);
  const deployed: string[] = [];
  const webhooks = new Map<string, { reconciler: Reconciler; caBundle: string }>();
  const policyVersion = await servedMutatingPolicies(api);
  for (const dir of dirs) {
    // From the registry by digest (the kubelet pulls it, as on every cluster), or imported into the node.
    const { imageRef, imageId } = await placeFunctionImage(dir, placement);
    // Declared defaults: the apiserver's own policies where the cluster serves them (no webhook for them then).
    const defaults = defaultsForCluster(policyVersion, await loadFunction(dir), options.namespaces);
    const reconciler = defaults.reconciler;
    if (defaults.note) log(defaults.note);
    const versions: { version: string }[] = reconciler.for.options.previousVersions ?? [];
    if (versions.length && knative) throw new UsageError(`kfn deploy: ${reconciler.for.kind} has previous versions (${versions.map((v) => v.version).join(', ')}), which need the function's conversion webhook; Knative gives no TLS listener of the function's own — deploy it with --target deployment`, 1);
    if (knative) for (const note of rulesAtZero(reconciler)) log(note);
    // A certificate for a function that serves HTTPS: its webhooks, or its deliveries (deliveryTls).
    const caBundle = servesHttps(reconciler) && !knative ? await ensureWebhookTls(api, reconciler, options.namespace, log) : undefined;
    if (caBundle && hasWebhooks(reconciler)) webhooks.set(reconciler.name, { reconciler, caBundle });
    // The apiserver calls a function's webhooks at any time, and cannot wait for a pod to start.
    const scaleToZero = !knative && options.scaleToZero && !hasWebhooks(reconciler) ? { ...options.scaleToZero, deployment: `kfn-fn-${reconciler.name}` } : undefined;
    if (options.scaleToZero && !scaleToZero && !knative) log(`Function ${reconciler.name} serves admission or conversion webhooks, which the apiserver calls at any time: it is not scaled to zero (its rules as the apiserver's own policies would let it rest)`);
    const objects = functionManifests(reconciler, {
      ...(scaleToZero ? { scaleToZero } : {}),
      namespace: options.namespace,
      sinkUri: knative ? undefined : functionServiceUrl(reconciler, options.namespace),
      namespaces: options.namespaces,
      resyncPeriodSeconds: options.resyncPeriodSeconds,
      scopeOf: await discoveredScopes(api, reconciler),
      // With deliveryTls, the Reconciler trusts the function's CA for its deliveries.
      ...(caBundle ? { deliveryCaBundle: caBundle } : {}),
      // The CRD names its conversion webhook: the function's Service, over TLS.
      ...(versions.length && caBundle ? { conversion: { client: { service: { namespace: options.namespace, name: `kfn-fn-${reconciler.name}` } }, caBundle } } : {}),
    });
    await applyFunction(api, reconciler.name, [...objects, ...defaults.policies], options.namespace);
    await removeOtherTarget(api, options.namespace, reconciler.name, knative ? 'knative' : 'deployment', log);
    const workload = { namespace: options.namespace, image: imageRef, imageId, record: options.record, otlpEndpoint: options.otlpEndpoint, imagePullSecrets: pullSecrets, defaultsAsPolicies: defaults.policies.length > 0, scaleToZero: Boolean(scaleToZero) };
    // A webhook configuration the function no longer has (its defaults now the apiserver's
    // policies, say): gone before its pods change, or with failurePolicy Fail it would refuse
    // every write of the kind once nothing answers it.
    await removeStaleWebhooks(api, reconciler, knative, log);
    const apply = knative ? [functionKnativeService(reconciler, { ...workload, minScale: options.minScale, retentionSeconds: options.retentionSeconds, windowSeconds: options.windowSeconds })] : functionWorkload(reconciler, workload);
    for (const obj of apply) await applyObject(api, obj as Parameters<typeof applyObject>[1], 'kfn-deploy');
    deployed.push(reconciler.name);
  }
  const deadline = systemClock.now() + (options.timeoutSeconds ?? 120) * 1000;
  for (const name of deployed) {
    if (knative) await waitKnativeService(api, options.namespace, `kfn-fn-${name}`, deadline);
    else await waitDeployment(api, options.namespace, name, deadline);
    log(`Function ${name} runs in the cluster: ${knative ? 'Knative Service' : 'Deployment and Service'} ${options.namespace}/kfn-fn-${name}`);
    // Registered once the function answers: with failurePolicy Fail, a webhook nobody serves
    // would refuse every write of the kind.
    const hooks = webhooks.get(name);
    // (A kind with previous versions alone has its conversion webhook in its CRD: no configurations.)
    const owner = hooks ? await reconcilerOwner(api, name) : undefined;
    const configs = hooks
      ? webhookConfigurations(hooks.reconciler, {
          client: { service: { namespace: options.namespace, name: `kfn-fn-${name}` } },
          caBundle: hooks.caBundle,
          namespaces: options.namespaces,
          owner: owner!,
        })
      : [];
    for (const config of configs) await applyObject(api, config as Parameters<typeof applyObject>[1], 'kfn-deploy');
    if (configs.length) log(`Admission webhooks of ${name} registered: ${configs.map((c) => (c.webhooks as { name: string }[])[0]!.name).join(', ')}`);
  }
}

/** Deletes the function's Mutating/ValidatingWebhookConfiguration when it no longer has that webhook here. */
export async function removeStaleWebhooks(api: KubeApi, reconciler: Reconciler, knative: boolean, log: (line: string) => void): Promise<void> {
  // On Knative nothing serves them (no TLS listener of the function's own).
  const wanted: Record<string, boolean> = { MutatingWebhookConfiguration: !knative && hasDefaulting(reconciler), ValidatingWebhookConfiguration: !knative && Boolean(reconciler.validate) };
  const stale = webhookConfigurationKinds.filter((k) => !wanted[k.kind]);
  for (const what of await removeLabelled(api, reconciler.name, stale)) log(`Removed ${what}: ${reconciler.name} no longer has that webhook`);
}

/** On a target that scales to zero: which of a function's rules hold with it at zero (CEL in its CRD), and which need it up (webhooks), and the way to have those. */
export function rulesAtZero(reconciler: Reconciler): string[] {
  const kind = reconciler.for as Partial<Kind>;
  const cel = kind.options ? rulesOf(kind as Kind).length : 0;
  const hooks = [hasDefaulting(reconciler) && 'default', reconciler.validate && 'validate'].filter(Boolean);
  const notes: string[] = [];
  if (cel) notes.push(`${reconciler.name}: ${cel} rule${cel > 1 ? 's' : ''} of ${reconciler.for.kind} run${cel > 1 ? '' : 's'} in the apiserver (CEL in its CRD), with the function at zero too`);
  if (hooks.length) {
    const many = hooks.length > 1;
    notes.push(`${reconciler.name}: ${hooks.join(' and ')} ${many ? 'are webhooks' : 'is a webhook'}, which need${many ? '' : 's'} the function up and a TLS listener of its own: on Knative ${many ? 'they are' : 'it is'} not served. Deploy ${reconciler.name} with --target deployment to have ${many ? 'them' : 'it'}, or say the rule in CEL (docs/functions.md, "Rules the apiserver runs")`);
  }
  return notes;
}

/**
 * Runs the functions as one shared host (functions/sdk/host.ts): one image with all of them,
 * their objects bound to the host's ServiceAccount (hostManifests), the host's Deployment and
 * Service; a function that ran on its own before loses its own workload, and one the host
 * served before and does not now loses its rights on the host's identity. Waits until it answers.
 */
export async function deployHost(host: string, dirs: string[], options: Omit<DeployOptions, 'target' | 'minScale' | 'retentionSeconds' | 'windowSeconds'>): Promise<void> {
  const log = options.log ?? say;
  const reconcilers = await loadHostFunctions('deploy', host, dirs);
  const ns = options.namespace;
  const { api, pullSecrets, placement } = await prepareDeploy({ ...options, target: 'deployment' }, log);
  const { imageRef, imageId } = await placeHostImage(host, dirs, placement);
  const names = reconcilers.map((r) => r.name);
  const before = await hostFunctions(api, ns, host);
  const objects = hostManifests(host, reconcilers, { namespace: ns, namespaces: options.namespaces, resyncPeriodSeconds: options.resyncPeriodSeconds, scopeOf: await discoveredScopes(api, ...reconcilers), ...(options.scaleToZero ? { scaleToZero: options.scaleToZero } : {}) });
  await applyHostFunctions(api, host, names, objects, ns);
  for (const name of names) await removeOwnWorkload(api, ns, name, host, log);
  for (const name of before.filter((n) => !names.includes(n))) await releaseFromHost(api, ns, host, name, log);
  for (const obj of hostWorkload(host, reconcilers, { namespace: ns, image: imageRef, imageId, record: options.record, otlpEndpoint: options.otlpEndpoint, imagePullSecrets: pullSecrets, scaleToZero: Boolean(options.scaleToZero) })) await applyObject(api, obj as Parameters<typeof applyObject>[1], 'kfn-deploy');
  await waitHost(api, ns, host, systemClock.now() + (options.timeoutSeconds ?? 120) * 1000);
  log(`Host ${host} runs in the cluster: Deployment and Service ${ns}/${hostResourceName(host)}, serving ${names.map((n) => `${n} on ${hostPath(n)}`).join(', ')}`);
}
