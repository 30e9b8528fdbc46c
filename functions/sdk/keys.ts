// The function's auth key from a file that changes: the Reconciler's auth Secret mounted as a
// volume, which the kubelet refreshes in place (within about a minute) when the Secret is
// rotated. The function takes the new key without a restart and, for a grace period, still
// accepts the one before it — the bridge may sign with either while the rotation settles.
import { readFileSync } from 'node:fs';
import type { Credentials } from '../../core/authentication.ts';

export interface KeyFileOptions {
  /** Milliseconds between reads of the file (default 1 s). */
  checkEveryMs?: number;
  /** How long the previous key is still accepted after a change (default 10 minutes). */
  previousForMs?: number;
  now?: () => number;
  /** The setting that named the file, for the error that says it cannot be read (default KFN_AUTH_SECRET_FILE). */
  setBy?: string;
}

/** Credentials read from `path` (HMAC), as fresh as the file: a getter, called per request. */
export function keyFileCredentials(path: string, options: KeyFileOptions = {}): () => Credentials {
  const now = options.now ?? (() => performance.now());
  const checkEveryMs = options.checkEveryMs ?? 1000;
  const previousForMs = options.previousForMs ?? 600_000;
  const read = () => {
    try {
      const key = readFileSync(path, 'utf8');
      if (!key) throw new Error('the file is empty');
      return key;
    } catch (err) {
      throw new Error(`cannot read the auth key from ${path} (${options.setBy ?? 'KFN_AUTH_SECRET_FILE'}): ${(err as Error).message}`);
    }
  };
  let key = read();
  let readAt = now();
  let previous: { key: string; until: number } | undefined;
  return () => {
    const t = now();
    if (t - readAt >= checkEveryMs) {
      readAt = t;
      // A failed read keeps the key in use: the kubelet swaps the file by a link, never empties it.
      let fresh = key;
      try {
        fresh = read();
      } catch {
        /* keep the key in use */
      }
      if (fresh !== key) {
        previous = { key, until: t + previousForMs };
        key = fresh;
      }
    }
    const accepted = previous && t < previous.until ? [previous.key] : [];
    return { kind: 'hmac', secret: key, ...(accepted.length ? { previous: accepted } : {}) };
  };
}
