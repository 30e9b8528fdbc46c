// A recorded reconcile as a unit test of MyWeb: the record in testdata/ was taken from a real
// cluster (kfn dev wrote it when a MyWeb's page was edited), and runs here with no cluster. If
// a change to index.ts alters what MyWeb writes for that edit, this test names the field.
// How to make one: docs/debugging.md, "A record becomes a test".
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { formatChanges } from '../sdk/diff.ts';
import type { InvocationRecord } from '../sdk/record.ts';
import { replayOffline } from '../sdk/replay.ts';
import MyWebFunction from './index.ts';

const record = JSON.parse(readFileSync(new URL('./testdata/updated.record.json', import.meta.url), 'utf8')) as InvocationRecord;

test('an edited page: MyWeb writes the ConfigMap, the Deployment (new page hash) and the status, as recorded', async () => {
  const out = await replayOffline(MyWebFunction, record);
  const differences = out.comparisons.filter((c) => c.status !== 'same').flatMap((c) => [`${c.status} ${c.key}`, ...formatChanges(c.changes)]);
  assert.deepEqual(differences, []);
  assert.equal(out.record.error, undefined);
  // And what it wrote, spelled out: the new page reached the ConfigMap.
  const page = out.record.writes.find((w) => w.path.endsWith('/configmaps/web-1-page'))?.body as { data: Record<string, string> };
  assert.equal(page.data['index.html'], '<h1>v2</h1>');
});
