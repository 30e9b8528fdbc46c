// Every `--help` says what its command takes today: each flag a command's parser accepts is named
// in the help that command shows, and each flag a help names is accepted by a parser that shows
// it. The rule is the same for every command, so a flag added to a parser without its line in
// the help (or the other way round) fails here.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Options } from './command.ts';
import { commands } from './commands.ts';

/**
 * The flags a help text offers: `--name` and `-x`, except where it quotes a command line — in
 * backticks (`kfn deploy --target knative`), or as an example line that starts with the program
 * it runs (`  npm start -- --function greeter`, `  apt-get install -y …`).
 */
function offeredFlags(usage: string): Set<string> {
  const prose = usage
    .replace(/`[^`]*`/g, '')
    .split('\n')
    .filter((line) => !/^\s*(kfn|npm|npx|node|apt-get|kubectl|helm|eval|cd)\s/.test(line))
    .join('\n');
  const flags = new Set<string>();
  for (const m of prose.matchAll(/(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])/g)) flags.add(m[1]!);
  // --help and -h are every command's, answered before its parser runs.
  flags.delete('--help');
  flags.delete('-h');
  return flags;
}

/** The flags a parser accepts, as a user writes them. */
function acceptedFlags(options: Options): string[] {
  return Object.entries(options).flatMap(([name, o]) => [`--${name}`, ...(o.short ? [`-${o.short}`] : [])]);
}

const names = (usage: string, flag: string) => new RegExp(`(?<![\\w-])${flag}(?![\\w-])`).test(usage);

for (const entry of commands) {
  test(`kfn ${entry.name}: its help names every flag its parsers take, and only those`, async () => {
    const command = await entry.load();
    const parsers = [{ name: entry.name, usage: command.usage, options: command.options }, ...Object.entries(command.subcommands ?? {}).map(([sub, s]) => ({ name: `${entry.name} ${sub}`, ...s }))];
    for (const p of parsers) {
      assert.ok(p.options, `kfn ${p.name} does not expose its parser's options (Command.options)`);
      const unnamed = acceptedFlags(p.options).filter((flag) => !names(p.usage, flag));
      assert.deepEqual(unnamed, [], `kfn ${p.name} accepts ${unnamed.join(', ')}, which its --help does not mention`);
    }
    // One help text may be shown by several parsers (`kfn image build` and `push`): a flag it
    // offers must be accepted by one of them.
    for (const usage of new Set(parsers.map((p) => p.usage))) {
      const accepted = new Set(parsers.filter((p) => p.usage === usage).flatMap((p) => acceptedFlags(p.options)));
      const unknown = [...offeredFlags(usage)].filter((flag) => !accepted.has(flag));
      assert.deepEqual(unknown, [], `the --help of kfn ${parsers.find((p) => p.usage === usage)!.name} offers ${unknown.join(', ')}, which its parser refuses`);
    }
  });
}

test('the help check sees a flag a help offers but the parser refuses, and one the parser takes but the help omits', () => {
  const usage = 'Usage: kfn x [options]\n\nLike `kfn deploy --target knative`.\n  npm start -- --function x\n\n  --port N   the port\n  -n N       the namespace\n  -h, --help show this help';
  assert.deepEqual([...offeredFlags(usage)], ['--port', '-n']);
  assert.deepEqual(acceptedFlags({ port: { type: 'string' }, namespace: { type: 'string', short: 'n' } }), ['--port', '--namespace', '-n']);
  assert.equal(names(usage, '--namespace'), false);
});

// A command's one line of summary is written once, in cli/commands.ts, where `kfn --help` reads
// it without loading the command: a second copy in the command's file would drift from it.
test('each summary is written once, in cli/commands.ts, and the command under it has the same name', async () => {
  const twice: string[] = [];
  const summaries = commands.map((c) => c.summary);
  assert.deepEqual(summaries.filter((s, i) => summaries.indexOf(s) !== i), [], 'two commands have the same summary');
  for (const file of readdirSync(import.meta.dirname).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && f !== 'commands.ts')) {
    const text = readFileSync(join(import.meta.dirname, file), 'utf8');
    // As a string (a comment may say the same in prose).
    for (const entry of commands) if (["'", '"', '`'].some((q) => text.includes(`${q}${entry.summary}${q}`))) twice.push(`cli/${file} repeats the summary of kfn ${entry.name}`);
  }
  assert.deepEqual(twice, []);
  for (const entry of commands) {
    const command = await entry.load();
    assert.equal(command.name, entry.name, `cli/commands.ts lists kfn ${entry.name}, whose command calls itself ${command.name}`);
    assert.equal('summary' in command, false, `kfn ${entry.name} carries a summary of its own: its one home is cli/commands.ts`);
  }
});
