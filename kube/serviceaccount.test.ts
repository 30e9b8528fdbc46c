import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { connectionFromKubeconfigText } from './kubeconfig.ts';
import { kubeconfigForToken, parseServiceAccountRef } from './serviceaccount.ts';

test('parseServiceAccountRef accepts namespace/name and a bare name in default', () => {
  assert.deepEqual(parseServiceAccountRef('kfn-system/bridge'), { namespace: 'kfn-system', name: 'bridge' });
  assert.deepEqual(parseServiceAccountRef('builder'), { namespace: 'default', name: 'builder' });
});

test('parseServiceAccountRef rejects what is not a reference, saying how to write one', () => {
  for (const bad of ['', 'a/b/c', 'Upper/case', 'ns/', '/name', 'ns/under_score']) {
    assert.throws(() => parseServiceAccountRef(bad), /write it as <namespace>\/<name>/, bad);
  }
});

test('kubeconfigForToken keeps the cluster (its CA inline, even from a file the base names) and uses only the token', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-sa-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'ca.crt'), 'CA FROM A FILE');
  const base = (cluster: Record<string, unknown>) => {
    const path = join(dir, 'admin.kubeconfig');
    writeFileSync(path, stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:16443', ...cluster } }, { name: 'other', cluster: { server: 'https://elsewhere' } }],
      users: [{ name: 'admin', user: { token: 'admin-token' } }],
      contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'admin' } }],
      'current-context': 'ctx',
    }));
    return path;
  };
  const text = kubeconfigForToken(base({ 'certificate-authority-data': 'Q0E=' }), 'sa-token');
  assert.equal(connectionFromKubeconfigText(text, 'sa').server, 'https://127.0.0.1:16443');
  assert.doesNotMatch(text, /admin-token|elsewhere/);
  // JSON (which is YAML too): a Lambda reads it from $KFN_KUBECONFIG on its first invocation, and
  // kfn dev's functions on their first reconcile, without the YAML parser's first-call cost.
  assert.equal(text.trimEnd().includes('\n'), false, 'on one line: the shortest form, for an environment variable');
  const doc = JSON.parse(text) as { clusters: { cluster: Record<string, unknown> }[]; users: { user: Record<string, unknown> }[] };
  assert.equal(doc.clusters[0]!.cluster['certificate-authority-data'], 'Q0E=');
  assert.deepEqual(doc.users[0]!.user, { token: 'sa-token' });
  const fromFile = JSON.parse(kubeconfigForToken(base({ 'certificate-authority': 'ca.crt' }), 'sa-token')) as typeof doc;
  assert.equal(fromFile.clusters[0]!.cluster['certificate-authority-data'], Buffer.from('CA FROM A FILE').toString('base64'), 'a CA file relative to the base kubeconfig, read and put inline');
});
