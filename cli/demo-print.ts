// What `kfn demo` prints: its lines on standard output, dimmed or bold on a terminal, and one
// readable line per delivery of the bridge's journal (event → function → what changed → status).
import type { JournalEntry } from '../core/journal.ts';

export const say = (line: string) => console.log(line);
export const dim = (s: string) => (process.stdout.isTTY ? `\x1b[2m${s}\x1b[0m` : s);
export const bold = (s: string) => (process.stdout.isTTY ? `\x1b[1m${s}\x1b[0m` : s);

/** One readable line per delivery: event → function → what changed → status. */
export function describeDelivery(l: JournalEntry): string {
  const time = l.time.slice(11, 19);
  const head = `${dim(time)} ${bold(`${l.primary.kind} ${l.key}`)} ${l.reason}${l.attempt > 1 ? ` (attempt ${l.attempt})` : ''} → ${l.reconciler}`;
  if (l.outcome === 'retry' || l.outcome === 'terminal') return `${head} → ${l.outcome === 'retry' ? 'will retry' : 'refused'}: ${l.why ?? ''}`;
  const changes = l.response?.changes ?? [];
  const applied = changes.filter((c) => c.action === 'applied' || c.action === 'pruned').map((c) => `${c.action === 'pruned' ? 'pruned ' : ''}${c.ref.kind}/${c.ref.name}`);
  const status = changes.find((c) => c.action === 'status')?.detail;
  const what = [applied.length ? `applied ${applied.join(', ')}` : '', status ? `status ${status}` : ''].filter(Boolean).join('; ') || 'no changes';
  return `${head} → ${l.status} in ${l.durationMs} ms: ${what}${l.outcome === 'requeue' ? ` (requeue${l.response?.message ? `: ${l.response.message}` : ''})` : ''}`;
}
