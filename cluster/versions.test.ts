import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareVersions, goDirective, pinnedVersions, requiredVersion } from './versions.ts';

const goMod = `module example

go 1.25.0

require (
	go.etcd.io/etcd/server/v3 v3.6.5 // indirect
	k8s.io/kubernetes v1.35.4
)

require sigs.k8s.io/kwok v0.7.0
`;

test('requiredVersion reads block and single-line require directives', () => {
  assert.equal(requiredVersion(goMod, 'k8s.io/kubernetes'), 'v1.35.4');
  assert.equal(requiredVersion(goMod, 'go.etcd.io/etcd/server/v3'), 'v3.6.5');
  assert.equal(requiredVersion(goMod, 'sigs.k8s.io/kwok'), 'v0.7.0');
});

test('requiredVersion names the file and the fix when a module is missing', () => {
  assert.throws(() => requiredVersion(goMod, 'k8s.io/api', 'cluster/go.mod'), /cluster\/go\.mod does not require k8s\.io\/api; regenerate it/);
});

test('goDirective and compareVersions', () => {
  assert.equal(goDirective(goMod), '1.25.0');
  assert.equal(compareVersions('go1.26.8', '1.25.0'), 1);
  assert.equal(compareVersions('1.25', '1.25.0'), 0);
  assert.equal(compareVersions('go1.24.9', '1.25.0'), -1);
  assert.equal(compareVersions('v1.10.0', 'v1.9.9'), 1);
});

test('the repository pins one Kubernetes release, with etcd and kwok', () => {
  const v = pinnedVersions();
  assert.match(v.kubernetes, /^v1\.\d+\.\d+$/);
  assert.match(v.etcd, /^v3\.\d+\.\d+$/);
  assert.match(v.kwok, /^v0\.\d+\.\d+$/);
});
