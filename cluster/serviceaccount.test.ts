import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { connectionFromKubeconfigText } from '../kube/connection.ts';
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

test('kubeconfigForToken keeps the cluster and uses only the token', () => {
  const base = stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:16443', 'certificate-authority-data': 'Q0E=' } }, { name: 'other', cluster: { server: 'https://elsewhere' } }],
    users: [{ name: 'admin', user: { token: 'admin-token' } }],
    contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'admin' } }],
    'current-context': 'ctx',
  });
  const text = kubeconfigForToken(base, 'sa-token');
  const connection = connectionFromKubeconfigText(text, 'sa');
  assert.equal(connection.server, 'https://127.0.0.1:16443');
  assert.doesNotMatch(text, /admin-token|elsewhere/);
  assert.match(text, /certificate-authority-data: Q0E=/);
  assert.match(text, /token: sa-token/);
});
