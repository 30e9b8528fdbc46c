// The arguments of one `node --test` run of `npm test` (test/run.ts), apart so that a test can
// hold the run to counting every test that ran (test/unit/node-test.test.ts).
import { join } from 'node:path';

const support = import.meta.dirname;

/** `node --test` over `files`: spec output to stdout, the totals as JSON (count-reporter.ts) to `counts`. */
export function nodeTestArgs(files: string[], concurrency: number, counts: string): string[] {
  return [
    // Each file's stdout written synchronously: with --test-force-exit below, verdicts still queued
    // on an asynchronous pipe were lost (blocking-stdout.ts).
    `--import=${join(support, 'blocking-stdout.ts')}`,
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-timeout=300000',
    // A file's process ends once its tests (and their after hooks) have: a child process a test
    // leaves holding a pipe or socket must not keep the whole run waiting.
    '--test-force-exit',
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    `--test-reporter=${join(support, 'count-reporter.ts')}`,
    `--test-reporter-destination=${counts}`,
    ...files,
  ];
}
