// The function server's log: pino's lines written to stdout together, not one system call each.
import pino, { type DestinationStream } from 'pino';

/** A batching stdout; `send` writes what waits now. */
interface Batcher {
  send(): void;
}

// Every live batcher, for one exit listener and one shutdown flush for them all.
const batchers = new Set<WeakRef<Batcher>>();
let listening = false;

/**
 * At exit, and at a SIGTERM or SIGINT, what waits is written. A signal nothing else in the
 * program handles then ends the process as it would have (raised again with no listener left):
 * a program that calls serve() and no more is stopped by its pod's SIGTERM as before, with its
 * last lines out.
 */
function listen(): void {
  if (listening) return;
  listening = true;
  process.once('exit', flushServerLogs);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      flushServerLogs();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
  }
}

/** Hands every batching log's waiting lines to stdout now: a server calls it when told to stop. */
export function flushServerLogs(): void {
  for (const b of batchers) b.deref()?.send();
}

/**
 * Stdout for pino in batches: the lines of up to `delayMs` (default 200) handed over together, or
 * as soon as `maxBytes` (8 KiB) wait; what is left is written at exit. A busy function logs a line
 * per reconcile, and writing each by itself was about a twentieth of its CPU. For a server only:
 * a Lambda is frozen between invocations with its lines unwritten, so it keeps pino's
 * line-by-line default. The batching is here, not in sonic-boom's minLength: its flush does
 * nothing while a write is under way, which left lines waiting for the next one. Each batch is
 * written synchronously, as pino's default writes each line: at exit or at a signal nothing
 * is left in flight to be lost (an asynchronous write still under way when a SIGTERM ends the
 * process never reaches stdout).
 */
export function batchedStdout(delayMs = 200, maxBytes = 8192): DestinationStream {
  // Synchronous, minLength 0: each batch is written whole when handed over (sonic-boom retries
  // a stdout that answers EAGAIN).
  const out = pino.destination({ dest: 1, sync: true });
  let waiting = '';
  let timer: NodeJS.Timeout | undefined;
  const batcher: Batcher = {
    send() {
      if (timer) clearTimeout(timer);
      timer = undefined;
      if (!waiting) return;
      const lines = waiting;
      waiting = '';
      try {
        out.write(lines);
      } catch {
        // stdout is gone (a closed pipe): the lines have nowhere to go
      }
    },
  };
  batchers.add(new WeakRef(batcher));
  listen();
  return {
    write(line: string) {
      waiting += line;
      if (waiting.length >= maxBytes) batcher.send();
      else timer ??= setTimeout(() => batcher.send(), delayMs).unref();
    },
  };
}
