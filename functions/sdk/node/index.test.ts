// The function as its container runs it: SIGTERM during a reconcile lets that reconcile finish
// and answer, refuses new connections, then exits.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { encodeReconcileEvent } from '../../../core/event.ts';
import { repoRoot } from '../../../cluster/paths.ts';
import { freePort } from '../../../test/support/bridge.ts';
import { waitFor } from '../../../core/clock.ts';

test('SIGTERM during a reconcile: it finishes and answers, new connections are refused, then the process exits', async (t) => {
  const port = await freePort();
  const child = spawn(process.execPath, [join(repoRoot, 'functions', 'sdk', 'testdata', 'slow-function.ts')], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await waitFor('the function to listen', async () => output.includes('listening on') || undefined, { timeoutMs: 20_000 });

  const { message } = encodeReconcileEvent(
    { reconciler: 'slow', primary: { apiVersion: 'slow.kfn.test/v1', kind: 'Slow', namespace: 'demo', name: 'a', uid: 'uid-of-a' }, reason: 'updated', observedAt: Date.now() },
    1,
    'kfn://test',
    Date.now() + 30_000,
  );
  const url = `http://127.0.0.1:${port}/`;
  const answer = fetch(url, { method: 'POST', headers: message.headers, body: message.body }).then(async (r) => ({ status: r.status, body: await r.text(), at: Date.now() }));
  await waitFor('the reconcile to start', async () => output.includes('reconcile started') || undefined, { timeoutMs: 10_000 });
  child.kill('SIGTERM');
  const signalledAt = Date.now();
  await waitFor('the function to take the signal', async () => output.includes('taking no new requests') || undefined, { timeoutMs: 5000 });
  await assert.rejects(fetch(url, { method: 'POST', headers: message.headers, body: message.body }), 'a new connection after SIGTERM is refused');

  const { status, body, at } = await answer;
  assert.equal(status, 200, body);
  assert.equal((JSON.parse(body) as { result: string }).result, 'done');
  assert.ok(output.includes('reconcile finished'), 'the reconcile ran to its end');
  assert.equal(await exited, 0);
  assert.ok(at - signalledAt > 1000, `answered ${at - signalledAt} ms after the signal: it waited for the reconcile`);
  assert.match(output, /slow: stopped/);
});
