// MyResource's reconcile without a cluster: the ConfigMap and the Job, a Job per spec, the
// seed's states from the Job's status.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, Job } from '../sdk/index.ts';
import { checkRules, testReconcile } from '../sdk/testing.ts';
import MyResourceFunction, { MyResource } from './index.ts';

const res = (memory: string | number = '64Mi') => ({ metadata: { name: 'r', namespace: 'demo' }, spec: { image: 'kfn.local/busybox:1.35', memory } });
type JobSpec = { metadata: { name: string }; spec: { template: { spec: { containers: { image: string; resources: { limits: { memory: string } } }[] } } } };

test('a ConfigMap with the spec and a Job running the image with the memory limit; Pending until the Job runs', async () => {
  const out = await testReconcile(MyResourceFunction, { object: res(), reason: 'created' });
  assert.deepEqual(out.child<{ data: Record<string, string> }>(ConfigMap, 'r')?.data, { image: 'kfn.local/busybox:1.35', memory: '64Mi' });
  const job = out.children.find((c) => c.kind === 'Job') as unknown as JobSpec;
  assert.match(job.metadata.name, /^r-[0-9a-f]{8}$/);
  assert.deepEqual(job.spec.template.spec.containers[0]!.resources.limits, { memory: '64Mi' });
  assert.equal(out.status?.state, 'Pending');
  assert.equal(out.ready?.reason, 'JobPending');
});

test('an edited spec names a new Job, and the old one is pruned', async () => {
  const first = await testReconcile(MyResourceFunction, { object: res('64Mi') });
  const oldJob = first.children.find((c) => c.kind === 'Job')!;
  const out = await testReconcile(MyResourceFunction, { object: res('128Mi'), children: [oldJob] });
  const newJob = out.children.find((c) => c.kind === 'Job')!;
  assert.notEqual(newJob.metadata.name, oldJob.metadata.name);
  assert.deepEqual(out.pruned.map((p) => `${p.kind}/${p.name}`), [`Job/${oldJob.metadata.name}`]);
});

test('status.state follows the Job: Running, Succeeded (Ready), Failed', async () => {
  const name = (await testReconcile(MyResourceFunction, { object: res() })).children.find((c) => c.kind === 'Job')!.metadata.name;
  const withJob = (status: object) => testReconcile(MyResourceFunction, { object: res(), children: [{ apiVersion: 'batch/v1', kind: 'Job', metadata: { name }, status }] });
  assert.equal((await withJob({ active: 1 })).status?.state, 'Running');
  const done = await withJob({ succeeded: 1, conditions: [{ type: 'Complete', status: 'True' }] });
  assert.deepEqual([done.status?.state, done.ready?.status], ['Succeeded', 'True']);
  assert.equal((await withJob({ failed: 1, conditions: [{ type: 'Failed', status: 'True' }] })).status?.state, 'Failed');
  void Job;
});

test('the CRD refuses a bare number of bytes, saying what was meant, and more than 4Gi; 1024Mi is fine (the apiserver runs the same rules)', () => {
  const refusals = (memory: string | number) => checkRules(MyResource, { spec: { image: 'busybox', memory } });
  assert.deepEqual(refusals(256), ['spec.memory: Invalid value: 256: is 256 bytes, too little to run a container; did you mean 256Mi?']);
  assert.deepEqual(refusals('3000Ki'), ['spec.memory: Invalid value: "3000Ki": is less than 4Mi, too little to run a container']);
  assert.deepEqual(refusals('3.5Mi'), ['spec.memory: Invalid value: "3.5Mi": is less than 4Mi, too little to run a container']);
  assert.deepEqual(refusals('8Gi'), ['spec.memory: Invalid value: "8Gi": must be at most 4Gi']);
  assert.deepEqual(refusals('1024Mi'), []);
  assert.deepEqual(refusals('4Gi'), []);
  assert.equal(MyResourceFunction.validate, undefined, 'no webhook: the function may rest at zero');
});
