// Bridges in tests: in this process (bridgeFixture) or as separate processes that can be
// killed (spawnBridge), each with its own Widget CRD, namespace and receiver (widgetSetup).
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { parse, stringify } from 'yaml';
import type { Credentials } from '../../core/authentication.ts';
import { startBridge, type BridgeProcessOptions, type RunningBridge } from '../../bridge/main.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { authForAnnotation } from '../../core/names.ts';
import { installCrd, testNamespace, uniqueName, type TestCluster, kubeApi } from './cluster.ts';
import { startReceiver, type Receiver } from './receiver.ts';

export interface WidgetSetup {
  ns: string;
  group: string;
  apiVersion: string;
  receiver: Receiver;
  dir: string;
  /** The bridge configuration file (one Reconciler, `widgets`, for Widgets in `ns`). */
  configFile: string;
  custom: CustomObjectsApi;
  createWidget(name: string, spec?: Record<string, unknown>, labels?: Record<string, string>): Promise<{ metadata: { uid: string; name: string } }>;
  patchWidget(name: string, patch: Record<string, unknown>, subresource?: 'status'): Promise<void>;
  deleteWidget(name: string): Promise<void>;
}

export interface BridgeFixture extends WidgetSetup {
  running: RunningBridge;
}

export interface FixtureOptions {
  /** Extra Reconciler spec fields (owns, watches, resyncPeriodSeconds, …). */
  spec?: Record<string, unknown>;
  bridge?: Partial<BridgeProcessOptions>;
  auth?: 'hmac' | 'none';
}

/**
 * Everything a bridge test needs but the bridge: a namespace, a Widget CRD of its own (so
 * tests never see each other's objects), a signing Secret, a receiver standing in for the
 * function, and a configuration file naming them.
 */
export async function widgetSetup(t: TestContext, cluster: TestCluster, options: FixtureOptions = {}): Promise<WidgetSetup> {
  const ns = await testNamespace(t, cluster);
  const group = `${uniqueName('bridge')}.kfn.test`;
  const apiVersion = `${group}/v1`;
  await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
  const secret = uniqueName('key');
  const credentials: Credentials = options.auth === 'none' ? { kind: 'none' } : { kind: 'hmac', secret };
  const auth = options.auth === 'none' ? {} : { auth: { secretRef: { name: 'widget-fn', namespace: ns } } };
  if (options.auth !== 'none') await cluster.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'widget-fn', annotations: { [authForAnnotation]: 'widgets' } }, stringData: { secret } } });
  const receiver = await startReceiver(t, credentials);
  const dir = mkdtempSync(join(tmpdir(), 'kfn-bridge-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const reconciler = {
    apiVersion: 'kfn.dev/v1alpha1',
    kind: 'Reconciler',
    metadata: { name: 'widgets' },
    // No resync unless a test asks: its first round falls anywhere in the period, and would be
    // one more delivery, Event or retry count in a test that counts them.
    spec: { for: { apiVersion, kind: 'Widget' }, sink: { uri: receiver.url }, namespaces: [ns], resyncPeriodSeconds: 0, ...auth, ...options.spec },
  };
  const configFile = join(dir, 'bridge.yaml');
  writeFileSync(configFile, stringify(reconciler));
  const custom = cluster.kc.makeApiClient(CustomObjectsApi);
  const api = kubeApi(cluster.kc);
  const ref = { group, version: 'v1', namespace: ns, plural: 'widgets' };
  return {
    ns,
    group,
    apiVersion,
    receiver,
    dir,
    configFile,
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

/** A bridge configuration file per bridge process, `who`, whose sink is the receiver's path `/<who>`: deliveries say who sent them. */
export function perBridgeConfig(f: WidgetSetup): (who: string) => string {
  const config = parse(readFileSync(f.configFile, 'utf8')) as { spec: { sink: { uri: string } } };
  return (who) => {
    const file = join(f.dir, `bridge-${who}.yaml`);
    writeFileSync(file, stringify({ ...config, spec: { ...config.spec, sink: { uri: `${f.receiver.url}${who}` } } }));
    return file;
  };
}

/** widgetSetup plus a bridge running in this process (metrics on a free port, a journal). */
export async function bridgeFixture(t: TestContext, cluster: TestCluster, options: FixtureOptions = {}): Promise<BridgeFixture> {
  const setup = await widgetSetup(t, cluster, options);
  const running = await startBridge({
    kubeconfig: cluster.paths.kubeconfig,
    configFile: setup.configFile,
    metricsAddr: '127.0.0.1:0',
    journal: join(setup.dir, 'journal.jsonl'),
    logLevel: 'warn',
    shutdownTimeoutMs: 5000,
    ...options.bridge,
  });
  t.after(() => running.stop());
  return { ...setup, running };
}

export interface BridgeProcess {
  pid: number;
  metricsUrl: string;
  log: string;
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): void;
  /** 1 when this process holds the lease, 0 when standing by, undefined when not answering. */
  leaderStatus(): Promise<number | undefined>;
}

/** A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon after). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The last `n` lines of a bridge's log: what a wait that timed out shows. */
export function logTail(b: Pick<BridgeProcess, 'log'>, n = 20): string {
  return readFileSync(b.log, 'utf8').trimEnd().split('\n').slice(-n).join('\n');
}

/**
 * Runs `kfn bridge` as its own process (so a test can SIGKILL it), logging to a file in `dir`.
 * It is killed when the test ends, if still running.
 */
export async function spawnBridge(t: TestContext, dir: string, name: string, args: string[], env?: Record<string, string>, nodeOptions: string[] = []): Promise<BridgeProcess> {
  const port = await freePort();
  const log = join(dir, `${name}.log`);
  const fd = openSync(log, 'a');
  const child = spawn(process.execPath, [...nodeOptions, join(repoRoot, 'cli', 'kfn.ts'), 'bridge', `--metrics-addr=127.0.0.1:${port}`, ...args], { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const metricsUrl = `http://127.0.0.1:${port}/metrics`;
  return {
    pid: child.pid!,
    metricsUrl,
    log,
    exited,
    kill: (signal = 'SIGKILL') => void child.kill(signal),
    async leaderStatus() {
      try {
        const text = await fetch(metricsUrl, { signal: AbortSignal.timeout(1000) }).then((r) => r.text());
        const m = text.match(/^leader_election_master_status\{[^}]*\} (\d)/m);
        return m ? Number(m[1]) : undefined;
      } catch {
        return undefined;
      }
    },
  };
}
