// MyResource's reconcile without a cluster: the ConfigMap and the Job, a Job per spec, the
// seed's states from the Job's status.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigMap, Job } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import { admit, parseAdmissionReview } from '../sdk/admission.ts';
import MyResourceFunction from './index.ts';

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

test('webhook: a bare number of bytes and more than 4Gi are refused with the field; 1024Mi is fine', async () => {
  const review = (memory: string | number) => parseAdmissionReview(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', kind: { group: 'mygroup.example.com', version: 'v1alpha1', kind: 'MyResource' }, operation: 'CREATE', object: { apiVersion: 'mygroup.example.com/v1alpha1', kind: 'MyResource', metadata: { name: 'r' }, spec: { image: 'busybox', memory } } } }));
  const causes = async (memory: string | number) => (await admit(MyResourceFunction, 'validate', review(memory))).response?.status?.details?.causes.map((c) => `${c.field}: ${c.message}`);
  assert.deepEqual(await causes(256), ['spec.memory: 256 is 256 bytes, too little to run a container; did you mean 256Mi?']);
  assert.deepEqual(await causes('8Gi'), ['spec.memory: at most 4Gi (got 8Gi)']);
  assert.equal(await causes('1024Mi'), undefined);
});
