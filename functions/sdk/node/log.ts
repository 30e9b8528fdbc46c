// The function server's log: pino's lines written to stdout together, not one system call each.
import pino, { type DestinationStream } from 'pino';

/**
 * Stdout for pino in batches: the lines of up to `delayMs` (default 200) written together, or as
 * soon as 8 KiB wait; what is left is written at exit. A busy function logs a line per reconcile,
 * and writing each by itself was about a twentieth of its CPU. For a server only: a Lambda is
 * frozen between invocations with its lines unwritten, so it keeps pino's line-by-line default.
 */
export function batchedStdout(delayMs = 200): DestinationStream {
  const out = pino.destination({ dest: 1, sync: false, minLength: 8192 });
  let timer: NodeJS.Timeout | undefined;
  process.once('exit', () => {
    try {
      out.flushSync();
    } catch {
      // exiting: nothing more to do
    }
  });
  return {
    write(line: string) {
      out.write(line);
      // With a callback, a flush asked for while a write is under way happens after it (without
      // one, sonic-boom drops it); the callback's error (fsync of a pipe) says nothing here.
      timer ??= setTimeout(() => {
        timer = undefined;
        out.flush(() => {});
      }, delayMs).unref();
    },
  };
}
