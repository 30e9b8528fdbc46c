import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { isRunning, logTail, residentBytes, startProcess, stopProcess } from './processes.ts';

const sh = '/bin/sh';

test('a started process is recorded, observed running, and stopped by PID', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const log = join(dir, 'p.log');
  // The shell must stay the process (no exec), so that the PID keeps running the recorded command.
  const record = startProcess('sleeper', sh, ['-c', 'echo started; sleep 30; true'], log);
  assert.ok(record.pid > 0);
  assert.ok(isRunning(record));
  assert.ok((residentBytes(record.pid) ?? 0) > 0);
  assert.equal(await stopProcess(record, 2000), true);
  assert.equal(isRunning(record), false);
  assert.equal(await stopProcess(record, 2000), false, 'stopping a stopped process reports it was not running');
});

test('a PID that now runs another program is not treated as ours', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const record = startProcess('sleeper', sh, ['-c', 'exec sleep 30'], join(dir, 'p.log'));
  t.after(() => stopProcess(record, 1000));
  // `exec sleep` replaced /bin/sh in that PID: the record's command no longer matches.
  await waitForCommandChange(record.pid);
  assert.equal(isRunning(record), false);
  assert.equal(await stopProcess(record, 1000), false, 'never signals a process it did not start');
  assert.equal(isRunning({ pid: record.pid, command: readFileSync(`/proc/${record.pid}/cmdline`, 'utf8').split('\0')[0]! }), true);
  process.kill(record.pid, 'SIGKILL');
});

async function waitForCommandChange(pid: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(sh)) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('sh never exec-ed sleep');
}

test('a process that ignores SIGTERM is killed after the grace period', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const log = join(dir, 'p.log');
  const record = startProcess('stubborn', sh, ['-c', "trap '' TERM; echo ready; while :; do sleep 0.05; done"], log);
  for (let i = 0; i < 100 && !logTail(log).includes('ready'); i++) await new Promise((r) => setTimeout(r, 20));
  const started = Date.now();
  assert.equal(await stopProcess(record, 300), true);
  assert.equal(isRunning(record), false);
  assert.ok(Date.now() - started >= 300, 'waited for the grace period before SIGKILL');
});

test('logTail returns the last lines, or a placeholder for a missing log', () => {
  assert.equal(logTail('/nonexistent/kfn.log'), '(no log)');
});
