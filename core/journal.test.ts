import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, closeSync, constants, existsSync, mkdtempSync, openSync, read, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import type { open } from 'node:fs/promises';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Journal, redact, type JournalEntry } from './journal.ts';

function entry(i: number, response?: unknown): JournalEntry {
  return {
    time: new Date(0).toISOString(),
    id: `id-${i}`,
    reconciler: 'r',
    key: `ns/o${i}`,
    reason: 'updated',
    attempt: 1,
    primary: { apiVersion: 'v1', kind: 'Secret', namespace: 'ns', name: `o${i}` },
    observedAt: new Date(0).toISOString(),
    sink: 'http://127.0.0.1:1/',
    status: 200,
    outcome: 'done',
    durationMs: 3,
    // Any shape: what the function said may hold Secret data anywhere, and none of it is written.
    response: response as JournalEntry['response'],
  };
}

test('one JSON line per entry; Secret data never written, wherever it appears', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const j = new Journal(join(dir, 'j.jsonl'));
  j.append(entry(1, { result: 'done', changes: [{ action: 'applied', ref: { kind: 'Secret', name: 's' }, data: { password: 'hunter2' } }], stringData: { x: 'y' } }));
  await j.flush();
  const text = readFileSync(join(dir, 'j.jsonl'), 'utf8');
  assert.equal(text.trim().split('\n').length, 1);
  assert.ok(!text.includes('hunter2') && !text.includes('stringData'), text);
  assert.equal((JSON.parse(text) as { id: string }).id, 'id-1');
  assert.deepEqual(redact({ a: [{ data: 1, b: { binaryData: 2, c: 3 } }] }), { a: [{ b: { c: 3 } }] });
});

test('rotates by size and keeps a bounded number of files', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  const j = new Journal(path, { maxBytes: 1000, keep: 2 });
  for (let i = 0; i < 40; i++) j.append(entry(i));
  await j.flush();
  assert.ok(existsSync(`${path}.1`) && existsSync(`${path}.2`));
  assert.ok(!existsSync(`${path}.3`), 'no more than `keep` rotated files');
  for (const f of [path, `${path}.1`, `${path}.2`]) assert.ok(readFileSync(f).length <= 1000, `${f} within the size limit`);
  const last = readFileSync(path, 'utf8').trim().split('\n').at(-1)!;
  assert.equal((JSON.parse(last) as { id: string }).id, 'id-39', 'the newest entry is in the current file');
  // A journal reopened on an existing file appends to it.
  const reopened = new Journal(path, { maxBytes: 1000, keep: 2 });
  reopened.append(entry(40));
  await reopened.flush();
  assert.match(readFileSync(path, 'utf8'), /id-40/);
});

test('appending does not write on the caller\'s turn; lines come out in order, in few writes; an exit writes the rest', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  const j = new Journal(path);
  for (let i = 0; i < 100; i++) j.append(entry(i));
  assert.equal(existsSync(path) ? readFileSync(path, 'utf8') : '', '', 'nothing written on the delivery path');
  await j.flush();
  const ids = readFileSync(path, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id);
  assert.deepEqual(ids, Array.from({ length: 100 }, (_, i) => `id-${i}`));
  // What is still queued when the process exits is written synchronously.
  j.append(entry(100));
  j.flushSync();
  assert.match(readFileSync(path, 'utf8'), /id-100/);
  await j.flush();
  assert.equal(readFileSync(path, 'utf8').match(/id-100"/g)?.length, 1, 'written once');
});

/** Descriptors this process has open on a path (a removed file's reads "… (deleted)"). */
function fdsOn(path: string): number {
  return readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`).startsWith(path);
    } catch {
      return false; // closed meanwhile (the listing's own)
    }
  }).length;
}

test('writes go through one open file while it is held; a journal removed from outside comes back once the hold is over', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  let clock = 0;
  const j = new Journal(path, { holdMs: 1000, now: () => clock });
  const fds = () => fdsOn(path);
  j.append(entry(0));
  await j.flush();
  const held = fds();
  assert.equal(held, 1, 'the journal holds its file open after a write');
  for (let i = 1; i <= 5; i++) {
    clock += 100;
    j.append(entry(i));
    await j.flush();
    assert.equal(fds(), held, 'the same file stays open between writes (no open and close per write)');
  }
  assert.equal(readFileSync(path, 'utf8').trim().split('\n').length, 6);
  rmSync(path); // as someone cleaning up might
  clock += 1000;
  j.append(entry(6));
  await j.flush();
  assert.match(readFileSync(path, 'utf8'), /"id":"id-6"/, 'past the hold, the journal opens its path again');
  assert.equal(fds(), held, 'the old file closed when the new one opened');
});

test('a line appended while the journal closes its file is written by the same flush', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  // The clock is read when the file opens, then when the write is done (past the hold: it
  // closes): a delivery's line arrives at that moment.
  let reads = 0;
  const j: Journal = new Journal(path, { holdMs: 0, now: () => (++reads === 2 && j.append(entry(1)), 0) });
  j.append(entry(0));
  await j.flush();
  assert.equal(j.queuedLines, 0, 'nothing left queued once flush resolves');
  assert.deepEqual(readFileSync(path, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id), ['id-0', 'id-1']);
});

test('a file held past its hold is closed by the time flush resolves (a volume can then be remounted or unmounted)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  // Closes that take 20 ms (a slow volume): a close flush did not wait for would still be under
  // way. The journal's `open` is fs/promises' own, swapped here through Node's builtin-module sync.
  const fsp = createRequire(import.meta.url)('node:fs/promises') as { open: typeof open };
  const realOpen = fsp.open;
  fsp.open = (async (...args: Parameters<typeof open>) => {
    const handle = await realOpen(...args);
    const close = handle.close.bind(handle);
    handle.close = async () => {
      await new Promise((r) => setTimeout(r, 20));
      return close();
    };
    return handle;
  }) as typeof open;
  syncBuiltinESMExports();
  t.after(() => {
    fsp.open = realOpen;
    syncBuiltinESMExports();
  });
  const j = new Journal(path, { holdMs: 0 });
  for (let i = 0; i < 3; i++) {
    j.append(entry(i));
    await j.flush();
    assert.equal(fdsOn(path), 0, `after write ${i}, the file is closed once flush resolves`);
  }
});

test('a write the file system cuts short (a file size limit) is a failure, counted and reported', { skip: process.platform !== 'linux' && 'needs ulimit and /bin/sh' }, (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  // A child under `ulimit -f 4` (4 KiB files; Node ignores SIGXFSZ, so a write past it is short,
  // then EFBIG): about 6 KiB of lines in one write.
  const script = `import { Journal } from ${JSON.stringify(new URL('./journal.ts', import.meta.url).href)};
const problems = [];
const j = new Journal(${JSON.stringify(path)}, { onProblem: (p) => problems.push(p) });
for (let i = 0; i < 6; i++) j.append({ id: 'line-' + i, pad: 'x'.repeat(1000) });
await j.flush();
console.log(JSON.stringify({ failures: j.failures, problems }));`;
  const out = execFileSync('/bin/sh', ['-c', `ulimit -f 4; exec "$0" --input-type=module -e "$1"`, process.execPath, script], { encoding: 'utf8' });
  const { failures, problems } = JSON.parse(out) as { failures: number; problems: string[] };
  assert.ok(failures >= 1, `the cut-short write counted as a failure (failures: ${failures})`);
  assert.match(problems[0] ?? '', /j\.jsonl/);
});

test('a write cut short (a full disk) leaves half a line, and the next entry starts on a line of its own', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  // While `cut` is set, the journal's next append writes three quarters of its data and then
  // fails, as a write does that fills a disk. Swapped through Node's builtin-module sync.
  let cut = false;
  const fsp = createRequire(import.meta.url)('node:fs/promises') as { open: typeof open };
  const realOpen = fsp.open;
  fsp.open = (async (...args: Parameters<typeof open>) => {
    const handle = await realOpen(...args);
    const appendFile = handle.appendFile.bind(handle);
    handle.appendFile = (async (data: string) => {
      if (!cut) return appendFile(data);
      cut = false;
      await appendFile(data.slice(0, Math.floor(data.length * 0.75)));
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    }) as typeof handle.appendFile;
    return handle;
  }) as typeof open;
  syncBuiltinESMExports();
  t.after(() => {
    fsp.open = realOpen;
    syncBuiltinESMExports();
  });
  const problems: string[] = [];
  const j = new Journal(path, { onProblem: (p) => problems.push(p) });
  j.append(entry(0));
  await j.flush();
  cut = true;
  j.append(entry(1));
  j.append(entry(2)); // one write with entry 1: it ends in the middle of this one
  await j.flush();
  assert.equal(j.failures, 1);
  assert.match(problems[0] ?? '', /ENOSPC/);
  j.append(entry(3));
  await j.flush();
  // Cut again, and then the process exits: what it writes at exit starts on a line of its own too.
  cut = true;
  j.append(entry(4));
  await j.flush();
  j.append(entry(5));
  j.flushSync();
  await j.flush();
  const lines = readFileSync(path, 'utf8').split('\n').filter((l) => l.trim());
  assert.deepEqual(idsOf(lines), ['id-0', 'id-1', 'id-3', 'id-5'], 'every complete entry, and the one after each cut, read back');
  assert.equal(lines.length, 6, 'each line cut short stands alone');
});

test('a journal opened on a file an earlier process left cut short starts its first entry on a line of its own', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'j.jsonl');
  const whole = `${JSON.stringify(entry(0))}\n`;
  writeFileSync(path, whole + whole.slice(0, 40));
  const j = new Journal(path);
  j.append(entry(1));
  await j.flush();
  assert.deepEqual(idsOf(readFileSync(path, 'utf8').split('\n')), ['id-0', 'id-1']);
  // A file that ends a line gets no empty one.
  j.append(entry(2));
  await j.flush();
  const reopened = new Journal(path);
  reopened.append(entry(3));
  await reopened.flush();
  assert.doesNotMatch(readFileSync(path, 'utf8'), /\n\n/);
});

/** The ids of the lines that parse; a line cut short does not. */
function idsOf(lines: string[]): string[] {
  return lines.flatMap((l) => {
    try {
      return [(JSON.parse(l) as { id: string }).id];
    } catch {
      return [];
    }
  });
}

test('a journal whose directory cannot be made does not throw: the failure is counted and reported, and writing starts once it can be made', async (t) => {
  const unhandled = rejections(t);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const blocker = join(dir, 'a-file');
  writeFileSync(blocker, '');
  const path = join(blocker, 'journal', 'j.jsonl');
  const problems: string[] = [];
  const j = new Journal(path, { onProblem: (p) => problems.push(p) });
  assert.equal(j.failures, 1);
  assert.equal(problems.length, 1);
  assert.match(problems[0]!, /cannot create the directory of .*j\.jsonl: .*ENOTDIR/);
  j.append(entry(0));
  await j.flush();
  assert.ok(j.failures >= 2, 'its lines are lost, and counted');
  assert.equal(problems.length, 1, 'reported once for the episode');
  rmSync(blocker); // the way is clear: the directory can be made now
  j.append(entry(1));
  await j.flush();
  assert.match(readFileSync(path, 'utf8'), /"id":"id-1"/);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(unhandled, []);
});

/**
 * A directory that cannot be written: a read-only tmpfs as root (who may write anywhere else),
 * or mode 0555 for anyone else. Made read-only by `lock()`, writable again by `unlock()`.
 */
function lockableDir(t: TestContext): { dir: string; lock(): void; unlock(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-ro-'));
  const root = process.getuid?.() === 0;
  if (root) execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
  t.after(() => {
    if (root) execFileSync('umount', [dir]);
    else chmodSync(dir, 0o755);
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    dir,
    lock: () => (root ? execFileSync('mount', ['-o', 'remount,ro', dir]) : chmodSync(dir, 0o555)),
    unlock: () => (root ? execFileSync('mount', ['-o', 'remount,rw', dir]) : chmodSync(dir, 0o755)),
  };
}

/** Collects unhandled rejections while the test runs: a journal failure must never be one. */
function rejections(t: TestContext): unknown[] {
  const seen: unknown[] = [];
  const on = (reason: unknown) => seen.push(reason);
  process.on('unhandledRejection', on);
  t.after(() => process.off('unhandledRejection', on));
  return seen;
}

test('a read-only directory: rotation and writes fail without an unhandled rejection; failures are reported and counted; writing resumes once it is writable', async (t) => {
  const unhandled = rejections(t);
  const { dir, lock, unlock } = lockableDir(t);
  const problems: string[] = [];
  // No hold: each write opens the path and closes it, so the volume can be made read-only between
  // writes (a remount refuses while a file on it is open for writing).
  const j = new Journal(join(dir, 'j.jsonl'), { maxBytes: 600, holdMs: 0, onProblem: (p) => problems.push(p) });
  for (let i = 0; i < 3; i++) j.append(entry(i));
  await j.flush();
  lock();
  for (let i = 3; i < 12; i++) {
    j.append(entry(i));
    await j.flush();
  }
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(unhandled, []);
  assert.ok(j.failures > 0, 'failures counted');
  assert.ok(problems.length >= 1 && /j\.jsonl/.test(problems[0]!), `the problem names the file: ${problems[0]}`);
  unlock();
  j.append(entry(99));
  await j.flush();
  const files = readdirSync(dir).map((f) => readFileSync(join(dir, f), 'utf8')).join('');
  assert.match(files, /"id":"id-99"/, 'written again once the directory is writable');
});

test('a full volume: writes fail with ENOSPC, counted, and the journal keeps taking lines', async (t) => {
  const unhandled = rejections(t);
  const problems: string[] = [];
  const j = new Journal('/dev/full', { onProblem: (p) => problems.push(p) });
  for (let i = 0; i < 5; i++) {
    j.append(entry(i));
    await j.flush();
  }
  assert.deepEqual(unhandled, []);
  assert.equal(j.failures, 5);
  assert.match(problems[0] ?? '', /ENOSPC|no space/i);
});

test('a disk that does not keep up: the queue is bounded, the oldest lines dropped and counted', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-journal-slow-'));
  const fifo = join(dir, 'j.jsonl');
  execFileSync('mkfifo', [fifo]);
  // Nobody reads the pipe yet: the first write waits, as on a disk that has stopped answering.
  const j = new Journal(fifo, { maxQueuedLines: 5 });
  let reader: number | undefined;
  t.after(() => {
    // A reader that opens and closes at once ends a write still waiting on the pipe.
    closeSync(reader ?? openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK));
    rmSync(dir, { recursive: true, force: true });
  });
  for (let i = 0; i < 50; i++) j.append(entry(i));
  await new Promise((r) => setTimeout(r, 20));
  for (let i = 50; i < 100; i++) j.append(entry(i));
  assert.ok(j.queuedLines <= 5, `${j.queuedLines} lines queued`);
  assert.ok(j.dropped >= 90, `${j.dropped} dropped`);
  reader = openSync(fifo, 'r');
  const drained = (async () => {
    let text = '';
    const buf = Buffer.alloc(1 << 16);
    for (;;) {
      const n = await new Promise<number>((resolve, reject) => read(reader!, buf, 0, buf.length, null, (err, bytes) => (err ? reject(err) : resolve(bytes))));
      // The journal closes the pipe at times (past its hold): an end of file only means the next write has not begun.
      if (n === 0) await new Promise((r) => setTimeout(r, 5));
      text += buf.subarray(0, n).toString('utf8');
      if (text.includes('"id-99"')) return text;
    }
  })();
  await j.flush();
  const text = await drained;
  assert.match(text, /"id":"id-99"/, 'the newest lines are kept');
  assert.match(text, /"id":"id-45"/, 'the write under way when the disk stalled goes out');
  assert.doesNotMatch(text, /"id":"id-60"/, 'older ones were dropped');
});
