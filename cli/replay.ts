// `kfn replay`: run a recorded reconcile again — offline against the reads it recorded, as a
// server-side dry run against the cluster, or live by sending its event to the function again.
import { readRecords } from '../functions/sdk/record.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { clusterNow, type ChosenCluster } from './cluster-choice.ts';
import { execInPod } from './pod-exec.ts';
import { bridgeSource, readSource, type ClusterAccess } from './replay-sources.ts';
import { parseSince, select } from './replay-select.ts';
import { deliveryLines, describeSelected } from './replay-print.ts';
import { replayOne } from './replay-one.ts';

const usage = `Usage: kfn replay <source> [options]

Runs recorded reconciles again. <source> is one of:
  a record file          what a function wrote with KFN_RECORD=<file> (kfn dev writes one)
  a function's log       records are JSON lines among its logs (KFN_RECORD=stdout, what
                         kfn deploy sets unless --record off); other lines are passed over
  a bridge journal       deliveries without reads: listed, and replayed with --live or --dry-run
  -                      standard input
  cluster:<function>     the logs of that function's pods in the cluster (and, after a restart,
                         its container's log before it)
  cluster:bridge         the bridge's journal, read out of each bridge pod (pods/exec: the rights
                         of kubectl exec in the bridge's namespace)

Modes:
  --offline      (default) run the function in this process against the reads recorded then;
                 no cluster needed. Shows the writes it makes now next to the writes made then.
                 A journal's deliveries, which hold no reads, are listed with their outcomes.
  --dry-run      run it in this process against the live cluster with every write a
                 server-side dry run (dryRun=All): what it would change now; nothing is stored
  --live         send the recorded event to the running function again (reason replay),
                 signed as the bridge signs it; the function reconciles the object as it is now

Which records (default: all; --live: the most recent):
  --id ID        a record id or event id (a prefix is enough)
  --object O     the object: namespace/name, or name
  --since T      recorded at or after T: an RFC 3339 time, or an age such as 90s, 10m, 2h
  --last         only the most recent of those selected

Options:
  --function DIR   the function's folder (default: the one under functions/ named in the record)
  --to URL         --live: the function's URL (default: the Reconciler's sink, through the
                   apiserver's service proxy when it is a cluster address)
${clusterFlagsUsage(16)}
                   (the cluster for --dry-run, --live and cluster:)
  -n, --namespace N  where the functions and the bridge run in the cluster (default kfn-system)
  --expect-same    print only what differs; for CI
  --json           print the outcomes as JSON lines
  -h, --help       show this help

Exit status: 0 when every replay wrote what was recorded, 1 when one differs or failed
differently, 2 when the input or the options are wrong.`;

const flags = {
  offline: { type: 'boolean' },
  'dry-run': { type: 'boolean' },
  live: { type: 'boolean' },
  id: { type: 'string' },
  object: { type: 'string' },
  since: { type: 'string' },
  last: { type: 'boolean' },
  function: { type: 'string' },
  to: { type: 'string' },
  ...clusterFlags,
  namespace: { type: 'string', short: 'n' },
  'expect-same': { type: 'boolean' },
  json: { type: 'boolean' },
} as const;

export const replayCommand: Command = {
  name: 'replay',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs(
      'replay',
      argv,
      flags,
      true,
    );
    if (positionals.length !== 1) throw new UsageError(`kfn replay: expected one source (a record file, a log, a journal, -, cluster:<function> or ${bridgeSource})\n\n${usage}`);
    const modes = (['offline', 'dry-run', 'live'] as const).filter((m) => values[m]);
    if (modes.length > 1) throw new UsageError(`kfn replay: choose one of --offline, --dry-run, --live (given: ${modes.map((m) => `--${m}`).join(', ')})`);
    const mode = modes[0] ?? 'offline';
    const namespace = values.namespace ?? 'kfn-system';
    let chosen: ChosenCluster | undefined;
    const cluster = () => (chosen ??= clusterNow({ kubeconfig: values.kubeconfig, context: values.context }, { actsIn: () => namespace }));
    const clusterApi = () => cluster().api;
    const access = (): ClusterAccess => ({ api: clusterApi(), exec: (target, command) => execInPod(cluster(), target, command) });
    const sources = await readSource(positionals[0]!, access, namespace);
    const source = { name: sources.length === 1 ? sources[0]!.name : positionals[0]!.startsWith('cluster:') ? `${positionals[0]} (${sources.map((f) => f.name).join(', ')})` : `${positionals[0]} and ${sources.length - 1} rotated file(s)` };
    const read = sources.map((f) => readRecords(f.text, f.name)).reduce((a, b) => ({ records: [...a.records, ...b.records], deliveries: [...a.deliveries, ...b.deliveries], problems: [...a.problems, ...b.problems] }));
    for (const p of read.problems) console.error(`kfn replay: ${p}`);
    const selected = select(read.records, read.deliveries, {
      id: values.id,
      object: values.object,
      since: values.since ? parseSince(values.since) : undefined,
      last: values.last ?? mode === 'live',
    });
    if (!selected.length) {
      const found = `${read.records.length} record(s) and ${read.deliveries.length} delivery line(s) in ${source.name}`;
      throw new UsageError(`kfn replay: nothing to replay: ${found}${values.id || values.object || values.since ? ', none matching the selection' : ''}${read.records.length + read.deliveries.length === 0 ? ' (records are written by functions run with KFN_RECORD, e.g. by kfn dev)' : ''}`);
    }
    let allSame = true;
    let listed = 0;
    for (const s of selected) {
      // A delivery holds no reads to replay offline: asked for no mode, it is listed with what the function answered.
      if (!modes.length && !s.record) {
        listed++;
        if (values.json) console.log(JSON.stringify({ event: s.event.id, mode: 'listed', delivery: s.delivery }));
        else console.log([describeSelected(s), ...deliveryLines(s.delivery!)].join('\n'));
        continue;
      }
      allSame = (await replayOne(s, { mode, functionDir: values.function, to: values.to, api: clusterApi, namespace, quiet: values['expect-same'] ?? false, json: values.json })) && allSame;
    }
    if (listed && !values.json) console.log(`${listed} deliver${listed === 1 ? 'y' : 'ies'} from the journal, listed: a journal holds no reads to replay offline. --dry-run runs one against the cluster now (--id, --last), --live sends it to the function again; the function's own records replay offline (kfn replay cluster:<function> --object …)`);
    return allSame ? 0 : 1;
  },
};
