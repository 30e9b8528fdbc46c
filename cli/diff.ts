// kfn diff: what a function would change for one object now — its reconcile run in this process
// against the cluster, every write a server-side dry run (dryRun=All), nothing stored.
import { join } from 'node:path';
import { encodeReconcileEvent } from '../core/event.ts';
import { ApiError, objectPath } from '../kube/api.ts';
import { repoRoot } from '../cluster/paths.ts';
import type { RecordedEvent } from '../functions/sdk/record.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { replayDryRun } from '../functions/sdk/replay.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster } from './cluster-choice.ts';
import { functionInFolder, functionNamed } from './functions.ts';
import { effectLines, wouldChange } from './replay-print.ts';

const usage = `Usage: kfn diff <function> <object> [options]

Runs the function's reconcile for one object against the cluster with every write a server-side
dry run (dryRun=All): the apiserver validates, defaults and merges each write and stores
nothing. Prints the writes the function would make and what each would create, change or
delete. Nothing is delivered to a running function and nothing changes in the cluster.

  <function>   a function folder (functions/myweb) or a function's name (myweb)
  <object>     namespace/name, or name (in the namespace of -n, else the context's; or a
               cluster-scoped object)

Options:
${clusterFlagsUsage(18)}
  -n, --namespace N  the namespace it acts in, as kubectl's: the object's when <object> names
                     none (default: the context's namespace, else default)
  --json             print the outcome as JSON
  -h, --help         show this help

Exit status: 0 when nothing would change, 1 when something would, 2 for bad input.
The function runs with your credentials, not its ServiceAccount's: a write its RBAC forbids
shows here as allowed (kfn dev runs it under its own account).`;

async function resolveFunction(arg: string): Promise<Reconciler> {
  const found = (await functionInFolder(arg)) ?? (await functionInFolder(join(repoRoot, 'functions', arg))) ?? (await functionNamed(arg).catch(() => undefined));
  if (!found) throw new UsageError(`kfn diff: ${arg} is neither a function folder (with an index.ts) nor the name of a function under functions/`);
  return found;
}

const flags = { ...clusterFlags, namespace: { type: 'string', short: 'n' }, json: { type: 'boolean' } } as const;

export const diffCommand: Command = {
  name: 'diff',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('diff', argv, flags, true);
    if (positionals.length !== 2) throw new UsageError(`kfn diff: expected a function and an object\n\n${usage}`);
    const reconciler = await resolveFunction(positionals[0]!);
    const kind = reconciler.for;
    const [first, second] = positionals[1]!.split('/');
    if (positionals[1]!.split('/').length > 2 || !first) throw new UsageError(`kfn diff: ${positionals[1]} is not namespace/name or name`);
    const name = second ?? first;
    if (!kind.namespaced && second) throw new UsageError(`kfn diff: ${kind.kind} is cluster-scoped: give its name alone, not ${positionals[1]}`);
    // The object's namespace: its own, else -n, else the context's (kubectl's choice, the cluster's namespace).
    const objectNamespace = (clusterNamespace: string) => (kind.namespaced ? (second ? first : clusterNamespace) : undefined);
    const { api, namespace: defaultNamespace } = await chooseCluster(values, { actsIn: (cluster) => objectNamespace(cluster.namespace) });
    const namespace = objectNamespace(defaultNamespace);
    const path = objectPath({ apiVersion: kind.apiVersion, kind: kind.kind, plural: kind.plural, namespaced: kind.namespaced, verbs: [] }, name, namespace);
    const live = await api.request<{ metadata: { uid: string; resourceVersion: string } }>('GET', path).catch((err) => {
      if (err instanceof ApiError && err.status === 404) throw new UsageError(`kfn diff: there is no ${kind.kind} ${namespace ? `${namespace}/` : ''}${name} (${kind.apiVersion}) in the cluster`);
      throw err;
    });
    const primary = { apiVersion: kind.apiVersion, kind: kind.kind, ...(namespace ? { namespace } : {}), name, uid: live.metadata.uid, resourceVersion: live.metadata.resourceVersion };
    const { event } = encodeReconcileEvent({ reconciler: reconciler.name, primary, reason: 'resync', observedAt: Date.now() }, 1, 'kfn-diff');
    const recorded: RecordedEvent = { id: event.id, source: event.source, reason: 'resync', attempt: 1, data: event.data! };
    const out = await replayDryRun(reconciler, recorded, api);
    if (values.json) {
      console.log(JSON.stringify({ function: reconciler.name, object: primary, writes: out.record.writes.map((w) => ({ method: w.method, path: w.path, status: w.status })), effects: out.effects, error: out.record.error }));
    } else {
      const r = out.record;
      console.log(`${kind.kind} ${namespace ? `${namespace}/` : ''}${name}  function ${reconciler.name}  (dry run: ${r.reads.length} read(s), ${r.writes.length} write(s))`);
      for (const w of r.writes) {
        if (w.status >= 200 && w.status < 300) continue;
        console.log(`  the apiserver would refuse ${w.method} ${w.path} (${w.status || 'no answer'}): ${(w.response as { message?: string } | undefined)?.message ?? w.error ?? ''}`);
      }
      console.log(effectLines(out, 'the reconcile').join('\n'));
      if (r.result?.result === 'requeue' && r.result.message) console.log(`  it would ask to be requeued: ${r.result.message}`);
    }
    if (out.record.error) return 1;
    return wouldChange(out) || out.record.writes.some((w) => !(w.status >= 200 && w.status < 300)) ? 1 : 0;
  },
};
