// Compile-fail tests: tsc, on testdata/types, must refuse each mistyped child and read exactly
// where the file says, and accept the rest — the types are what these tests are about, so they
// run the compiler rather than the code.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, 'testdata', 'types');
const tsc = join(here, '..', '..', 'node_modules', '.bin', 'tsc');

interface Diagnostic {
  line: number;
  code: string;
  message: string;
}

/** tsc's diagnostics for the fixtures, by file: a message with its indented continuation lines. */
function compile(): Map<string, Diagnostic[]> {
  const run = spawnSync(tsc, ['--noEmit', '--pretty', 'false', '-p', join(fixtures, 'tsconfig.json')], { encoding: 'utf8' });
  assert.ok(run.status !== null, `tsc did not run: ${run.error?.message ?? run.stderr}`);
  const out = new Map<string, Diagnostic[]>();
  let last: Diagnostic | undefined;
  for (const line of run.stdout.split('\n')) {
    const m = /^(.+?)\((\d+),\d+\): error (TS\d+): (.*)$/.exec(line);
    if (m) {
      last = { line: Number(m[2]), code: m[3]!, message: m[4]! };
      const file = m[1]!.split('/').at(-1)!;
      out.set(file, [...(out.get(file) ?? []), last]);
    } else if (last && line.startsWith(' ')) last.message += `\n${line.trim()}`;
    else if (line.trim()) assert.fail(`tsc said something this test cannot read: ${line}`);
  }
  return out;
}

/** `// expect TSnnnn words` comments: the line of code they are about, the code, the words. */
function expectations(file: string): { line: number; code: string; words: string }[] {
  const lines = readFileSync(join(fixtures, file), 'utf8').split('\n');
  const out: { line: number; code: string; words: string }[] = [];
  lines.forEach((text, i) => {
    const m = /\/\/ expect (TS\d+) (.+)$/.exec(text);
    if (!m) return;
    let target = i + 1;
    while (lines[target]!.trim().startsWith('//')) target++;
    out.push({ line: target + 1, code: m[1]!, words: m[2]!.trim() });
  });
  return out;
}

test('tsc refuses mistyped children and reads where expected, and accepts typed ones', () => {
  const diagnostics = compile().get('children.ts') ?? [];
  const expected = expectations('children.ts');
  assert.ok(expected.length >= 8, 'the fixture states its expectations');
  for (const e of expected) {
    const found = diagnostics.filter((d) => d.line === e.line);
    assert.ok(
      found.some((d) => d.code === e.code && d.message.includes(e.words)),
      `line ${e.line}: expected ${e.code} with "${e.words}", got ${found.length ? found.map((d) => `${d.code} ${d.message.split('\n')[0]}`).join('; ') : 'no error (the type lets the mistake through)'}`,
    );
  }
  const unexpected = diagnostics.filter((d) => !expected.some((e) => e.line === d.line));
  assert.deepEqual(unexpected.map((d) => `line ${d.line}: ${d.code} ${d.message.split('\n')[0]}`), [], 'code that should compile does');
});

test('the repository type-checks: every example, test and tool (npm run typecheck)', () => {
  const run = spawnSync(tsc, ['--noEmit', '--pretty', 'false', '-p', join(here, '..', '..', 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(run.status, 0, `tsc found errors:\n${run.stdout.split('\n').slice(0, 20).join('\n')}`);
});
