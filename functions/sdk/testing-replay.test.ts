// A record becomes a test in a project of its own: what kfn/sdk/testing gives it to read records
// and replay them, as docs/debugging.md shows.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import MyWebFunction from '../myweb/index.ts';
import { readRecords, replayOffline, type InvocationRecord } from './testing.ts';

test('kfn/sdk/testing reads a record (pretty-printed, or lines of a log) and replays it offline', async () => {
  const text = readFileSync(new URL('../myweb/testdata/updated.record.json', import.meta.url), 'utf8');
  const record = JSON.parse(text) as InvocationRecord;
  const out = await replayOffline(MyWebFunction, record);
  assert.equal(out.same, true, 'the function as it is writes what it wrote then');
  const log = `{"level":30,"msg":"listening"}\n${JSON.stringify(record)}\n`;
  assert.deepEqual(readRecords(log, 'pod log').records.map((r) => r.id), [record.id], 'a record among other log lines');
});
