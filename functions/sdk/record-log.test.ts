// Records in a deployed function's log (KFN_RECORD=stdout): bounded per record, and without the
// resyncs that changed nothing, so that the kubelet's share of the log holds the reconciles that did.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import MyWebFunction from '../myweb/index.ts';
import { cutRecord, logLine, logsRecord, readRecords, recordSinkFromEnv, type InvocationRecord } from './record.ts';
import { replayOffline } from './replay.ts';

const updated = () => JSON.parse(readFileSync(new URL('../myweb/testdata/updated.record.json', import.meta.url), 'utf8')) as InvocationRecord;
const withEvent = (r: InvocationRecord, reason: InvocationRecord['event']['reason']) => ({ ...r, event: { ...r.event, reason } });

test('a resync that wrote nothing and did not fail is not logged; every other reconcile is', () => {
  const r = updated();
  assert.equal(logsRecord(r), true, 'an update that wrote');
  assert.equal(logsRecord({ ...withEvent(r, 'resync'), writes: [] }), false, 'a resync with nothing to do');
  assert.equal(logsRecord(withEvent(r, 'resync')), true, 'a resync that set something back');
  assert.equal(logsRecord({ ...withEvent(r, 'resync'), writes: [], error: { message: 'boom' } }), true, 'a resync that failed');
  assert.equal(logsRecord({ ...withEvent(r, 'created'), writes: [] }), true, 'a change that needed no write');
});

test('a record bigger than the bound is logged cut: what it did, not what it read, and it says so', () => {
  const r = updated();
  const whole = logLine(r);
  assert.deepEqual(JSON.parse(whole), r, 'a record under the bound is logged whole');
  const line = logLine(r, 10_000);
  assert.ok(Buffer.byteLength(line) < 10_000, `cut to ${Buffer.byteLength(line)} bytes`);
  const cut = readRecords(line, 'log').records[0]!;
  assert.deepEqual(cut.cut, { bytes: Buffer.byteLength(whole) - 1 });
  assert.deepEqual([cut.reads, cut.children, cut.logs], [[], [], []]);
  assert.deepEqual(cut.writes, r.writes.map((w) => ({ method: w.method, path: w.path, status: w.status })), 'each write named, without its body');
  assert.deepEqual([cut.id, cut.event.id, cut.result], [r.id, r.event.id, r.result]);
  assert.equal(cut.event.data.observed, undefined);
  assert.deepEqual(cutRecord(r, 1).event.data.primary, r.event.data.primary);
});

test('KFN_RECORD=stdout writes each record as one line, cut when big, and leaves out resyncs that changed nothing', (t) => {
  const written: string[] = [];
  t.mock.method(process.stdout, 'write', (chunk: string) => (written.push(chunk), true));
  const sink = recordSinkFromEnv({ KFN_RECORD: 'stdout' })!;
  const r = updated();
  sink(r);
  sink({ ...withEvent(r, 'resync'), writes: [] });
  const big = { ...r, logs: Array.from({ length: 200 }, (_, i) => ({ msg: 'x'.repeat(6000), i })) };
  sink(big);
  t.mock.restoreAll();
  assert.equal(written.length, 2, 'the idle resync is not logged');
  assert.ok(written.every((l) => l.endsWith('\n') && !l.slice(0, -1).includes('\n')), 'one line each');
  assert.equal((JSON.parse(written[0]!) as InvocationRecord).cut, undefined);
  assert.ok((JSON.parse(written[1]!) as InvocationRecord).cut!.bytes > 1 << 20, 'a record of more than 1 MiB is cut');
  assert.equal(recordSinkFromEnv({ KFN_RECORD: 'off' }), undefined);
  assert.equal(recordSinkFromEnv({}), undefined, 'unset: no records (kfn deploy sets it)');
});

test('a cut record does not replay offline, and says how it does replay', async () => {
  const cut = cutRecord(updated(), 2_000_000);
  await assert.rejects(replayOffline(MyWebFunction, cut), /record \w+ was cut before it was logged \(2000000 bytes\): it holds no reads to answer, so it replays with --dry-run \(against the cluster now\) or --live, not offline/);
});
