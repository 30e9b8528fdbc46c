// `npm test` counts every test that ran: with --test-force-exit and files run in parallel, a
// file's last verdicts were lost on their way to the runner, and a run reported fewer tests than
// ran, still passing (test/support/blocking-stdout.ts).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { nodeTestArgs } from '../support/node-test.ts';

test('a run of many quick files, two at a time and forced to exit, counts every test', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-node-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // 2000 tests that pass at once: before blocking-stdout.ts, four runs here counted 1780 to 1908.
  const files = Array.from({ length: 40 }, (_, f) => {
    const file = join(dir, `f${f}.test.mjs`);
    writeFileSync(file, ["import { test } from 'node:test';", ...Array.from({ length: 50 }, (_, i) => `test('file ${f}, test ${i}, with a name as long as a real one is', () => {});`)].join('\n'));
    return file;
  });
  const counts = join(dir, 'counts.json');
  // A runner of its own, not a file of this run (which NODE_TEST_CONTEXT would make it).
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const code = await new Promise<number | null>((resolve) => spawn(process.execPath, nodeTestArgs(files, 2, counts), { cwd: dir, stdio: 'ignore', env }).on('close', resolve));
  assert.equal(code, 0);
  const totals = JSON.parse(readFileSync(counts, 'utf8')) as { passed: number; failed: number };
  assert.deepEqual({ passed: totals.passed, failed: totals.failed }, { passed: 2000, failed: 0 });
});
