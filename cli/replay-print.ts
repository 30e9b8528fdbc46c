// What `kfn replay` prints of each replay: the record or delivery it replays, what a journal's
// delivery says the function answered, and the writes now beside the writes then, or what a dry
// run would change in the cluster (which kfn diff prints too).
import type { JournalEntry } from '../core/journal.ts';
import { objectKey } from '../core/objects.ts';
import { formatChanges } from '../functions/sdk/diff.ts';
import type { InvocationRecord } from '../functions/sdk/record.ts';
import type { ReplayOutcome } from '../functions/sdk/replay.ts';
import type { Selected } from './replay-select.ts';

/** "3 writes", or "1 write, 3 refused" when the apiserver refused some. */
function writeCount(writes: InvocationRecord['writes']): string {
  const refused = writes.filter((w) => !(w.status >= 200 && w.status < 300)).length;
  const done = writes.length - refused;
  return `${done} write${done === 1 ? '' : 's'}${refused ? `, ${refused} refused` : ''}`;
}

/** One line for a record or delivery: which, of what function and object, why, when, and how it ended then. */
export function describeSelected(s: Selected): string {
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

/** Prints an offline or dry-run replay: the writes now beside those then, what it would change, and whether they are the same. */
export function printOutcome(out: ReplayOutcome, s: Selected, quiet: boolean): void {
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
