// docs/getting-started.md as a new user follows it: the shell blocks marked to run are run as
// written, one after another, in one folder; the TypeScript blocks marked to be written go into
// the project at the path their first line names. Marked in the markdown, on the line before the
// block, so that the test runs the doc's own text and an edit to the doc is an edit to the test:
//
//   <!-- run by test/e2e/package.serial.test.ts, as written -->
//   <!-- written into the project by test/e2e/package.serial.test.ts -->
//
// The doc clones kfn's repository; the test answers that clone with this checkout as it is now.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface DocBlock {
  /** The line of the block's first line of code (1-based). */
  line: number;
  code: string;
  /** For a block written into the project: the path its first line names. */
  path?: string;
}

const runMarker = /^<!--\s*run by test\/e2e\/package\.serial\.test\.ts, as written\s*-->$/;
const writeMarker = /^<!--\s*written into the project by test\/e2e\/package\.serial\.test\.ts\s*-->$/;
const fileComment = /^\/\/\s*((?:[\w.-]+\/)*[\w.-]+\.ts)\s*$/;

/** The marked blocks of a doc, in order: each `sh` block to run, and each `ts` block to write. */
export function markedBlocks(markdown: string): { run: DocBlock[]; write: DocBlock[] } {
  const lines = markdown.split('\n');
  const run: DocBlock[] = [];
  const write: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = lines[i]!.trim();
    const toRun = runMarker.test(marker);
    if (!toRun && !writeMarker.test(marker)) continue;
    const open = /^```(\w+)\s*$/.exec(lines[i + 1] ?? '');
    const want = toRun ? 'sh' : 'ts';
    if (open?.[1] !== want) throw new Error(`docs line ${i + 1}: ${marker} must stand right above a \`\`\`${want} block`);
    let end = i + 2;
    while (end < lines.length && lines[end] !== '```') end++;
    if (end === lines.length) throw new Error(`docs line ${i + 2}: the block is never closed`);
    const code = lines.slice(i + 2, end).join('\n');
    if (toRun) run.push({ line: i + 3, code });
    else {
      const path = fileComment.exec(lines[i + 2] ?? '')?.[1];
      if (!path) throw new Error(`docs line ${i + 3}: a block written into the project names its file on its first line (// functions/x/y.ts)`);
      write.push({ line: i + 3, code, path });
    }
    i = end;
  }
  return { run, write };
}

/**
 * The PATH a user has: the test's own without what npm put first for the script that started it
 * (node_modules/.bin, which holds the checkout's pinned Node): the doc's steps must bring the Node
 * they need, on whatever Node the machine has.
 */
export function userPath(path = process.env.PATH ?? ''): string {
  return path
    .split(':')
    .filter((dir) => dir && !/\/node_modules\/\.bin$/.test(dir) && !dir.includes('/node_modules/npm/node_modules/@npmcli/run-script/lib/node-gyp-bin'))
    .join(':');
}

/**
 * The blocks as one bash script: each command line (a line ending in `\` joined to the next) in
 * a group of its own that ends the script with its status when it fails, naming its doc line —
 * `set -e` alone would go on past `cd x && npm install && npm test` whose npm install failed.
 */
export function docScript(blocks: DocBlock[], doc = 'docs/getting-started.md'): string {
  const out: string[] = [];
  for (const block of blocks) {
    const lines = block.code.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const at = block.line + i;
      let command = lines[i]!;
      while (command.endsWith('\\') && i + 1 < lines.length) command = `${command.slice(0, -1)} ${lines[++i]!.trim()}`;
      if (!command.trim() || command.trim().startsWith('#')) continue;
      out.push(`echo ${shellQuote(`+ ${command.trim()}`)} >&2`, `{ ${command}\n} || { status=$?; echo ${shellQuote(`${doc}:${at}: exited with`)} "$status" >&2; exit "$status"; }`);
    }
  }
  return `${out.join('\n')}\n`;
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * The checkout as a clone of it would be, with the edits not yet committed: every file git
 * tracks or would track (not node_modules/, lib/ or .kfn/), as it is now.
 */
export function copyCheckout(root: string, dest: string): void {
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' });
  if (listed.status !== 0) throw new Error(`git ls-files in ${root}: ${listed.stderr}`);
  for (const file of listed.stdout.split('\0').filter(Boolean)) {
    if (!existsSync(join(root, file))) continue; // deleted, not yet committed
    mkdirSync(dirname(join(dest, file)), { recursive: true });
    copyFileSync(join(root, file), join(dest, file));
  }
}

/**
 * A folder holding a `git` that answers `git clone <url>` (into the folder the URL names, or the
 * one given) with a copy of `source`, and hands any other command to the git on the PATH.
 */
export function fakeGitClone(bin: string, url: string, source: string): void {
  const git = spawnSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).stdout.trim();
  const into = url.replace(/\.git$/, '').split('/').at(-1)!;
  mkdirSync(bin, { recursive: true });
  writeFileSync(
    join(bin, 'git'),
    `#!/bin/sh
if [ "$1" = clone ]; then
  [ "$2" = ${shellQuote(url)} ] || { echo "this test's git clones only ${url}, not $2" >&2; exit 2; }
  cp -a ${shellQuote(source)} "\${3:-${into}}" && echo "Cloned ${url} (the checkout under test)" >&2
  exit
fi
exec ${shellQuote(git || '/usr/bin/git')} "$@"
`,
    { mode: 0o755 },
  );
}
