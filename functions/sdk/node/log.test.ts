// The function server's stdout log: lines written together, none lost at exit.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';

/** Runs `body` in a child with batchedStdout as `out`; answers its stdout as the chunks it arrived in. */
async function chunks(body: string): Promise<string[]> {
  const script = `import { batchedStdout } from ${JSON.stringify(new URL('./log.ts', import.meta.url).href)};\nconst out = batchedStdout(1000);\n${body}`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const got: string[] = [];
  child.stdout.on('data', (b: Buffer) => got.push(b.toString('utf8')));
  const code = await new Promise((resolve) => child.on('exit', resolve));
  assert.equal(code, 0);
  return got;
}

test('lines logged a few ms apart come out in one write, after the delay', async () => {
  // Five lines over about 20 ms: each its own write (and, read as they come, its own chunk) without batching.
  const got = await chunks("for (let i = 0; i < 5; i++) setTimeout(() => out.write(`line ${i}\\n`), i * 5);\nsetTimeout(() => {}, 1300);");
  assert.equal(got.length, 1, `one write for five lines, not ${got.length}`);
  assert.deepEqual(got[0]!.trim().split('\n'), ['line 0', 'line 1', 'line 2', 'line 3', 'line 4']);
});

test('a line logged just before the process exits is written', async () => {
  const got = await chunks("out.write('first\\n');\nsetTimeout(() => { out.write('last\\n'); process.exit(0); }, 10);");
  assert.deepEqual(got.join('').trim().split('\n'), ['first', 'last']);
});

test('a line logged while a batch is still being written comes out soon after, not at the next line or at exit', async () => {
  // 2 MB at once fills the pipe (its reader paused for a second): writes are under way when the
  // last line comes, 100 ms later; the child stays up for 3 s.
  const script = `import { batchedStdout } from ${JSON.stringify(new URL('./log.ts', import.meta.url).href)};
const out = batchedStdout(50);
for (let i = 0; i < 2000; i++) out.write('x'.repeat(999) + '\\n');
setTimeout(() => out.write('tail\\n'), 100);
setTimeout(() => {}, 3000);`;
  const started = performance.now();
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  child.stdout.pause();
  setTimeout(() => child.stdout.resume(), 1000);
  let text = '';
  let tailAt: number | undefined;
  child.stdout.on('data', (b: Buffer) => {
    text += b.toString('utf8');
    if (tailAt === undefined && text.includes('tail\n')) tailAt = performance.now() - started;
  });
  await new Promise((resolve) => child.on('exit', resolve));
  assert.ok(tailAt !== undefined && tailAt < 2500, `the last line came ${tailAt?.toFixed(0)} ms after the start (the child exits at 3000)`);
  assert.equal(text.split('\n').filter((l) => l.startsWith('x')).length, 2000, 'every line, once');
});

/** Runs `body` in a child with batchedStdout(1000) as `out`, sends it SIGTERM once it says "ready" on stderr; its stdout and how it ended. */
async function terminated(body: string): Promise<{ stdout: string; code: number | null; signal: NodeJS.Signals | null }> {
  const script = `import { batchedStdout } from ${JSON.stringify(new URL('./log.ts', import.meta.url).href)};\nconst out = batchedStdout(1000);\n${body}\nsetInterval(() => {}, 1000);\nprocess.stderr.write('ready\\n');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString('utf8')));
  child.stderr.on('data', (b: Buffer) => b.toString('utf8').includes('ready') && child.kill('SIGTERM'));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on('exit', (c, s) => resolve([c, s])));
  return { stdout, code, signal };
}

test('a SIGTERM nothing handles writes the lines waiting, then ends the process as the signal does', async () => {
  const got = await terminated("out.write('waiting\\n');");
  assert.equal(got.stdout, 'waiting\n');
  assert.deepEqual([got.code, got.signal], [null, 'SIGTERM'], 'killed by the signal, as without the log');
});

test("a SIGTERM the program handles is the program's: the lines waiting are written and it exits as it chooses", async () => {
  const got = await terminated("out.write('waiting\\n');\nprocess.once('SIGTERM', () => setTimeout(() => process.exit(3), 20));");
  assert.equal(got.stdout, 'waiting\n');
  assert.deepEqual([got.code, got.signal], [3, null]);
});
