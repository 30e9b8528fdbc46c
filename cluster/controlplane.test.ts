// What `up` (and so `npm test`, which asks for the test cluster's options) does with a running
// local cluster, from the options it was recorded with: the demo's cluster (`npm start`, no fake
// nodes) is given the fake nodes the suite needs, not reused as it is nor thrown away.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { reusePlan } from './controlplane.ts';
import type { ProcessRecord } from './processes.ts';
import { testClusterOptions } from '../test/support/cluster.ts';

const processes = (...names: string[]): ProcessRecord[] => names.map((name, i) => ({ name, pid: 1000 + i, command: `/bin/${name}`, args: [], log: `${name}.log` }));
const controlPlane = ['etcd', 'containerd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet', 'kube-proxy'];

test('the demo\'s cluster (no fake nodes, no kwok) gets kwok started and the test suite\'s fake nodes added', () => {
  const demo = { fakeNodes: 0, processes: processes(...controlPlane) };
  assert.deepEqual(reusePlan(demo, testClusterOptions), { action: 'add-fake-nodes', names: ['kfn-fake-0', 'kfn-fake-1'], total: 2, startKwok: true });
});

test('a cluster with fewer fake nodes than asked gets the rest, from the next name on, by the kwok it runs', () => {
  const one = { fakeNodes: 1, processes: processes(...controlPlane, 'kwok') };
  assert.deepEqual(reusePlan(one, { fakeNodes: 3 }), { action: 'add-fake-nodes', names: ['kfn-fake-1', 'kfn-fake-2'], total: 3, startKwok: false });
});

test('a cluster with the fake nodes asked for, or more, is reused as it is', () => {
  const test2 = { fakeNodes: 2, processes: processes(...controlPlane, 'kwok') };
  assert.deepEqual(reusePlan(test2, testClusterOptions), { action: 'reuse' });
  assert.deepEqual(reusePlan(test2, { fakeNodes: 1 }), { action: 'reuse' });
  assert.deepEqual(reusePlan(test2, {}), { action: 'reuse' }, 'npm start on the test cluster keeps it');
  assert.deepEqual(reusePlan({ fakeNodes: 0, processes: processes(...controlPlane) }, {}), { action: 'reuse' });
});

test('when kwok cannot be started beside it, the cluster is restarted, saying why', () => {
  const plan = reusePlan({ fakeNodes: 0, processes: processes(...controlPlane) }, testClusterOptions, 'missing: .kfn/cluster/kwok.yaml');
  assert.equal(plan.action, 'restart');
  assert.equal(plan.action === 'restart' && plan.reason, 'it has 0 fake nodes, 2 are needed, and kwok cannot be started beside it (missing: .kfn/cluster/kwok.yaml)');
  // A kwok that already runs needs none of its files again.
  assert.equal(reusePlan({ fakeNodes: 1, processes: processes(...controlPlane, 'kwok') }, testClusterOptions, 'missing: .kfn/cluster/kwok.yaml').action, 'add-fake-nodes');
});
