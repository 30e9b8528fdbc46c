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
import MyWebFunction, { shortName } from './index.ts';

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

// The record of a real failure: a MyWeb named with 64 characters, whose name MyWeb put into label
// values and the Service's name, where Kubernetes allows 63. The apiserver refused all three
// children (422) and the MyWeb stayed Ready=False. docs/debugging.md walks through the case.
const longName = JSON.parse(readFileSync(new URL('./testdata/long-name.record.json', import.meta.url), 'utf8')) as InvocationRecord;

test('a MyWeb named longer than 63 characters: label values and the Service name are cut to 63, with a hash', async () => {
  assert.equal(longName.writes.filter((w) => w.status === 422).length, 3, 'the record holds the three refused applies');
  const out = await replayOffline(MyWebFunction, longName);
  assert.equal(out.record.error, undefined);
  const children = out.record.writes.filter((w) => !w.path.endsWith('/status')).map((w) => w.body as { kind: string; metadata: { name: string; labels: Record<string, string> }; spec?: { selector?: unknown } });
  assert.deepEqual(children.map((c) => c.kind), ['ConfigMap', 'Deployment', 'Service']);
  const tooLong = (v: string) => v.length > 63;
  for (const c of children) {
    assert.deepEqual(Object.values(c.metadata.labels).filter(tooLong), [], `${c.kind} labels`);
    assert.doesNotMatch(JSON.stringify(c.spec?.selector ?? {}), /"[^"]{64,}"/, `${c.kind} selector`);
  }
  const service = children.find((c) => c.kind === 'Service')!;
  assert.equal(service.metadata.name, 'quarterly-report-landing-page-for-the-finance-team-e-973c27ca51');
  // The status no longer carries the apiserver's refusal.
  const status = out.record.writes.find((w) => w.path.endsWith('/status'))!.body as { status: { conditions: { reason: string }[] } };
  assert.equal(status.status.conditions[0]!.reason, 'DeploymentNotAvailable');
});

test('a name of 63 characters or fewer is used as it is', () => {
  assert.equal(shortName('web-1'), 'web-1');
  assert.equal(shortName('a'.repeat(63)), 'a'.repeat(63));
  assert.equal(shortName('a'.repeat(64)).length, 63);
  assert.notEqual(shortName(`${'a'.repeat(60)}-x1`), shortName(`${'a'.repeat(60)}-x2`), 'two long names that share a prefix stay apart');
});
