// A node:test reporter that writes one JSON line at the end of a run: the totals
// ({passed, failed, skipped}) and each failed test (its file, its name under its suites, and the
// start of its error), so that the runner can print one closing summary over several runs — the
// last lines of a long CI log then say which test failed and why.
import type { TestEvent } from 'node:test/reporters';

export interface Failure {
  file: string;
  name: string;
  error: string;
}

/** The first lines of a failed test's error, without the stack. */
export function errorHead(error: unknown, lines = 12): string {
  const err = error as { cause?: unknown; message?: unknown } | undefined;
  // node:test wraps what a test threw in an ERR_TEST_FAILURE whose cause is the real error.
  const cause = (err && typeof err === 'object' && 'cause' in err ? err.cause : err) as { message?: unknown } | undefined;
  const text = cause && typeof cause === 'object' && typeof cause.message === 'string' ? cause.message : String(cause);
  const all = text.split('\n');
  return all.slice(0, lines).join('\n').trimEnd() + (all.length > lines ? `\n… (${all.length - lines} more lines)` : '');
}

export default async function* countReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const totals = { passed: 0, failed: 0, skipped: 0, failures: [] as Failure[] };
  // Names of the suites each test runs in, by file and nesting level, from the start events.
  const open = new Map<string, string[]>();
  for await (const event of source) {
    if (event.type === 'test:start') {
      const file = event.data.file ?? '';
      const path = open.get(file) ?? [];
      path.length = event.data.nesting;
      path.push(event.data.name);
      open.set(file, path);
      continue;
    }
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    if (event.data.details.type === 'suite') continue;
    if (event.type === 'test:fail') {
      totals.failed++;
      const file = event.data.file ?? '';
      const path = (open.get(file) ?? []).slice(0, event.data.nesting);
      totals.failures.push({ file, name: [...path, event.data.name].join(' > '), error: errorHead(event.data.details.error) });
    } else if (event.data.skip || event.data.todo) totals.skipped++;
    else totals.passed++;
  }
  yield `${JSON.stringify(totals)}\n`;
}
