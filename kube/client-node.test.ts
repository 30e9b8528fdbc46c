// @kubernetes/client-node is optional: imported by name when a kubeconfig needs it, and when it
// is not installed, one message that says what needs it and the command that installs it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ClientNodeMissing, importClientNode } from './client-node.ts';

test('installed (here, as kfn\'s devDependency), it is imported on first use', async () => {
  const { KubeConfig } = await importClientNode('the user "eks" of ~/.kube/config has an exec plugin');
  assert.equal(typeof KubeConfig, 'function');
});

test('not installed, the error says what needs it and how to install it', async () => {
  const missing = Object.assign(new Error("Cannot find package '@kubernetes/client-node' imported from /p/node_modules/kfn/lib/kube/client-node.js"), { code: 'ERR_MODULE_NOT_FOUND' });
  await assert.rejects(importClientNode('the user "eks" of ~/.kube/config has an exec plugin (aws)', () => Promise.reject(missing)), (err) => {
    assert.ok(err instanceof ClientNodeMissing);
    assert.equal(err.message, 'the user "eks" of ~/.kube/config has an exec plugin (aws), which kfn runs through @kubernetes/client-node; it is not installed here. Install it in your project (npm install --save-dev @kubernetes/client-node) and run kfn again.');
    return true;
  });
  // Anything else it meets loading (a package of its own missing) is said as it is.
  const other = Object.assign(new Error("Cannot find package 'ws' imported from …/client-node/dist/index.js"), { code: 'ERR_MODULE_NOT_FOUND' });
  await assert.rejects(importClientNode('why', () => Promise.reject(other)), (err) => err === other);
});
