// `kfn manifests`: write (and apply) what functions need in a cluster, each on its own or
// several as one shared host (`--host`).
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { stringify } from 'yaml';
import { applyObject } from '../kube/api.ts';
import { kfnVersion } from '../cluster/paths.ts';
import { functionKnativeService, functionManifests, functionServiceUrl, functionWorkload, hostManifests, hostWorkload } from '../functions/sdk/manifests.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { hasWebhooks } from '../functions/sdk/webhooks.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster } from './cluster-choice.ts';
import { webhookSet, type WebhookCa } from './webhook-tls.ts';
import { applyFunction, applyHostFunctions, discoveredScopes, functionDirs, loadFunction, servedMutatingPolicies } from './functions.ts';
import { defaultsAsPolicies, defaultsManifests, mutatingPolicyVersions, type MutatingPolicyVersion } from '../functions/sdk/policies.ts';
import { hostName, loadHostFunctions } from './hosts.ts';
import { reconcilerOwner, webhookTlsSecret } from './webhooks.ts';

const manifestsUsage = `Usage: kfn manifests [function dir …] [options]
       kfn manifests --host H [function dir …] [options]

Writes, for each function (default: every folder under functions/), its CRD, its Reconciler
(delivering to the function's Service kfn-fn-<function>, where \`kfn deploy\` runs it; to its
Knative Service with --target knative), its ServiceAccount with least-privilege RBAC, and the
bridge's list/watch grant; with --target, the function's workload; for a function with
webhooks (default/validate, or a kind with previous versions), the
Mutating/ValidatingWebhookConfigurations, the CRD's conversion webhook and the certificate
they trust. With --host H, the functions as one shared host: its
ServiceAccount kfn-host-H (the identity of every function's Reconciler, bound to each one's
RBAC), each function's CRD, RBAC and Reconciler delivering to its path on the host, and the
host's Deployment and Service (\`kfn deploy --host\` applies the same).

Options:
  --out DIR          write one YAML file per function into DIR (default: print to stdout)
  --apply            apply them to the cluster, and create each function's auth Secret if missing
${clusterFlagsUsage(18)}
                     (the cluster for --apply)
  -n, --namespace N  where the functions run: their ServiceAccounts, Secrets and workloads
                     (default kfn-system)
  --sink-uri URL     deliver to this URL instead of the function's Service kfn-fn-<function>
                     (or its Knative Service with --target knative)
  --host H           the functions as one shared host kfn-host-H, its workload included (no
                     functions with webhooks or deliveryTls; not with --target knative,
                     --sink-uri or --webhook-ca); one file host-H.yaml with --out
  --target T         where the function runs, as kfn deploy's --target: the Reconciler's sink,
                     and the function's workload added:
                       deployment  (default: the sink) a Deployment and Service kfn-fn-<function>
                                   (serves webhooks); the workload only when named
                       knative     a Knative Service kfn-fn-<function>, scales to zero (no webhooks)
  --image-prefix P   where the workload pulls the function's image from: P/fn-<function>:<version>
                     (default kfn.local, the images \`kfn image build\` imports into the local node);
                     a shared host's from P/host-<host>:<version>
  --webhook-ca C     who signs the webhook certificate the apiserver trusts:
                       kfn           (default) a CA and certificate made here, in a TLS Secret, the
                                     CA bundle in the configurations (with --apply, the Secret in
                                     the cluster is kept while it is good for 30 more days)
                       cert-manager  a cert-manager Certificate, the CA injected by its cainjector
                                     (cert-manager.io/inject-ca-from)
  --issuer K/NAME    with --webhook-ca cert-manager: the Issuer or ClusterIssuer to sign with
                     (default: a self-signed Issuer kfn-selfsigned, written beside it)
  --mutating-policies V
                     a function's declared defaults as MutatingAdmissionPolicies of
                     admissionregistration.k8s.io/V (v1 from Kubernetes 1.36, v1beta1 on 1.34–1.35
                     with its beta on): the apiserver writes them, no webhook. Default: with
                     --apply, what the cluster serves; without, its defaulting webhook
  -h, --help         show this help

Webhooks with failurePolicy Fail (the default) refuse every write of their kind until the
function answers: apply the configurations once its workload is ready (\`kfn deploy\` waits).`;

const manifestsFlags = { host: { type: 'string' }, out: { type: 'string' }, apply: { type: 'boolean' }, ...clusterFlags, namespace: { type: 'string', short: 'n' }, 'sink-uri': { type: 'string' }, target: { type: 'string' }, 'image-prefix': { type: 'string' }, 'webhook-ca': { type: 'string' }, issuer: { type: 'string' }, 'mutating-policies': { type: 'string' } } as const;

export const manifestsCommand: Command = {
  name: 'manifests',
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
    const dirs = positionals.length ? positionals : functionDirs();
    const namespace = values.namespace ?? 'kfn-system';
    const imagePrefix = (values['image-prefix'] ?? 'kfn.local').replace(/\/$/, '');
    if (values.host !== undefined) {
      const host = hostName('manifests', values.host);
      const alone = [values.target === 'knative' && '--target knative', values['sink-uri'] && '--sink-uri', values['webhook-ca'] && '--webhook-ca', values.issuer && '--issuer'].filter(Boolean);
      if (alone.length) throw new UsageError(`kfn manifests --host ${host}: a shared host is a Deployment serving each function on its own path over plain HTTP; ${alone.join(', ')} go${alone.length === 1 ? 'es' : ''} with functions on their own`);
      const api = values.apply ? (await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context }, { actsIn: () => namespace })).api : undefined;
      const reconcilers = await loadHostFunctions('manifests', host, dirs);
      const objects = [
        ...hostManifests(host, reconcilers, { namespace, ...(api ? { scopeOf: await discoveredScopes(api, ...reconcilers) } : {}) }),
        ...hostWorkload(host, reconcilers, { namespace, image: `${imagePrefix}/host-${host}:${kfnVersion}` }),
      ];
      emit(`host ${host}`, `host-${host}`, objects, values.out, Boolean(api));
      if (api) await applyHostFunctions(api, host, reconcilers.map((r) => r.name), objects, namespace);
      return 0;
    }
    const ca = webhookCaOption(values['webhook-ca'], values.issuer);
    const api = values.apply ? (await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context }, { actsIn: () => namespace })).api : undefined;
    const image = (reconciler: Reconciler) => `${imagePrefix}/fn-${reconciler.name}:${kfnVersion}`;
    const policyVersion = mutatingPoliciesOption(values['mutating-policies']) ?? (api ? await servedMutatingPolicies(api) : undefined);
    for (const dir of dirs) {
      const loaded = await loadFunction(dir);
      // Declared defaults: the apiserver's policies when it serves them, else the defaulting webhook.
      const reconciler = policyVersion ? defaultsAsPolicies(loaded) : loaded;
      const policies = policyVersion ? defaultsManifests(loaded, policyVersion) : [];
      if (!policyVersion && loaded.defaults?.length) console.error(`${loaded.name}: its defaults are applied by its defaulting webhook; for a cluster that serves MutatingAdmissionPolicy, --mutating-policies v1 (or v1beta1) has the apiserver write them, with no function up`);
      if (target === 'knative' && hasWebhooks(reconciler)) console.error(`${reconciler.name} has webhooks, which only a Deployment serves (Knative gives no TLS listener of the function's own): --target deployment`);
      // kfn's certificate is kept from the cluster's Secret while good: an apply does not rotate it.
      const existing = api && ca.kind === 'kfn' ? (await webhookTlsSecret(api, reconciler, namespace))?.data : undefined;
      const hooks = target === 'knative' ? undefined : webhookSet(reconciler, { namespace, ca: ca.kind === 'kfn' ? { kind: 'kfn', existing } : ca });
      // The function's Service, where kfn deploy runs it, unless it is told otherwise: Knative's by --target knative (its sink ref), a URL by --sink-uri.
      const sinkUri = values['sink-uri'] ?? (target === 'knative' ? undefined : functionServiceUrl(reconciler, namespace));
      const objects = [
        ...functionManifests(reconciler, { namespace, sinkUri, webhookCa: ca.kind, ...(hooks?.caBundle ? { deliveryCaBundle: hooks.caBundle } : {}), ...(hooks?.conversion ? { conversion: hooks.conversion } : {}), ...(api ? { scopeOf: await discoveredScopes(api, reconciler) } : {}) }),
        ...policies,
        ...(hooks?.tls ?? []),
      ];
      if (target === 'knative') objects.push(functionKnativeService(reconciler, { namespace, image: image(reconciler) }));
      if (target === 'deployment') objects.push(...functionWorkload(reconciler, { namespace, image: image(reconciler), webhookCa: ca.kind }));
      emit(reconciler.name, basename(dir), [...objects, ...(hooks?.configurations ?? [])], values.out, Boolean(api));
      if (api) {
        await applyFunction(api, reconciler.name, objects, namespace);
        // Owned by the Reconciler, as kfn deploy registers them: deleting the function deletes them.
        const owner = hooks?.configurations.length ? await reconcilerOwner(api, reconciler.name) : undefined;
        for (const config of hooks?.configurations ?? []) {
          const metadata = config.metadata as Record<string, unknown>;
          metadata.ownerReferences = [owner!];
          await applyObject(api, config as Parameters<typeof applyObject>[1], 'kfn-manifests');
        }
      }
    }
    return 0;
  },
};

/** Writes the objects of `what` as YAML into `out`/`file`.yaml, or prints them when they are neither written nor applied. */
function emit(what: string, file: string, objects: Record<string, unknown>[], out: string | undefined, applied: boolean): void {
  const text = objects.map((o) => stringify(o, { aliasDuplicateObjects: false })).join('---\n');
  if (out) {
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, `${file}.yaml`), text);
    console.error(`wrote ${join(out, `${file}.yaml`)}`);
  } else if (!applied) {
    process.stdout.write(`# ${what}\n---\n${text}---\n`);
  }
}

/** --mutating-policies, checked: the full apiVersion. */
function mutatingPoliciesOption(value: string | undefined): MutatingPolicyVersion | undefined {
  if (value === undefined) return undefined;
  const version = mutatingPolicyVersions.find((v) => v === value || v.endsWith(`/${value}`));
  if (!version) throw new UsageError(`--mutating-policies must be ${mutatingPolicyVersions.map((v) => v.split('/')[1]).join(' or ')}, not "${value}"`);
  return version;
}

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
