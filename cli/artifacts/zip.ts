// A Lambda deployment package: a zip (deflate) written by fflate, with Unix file modes and a
// fixed time, so the same bundle always gives the same bytes.
import { zipSync, type Zippable } from 'fflate';

export interface ZipEntry {
  name: string;
  data: Buffer;
  /** Unix permission bits (default 0o644). */
  mode?: number;
}

/** 1980-01-01 00:00, the earliest time a zip can hold: reproducible archives. */
const fixedTime = new Date(1980, 0, 1, 0, 0, 0);

export function zip(entries: ZipEntry[]): Buffer {
  const files: Zippable = {};
  for (const e of entries) {
    // A regular file (type 0o100000) with its permission bits, as Unix zip writes them.
    files[e.name] = [e.data, { level: 9, mtime: fixedTime, os: 3, attrs: (((e.mode ?? 0o644) | 0o100000) << 16) >>> 0 }];
  }
  return Buffer.from(zipSync(files));
}
