// `kfn replay`: run a recorded reconcile again — offline against the reads it recorded, as a
// server-side dry run against the cluster, or live by sending its event to the function again.
import { authenticate, type Credentials } from '../core/authentication.ts';
import { encodeReconcileEvent } from '../core/event.ts';
import { type ReconcileResponse } from '../core/response.ts';
import type { JournalEntry } from '../core/journal.ts';
import { ApiError, KubeApi, readText } from '../kube/api.ts';
import { formatChanges } from '../functions/sdk/diff.ts';
import { readRecords, type InvocationRecord, type RecordedEvent } from '../functions/sdk/record.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { replayDryRun, replayOffline, type ReplayOutcome } from '../functions/sdk/replay.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { clusterNow, type ChosenCluster } from './cluster-choice.ts';
import { execInPod } from './pod-exec.ts';
import { bridgeSource, readSource, type ClusterAccess } from './replay-sources.ts';
import { functionNamed, loadFunction } from './functions.ts';
import { reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import type { ReconcilerObject, WrittenReconcilerSpec } from '../core/reconciler-spec.ts';
import { objectKey } from '../core/objects.ts';

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

interface Selected {
  /** A full record (all modes), or a bridge delivery (live and dry-run). */
  record?: InvocationRecord;
  delivery?: JournalEntry;
  time: string;
  event: RecordedEvent;
  function: string;
}

export function parseSince(text: string, now = Date.now()): number {
  const age = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text);
  if (age) return now - Number(age[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[age[2] as 'ms']!;
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw new UsageError(`--since must be an RFC 3339 time or an age such as 10m, not "${text}"`);
  return at;
}

function eventOfDelivery(d: JournalEntry): RecordedEvent {
  return {
    id: d.id,
    source: 'kfn-replay',
    reason: d.reason,
    attempt: d.attempt,
    data: { contract: 1, reconciler: d.reconciler, primary: d.primary, ...(d.trigger ? { trigger: d.trigger } : {}) },
  };
}


/** Picks the records the options name, oldest first. */
export function select(records: InvocationRecord[], deliveries: JournalEntry[], o: { id?: string; object?: string; since?: number; last?: boolean }): Selected[] {
  let all: Selected[] = [
    ...records.map((r) => ({ record: r, time: r.time, event: r.event, function: r.function })),
    // A delivery that a record also covers (same event and attempt) is the record's.
    ...deliveries
      .filter((d) => !records.some((r) => r.event.id === d.id && r.event.attempt === d.attempt))
      .map((d) => ({ delivery: d, time: d.time, event: eventOfDelivery(d), function: d.reconciler })),
  ];
  if (o.id) all = all.filter((s) => s.record?.id.startsWith(o.id!) || s.event.id.startsWith(o.id!));
  if (o.object) all = all.filter((s) => objectKey(s.event.data.primary) === o.object || s.event.data.primary.name === o.object);
  if (o.since !== undefined) all = all.filter((s) => Date.parse(s.time) >= o.since!);
  all.sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
  return o.last ? all.slice(-1) : all;
}

const functionCache = new Map<string, Promise<Reconciler>>();

/** The function a record names: --function, or the folder under functions/ whose reconciler has that name. */
export async function functionFor(name: string, dir: string | undefined): Promise<Reconciler> {
  const key = dir ?? `name:${name}`;
  let found = functionCache.get(key);
  if (!found) {
    found = (async () => {
      if (dir) return loadFunction(dir);
      const named = await functionNamed(name);
      if (named) return named;
      throw new UsageError(`the record is of function ${name}, and no folder under functions/ defines it (renamed or removed?): pass --function <dir>`);
    })();
    functionCache.set(key, found);
  }
  return found;
}

/** "3 writes", or "1 write, 3 refused" when the apiserver refused some. */
function writeCount(writes: InvocationRecord['writes']): string {
  const refused = writes.filter((w) => !(w.status >= 200 && w.status < 300)).length;
  const done = writes.length - refused;
  return `${done} write${done === 1 ? '' : 's'}${refused ? `, ${refused} refused` : ''}`;
}

function describeSelected(s: Selected): string {
  const p = s.event.data.primary;
  const id = s.record ? `record ${s.record.id}` : `delivery ${s.event.id.slice(0, 12)}`;
  const outcome = s.record ? `${s.record.error ? `failed: ${s.record.error.message}` : `${s.record.result?.result ?? '?'}, ${writeCount(s.record.writes)}`}${s.record.cut ? '; cut: no reads' : ''}` : s.delivery?.outcome;
  return `${id}  ${s.function}  ${p.kind} ${objectKey(p)}  reason ${s.event.reason}  attempt ${s.event.attempt}  ${s.time}  (${outcome})`;
}

/** What a journal's delivery says of the function's answer: its changes, or why it was retried or refused. */
export function deliveryLines(d: JournalEntry): string[] {
  const lines: string[] = [];
  if (d.why) lines.push(`  ${d.outcome === 'terminal' ? 'refused' : 'why'}: ${d.why}`);
  const changes = d.response?.changes ?? [];
  if (changes.length) lines.push(`  changes: ${changes.map((c) => `${c.action} ${c.ref.kind} ${objectKey(c.ref)}`).join('; ')}`);
  else if (d.response) lines.push(`  no changes${d.response.message ? `: ${d.response.message}` : ''}`);
  if (d.response?.result === 'requeue' && d.response.requeueAfterSeconds !== undefined) lines.push(`  requeue after ${d.response.requeueAfterSeconds} s`);
  return lines;
}

/** What a dry run would do to the cluster, and a failure with its stack: lines for the terminal. */
export function effectLines(out: ReplayOutcome, what: string): string[] {
  const lines: string[] = [];
  for (const e of out.effects) {
    const path = e.key.replace(/^[A-Z]+ /, '');
    if (e.created) lines.push(`  would create ${path} (it does not exist now)`);
    else if (e.deleted) lines.push(`  would delete ${path}`);
    else if (e.changes.length) lines.push(`  would change ${path}:`, ...formatChanges(e.changes));
  }
  if (out.mode === 'dry-run' && !wouldChange(out) && !out.record.error) lines.push('  nothing would change in the cluster now');
  const r = out.record;
  if (r.error) {
    lines.push(`  ${what} failed: ${r.error.message}`);
    const stack = r.error.cause?.stack ?? r.error.stack;
    if (stack) lines.push(...stack.split('\n').slice(1, 6).map((l) => `    ${l.trim()}`));
  }
  return lines;
}

/** Whether a dry run found anything to create, delete or change. */
export function wouldChange(out: ReplayOutcome): boolean {
  return out.effects.some((e) => e.created || e.deleted || e.changes.length);
}

function printOutcome(out: ReplayOutcome, s: Selected, quiet: boolean): void {
  const lines: string[] = [];
  const r = out.record;
  if (out.mode === 'offline') lines.push(`  offline: ${r.reads.length} read${r.reads.length === 1 ? '' : 's'} answered from the record; ${s.record!.writes.length} write(s) then, ${r.writes.length} now`);
  else lines.push(`  dry-run against the cluster: ${r.reads.length} read(s), ${r.writes.length} write(s) it would make now`);
  for (const c of out.comparisons) {
    if (quiet && c.status === 'same') continue;
    const mark = { same: '=', changed: '~', added: '+', removed: '-' }[c.status];
    const label = { same: 'same as then', changed: 'changed', added: 'new: not written then', removed: 'not written now' }[c.status];
    lines.push(`  ${mark} ${c.key}  (${label})`);
    if (c.status === 'changed') lines.push(...formatChanges(c.changes));
  }
  lines.push(...effectLines(out, 'the replay'));
  if (out.unrecordedReads.length) lines.push(`  not in the record (the function reads more now): ${out.unrecordedReads.join('; ')}`);
  if (out.redactedReads.length) lines.push(`  redacted in the record (the function saw hashes, not the values): ${out.redactedReads.join('; ')}`);
  const differing = out.comparisons.filter((c) => c.status !== 'same');
  if (out.comparisons.length || s.record) {
    lines.push(
      out.same
        ? '  ✓ the writes equal the recorded ones'
        : `  ✗ the writes differ from the recorded ones${differing.length ? ` (${['changed', 'added', 'removed'].map((k) => [k, differing.filter((c) => c.status === k).length] as const).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(', ')})` : ''}${!r.error !== !s.record?.error ? (r.error ? '; it failed now, not then' : '; it failed then, not now') : ''}`,
    );
  }
  console.log(lines.join('\n'));
}

/** Where a live replay goes and with what credentials: given, or as the function's Reconciler and auth Secret say. */
interface ReplayTarget {
  url?: string;
  credentials: Credentials;
  /** A cluster address (service.namespace.svc…) is reached through the apiserver's service proxy. */
  viaProxy?: { path: string };
}

async function replayTarget(s: Selected, o: { to?: string; api: () => KubeApi; namespace: string }): Promise<ReplayTarget> {
  const reconcilerName = s.event.data.reconciler;
  const fromEnv: Credentials | undefined = process.env.KFN_AUTH_SECRET ? { kind: 'hmac', secret: process.env.KFN_AUTH_SECRET } : process.env.KFN_AUTH_TOKEN ? { kind: 'bearer', token: process.env.KFN_AUTH_TOKEN } : undefined;
  if (o.to && fromEnv) return { url: o.to, credentials: fromEnv };
  // No Reconciler (404): the function runs under kfn dev, which keeps only its auth Secret in the cluster.
  const rec = await o
    .api()
    .request<ReconcilerObject>('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${reconcilerName}`)
    .catch((err) => {
      if (err instanceof ApiError && err.status === 404) return undefined;
      throw new UsageError(`cannot read Reconciler ${reconcilerName} from the cluster (${(err as Error).message.trim()}); pass --to URL and set KFN_AUTH_SECRET`);
    });
  const credentials = fromEnv ?? (await secretCredentials(s, o, rec?.spec.auth, !rec));
  if (o.to) return { url: o.to, credentials };
  if (!rec) throw new UsageError(`there is no Reconciler ${reconcilerName} in the cluster to say where the function runs: pass --to with its URL (under kfn dev: http://127.0.0.1:8070/fn/${s.function})`);
  const url = rec.spec.sink.uri;
  if (!url) throw new UsageError(`Reconciler ${reconcilerName} delivers to a sink reference (a Knative Service?); pass --to with the function's URL`);
  const u = new URL(url);
  const host = u.hostname.split('.');
  if (host.length >= 2 && (host[2] === 'svc' || u.hostname.endsWith('.svc'))) {
    return { url, credentials, viaProxy: { path: `/api/v1/namespaces/${host[1]}/services/${host[0]}:${u.port || (u.protocol === 'https:' ? 443 : 80)}/proxy${u.pathname}` } };
  }
  return { url, credentials };
}

/** The credentials in the Reconciler's auth Secret (or, under kfn dev, the function's own); none when there is neither. */
async function secretCredentials(s: Selected, o: { api: () => KubeApi; namespace: string }, auth: WrittenReconcilerSpec['auth'], underDev: boolean): Promise<Credentials> {
  const ref = auth?.secretRef ?? (underDev ? { name: `kfn-fn-${s.function}`, namespace: o.namespace, key: 'secret' } : undefined);
  if (!ref) return { kind: 'none' };
  const secret = await o
    .api()
    .request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${ref.namespace}/secrets/${ref.name}`)
    .catch((err) => {
      if (underDev && err instanceof ApiError && err.status === 404) return undefined;
      throw new UsageError(`cannot read the function's auth Secret ${ref.namespace}/${ref.name} (${(err as Error).message.trim()}); set KFN_AUTH_SECRET`);
    });
  if (!secret) return { kind: 'none' };
  const value = Buffer.from(secret.data?.[ref.key ?? 'secret'] ?? '', 'base64').toString('utf8');
  return auth?.type === 'bearer' ? { kind: 'bearer', token: value } : { kind: 'hmac', secret: value };
}

/** Sends the event again, reason replay, as the bridge would; says whether the function's changes equal the recorded ones. */
async function replayLive(s: Selected, o: { to?: string; api: () => KubeApi; namespace: string; quiet: boolean }): Promise<boolean> {
  const target = await replayTarget(s, o);
  const { message, event } = encodeReconcileEvent({ reconciler: s.event.data.reconciler, primary: s.event.data.primary, reason: 'replay', ...(s.event.data.trigger ? { trigger: s.event.data.trigger } : {}), observedAt: Date.now() }, 1, 'kfn-replay', Date.now() + 30_000);
  const signed = authenticate(message, target.credentials);
  let res: { status: number; text: string };
  if (target.viaProxy) {
    const api = o.api();
    const reply = await api.connection.send({ method: 'POST', url: new URL(api.connection.server + target.viaProxy.path), headers: { ...(await api.connection.headers()), ...signed.headers }, body: signed.body });
    res = { status: reply.statusCode, text: await readText(reply.body) };
  } else {
    const reply = await fetch(target.url!, { method: 'POST', headers: signed.headers, body: signed.body });
    res = { status: reply.status, text: await reply.text() };
  }
  const text = res.text;
  let answer: ReconcileResponse | { error?: string } | undefined;
  try {
    answer = JSON.parse(text) as ReconcileResponse;
  } catch {
    answer = undefined;
  }
  console.log(`  live: event ${event.id.slice(0, 12)} (reason replay) → ${target.viaProxy ? `service proxy ${target.viaProxy.path}` : target.url}: HTTP ${res.status}`);
  if (res.status !== 200 || !answer || !('changes' in answer)) {
    console.log(`  ✗ the function answered ${res.status}: ${(answer as { error?: string } | undefined)?.error ?? text.slice(0, 300)}`);
    return false;
  }
  return sameChanges(answer.changes, s.record?.result?.changes, o.quiet);
}

/** Prints the changes a replay made and whether they equal the recorded ones (true when nothing was recorded). */
function sameChanges(changes: ReconcileResponse['changes'], recorded: ReconcileResponse['changes'] | undefined, quiet: boolean): boolean {
  const changeKey = (c: ReconcileResponse['changes'][number]) => `${c.action} ${c.ref.kind} ${objectKey(c.ref)}`;
  const now = changes.map(changeKey);
  for (const c of now) console.log(`    ${c}`);
  if (!now.length) console.log('    no changes: the object is as the function wants it');
  if (!recorded) return true;
  const then = recorded.map(changeKey);
  const same = now.length === then.length && now.every((c) => then.includes(c));
  if (!same || !quiet) console.log(same ? '  ✓ the changes equal the recorded ones' : `  ✗ the changes differ from the recorded ones (then: ${then.join('; ') || 'none'})`);
  return same;
}

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
    const cluster = () => (chosen ??= clusterNow({ kubeconfig: values.kubeconfig, context: values.context }));
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
      if (!values.json) console.log(describeSelected(s));
      try {
        if (mode === 'live') {
          allSame = (await replayLive(s, { to: values.to, api: clusterApi, namespace, quiet: values['expect-same'] ?? false })) && allSame;
          continue;
        }
        if (mode === 'offline' && !s.record) throw new Error('a bridge delivery carries no reads: replay it with --live or --dry-run, or record the function (KFN_RECORD) to replay offline');
        const reconciler = await functionFor(s.function, values.function);
        // A cut record names its writes without their bodies: nothing to compare the writes now with.
        const outcome = mode === 'offline' ? await replayOffline(reconciler, s.record!) : await replayDryRun(reconciler, s.event, clusterApi(), { then: s.record?.cut ? undefined : s.record });
        if (values.json) console.log(JSON.stringify({ record: s.record?.id, event: s.event.id, mode, same: outcome.same, comparisons: outcome.comparisons.map((c) => ({ key: c.key, status: c.status, changes: c.changes })), effects: outcome.effects, error: outcome.record.error, unrecordedReads: outcome.unrecordedReads, redactedReads: outcome.redactedReads }));
        else printOutcome(outcome, s, values['expect-same'] ?? false);
        allSame &&= outcome.same;
      } catch (err) {
        if (err instanceof UsageError) throw err;
        console.log(`  ✗ ${err instanceof ApiError ? `the cluster answered: ${err.message}` : (err as Error).message}`);
        allSame = false;
      }
    }
    if (listed && !values.json) console.log(`${listed} deliver${listed === 1 ? 'y' : 'ies'} from the journal, listed: a journal holds no reads to replay offline. --dry-run runs one against the cluster now (--id, --last), --live sends it to the function again; the function's own records replay offline (kfn replay cluster:<function> --object …)`);
    return allSame ? 0 : 1;
  },
};
