import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { authenticate, authenticationProblem } from '../../core/authentication.ts';
import { encodeReconcileEvent } from '../../core/event.ts';
import { keyFileCredentials } from './keys.ts';

test('a rotated key file is taken without a restart, and the previous key is accepted for a grace period', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-keys-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'secret');
  writeFileSync(file, 'first');
  let now = 0;
  const credentials = keyFileCredentials(file, { now: () => now, checkEveryMs: 1000, previousForMs: 60_000 });
  const { message } = encodeReconcileEvent({ reconciler: 'r', primary: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'a', name: 'b' }, reason: 'updated', observedAt: 0 }, 1, 'kfn://test');
  const signedWith = (secret: string) => authenticate(message, { kind: 'hmac', secret });
  const refuses = (secret: string) => authenticationProblem(signedWith(secret).headers, signedWith(secret).body, credentials());
  assert.equal(refuses('first'), undefined);
  assert.match(String(refuses('second')), /bad signature/);

  // The kubelet swaps the file (a new file renamed into place); the function sees it within a second.
  writeFileSync(join(dir, 'next'), 'second');
  renameSync(join(dir, 'next'), file);
  now = 500;
  assert.match(String(refuses('second')), /bad signature/, 'not read again within the second');
  now = 1500;
  assert.equal(refuses('second'), undefined, 'the new key');
  assert.equal(refuses('first'), undefined, 'the previous key, while the rotation settles');
  now = 1500 + 60_001;
  assert.match(String(refuses('first')), /bad signature/, 'the previous key, once the grace has passed');
  assert.equal(refuses('second'), undefined);

  rmSync(file);
  now += 2000;
  assert.equal(refuses('second'), undefined, 'a file briefly missing keeps the key in use');
});

test('an unreadable key file at start is an error that names it', () => {
  assert.throws(() => keyFileCredentials('/nonexistent/kfn/secret'), /cannot read the auth key from \/nonexistent\/kfn\/secret \(KFN_AUTH_SECRET_FILE\)/);
});
