import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { resolveKubeconfig } from '../kube/kubeconfig.ts';
import { startExecApiServer } from '../test/support/exec-apiserver.ts';
import { execInPod, execUrl, ExecFailed } from './pod-exec.ts';

const pod = { name: 'kfn-bridge-0', labels: {}, containers: [{ name: 'bridge' }] };
const target = { namespace: 'kfn-system', pod: 'kfn-bridge-0', container: 'bridge' };

/** The fake apiserver's kubeconfig as a command chooses it (--kubeconfig). */
function chosen(t: TestContext, kubeconfig: string) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-exec-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'kubeconfig'), kubeconfig);
  return resolveKubeconfig({ kubeconfig: join(dir, 'kubeconfig') });
}

test('the exec URL is the apiserver\'s, as a WebSocket, with the command as repeated parameters', () => {
  const url = execUrl('https://10.0.0.1:6443/prefix/', target, ['node', '-e', 'a b&c']);
  assert.equal(url.protocol, 'wss:');
  assert.equal(url.pathname, '/prefix/api/v1/namespaces/kfn-system/pods/kfn-bridge-0/exec');
  assert.deepEqual(url.searchParams.getAll('command'), ['node', '-e', 'a b&c']);
  assert.equal(url.searchParams.get('container'), 'bridge');
  assert.equal(execUrl('http://127.0.0.1:8080', target, []).protocol, 'ws:');
});

test('a command run in a pod: its standard output whole (many messages), with the kubeconfig\'s credentials', async (t) => {
  const server = await startExecApiServer('kfn-system', [pod]);
  t.after(() => server.close());
  const cluster = chosen(t, server.kubeconfig);
  // 300 KB: more than one message of the channel protocol, and more than a 64 KiB frame.
  const out = await execInPod(cluster, target, ['node', '-e', "process.stdout.write('x'.repeat(300000) + 'end')"]);
  assert.equal(out.length, 300_003);
  assert.ok(out.toString().endsWith('xend'));
  assert.deepEqual(server.execs.map((e) => [e.pod, e.container]), [['kfn-bridge-0', 'bridge']]);
});

test('a command that fails: its exit status and standard error, and the pod named', async (t) => {
  const server = await startExecApiServer('kfn-system', [pod]);
  t.after(() => server.close());
  const cluster = chosen(t, server.kubeconfig);
  await assert.rejects(execInPod(cluster, target, ['node', '-e', "process.stderr.write('no journal here'); process.exit(3)"]), (err: Error) => {
    assert.ok(err instanceof ExecFailed);
    assert.equal(err.message, 'exec in pod kfn-system/kfn-bridge-0 (container bridge): the command ended with exit status 3: no journal here');
    return true;
  });
  await assert.rejects(execInPod(cluster, target, ['node', '-e', "process.stdout.write('x'.repeat(5000))"], { maxBytes: 1000 }), /wrote more than 1000 bytes, the most this reader keeps/);
});

test('an exec the apiserver refuses says which right is missing, as the apiserver answers a review of it', async (t) => {
  const server = await startExecApiServer('kfn-system', [pod]);
  t.after(() => server.close());
  server.allowed.delete('create');
  await assert.rejects(
    execInPod(chosen(t, server.kubeconfig), target, ['true']),
    /exec in pod kfn-system\/kfn-bridge-0 \(container bridge\): the apiserver refused: you may not create pods\/exec in namespace kfn-system \(kubectl auth can-i create pods\/exec -n kfn-system\); ask for a Role with get and create on pods\/exec there/,
  );
});
