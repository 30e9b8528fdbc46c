// PodBuggerTool's reconcile without a cluster: a debug container for each running pod its
// selector matches, once; status lists them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Pod } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import PodBuggerToolFunction from './index.ts';

const tool = { metadata: { name: 'dbg', namespace: 'demo' }, spec: { selector: { matchLabels: { app: 'web' } }, image: 'kfn.local/busybox:1.35' } };
const pod = (name: string, labels: Record<string, string>, phase = 'Running', ephemeralContainers?: { name: string }[]) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, labels }, spec: { containers: [{ name: 'main' }], ...(ephemeralContainers ? { ephemeralContainers } : {}) }, status: { phase } });

test('a debug container goes into each running pod the selector matches, targeting its first container', async () => {
  const out = await testReconcile(PodBuggerToolFunction, { object: tool, existing: [pod('web-1', { app: 'web' }), pod('web-2', { app: 'web' }, 'Pending'), pod('db-1', { app: 'db' })] });
  assert.equal(out.error, undefined);
  const patches = out.writes.filter((w) => w.path.endsWith('/ephemeralcontainers'));
  assert.deepEqual(patches.map((w) => w.path), ['/api/v1/namespaces/demo/pods/web-1/ephemeralcontainers']);
  assert.deepEqual((patches[0]!.body as { spec: { ephemeralContainers: unknown[] } }).spec.ephemeralContainers, [{ name: 'podbugger-dbg', image: 'kfn.local/busybox:1.35', stdin: true, tty: true, targetContainerName: 'main' }]);
  assert.deepEqual(out.status?.debuggedPods, ['web-1']);
  assert.deepEqual(out.get<{ spec: { ephemeralContainers: { name: string }[] } }>(Pod, 'web-1')?.spec.ephemeralContainers.map((c) => c.name), ['podbugger-dbg']);
});

test('a pod that already has the debug container is not patched again', async () => {
  const out = await testReconcile(PodBuggerToolFunction, { object: tool, existing: [pod('web-1', { app: 'web' }, 'Running', [{ name: 'podbugger-dbg' }])] });
  assert.equal(out.writes.filter((w) => w.path.endsWith('/ephemeralcontainers')).length, 0);
  assert.deepEqual(out.status?.debuggedPods, ['web-1']);
});
