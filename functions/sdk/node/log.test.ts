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
