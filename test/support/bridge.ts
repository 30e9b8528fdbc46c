// Starting a bridge in a test: a Widget CRD of its own (so tests never see each other's
// objects), a signing Secret, a receiver standing in for the function, and the bridge itself
// (in-process, configured from a file, metrics on a free port).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { KubeApi } from '../../bridge/kubeapi.ts';
import { stringify } from 'yaml';
import type { Credentials } from '../../bridge/contract.ts';
import { startBridge, type BridgeProcessOptions, type RunningBridge } from '../../bridge/main.ts';
import { installCrd, testNamespace, uniqueName, type TestCluster } from './cluster.ts';
import { startReceiver, type Receiver } from './receiver.ts';

export interface BridgeFixture {
  ns: string;
  group: string;
  apiVersion: string;
  receiver: Receiver;
  running: RunningBridge;
  dir: string;
  custom: CustomObjectsApi;
  createWidget(name: string, spec?: Record<string, unknown>, labels?: Record<string, string>): Promise<{ metadata: { uid: string; name: string } }>;
  patchWidget(name: string, patch: Record<string, unknown>, subresource?: 'status'): Promise<void>;
  deleteWidget(name: string): Promise<void>;
}

export interface FixtureOptions {
  /** Extra Reconciler spec fields (owns, watches, resyncPeriodSeconds, …). */
  spec?: Record<string, unknown>;
  bridge?: Partial<BridgeProcessOptions>;
  auth?: 'hmac' | 'none';
}

export async function bridgeFixture(t: TestContext, cluster: TestCluster, options: FixtureOptions = {}): Promise<BridgeFixture> {
  const ns = await testNamespace(t, cluster);
  const group = `${uniqueName('bridge')}.kfn.test`;
  const apiVersion = `${group}/v1`;
  await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  const secret = uniqueName('key');
  const credentials: Credentials = options.auth === 'none' ? { kind: 'none' } : { kind: 'hmac', secret };
  const auth = options.auth === 'none' ? {} : { auth: { secretRef: { name: 'widget-fn', namespace: ns } } };
  if (options.auth !== 'none') await cluster.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'widget-fn' }, stringData: { secret } } });
  const receiver = await startReceiver(t, credentials);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-bridge-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const reconciler = {
    apiVersion: 'kfn.dev/v1alpha1',
    kind: 'Reconciler',
    metadata: { name: 'widgets' },
    spec: { for: { apiVersion, kind: 'Widget' }, sink: { uri: receiver.url }, namespaces: [ns], ...auth, ...options.spec },
  };
  writeFileSync(join(dir, 'bridge.yaml'), stringify(reconciler));
  const running = await startBridge({
    kubeconfig: cluster.paths.kubeconfig,
    configFile: join(dir, 'bridge.yaml'),
    metricsAddr: '127.0.0.1:0',
    journal: join(dir, 'journal.jsonl'),
    logLevel: 'warn',
    shutdownTimeoutMs: 5000,
    ...options.bridge,
  });
  t.after(() => running.stop());
  const custom = cluster.kc.makeApiClient(CustomObjectsApi);
  const api = new KubeApi(cluster.kc);
  const ref = { group, version: 'v1', namespace: ns, plural: 'widgets' };
  return {
    ns,
    group,
    apiVersion,
    receiver,
    running,
    dir,
    custom,
    createWidget: (name, spec = { size: 1 }, labels) =>
      custom.createNamespacedCustomObject({ ...ref, body: { apiVersion, kind: 'Widget', metadata: { name, labels }, spec } }) as Promise<{ metadata: { uid: string; name: string } }>,
    async patchWidget(name, patch, subresource) {
      const path = `/apis/${apiVersion}/namespaces/${ns}/widgets/${name}${subresource ? `/${subresource}` : ''}`;
      await api.request('PATCH', path, { body: patch, contentType: 'application/merge-patch+json' });
    },
    async deleteWidget(name) {
      await custom.deleteNamespacedCustomObject({ ...ref, name });
    },
  };
}
