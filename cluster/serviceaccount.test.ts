import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { kubeConfigForToken, parseServiceAccountRef } from './serviceaccount.ts';

test('parseServiceAccountRef accepts namespace/name and a bare name in default', () => {
  assert.deepEqual(parseServiceAccountRef('kfn-system/bridge'), { namespace: 'kfn-system', name: 'bridge' });
  assert.deepEqual(parseServiceAccountRef('builder'), { namespace: 'default', name: 'builder' });
});

test('parseServiceAccountRef rejects what is not a reference, saying how to write one', () => {
  for (const bad of ['', 'a/b/c', 'Upper/case', 'ns/', '/name', 'ns/under_score']) {
    assert.throws(() => parseServiceAccountRef(bad), /write it as <namespace>\/<name>/, bad);
  }
});

test('kubeConfigForToken keeps the cluster and uses only the token', () => {
  const base = new KubeConfig();
  base.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:16443', caData: 'Q0E=' }],
    users: [{ name: 'admin', token: 'admin-token' }],
    contexts: [{ name: 'ctx', cluster: 'c', user: 'admin' }],
    currentContext: 'ctx',
  });
  const kc = kubeConfigForToken(base, 'sa-token');
  assert.equal(kc.getCurrentCluster()?.server, 'https://127.0.0.1:16443');
  assert.equal(kc.getCurrentCluster()?.caData, 'Q0E=');
  assert.equal(kc.getCurrentUser()?.token, 'sa-token');
  assert.equal(kc.getUsers().length, 1);
});
