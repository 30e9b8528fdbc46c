// npm run bench:idle — what the bridge does when nothing changes, on the real local cluster: the
// twelve examples' Reconcilers in the cluster (with their identities and rights, as `kfn deploy`
// writes them) and their samples, served by two bridge processes with leader election (a leader and a standby,
// as the Deployment runs them with replicas: 2), each delivery answered at once by a local receiver. Once every
// sample has been delivered and the bridges have settled, each bridge's CPU over an idle minute
// (from /proc) and where the leader's went (a CPU profile through its inspector).
// Options: --settle S (default 120), --idle S (default 60), --node-options="…", --from-source.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { bridgeNodeOptionsAt } from '../../bridge/main.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { parseReconcileRequest } from '../../core/event.ts';
import { applyObject } from '../../kube/api.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { functionDirs, loadFunction } from '../../cli/functions.ts';
import { freePort } from '../support/bridge.ts';
import { applyYaml, installReconcilerCrd, kubeApi, testCluster, uniqueName } from '../support/cluster.ts';
import { bridgeMemoryLimitMiB, inspector, kfnEntry, profilePlaces, rssMiB, spawnBridge, type CpuProfile } from './common.ts';

const { values } = parseArgs({
  options: {
    settle: { type: 'string', default: '120' },
    idle: { type: 'string', default: '60' },
    'node-options': { type: 'string', default: bridgeNodeOptionsAt(bridgeMemoryLimitMiB()) },
    'from-source': { type: 'boolean', default: false },
  },
});
const say = (line: string) => console.log(line);

const entry = kfnEntry(values['from-source']);

const cluster = await testCluster();
const api = kubeApi(cluster.kc);
const ns = uniqueName('kfn-bench-idle');
const dir = mkdtempSync(join(tmpdir(), 'kfn-bench-'));
const delivered = new Set<string>();
let deliveries = 0;
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => (body += c));
  req.on('end', () => {
    const r = parseReconcileRequest(req.headers, body, { kind: 'none' });
    deliveries++;
    delivered.add(`${r.data.reconciler}/${r.data.primary.name}`);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const sink = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
const bridges: (ChildProcess & { logFile: string; metrics: string })[] = [];
const reconcilers: { metadata: { name: string }; spec: Record<string, unknown> }[] = [];

/** CPU seconds (user + system) a process has used, from /proc/<pid>/stat. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

try {
  await installReconcilerCrd(cluster);
  await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: ns } } });
  let samples = 0;
  for (const fnDir of functionDirs(join(repoRoot, 'functions'))) {
    const reconciler = await loadFunction(fnDir);
    const objects = functionManifests(reconciler, { namespace: ns, sinkUri: `${sink}${reconciler.name}`, namespaces: [ns] });
    // Everything as deployed, the Reconciler last and without the auth its receiver does not check.
    const r = objects.find((o) => o.kind === 'Reconciler') as { metadata: { name: string }; spec: Record<string, unknown> };
    delete r.spec.auth;
    for (const o of [...objects.filter((o) => o.kind !== 'Reconciler'), r]) await applyObject(api, o as never, 'kfn-bench');
    reconcilers.push(r);
    samples += (await applyYaml(cluster.kc, readFileSync(join(fnDir, 'samples.yaml'), 'utf8'), ns)).length;
  }
  say(`${reconcilers.length} Reconcilers, ${samples} samples in ${ns}; two bridges (leader election): node ${values['node-options']}`);
  for (const name of ['a', 'b']) {
    const logFile = join(dir, `bridge-${name}.log`);
    const port = await freePort();
    const child = spawnBridge(entry, `${values['node-options']} --inspect=127.0.0.1:0`, [`--kubeconfig=${cluster.paths.kubeconfig}`, '--leader-elect', `--lease-namespace=${ns}`, '--lease-name=idle', `--metrics-addr=127.0.0.1:${port}`, '--log-level=warn'], logFile);
    bridges.push(Object.assign(child, { logFile, metrics: `http://127.0.0.1:${port}/metrics` }));
    await sleep(1000);
  }
  const deadline = Date.now() + 300_000;
  while (delivered.size < samples) {
    if (Date.now() > deadline) throw new Error(`only ${delivered.size} of ${samples} samples were delivered in 300 s`);
    await sleep(500);
  }
  say(`every sample delivered; settling ${values.settle} s`);
  await sleep(Number(values.settle) * 1000);
  const leads = await Promise.all(bridges.map((b) => fetch(b.metrics).then((r) => r.text()).then((t) => /^leader_election_master_status\{[^}]*\} 1/m.test(t), () => false)));
  const leader = bridges[leads.indexOf(true)];
  if (!leader) throw new Error('neither bridge leads');
  // The CPU over an idle period first, with no profiler attached (its sampling costs CPU itself);
  // then where the leader's goes, over a second period.
  const before = bridges.map((b) => cpuSeconds(b.pid!));
  const deliveredBefore = deliveries;
  const idleS = Number(values.idle);
  await sleep(idleS * 1000);
  const used = bridges.map((b, i) => cpuSeconds(b.pid!) - before[i]!);
  const deliveredIdle = deliveries - deliveredBefore;
  const profiler = await inspector(leader.logFile);
  await profiler.call('Profiler.enable');
  await profiler.call('Profiler.setSamplingInterval', { interval: 1000 });
  await profiler.call('Profiler.start');
  await sleep(idleS * 1000);
  const { profile } = await profiler.call<{ profile: CpuProfile }>('Profiler.stop');
  profiler.close();
  const perMinute = (s: number) => (s * 60) / idleS;
  say('');
  say(`Idle bridges over ${idleS} s (${deliveredIdle} deliveries: resyncs)`);
  for (const [i, b] of bridges.entries()) say(`  ${b === leader ? 'leader ' : 'standby'}  CPU ${perMinute(used[i]!).toFixed(2)} s per idle minute, RSS ${rssMiB(b.pid!).toFixed(0)} MiB`);
  const { busyMs, places } = profilePlaces(profile, repoRoot);
  say(`  leader's profile: ${busyMs.toFixed(0)} ms busy; where it went (self time):`);
  for (const p of places.slice(0, 15)) say(`    ${p.ms.toFixed(0).padStart(6)} ms  ${p.where}`);
} finally {
  for (const b of bridges) b.kill('SIGTERM');
  server.close();
  for (const r of reconcilers) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${r.metadata.name}`).catch(() => undefined);
  await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
  if (process.env.KFN_BENCH_KEEP) say(`files kept in ${dir}: ${readdirSync(dir).join(', ')}`);
  else rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
