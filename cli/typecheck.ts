// A function's types, checked before kfn ships it. Node runs a function's TypeScript by removing
// its types, and esbuild bundles it the same way, so neither sees a type error: without this
// step `replicas: String(size)` builds, deploys and reconciles. `kfn build`, `kfn deploy`,
// `kfn image` and `kfn dev` check first, as Pepr's build does, with the function's own
// project: the nearest tsconfig.json above its folder, and the typescript package that project
// installs (kfn init puts it in devDependencies). `--no-typecheck` skips the step.
//
// Only the function's program is checked — its index.ts and what that imports, not the tests
// or notes beside it — under the project's compiler options, incrementally: the compiler keeps
// what it learnt in .kfn/typecheck/ beside the tsconfig.json for the next check (MyWeb in a
// project: 0.5 s with TypeScript 7, 2 s with 5.9; in kfn's checkout, with the SDK's sources,
// 1 s again after 2.5 s the first time).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';
import { systemClock } from '../core/clock.ts';
import { displayPath } from '../cluster/paths.ts';
import { UsageError } from './command.ts';
import { functionEntry } from './functions.ts';
import { formatLoadFailure, type LoadFailure } from './load-errors.ts';
import { ownChild } from './signals.ts';

/** The flag of each command that checks types, and its line in the command's help. */
export const typecheckFlag = { 'no-typecheck': { type: 'boolean' } } as const;
export const typecheckUsage = (width: number) => `  ${'--no-typecheck'.padEnd(width)} do not check the functions' types first (tsc, the project's tsconfig.json)`;

export interface TypeCheckOptions {
  /** Where a passing check is said (default: nowhere). */
  log?: (line: string) => void;
}

/**
 * Checks the functions in `dirs`; throws a UsageError (exit status 1) that says every type
 * error as `file:line:column: message` with its source line, or why the check could not run,
 * each with what to do. `command` names the command in the message (`build`, `image push`).
 */
export async function checkFunctionTypes(command: string, dirs: string[], options: TypeCheckOptions = {}): Promise<void> {
  const problems = await typeProblems(command, dirs, options);
  if (problems) throw new UsageError(`kfn ${command}: ${problems}\nFix the type errors, or pass --no-typecheck to ${command.split(' ').at(-1)} without checking types.`, 1);
}

/**
 * The type errors of the functions in `dirs`, as text (`type errors in <folders>` and each
 * error), or undefined when they have none. What kfn dev reports as a reload that failed.
 */
export async function typeProblems(command: string, dirs: string[], options: TypeCheckOptions = {}): Promise<string | undefined> {
  const reports: string[] = [];
  for (const [tsconfig, entries] of byProject(command, dirs)) {
    const started = systemClock.now();
    const { problems, label } = await checkProject(command, tsconfig, entries);
    const seconds = ((systemClock.now() - started) / 1000).toFixed(1);
    if (problems.length) reports.push(`type errors in ${label} (tsc, ${displayPath(tsconfig)}):\n${shown(problems, tsconfig)}`);
    else options.log?.(`Types checked: ${label} (${displayPath(tsconfig)}, ${seconds} s)`);
  }
  return reports.length ? reports.join('\n') : undefined;
}

/** The first problems, each with its source line; the count of the rest, and where to see them all. */
function shown(problems: LoadFailure[], tsconfig: string): string {
  const first = problems.slice(0, shownProblems).map((p) => formatLoadFailure(p));
  const rest = problems.length - first.length;
  return [...first, ...(rest > 0 ? [`… and ${rest} more (all of them: npx tsc -p ${displayPath(tsconfig)})`] : [])].join('\n');
}

/** Enough to act on: a broken import can bring hundreds, and the first ones are the cause. */
const shownProblems = 20;

/** The TypeScript entries of `dirs`, by the tsconfig.json that governs each (an entry in JavaScript has no types to check). */
function byProject(command: string, dirs: string[]): Map<string, string[]> {
  const projects = new Map<string, string[]>();
  for (const dir of dirs) {
    const entry = functionEntry(dir);
    if (!entry?.endsWith('.ts')) continue;
    const tsconfig = nearestTsconfig(dirname(entry));
    if (!tsconfig) throw new UsageError(`kfn ${command}: no tsconfig.json in ${displayPath(dirname(entry))} or a folder above it, so its types cannot be checked: add one (kfn init writes one for a project), or pass --no-typecheck`, 1);
    projects.set(tsconfig, [...(projects.get(tsconfig) ?? []), entry]);
  }
  return projects;
}

function nearestTsconfig(from: string): string | undefined {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'tsconfig.json'))) return join(dir, 'tsconfig.json');
    if (dirname(dir) === dir) return undefined;
  }
}

/** The project's own compiler: its typescript package's tsc, as `npx tsc` would run it there. */
function projectCompiler(command: string, project: string): string {
  let manifest: string;
  try {
    manifest = createRequire(join(project, 'package.json')).resolve('typescript/package.json');
  } catch {
    throw new UsageError(`kfn ${command}: the typescript package is not installed in ${displayPath(project)}, and kfn checks a function's types with it: npm install --save-dev typescript, or pass --no-typecheck`, 1);
  }
  const bin = (JSON.parse(readFileSync(manifest, 'utf8')) as { bin?: { tsc?: string } }).bin?.tsc ?? 'bin/tsc';
  return join(dirname(manifest), bin);
}

/** One check of one project at a time: two at once would write the same build info. */
const running = new Map<string, Promise<unknown>>();

/**
 * Runs the project's tsc on a config of kfn's that extends the project's tsconfig.json and
 * names only these entries. It lives beside that tsconfig.json (in .kfn/typecheck/) because the
 * compiler resolves `types` and node_modules from the config's folder.
 */
async function checkProject(command: string, tsconfig: string, entries: string[]): Promise<{ problems: LoadFailure[]; label: string }> {
  const project = dirname(tsconfig);
  const tsc = projectCompiler(command, project);
  const label = entries.map((e) => displayPath(dirname(e))).join(', ');
  const key = createHash('sha256').update(JSON.stringify([tsconfig, ...[...entries].sort()])).digest('hex').slice(0, 12);
  const dir = join(project, '.kfn', 'typecheck');
  const config = join(dir, `${entries.length > 1 ? 'functions' : basename(dirname(entries[0]!))}-${key}.json`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    config,
    JSON.stringify({
      extends: tsconfig,
      files: entries,
      // The project's include would add every file it names; only the functions' programs are wanted.
      include: [],
      // Checked, never emitted; composite would demand every imported file be listed in `files`.
      compilerOptions: { noEmit: true, emitDeclarationOnly: false, composite: false, incremental: true, tsBuildInfoFile: config.replace(/\.json$/, '.tsbuildinfo') },
    }),
  );
  const before = running.get(config) ?? Promise.resolve();
  const run = before.catch(() => undefined).then(() => runTsc(tsc, config, project));
  running.set(config, run);
  const { code, output } = await run;
  if (running.get(config) === run) running.delete(config);
  const problems = parseTscOutput(output, project);
  if (code !== 0 && !problems.length) throw new UsageError(`kfn ${command}: the type check of ${label} failed (${tsc} exited with ${code}):\n${output.trim()}\nPass --no-typecheck to go on without it.`, 1);
  return { problems, label };
}

function runTsc(tsc: string, config: string, cwd: string): Promise<{ code: number; output: string }> {
  return new Promise((done, fail) => {
    const child = ownChild(spawn(process.execPath, [tsc, '-p', config, '--pretty', 'false'], { cwd, stdio: ['ignore', 'pipe', 'pipe'] }));
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.once('error', fail);
    child.once('close', (code, signal) => done({ code: code ?? (signal ? 128 : 1), output }));
  });
}

/**
 * tsc's `--pretty false` lines, `file(line,col): error TS2322: message`, with a message's
 * further lines indented below it and errors of no file as `error TS5083: message`; files are
 * relative to `cwd`.
 */
export function parseTscOutput(output: string, cwd: string): LoadFailure[] {
  const problems: LoadFailure[] = [];
  for (const line of output.split(/\r?\n/)) {
    if (!line.trim()) continue;
    const at = /^(.+)\((\d+),(\d+)\): error (TS\d+): (.*)$/.exec(line);
    const global = /^error (TS\d+): (.*)$/.exec(line);
    const last = problems.at(-1);
    if (at) problems.push({ message: `${at[5]} (${at[4]})`, at: { file: resolve(cwd, at[1]!), line: Number(at[2]), column: Number(at[3]) } });
    else if (global) problems.push({ message: `${global[2]} (${global[1]})` });
    else if (/^\s/.test(line) && last) last.message += `\n${line}`;
  }
  return problems;
}
