// A node:test reporter that writes one JSON line of totals ({passed, failed, skipped}) at the
// end of a run, so that the runner can print one closing line over several runs.
import type { TestEvent } from 'node:test/reporters';

export default async function* countReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const totals = { passed: 0, failed: 0, skipped: 0 };
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    if (event.data.details.type === 'suite') continue;
    if (event.type === 'test:fail') totals.failed++;
    else if (event.data.skip || event.data.todo) totals.skipped++;
    else totals.passed++;
  }
  yield `${JSON.stringify(totals)}\n`;
}
