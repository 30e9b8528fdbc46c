// `kfn manifests` points a Reconciler where `kfn deploy` runs the function by default: its
// Deployment's Service; at its Knative Service only with --target knative, as kfn deploy has it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '../cluster/paths.ts';

/** The Reconciler's sink in what `kfn manifests functions/myweb <flags>` prints. */
function sinkOf(...flags: string[]): Record<string, unknown> {
  const out = spawnSync(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'manifests', join(repoRoot, 'functions', 'myweb'), ...flags], { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  const objects = parseAllDocuments(out.stdout).map((d) => d.toJS() as { kind?: string; spec?: { sink?: Record<string, unknown> } } | null);
  const reconciler = objects.find((o) => o?.kind === 'Reconciler');
  assert.ok(reconciler?.spec?.sink, out.stdout.slice(0, 2000));
  return reconciler.spec.sink;
}

test('kfn manifests delivers to the Deployment\'s Service by default, as kfn deploy runs it', () => {
  assert.equal(sinkOf().uri, 'http://kfn-fn-myweb.kfn-system.svc.cluster.local/');
  assert.equal(sinkOf('-n', 'ops').uri, 'http://kfn-fn-myweb.ops.svc.cluster.local/');
  assert.deepEqual(sinkOf('--target', 'deployment'), sinkOf());
});

test('kfn manifests --target knative delivers to the Knative Service', () => {
  assert.deepEqual(sinkOf('--target', 'knative'), { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'kfn-fn-myweb', namespace: 'kfn-system' } });
});
