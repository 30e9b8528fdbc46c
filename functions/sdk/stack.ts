// A stack trace that starts where the user can act: the frames in the function's own code
// first, then kfn's and its packages', Node's internals left out (counted). kfn dev, kfn serve
// and deployed functions log a reconcile that throws this way; kfn's load errors point at the
// first of the user's frames.
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { fileURLToPath } from 'node:url';
import { dirname, join, sep } from 'node:path';

export interface Frame {
  /** The frame as V8 wrote it, without its indentation: `at reconcile (/app/index.ts:12:5)`. */
  text: string;
  file?: string;
  line?: number;
  column?: number;
  /** In the user's code: not Node's, not kfn's own, not under node_modules. */
  user: boolean;
}

/** Where kfn's own code is: this file is <root>/functions/sdk/stack.ts, in a checkout and in the package's lib/ alike. */
const kfnRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const kfnRooms = ['functions/sdk', 'kube', 'core', 'bridge', 'cli', 'cluster'].map((room) => join(kfnRoot, room) + sep);

/** Whether a file is the user's: not kfn's own rooms (the examples beside the SDK are user code), not a package, not Node's. */
export function isUserFile(file: string): boolean {
  if (file.startsWith('node:') || !file.includes('/')) return false;
  if (file.includes('/node_modules/') || file.startsWith('node_modules/')) return false;
  // A bundle's source map names kfn's sources relative to the project it was built in (a deployed function).
  if (file.includes('/functions/sdk/') || file.startsWith('functions/sdk/')) return false;
  return !kfnRooms.some((room) => file.startsWith(room));
}

const located = /^(.*?):(\d+):(\d+)$/;

/** The frames of a V8 stack (`    at …` lines), each with its place when it names one. */
export function stackFrames(stack: string): Frame[] {
  return stack
    .split('\n')
    .filter((l) => /^\s+at /.test(l))
    .map((l) => {
      const text = l.trim();
      // `at fn (place)` or `at place`; `at async fn (place)` the same.
      const place = /\((.*)\)$/.exec(text)?.[1] ?? text.replace(/^at (async )?/, '');
      const m = located.exec(place);
      if (!m) return { text, user: false };
      const file = m[1]!.startsWith('file://') ? fileURLToPath(m[1]!) : m[1]!;
      const [line, column] = [Number(m[2]), Number(m[3])];
      const origin = originOf(file, line, column);
      if (origin) return { text: text.replace(place, `${origin.file}:${origin.line}:${origin.column}`), ...origin, user: isUserFile(origin.file) };
      return { text, file, line, column, user: isUserFile(file) };
    });
}

/** Each bundle's source map, read the first time a stack passes through it (null: it has none). */
const sourceMaps = new Map<string, SourceMap | null>();

/**
 * Where a place in a bundle (a deployed function's .mjs, built with its source map beside it)
 * came from: the source file as the map names it, relative to the project it was built in, and
 * its line and column. Read only when a stack is shown, so a function starts no slower for it.
 */
function originOf(file: string, line: number, column: number): { file: string; line: number; column: number } | undefined {
  if (!/\.m?js$/.test(file) || file.includes('/node_modules/')) return undefined;
  let map = sourceMaps.get(file);
  if (map === undefined) {
    try {
      map = existsSync(`${file}.map`) ? new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8'))) : null;
    } catch {
      map = null;
    }
    sourceMaps.set(file, map);
  }
  const entry = map?.findEntry(line - 1, column - 1) as { originalSource?: string; originalLine?: number; originalColumn?: number } | undefined;
  if (!entry?.originalSource || entry.originalLine === undefined || entry.originalColumn === undefined) return undefined;
  return { file: entry.originalSource.replace(/^file:\/\//, ''), line: entry.originalLine + 1, column: entry.originalColumn + 1 };
}

/** The first frame in the user's code, if the error passed through it. */
export function firstUserFrame(err: unknown): Frame | undefined {
  const stack = err instanceof Error ? err.stack : undefined;
  return stack ? stackFrames(stack).find((f) => f.user) : undefined;
}

/** An error, or one as an invocation record keeps it (message, stack, cause). */
export interface ErrorLike {
  message: string;
  stack?: string;
  cause?: unknown;
}

/**
 * The error's stack with the user's frames first, then kfn's and its packages' (at most
 * `others`), Node's internals counted, not shown. The error thrown by the user's code is its
 * `cause` when kfn wrapped it: that is the stack shown, under the wrapper's message.
 */
export function userFirstStack(err: unknown, { others = 5 }: { others?: number } = {}): string {
  if (!isErrorLike(err)) return String(err);
  const thrown = isErrorLike(err.cause) && err.cause.stack ? err.cause : err;
  const frames = stackFrames(thrown.stack ?? '');
  const mine = frames.filter((f) => f.user);
  const theirs = frames.filter((f) => !f.user && f.file !== undefined && !f.file.startsWith('node:'));
  const hidden = frames.length - mine.length - Math.min(theirs.length, others);
  const head = thrown === err ? headline(err) : `${err.message}\ncaused by ${headline(thrown)}`;
  const more = hidden > 0 ? [`    … ${hidden} more in Node${theirs.length > others ? ', kfn and packages' : ''}`] : [];
  return [head, ...mine.map((f) => `    ${f.text}`), ...theirs.slice(0, others).map((f) => `    ${f.text}`), ...more].join('\n');
}

const isErrorLike = (e: unknown): e is ErrorLike => typeof e === 'object' && e !== null && typeof (e as ErrorLike).message === 'string';

/** `Name: message` as the stack begins, the message alone for an error without a stack. */
function headline(e: ErrorLike): string {
  const first = e.stack?.split('\n')[0];
  return first && first.endsWith(e.message.split('\n')[0]!) ? `${first.slice(0, first.length - e.message.split('\n')[0]!.length)}${e.message}` : e.message;
}
