// The discovery lag: the apiserver lists a CRD's kind in discovery a moment after the CRD is
// Established. A bridge running before the CRD exists starts its Reconciler once the kind is
// served and delivers an object created at once, promptly; an apply made right after installCrd
// (Established, then served) goes through.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { startBridge } from '../../bridge/main.ts';
import { retrySeconds } from '../../bridge/reconcilers.ts';
import { waitFor } from '../../core/clock.ts';
import { applyYaml, installCrd, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { startReceiver } from '../support/receiver.ts';

test('a CRD installed while the bridge runs: an apply right after it is Established succeeds, and the object is delivered promptly', async (t) => {
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, 'discovery');
  const receiver = await startReceiver(t, { kind: 'none' });
  const group = `${uniqueName('discovery')}.kfn.test`;
  const apiVersion = `${group}/v1`;
  const dir = mkdtempSync(join(tmpdir(), 'kfn-discovery-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // A Reconciler from a file: no identity needed, and it is retried until its kind is served.
  const configFile = join(dir, 'bridge.yaml');
  writeFileSync(configFile, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: 'discovery' }, spec: { for: { apiVersion, kind: 'Widget' }, sink: { uri: receiver.url }, namespaces: [ns] } }));
  const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, configFile, metricsAddr: '127.0.0.1:0', logLevel: 'fatal', shutdownTimeoutMs: 5000 });
  t.after(() => running.stop());
  assert.equal(running.bridge.reconcilers().length, 0, 'not started: the kind is not served yet');

  await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  // At once, through discovery as kubectl would: refused as "not served" before installCrd waited for it.
  const created = Date.now();
  await applyYaml(cluster.kc, stringify({ apiVersion, kind: 'Widget', metadata: { name: 'at-once' }, spec: { size: 1 } }), ns);

  // The bridge tries Reconcilers whose kind is not served every retrySeconds, and its first
  // watch of the kind waits out the discovery lag: one retry, a list, a delivery.
  const promptMs = retrySeconds * 1000 + 5_000;
  const delivery = await waitFor('the delivery of the object created as its CRD became Established', async () => receiver.of('at-once')[0], { timeoutMs: promptMs + 20_000 });
  const took = delivery.receivedAt - created;
  assert.ok(took <= promptMs, `delivered ${took} ms after the object was created, within a retry (${promptMs} ms)`);
  assert.equal(running.bridge.reconcilers().length, 1, 'the Reconciler started once its kind was served');
});
