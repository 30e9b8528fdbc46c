import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { stringify } from 'yaml';
import { connectionFromKubeconfig, inClusterConnection, loadConnection } from './connection.ts';

function kubeconfig(t: TestContext, user: Record<string, unknown>, cluster: Record<string, unknown> = { server: 'https://127.0.0.1:6443/', 'certificate-authority': 'ca.crt' }) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-kc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'ca.crt'), 'CA PEM');
  writeFileSync(join(dir, 'token'), 'from-file\n');
  const path = join(dir, 'config');
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'c',
      contexts: [{ name: 'other', context: { cluster: 'x', user: 'x' } }, { name: 'c', context: { cluster: 'k', user: 'u' } }],
      clusters: [{ name: 'k', cluster }],
      users: [{ name: 'u', user }],
    }),
  );
  return path;
}

test('a token user of the current context, CA read relative to the kubeconfig', (t) => {
  const c = connectionFromKubeconfig(kubeconfig(t, { token: 'abc' }));
  assert.equal(c.server, 'https://127.0.0.1:6443');
  assert.deepEqual(c.headers(), { Authorization: 'Bearer abc' });
});

test('a tokenFile is read (and trimmed); basic auth works too', (t) => {
  assert.deepEqual(connectionFromKubeconfig(kubeconfig(t, { tokenFile: 'token' })).headers(), { Authorization: 'Bearer from-file' });
  assert.deepEqual(connectionFromKubeconfig(kubeconfig(t, { username: 'u', password: 'p' })).headers(), { Authorization: `Basic ${Buffer.from('u:p').toString('base64')}` });
});

test('an exec credential plugin (as EKS, GKE and AKS use) gives the token; a failing plugin is a clear error', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-exec-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const plugin = join(dir, 'plugin.sh');
  // Counts its runs: the credential is cached until it expires, not fetched per request.
  writeFileSync(plugin, `#!/bin/sh\necho run >> ${join(dir, 'runs')}\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-plugin","expirationTimestamp":"2999-01-01T00:00:00Z"}}'\n`, { mode: 0o755 });
  const c = connectionFromKubeconfig(kubeconfig(t, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, interactiveMode: 'Never' } }));
  assert.deepEqual(await c.headers(), { Authorization: 'Bearer from-plugin' });
  assert.deepEqual(await c.headers(), { Authorization: 'Bearer from-plugin' });
  assert.equal(readFileSync(join(dir, 'runs'), 'utf8').trim().split('\n').length, 1, 'one run while the credential is valid');
  const broken = connectionFromKubeconfig(kubeconfig(t, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: join(dir, 'missing-plugin'), interactiveMode: 'Never' } }));
  await assert.rejects(async () => broken.headers(), /kubeconfig .*config: the credential plugin of user u failed: /);
});

test('a kubeconfig in JSON reads as one in YAML, and so does one in YAML flow style, which also starts with a brace', (t) => {
  const path = kubeconfig(t, { token: 'abc' });
  const doc = { apiVersion: 'v1', kind: 'Config', 'current-context': 'c', contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }], clusters: [{ name: 'k', cluster: { server: 'https://127.0.0.1:6443' } }], users: [{ name: 'u', user: { token: 'abc' } }] };
  writeFileSync(path, JSON.stringify(doc));
  assert.deepEqual(connectionFromKubeconfig(path).headers(), { Authorization: 'Bearer abc' });
  writeFileSync(path, stringify(doc, { collectionStyle: 'flow' }));
  assert.match(readFileSync(path, 'utf8'), /^\{\s*apiVersion: v1,/);
  assert.deepEqual(connectionFromKubeconfig(path).headers(), { Authorization: 'Bearer abc' });
});

test('missing files and contexts are clear errors', (t) => {
  assert.throws(() => connectionFromKubeconfig('/nonexistent/kubeconfig'), /cannot read kubeconfig \/nonexistent\/kubeconfig/);
  const path = kubeconfig(t, { token: 'x' }, { 'certificate-authority-data': Buffer.from('CA').toString('base64') });
  assert.throws(() => connectionFromKubeconfig(path), /cluster k has no server/);
});

test('in-cluster configuration needs the ServiceAccount environment', () => {
  const saved = process.env.KUBERNETES_SERVICE_HOST;
  delete process.env.KUBERNETES_SERVICE_HOST;
  try {
    assert.throws(() => inClusterConnection(), /not running in a cluster/);
  } finally {
    if (saved !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved;
  }
});

test('loadConnection prefers the given path, then $KUBECONFIG (kubeconfig.test.ts has every rule)', (t) => {
  const path = kubeconfig(t, { token: 'env' });
  const saved = process.env.KUBECONFIG;
  process.env.KUBECONFIG = `${path}:/other`;
  try {
    assert.deepEqual(loadConnection().headers(), { Authorization: 'Bearer env' });
    assert.equal(loadConnection(path).source, `context "c" in ${path}`);
  } finally {
    if (saved === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = saved;
  }
});
