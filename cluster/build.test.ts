import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildGroups, clusterBuildSpec } from './build.ts';
import { pinnedVersions } from './versions.ts';

test("the cluster's Kubernetes programs are built by one go build; the others each by their own", () => {
  const groups = buildGroups(clusterBuildSpec(pinnedVersions()).steps).map((g) => g.map((s) => s.name));
  assert.deepEqual(groups, [['etcd'], ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl', 'kubelet', 'kube-proxy'], ['kwok'], ['coredns'], ['kfn-image'], ['pause']]);
});

test('steps join only when one go build would name and build them as asked', () => {
  const step = (name: string, pkg: string, more: { moduleDir?: string; ldflags?: string; tags?: string } = {}) => ({ name, pkg, moduleDir: more.moduleDir ?? '/m', ldflags: more.ldflags ?? '-s -w', ...(more.tags ? { tags: more.tags } : {}) });
  const names = (steps: ReturnType<typeof step>[]) => buildGroups(steps).map((g) => g.map((s) => s.name));
  assert.deepEqual(names([step('a', 'x/a'), step('b', 'x/b')]), [['a', 'b']]);
  assert.deepEqual(names([step('a', 'x/a'), step('my-b', 'x/b')]), [['a'], ['my-b']], 'a program named otherwise than its package');
  assert.deepEqual(names([step('a', 'x/a'), step('b', 'x/b', { moduleDir: '/n' })]), [['a'], ['b']], 'another module');
  assert.deepEqual(names([step('a', 'x/a'), step('b', 'x/b', { ldflags: '-X v=1' })]), [['a'], ['b']], 'other linker flags');
  assert.deepEqual(names([step('a', 'x/a'), step('b', 'x/b', { tags: 't' })]), [['a'], ['b']], 'other tags');
  assert.deepEqual(names([step('a', 'x/a'), step('b', 'y/b', { moduleDir: '/n' }), step('c', 'x/c')]), [['a'], ['b'], ['c']], 'only neighbours');
});
