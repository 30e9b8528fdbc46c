// One selected record or delivery of `kfn replay` run again in the mode asked — offline against
// its recorded reads, as a dry run against the cluster, or live by sending its event to the
// function — and what it did printed, as text or as a JSON line.
import { ApiError, type KubeApi } from '../kube/api.ts';
import { replayDryRun, replayOffline } from '../functions/sdk/replay.ts';
import { UsageError } from './command.ts';
import { replayLive } from './replay-live.ts';
import { describeSelected, printOutcome } from './replay-print.ts';
import { functionFor, type Selected } from './replay-select.ts';

export type ReplayMode = 'offline' | 'dry-run' | 'live';

export interface ReplayOneOptions {
  mode: ReplayMode;
  /** --function: the function's folder (default: the one under functions/ named in the record). */
  functionDir?: string;
  /** --live: the function's URL (default: the Reconciler's sink). */
  to?: string;
  /** The cluster's client, made when first asked for (--dry-run and --live). */
  api: () => KubeApi;
  namespace: string;
  /** --expect-same: print only what differs. */
  quiet: boolean;
  json?: boolean;
}

/**
 * Replays one record or delivery and prints the outcome; true when it wrote (or, live, changed)
 * what was recorded. A UsageError ends the whole replay; any other failure is this one's, said
 * on its line.
 */
export async function replayOne(s: Selected, o: ReplayOneOptions): Promise<boolean> {
  const { mode } = o;
  if (!o.json) console.log(describeSelected(s));
  try {
    if (mode === 'live') return await replayLive(s, { to: o.to, api: o.api, namespace: o.namespace, quiet: o.quiet });
    if (mode === 'offline' && !s.record) throw new Error('a bridge delivery carries no reads: replay it with --live or --dry-run, or record the function (KFN_RECORD) to replay offline');
    const reconciler = await functionFor(s.function, o.functionDir);
    // A cut record names its writes without their bodies: nothing to compare the writes now with.
    const outcome = mode === 'offline' ? await replayOffline(reconciler, s.record!) : await replayDryRun(reconciler, s.event, o.api(), { then: s.record?.cut ? undefined : s.record });
    if (o.json) console.log(JSON.stringify({ record: s.record?.id, event: s.event.id, mode, same: outcome.same, comparisons: outcome.comparisons.map((c) => ({ key: c.key, status: c.status, changes: c.changes })), effects: outcome.effects, error: outcome.record.error, unrecordedReads: outcome.unrecordedReads, redactedReads: outcome.redactedReads }));
    else printOutcome(outcome, s, o.quiet);
    return outcome.same;
  } catch (err) {
    if (err instanceof UsageError) throw err;
    console.log(`  ✗ ${err instanceof ApiError ? `the cluster answered: ${err.message}` : (err as Error).message}`);
    return false;
  }
}
