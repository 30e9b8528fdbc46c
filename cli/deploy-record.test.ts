import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseArgs } from 'node:util';
import MyWebFunction from '../functions/myweb/index.ts';
import { functionKnativeService, functionWorkload, hostWorkload } from '../functions/sdk/manifests.ts';
import { recordArgs, recordOf } from './deploy.ts';

type Workload = { kind: string; spec: { template: { spec: { containers: { env: { name: string; value?: string }[] }[] } } } };
const recordEnv = (objs: Record<string, unknown>[]) => (objs.find((o) => o.kind === 'Deployment' || o.kind === 'Service') as unknown as Workload).spec.template.spec.containers[0]!.env.filter((e) => e.name === 'KFN_RECORD');

test('kfn deploy records by default, --record off does not, and --record alone still means on', () => {
  // As kfn deploy parses them: --record takes a value.
  const parsed = (...argv: string[]) => recordOf(parseArgs({ args: recordArgs(argv), options: { record: { type: 'string' } }, allowPositionals: true, strict: true }).values.record);
  assert.equal(parsed('functions/myweb'), true, 'on by default');
  assert.equal(parsed('--record', 'off', 'functions/myweb'), false);
  assert.equal(parsed('--record=off', 'functions/myweb'), false);
  assert.equal(parsed('--record', 'on', 'functions/myweb'), true);
  assert.deepEqual(recordArgs(['--record', 'functions/myweb']), ['--record=on', 'functions/myweb'], 'a bare --record takes no function folder as its value');
  assert.deepEqual(recordArgs(['functions/myweb', '--record']), ['functions/myweb', '--record=on']);
  assert.deepEqual(recordArgs(['--', '--record']), ['--', '--record'], 'after --, a positional');
  assert.throws(() => recordOf('yes'), /--record takes on or off, not "yes"/);
});

test('a deployed function writes its records to its log unless told not to: Deployment, Knative Service and shared host alike', () => {
  const on = [{ name: 'KFN_RECORD', value: 'stdout' }];
  assert.deepEqual(recordEnv(functionWorkload(MyWebFunction, { image: 'i' })), on);
  assert.deepEqual(recordEnv([functionKnativeService(MyWebFunction, { image: 'i' })]), on);
  assert.deepEqual(recordEnv(hostWorkload('pair', [MyWebFunction], { image: 'i' })), on);
  assert.deepEqual(recordEnv(functionWorkload(MyWebFunction, { image: 'i', record: false })), [], '--record off');
  assert.deepEqual(recordEnv([functionKnativeService(MyWebFunction, { image: 'i', record: false })]), []);
});
