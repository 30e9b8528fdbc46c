import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
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
