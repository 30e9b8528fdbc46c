// Why a function does not load, said where: `file:line:column: message`, the source line with a
// caret under the place, and what to write instead when kfn knows. Node 24 reports each failure
// in its own shape — a TypeScript syntax error or refused syntax (ERR_INVALID_/
// ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX: the place on the stack's first line, a caret line below), a
// JavaScript syntax error (no place at all: esbuild parses the function to find it), a missing
// module or package (ERR_MODULE_NOT_FOUND: only the importing file; the import is found in it),
// an error thrown while the module runs (the first frame in the user's code) — and esbuild's
// errors (kfn dev's builds) carry theirs. Each becomes one LoadFailure, written one way.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, extname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Message } from 'esbuild';
import { firstUserFrame } from '../functions/sdk/stack.ts';

export interface SourcePlace {
  file: string;
  line: number;
  /** 1-based, as editors count. */
  column: number;
  /** How many characters the caret underlines (default 1). */
  length?: number;
}

export interface LoadFailure {
  message: string;
  at?: SourcePlace;
  /** What to write instead. */
  hint?: string;
}

/** Everything to say about a module that failed to import: where, the line, and what to do. */
export async function describeLoadError(err: unknown, entry: string): Promise<string> {
  return formatLoadFailure(await loadFailure(err, entry));
}

/** esbuild's errors (a build of the function failed), each said where, as a load error is. */
export function describeBuildError(err: unknown): string {
  const errors = (err as { errors?: Message[] }).errors;
  if (!errors?.length) return (err as Error).message ?? String(err);
  return errors.map((m) => formatLoadFailure({ message: m.text, ...(m.location ? { at: { file: resolve(m.location.file), line: m.location.line, column: m.location.column + 1, length: m.location.length } } : {}) })).join('\n');
}

export function formatLoadFailure(f: LoadFailure, cwd = process.cwd()): string {
  const lines: string[] = [];
  if (!f.at) lines.push(f.message);
  else {
    const shown = relative(cwd, f.at.file);
    lines.push(`${shown.startsWith('..') ? f.at.file : shown}:${f.at.line}:${f.at.column}: ${f.message}`);
    const source = sourceLine(f.at.file, f.at.line);
    if (source !== undefined) {
      const gutter = String(f.at.line).length;
      lines.push(`    ${f.at.line} | ${source}`, `    ${' '.repeat(gutter)} | ${' '.repeat(f.at.column - 1)}${'^'.repeat(Math.max(1, f.at.length ?? 1))}`);
    }
  }
  if (f.hint) lines.push(f.hint);
  return lines.join('\n');
}

function sourceLine(file: string, line: number): string | undefined {
  try {
    return readFileSync(file, 'utf8').split(/\r?\n/)[line - 1];
  } catch {
    return undefined;
  }
}

/** The failure an import of `entry` threw, located. */
export async function loadFailure(err: unknown, entry: string): Promise<LoadFailure> {
  if (!(err instanceof Error)) return { message: String(err) };
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ERR_MODULE_NOT_FOUND' || code === 'ERR_UNSUPPORTED_DIR_IMPORT') return missingModule(err) ?? { message: err.message };
  if (err instanceof SyntaxError) {
    const at = syntaxErrorPlace(err);
    const message = code === 'ERR_INVALID_TYPESCRIPT_SYNTAX' ? `${err.message} (a TypeScript syntax error)` : err.message;
    const hint = code === 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX' ? strippingHint(err.message) : undefined;
    return { message, ...(hint ? { hint } : {}), ...(at ? { at } : await parsedPlace(entry).then((p) => (p ? { at: p } : {}))) };
  }
  const frame = firstUserFrame(err);
  return { message: err.message, ...(frame?.file ? { at: { file: frame.file, line: frame.line!, column: frame.column! } } : {}) };
}

/**
 * A SyntaxError's place as Node writes it atop the stack: `<file>:<line>`, the source line(s),
 * then a line of carets under the place (in the column of the line just above it).
 */
function syntaxErrorPlace(err: SyntaxError): SourcePlace | undefined {
  const lines = (err.stack ?? '').split('\n');
  const head = /^(.+):(\d+)$/.exec(lines[0] ?? '');
  if (!head) return undefined;
  const file = head[1]!.startsWith('file://') ? fileURLToPath(head[1]!) : head[1]!;
  const caret = lines.findIndex((l, i) => i > 0 && /^\s*\^+\s*$/.test(l));
  const column = caret > 0 ? lines[caret]!.indexOf('^') + 1 : 1;
  const length = caret > 0 ? lines[caret]!.trim().length : 1;
  return { file, line: Number(head[2]), column, length };
}

/** A JavaScript syntax error Node gives no place for: esbuild parses the function and its modules, and names it. */
async function parsedPlace(entry: string): Promise<SourcePlace | undefined> {
  // Loaded here: `kfn serve` in a container has no esbuild binary, and needs it only for this.
  const { build } = await import('esbuild');
  try {
    await build({ entryPoints: [entry], bundle: true, write: false, platform: 'node', format: 'esm', packages: 'external', logLevel: 'silent' });
  } catch (err) {
    const where = (err as { errors?: Message[] }).errors?.find((m) => m.location)?.location;
    if (where) return { file: resolve(where.file), line: where.line, column: where.column + 1, length: where.length };
  }
  return undefined;
}

const strippingHints: [RegExp, string][] = [
  [/\benum\b/, 'a union of string literals, or an object `as const`, instead of an enum'],
  [/parameter property/, 'a field declared in the class and assigned in the constructor, instead of a parameter property'],
  [/namespace|module declaration/, 'a module of its own, or a plain object, instead of a namespace'],
];

function strippingHint(message: string): string {
  const instead = strippingHints.find(([pattern]) => pattern.test(message))?.[1];
  return `Node runs TypeScript by removing its types, so only syntax that erases works${instead ? `: use ${instead}` : ' (no enums, namespaces or parameter properties)'}.`;
}

/**
 * A module or package Node could not find: the message names the missing path (or package) and
 * the importing file, not the import; the import is the one in that file that resolves to it.
 */
function missingModule(err: Error): LoadFailure | undefined {
  const notFound = /Cannot find (package|module) '(.+?)' imported from (.+)$/.exec(err.message);
  const folder = /Directory import '(.+?)' is not supported resolving ES modules imported from (.+)$/.exec(err.message);
  const parts = notFound ? { what: notFound[1] as 'package' | 'module', missing: notFound[2]!, from: notFound[3]! } : folder ? { what: 'folder' as const, missing: folder[1]!, from: folder[2]! } : undefined;
  if (!parts) return undefined;
  const { what, missing } = parts;
  const importer = parts.from.startsWith('file://') ? fileURLToPath(parts.from) : parts.from;
  let text: string;
  try {
    text = readFileSync(importer, 'utf8');
  } catch {
    return undefined;
  }
  const named = (spec: string) =>
    what === 'package' ? spec === missing || spec.startsWith(`${missing}/`) : spec === missing || (spec.startsWith('file://') ? fileURLToPath(spec) : resolve(dirname(importer), spec)) === missing;
  const found = importsOf(text).find((i) => named(i.spec));
  const spec = found?.spec ?? missing;
  const message = what === 'folder' ? `Cannot import the folder '${spec}'` : `Cannot find ${what} '${what === 'package' ? missing : spec}'`;
  const at = found ? { file: importer, line: found.line, column: found.column, length: found.spec.length } : undefined;
  return { message, ...(at ? { at } : {}), hint: missingHint(what, spec, missing, importer) };
}

function missingHint(what: 'package' | 'module' | 'folder', spec: string, missing: string, importer: string): string {
  if (what === 'package') return `Install it (npm install ${missing}), or check its name: Node looked in node_modules in ${dirname(importer)} and every folder above.`;
  if (what === 'folder' && existsSync(join(missing, 'index.ts'))) return `Write '${spec.replace(/\/$/, '')}/index.ts': Node does not look for an index file in a folder.`;
  if (extname(missing) === '.js' && existsSync(missing.replace(/\.js$/, '.ts'))) return `Write '${spec.replace(/\.js$/, '.ts')}': Node runs the .ts file as it is and does not map .js to .ts.`;
  if (!extname(missing)) {
    const ext = ['.ts', '.mts', '.js', '.mjs'].find((e) => existsSync(`${missing}${e}`));
    if (ext) return `Write '${spec}${ext}': Node resolves an import as it is written, with no extension added.`;
    if (existsSync(join(missing, 'index.ts'))) return `Write '${spec}/index.ts': Node resolves an import as it is written.`;
  }
  return `There is no such file: ${missing}.`;
}

/** The specifiers a module's text imports (static, re-exports and dynamic), each where its text starts. */
function importsOf(text: string): { spec: string; line: number; column: number }[] {
  const out: { spec: string; line: number; column: number }[] = [];
  for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s*)(['"])([^'"\n]+)\1/gm)) {
    const offset = m.index + m[0].length - m[2]!.length - 1;
    const before = text.slice(0, offset);
    const line = before.split('\n').length;
    out.push({ spec: m[2]!, line, column: offset - before.lastIndexOf('\n') });
  }
  return out;
}
