// `kfn replay`'s choice of what to run again: the records and the journal's deliveries of its
// source that --id, --object, --since and --last name, oldest first, each with the event it
// carries, and the function each was a reconcile of.
import type { JournalEntry } from '../core/journal.ts';
import { objectKey } from '../core/objects.ts';
import type { InvocationRecord, RecordedEvent } from '../functions/sdk/record.ts';
import type { Reconciler } from '../functions/sdk/reconciler.ts';
import { UsageError } from './command.ts';
import { functionNamed, loadFunction } from './functions.ts';

/** One thing to replay: a record, or a journal's delivery (which holds no reads). */
export interface Selected {
  /** A full record (all modes), or a bridge delivery (live and dry-run). */
  record?: InvocationRecord;
  delivery?: JournalEntry;
  time: string;
  event: RecordedEvent;
  function: string;
}

/** --since: an RFC 3339 time, or an age (90s, 10m, 2h) before `now`, as epoch milliseconds. */
export function parseSince(text: string, now = Date.now()): number {
  const age = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text);
  if (age) return now - Number(age[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[age[2] as 'ms']!;
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw new UsageError(`--since must be an RFC 3339 time or an age such as 10m, not "${text}"`);
  return at;
}

/** The event a journal's delivery carried, as a record holds one. */
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
