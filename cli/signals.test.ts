// The CLI's stop signals (cli/signals.ts), in a process of their own: a signal nothing waits for
// ends the CLI and its owned children; a command waiting for it stops in its own time, a
// repeated Ctrl-C (a terminal's and the shim's copy) not cutting that short.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, test } from 'node:test';

const signals = join(import.meta.dirname, 'signals.ts');

/** A CLI stand-in: owns one child (a Node that idles), prints `<its pid> <the child's pid>`, then does `body`. */
function cli(body: string) {
  const script = [
    `import { spawn } from 'node:child_process';`,
    `import { handleStopSignals, ownChild, stopRequested } from ${JSON.stringify(signals)};`,
    `handleStopSignals();`,
    `const child = ownChild(spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' }));`,
    `console.log(process.pid, child.pid);`,
    body,
  ].join('\n');
  const p = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  // Nothing outlives the test, whatever its outcome.
  after(() => p.exitCode === null && p.signalCode === null && p.kill('SIGKILL'));
  let out = '';
  p.stdout!.on('data', (b) => (out += b));
  const pids = new Promise<number[]>((ok) => p.stdout!.on('data', () => out.includes('\n') && ok(out.split('\n')[0]!.split(' ').map(Number))));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((ok) => p.once('exit', (code, signal) => ok({ code, signal })));
  return { p, pids, exited, out: () => out };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  return !alive(pid);
}

test('a stop signal no command waits for ends the CLI by that signal, and its owned children with it', { timeout: 20_000 }, async (t) => {
  const run = cli('setInterval(() => {}, 1000);');
  const [, child] = await run.pids;
  t.after(() => alive(child!) && process.kill(child!, 'SIGKILL'));
  run.p.kill('SIGTERM');
  assert.deepEqual(await run.exited, { code: null, signal: 'SIGTERM' });
  assert.ok(await gone(child!), 'the owned child outlived the CLI');
});

test('a command waiting for the signal stops in its own time; the same signal again at once does not cut it short', { timeout: 20_000 }, async (t) => {
  const run = cli(
    [
      `const signal = await stopRequested();`,
      `console.log('stopping on', signal);`,
      `await new Promise((r) => setTimeout(r, 500));`,
      `child.kill();`,
      `console.log('stopped');`,
    ].join('\n'),
  );
  const [, child] = await run.pids;
  t.after(() => alive(child!) && process.kill(child!, 'SIGKILL'));
  run.p.kill('SIGINT');
  await new Promise((r) => setTimeout(r, 100));
  run.p.kill('SIGINT');
  assert.deepEqual(await run.exited, { code: 0, signal: null });
  assert.match(run.out(), /stopping on SIGINT\nstopped\n$/);
  assert.ok(await gone(child!), 'the owned child outlived the CLI');
});
