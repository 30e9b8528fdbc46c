// The journal: one JSON line per delivery attempt and its outcome, appended to a file that
// rotates by size (F → F.1 → F.2 …), which `kfn replay` reads. It records references and
// outcomes only; fields that can hold Secret data (`data`, `stringData`) are never written,
// wherever they appear.
//
// Writing is off the delivery path: `append` only queues the line; the lines queued meanwhile
// are written together by one asynchronous write, in order, to the file held open for up to a
// second (`holdMs`): opening and closing it for every write was a tenth of a busy bridge's CPU.
// Past the hold the path is opened again, so a journal removed or replaced from outside comes
// back within a second. What is still queued when the process exits is written synchronously
// then, so an exit loses nothing (a SIGKILL may lose the last lines, as it would any buffered log).
//
// A journal never stops what it records: a volume that is read-only, full or broken, or a
// directory that cannot be made, costs lines (counted in `failures` and `dropped`, reported
// through onProblem), never an exception. A write cut short (a full disk, a file size limit)
// leaves half a line; the next write starts on a new line, so a reader loses only the half line
// (passed over as not JSON) and never the entry after it.
import { appendFileSync, closeSync, existsSync, mkdirSync, openSync, readSync, renameSync, rmSync, statSync, type Stats } from 'node:fs';
import { mkdir, open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Observation } from './event.ts';
import type { DeliveryOutcome, ReconcileResponse } from './response.ts';

/** One line of the bridge's journal: a delivery attempt and its outcome. */
export interface JournalEntry {
  time: string;
  id: string;
  reconciler: string;
  key: string;
  reason: Observation['reason'];
  attempt: number;
  primary: Observation['primary'];
  trigger?: Observation['trigger'];
  observedAt: string;
  sink: string;
  status?: number;
  outcome: DeliveryOutcome['kind'];
  why?: string;
  durationMs: number;
  /** The function's answer, as it said it (a successful delivery). */
  response?: ReconcileResponse;
}

export interface JournalOptions {
  /** Rotate when the file passes this size (default 10 MiB). */
  maxBytes?: number;
  /** Rotated files kept (default 5). */
  keep?: number;
  /** Drop `data`/`stringData`/`binaryData` wherever they appear (default true: the bridge's journal). */
  redactSecretFields?: boolean;
  /**
   * The most lines held while the disk does not keep up (default 10,000); past it the oldest are
   * dropped (and counted in `dropped`), so a slow or stuck volume costs bounded memory.
   */
  maxQueuedLines?: number;
  /**
   * Told when writing starts failing (a write, a rotation) or lines start being dropped — once
   * per episode, not per line; a success ends the episode. Default: a process warning.
   */
  onProblem?: (problem: string) => void;
  /** How long the file stays open for further writes before its path is opened again (default 1000 ms). */
  holdMs?: number;
  /** The clock the hold is measured on (default performance.now). */
  now?: () => number;
}

const secretFields = new Set(['data', 'stringData', 'binaryData']);

/** A deep copy of `value` without any field that could carry Secret data. */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (typeof value !== 'object' || value === null) return value;
  // What JSON would write of it: a record the bridge keeps flat is nested by its toJSON.
  const json = (value as { toJSON?: () => unknown }).toJSON;
  if (typeof json === 'function') {
    const written = json.call(value);
    if (written !== value) return redact(written);
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (!secretFields.has(k)) out[k] = redact(v);
  return out;
}

// Journals still open, so that an exit writes what they hold (one listener for all of them).
const openJournals = new Set<WeakRef<Journal<object>>>();
process.once('exit', () => {
  for (const ref of openJournals) ref.deref()?.flushSync();
});

/** Appends JSON lines to a rotating file; by default the bridge's delivery journal. */
export class Journal<T extends object = JournalEntry> {
  readonly path: string;
  private readonly maxBytes: number;
  private readonly keep: number;
  private readonly maxQueued: number;
  private readonly onProblem: (problem: string) => void;
  private size: number;
  private queued: string[] = [];
  private draining: Promise<void> | undefined;
  private writing: string | undefined;
  /** In a failing episode: its problem has been reported; a successful write ends it. */
  private failing = false;
  /** In a dropping episode: reported; a queue that has room again ends it. */
  private dropping = false;
  /**
   * The file may end in the middle of a line: a write failed part way, here or in the process
   * that wrote the file before. The next write then starts with a newline (an empty line, when
   * nothing had been written: readers pass over those), so its first entry is a line of its own.
   */
  private cut = false;
  /** Its directory could not be made: each opening of the file tries again first. */
  private directoryMissing = false;
  private readonly rotates: boolean;
  private readonly redacts: boolean;
  private readonly holdMs: number;
  private readonly now: () => number;
  /** The file open for writing, and when it was opened; closed past the hold, at a rotation, after a failed write. */
  private file: { handle: FileHandle; openedAt: number } | undefined;
  /** The closes under way, chained (not awaited by the drain, awaited by flush). */
  private releasing: Promise<void> | undefined;
  /** Closes the file once writing has stopped for a hold (unref'd: it keeps no process alive). */
  private idleClose: ReturnType<typeof setTimeout> | undefined;
  /** Writes and rotations that failed. */
  failures = 0;
  /** Lines dropped unwritten: the queue was full. */
  dropped = 0;

  constructor(path: string, options: JournalOptions = {}) {
    this.path = path;
    this.maxBytes = options.maxBytes ?? 10 * 1024 * 1024;
    this.keep = Math.max(1, options.keep ?? 5);
    this.maxQueued = Math.max(1, options.maxQueuedLines ?? 10_000);
    this.onProblem = options.onProblem ?? ((problem) => process.emitWarning(problem));
    this.redacts = options.redactSecretFields ?? true;
    this.holdMs = options.holdMs ?? 1000;
    this.now = options.now ?? (() => performance.now());
    try {
      mkdirSync(dirname(path), { recursive: true });
    } catch (err) {
      this.failed('create the directory of', err);
      this.directoryMissing = true;
    }
    const existing = statOf(path);
    this.size = existing?.size ?? 0;
    // A device or pipe (--journal=/dev/stdout in a pod) is never rotated: it cannot be renamed.
    this.rotates = !existing || existing.isFile();
    this.cut = existing?.isFile() === true && existing.size > 0 && !endsWithNewline(path, existing.size);
    openJournals.add(new WeakRef(this as Journal<object>));
  }

  /** Lines waiting to be written. */
  get queuedLines(): number {
    return this.queued.length;
  }

  append(entry: T): void {
    if (this.queued.length >= this.maxQueued) {
      this.queued.shift();
      this.dropped++;
      if (!this.dropping) this.onProblem(`kfn journal: ${this.path} does not keep up; dropping the oldest of ${this.maxQueued} queued lines`);
      this.dropping = true;
    } else if (this.queued.length < this.maxQueued / 2) {
      this.dropping = false;
    }
    this.queued.push(`${JSON.stringify(this.redacts ? redact(entry) : entry)}\n`);
    if (!this.draining) this.draining = this.drain();
  }

  /** Resolves once every line appended so far is written (or has failed to be). */
  async flush(): Promise<void> {
    // A close the drain started (a file held past holdMs) is part of it: once flush resolves, that
    // file is closed. A file opened less than holdMs ago stays open until its idle close.
    while (this.draining || this.releasing) await (this.draining ?? this.releasing);
  }

  private failed(what: string, err: unknown): void {
    this.failures++;
    if (!this.failing) this.onProblem(`kfn journal: cannot ${what} ${this.path}: ${(err as Error).message}; deliveries go on, these lines are lost`);
    this.failing = true;
  }

  /** Never rejects: every failure is counted and reported instead. */
  private async drain(): Promise<void> {
    try {
      await Promise.resolve(); // let the caller's turn finish: its lines go out in one write
      // After a failed rotation the file grows past maxBytes until a rotation succeeds.
      let rotationFailed = false;
      while (this.queued.length) {
        // The lines that fit in the current file, in one write; rotation between writes.
        let chunk = '';
        let bytes = 0;
        while (this.queued.length) {
          const size = Buffer.byteLength(this.queued[0]!);
          if (this.rotates && !rotationFailed && (this.size > 0 || bytes > 0) && this.size + bytes + size > this.maxBytes) break;
          chunk += this.queued.shift();
          bytes += size;
        }
        if (!chunk) {
          try {
            await this.release();
            this.rotate();
          } catch (err) {
            this.failed('rotate', err);
            rotationFailed = true;
          }
          continue;
        }
        this.writing = chunk;
        let handle: FileHandle | undefined;
        try {
          handle = await this.openFile();
          const text = this.cut ? `\n${chunk}` : chunk;
          // appendFile, not write: it writes the rest after a short write (a signal on a pipe).
          // One that cannot go on (a full disk, a file size limit) rejects with part written.
          await handle.appendFile(text);
          this.size += bytes + (this.cut ? 1 : 0);
          this.cut = false;
          this.failing = false;
        } catch (err) {
          if (handle) this.cut = true;
          this.failed('append to', err);
          await this.release();
        }
        this.writing = undefined;
      }
      // Not awaited: a line appended meanwhile must find no drain under way, and start one.
      if (this.heldPastHold()) void this.release();
    } finally {
      this.draining = undefined;
      // A line appended after the loop's last look (with nothing left to write it) starts the next drain.
      if (this.queued.length) this.draining = this.drain();
      this.idleClose ??= setTimeout(() => {
        this.idleClose = undefined;
        if (!this.draining) void this.release();
      }, this.holdMs).unref();
    }
  }

  /** The file to write to: the one held open, unless held past holdMs; else the path opened again. */
  private async openFile(): Promise<FileHandle> {
    if (this.heldPastHold()) await this.release();
    if (this.directoryMissing) {
      await mkdir(dirname(this.path), { recursive: true });
      this.directoryMissing = false;
    }
    if (!this.file) this.file = { handle: await open(this.path, 'a'), openedAt: this.now() };
    return this.file.handle;
  }

  private heldPastHold(): boolean {
    return this.file !== undefined && this.now() - this.file.openedAt >= this.holdMs;
  }

  /** Closes the held file; never rejects (a close that fails has nothing left to lose). */
  private release(): Promise<void> {
    const file = this.file;
    if (!file) return this.releasing ?? Promise.resolve();
    this.file = undefined;
    // Chained to a close still under way: flush waits for every one, whichever ends first.
    const closing: Promise<void> = Promise.all([this.releasing, file.handle.close().catch(() => undefined)]).then(() => {
      if (this.releasing === closing) this.releasing = undefined;
    });
    this.releasing = closing;
    return closing;
  }

  /** At exit: what is queued (and a write still under way, at worst twice) goes out now. */
  flushSync(): void {
    const rest = (this.writing ?? '') + this.queued.join('');
    // A write under way may have written part of its lines: start on a line of its own.
    const newLine = this.cut || this.writing !== undefined;
    this.queued = [];
    this.writing = undefined;
    if (!rest) return;
    try {
      appendFileSync(this.path, newLine ? `\n${rest}` : rest);
    } catch {
      /* exiting: nothing more to do */
    }
  }

  private rotate(): void {
    rmSync(`${this.path}.${this.keep}`, { force: true });
    for (let i = this.keep - 1; i >= 1; i--) {
      if (existsSync(`${this.path}.${i}`)) renameSync(`${this.path}.${i}`, `${this.path}.${i + 1}`);
    }
    renameSync(this.path, `${this.path}.1`);
    this.size = 0;
    this.cut = false;
  }
}

/** The file at `path`, or undefined when there is none or it cannot be seen (a write will say why). */
function statOf(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch {
    return undefined;
  }
}

/** Whether the file of `size` bytes at `path` ends a line; not readable counts as not (a blank line at worst). */
function endsWithNewline(path: string, size: number): boolean {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const last = Buffer.alloc(1);
    return readSync(fd, last, 0, 1, size - 1) === 1 && last[0] === 0x0a;
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
