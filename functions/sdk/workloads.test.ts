// What explainWorkload says for the causes pods and controllers give, as the kubelet and the
// controllers write them (the shapes seen on the local node).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Deployment } from './types.ts';
import { explainWorkload, selectorString, whyNotAvailable, type PodView } from './workloads.ts';

const deployment = { kind: 'Deployment', metadata: { name: 'web', namespace: 'shop' }, spec: { selector: { matchLabels: { app: 'web' } } } };
const waiting = (name: string, reason: string, message: string, extra: Partial<NonNullable<PodView['status']>> = {}): PodView => ({
  metadata: { name },
  spec: { containers: [{ name: 'app', image: 'kfn.local/nginx:nope' }] },
  status: { phase: 'Pending', containerStatuses: [{ name: 'app', image: 'kfn.local/nginx:nope', restartCount: 0, state: { waiting: { reason, message } } }], ...extra },
});

test('an image that cannot be pulled: the image, the reason and the runtime\'s first line; the same cause in two pods once', () => {
  const pods = [
    waiting('web-1', 'ImagePullBackOff', 'Back-off pulling image "kfn.local/nginx:nope": ErrImagePull: failed to resolve reference\nmore'),
    waiting('web-2', 'ImagePullBackOff', 'Back-off pulling image "kfn.local/nginx:nope": ErrImagePull: failed to resolve reference\nmore'),
  ];
  const said = 'Deployment web: pod web-1: container app cannot pull image kfn.local/nginx:nope (ErrImagePull: failed to resolve reference) (and 1 more pod)';
  assert.equal(whyNotAvailable(deployment, pods), said);
  // The kubelet's other word for it, between back-offs: the same message, so no status write.
  const between = pods.map((p) => waiting(p.metadata.name!, 'ErrImagePull', 'failed to resolve reference'));
  assert.equal(whyNotAvailable(deployment, between), said);
});

test('a container that keeps crashing: its last exit code and restarts; OOMKilled named', () => {
  const crash = waiting('web-1', 'CrashLoopBackOff', 'back-off 40s restarting failed container=app');
  crash.status!.containerStatuses![0]!.restartCount = 3;
  crash.status!.containerStatuses![0]!.lastState = { terminated: { reason: 'Error', exitCode: 2 } };
  assert.equal(whyNotAvailable(deployment, [crash]), 'Deployment web: pod web-1: container app keeps crashing (CrashLoopBackOff; last exit code 2)');
  crash.status!.containerStatuses![0]!.lastState = { terminated: { reason: 'OOMKilled', exitCode: 137 } };
  assert.match(whyNotAvailable(deployment, [crash])!, /last exit code 137 \(OOMKilled\)/);
});

test('a crash loop says the same whichever phase of it a resync sees: backing off, or just ended again — even with exit code 0', () => {
  const container = (state: object, lastState?: object) => ({ metadata: { name: 'web-1' }, status: { phase: 'Running', containerStatuses: [{ name: 'app', restartCount: 4, state, ...(lastState ? { lastState } : {}) }] } }) as PodView;
  const done = { terminated: { reason: 'Completed', exitCode: 0 } };
  const backingOff = container({ waiting: { reason: 'CrashLoopBackOff', message: 'back-off 1m20s restarting failed container=app' } }, done);
  const endedAgain = container(done, done);
  const said = 'Deployment web: pod web-1: container app keeps crashing (CrashLoopBackOff; last exit code 0 (Completed))';
  assert.equal(whyNotAvailable(deployment, [backingOff]), said);
  assert.equal(whyNotAvailable(deployment, [endedAgain]), said, 'the same message: no status write between the two');
});

test('a pod no node takes: the scheduler\'s message; pods starting or running explain nothing', () => {
  const pending: PodView = { metadata: { name: 'web-1' }, status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/1 nodes are available: 1 Insufficient cpu.' }] } };
  assert.equal(whyNotAvailable(deployment, [pending]), 'Deployment web: pod web-1 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu.');
  const creating = waiting('web-2', 'ContainerCreating', '');
  const running: PodView = { metadata: { name: 'web-3' }, status: { phase: 'Running', containerStatuses: [{ name: 'app', state: { running: {} } }] } };
  assert.equal(whyNotAvailable(deployment, [creating, running]), undefined);
});

test('what the controller reports: pods it may not create (a quota), a rollout past its deadline, a failed Job', () => {
  const quota = { ...deployment, status: { conditions: [{ type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate', message: 'pods "web-7d9" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=0, limited: cpu=1' }] } };
  assert.equal(whyNotAvailable(quota, []), 'Deployment web: cannot create its pods (FailedCreate: pods "web-7d9" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=0, limited: cpu=1)');
  const stalled = { ...deployment, status: { conditions: [{ type: 'Progressing', status: 'False', reason: 'ProgressDeadlineExceeded', message: 'ReplicaSet "web-7d9" has timed out progressing.' }] } };
  assert.match(whyNotAvailable(stalled, [])!, /its rollout stopped \(ProgressDeadlineExceeded: ReplicaSet "web-7d9" has timed out progressing\.\)/);
  const job = { kind: 'Job', metadata: { name: 'backup' }, status: { conditions: [{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' }] } };
  const ended: PodView = { metadata: { name: 'backup-x' }, status: { phase: 'Failed', containerStatuses: [{ name: 'dump', state: { terminated: { reason: 'Error', exitCode: 1 } } }] } };
  assert.equal(whyNotAvailable(job, [ended]), 'Job backup: failed (BackoffLimitExceeded: Job has reached the specified backoff limit); pod backup-x: container dump ended with exit code 1');
});

test('explainWorkload lists the pods by the workload\'s selector, in its namespace', async () => {
  const asked: unknown[] = [];
  const ctx = { list: async (ref: unknown, options: unknown) => (asked.push([ref, options]), [waiting('web-1', 'ErrImagePull', 'not found')]) as never };
  const { kind: _kind, ...listed } = deployment; // as a list gives it: no kind
  assert.match((await explainWorkload(ctx, Deployment, listed))!, /^Deployment web: .*cannot pull image kfn\.local\/nginx:nope \(ErrImagePull: not found\)/);
  assert.deepEqual((asked[0] as [{ kind: string }, unknown])[1], { namespace: 'shop', labelSelector: 'app=web' });
  assert.equal(await explainWorkload(ctx, Deployment, undefined), undefined);
  assert.equal(selectorString({ matchLabels: { a: '1' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['web', 'api'] }, { key: 'canary', operator: 'DoesNotExist' }] }), 'a=1,tier in (web,api),!canary');
});
