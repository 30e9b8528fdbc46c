// A registry of a test's own on 127.0.0.1 (CNCF Distribution, as kfn builds it), asking for a
// user and password, with no cluster: removed with the test.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { ensureRegistryBinaries } from '../../cluster/registry.ts';
import { waitFor } from '../../core/clock.ts';
import { freePort } from './bridge.ts';

/** Starts it; answers its host:port, and the htpasswd line it checks the password with. */
export async function loopbackRegistry(t: TestContext, credentials: { username: string; password: string }): Promise<{ host: string; htpasswd: string }> {
  const bin = await ensureRegistryBinaries({ log: (line) => t.diagnostic(line) });
  const dir = mkdtempSync(join(tmpdir(), 'kfn-registry-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'data'));
  const line = spawnSync(bin.htpasswd, [credentials.username], { input: `${credentials.password}\n`, encoding: 'utf8' });
  assert.equal(line.status, 0, line.stderr);
  writeFileSync(join(dir, 'htpasswd'), line.stdout);
  const port = await freePort();
  writeFileSync(join(dir, 'config.yml'), `version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: ${join(dir, 'data')}}}\nhttp: {addr: 127.0.0.1:${port}, secret: test}\nauth: {htpasswd: {realm: test, path: ${join(dir, 'htpasswd')}}}\n`);
  const registry = spawn(bin.registry, ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  t.after(() => registry.kill());
  await waitFor('the registry to answer', async () => ((await fetch(`http://127.0.0.1:${port}/v2/`).catch(() => undefined))?.status === 401 ? true : undefined));
  return { host: `127.0.0.1:${port}`, htpasswd: line.stdout };
}
