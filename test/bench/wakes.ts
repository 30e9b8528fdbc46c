// node test/bench/wakes.ts — how often an idle bridge process wakes, without a cluster: the
// bridge as `kfn bridge` assembles it (startBridge: its metrics, health server and Reconcilers),
// with twelve Reconcilers of twelve kinds on a fake apiserver, N objects each, every delivery
// answered at once by a receiver in this process. Once every object has been delivered and the
// bridge has settled, it counts over an idle window of real time:
// - the JavaScript callbacks the event loop ran, by kind (timers by the line that set them,
//   through async_hooks; this script's own are left out);
// - the main thread's voluntary context switches (/proc): every time the loop slept and was
//   woken, including by native timers no JavaScript callback shows (the event-loop monitor).
// There is no Lease (no leader election: a fake apiserver takes no writes) and no bookmarks;
// against a real apiserver the leader adds a renewal every 2 s and each watch a bookmark about
// once a minute.
// Options: --objects N (default 100), --period S (the Reconcilers' resyncPeriodSeconds, default
// 300), --batch (resyncSchedule: batch), --settle S (default 5), --idle S (default 30).
import { createHook } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { parseReconciler } from '../../bridge/config.ts';
import { startBridge } from '../../bridge/main.ts';
import type { KubeApi } from '../../kube/api.ts';
import { FakeApiServer } from '../support/fake-apiserver.ts';

const { values } = parseArgs({
  options: {
    objects: { type: 'string', default: '100' },
    period: { type: 'string', default: '300' },
    batch: { type: 'boolean', default: false },
    settle: { type: 'string', default: '5' },
    idle: { type: 'string', default: '30' },
  },
});
const reconcilers = 12;
const objects = Number(values.objects);
const idleSeconds = Number(values.idle);

/**
 * Where a timer was set: the first frame outside Node and the clock that wraps the platform's
 * timers; else undici inside Node (its timer wheel), or the clock re-arming a timer that fired
 * early.
 */
function origin(stack: string): string {
  const frames = stack.split('\n').slice(1).filter((line) => !line.includes('AsyncHook.init'));
  for (const line of frames) {
    const where = line.match(/\(?((?:file:\/\/)?\/[^()]+|node:[^()]+):\d+:\d+\)?$/)?.[0];
    if (!where || where.includes('node:') || where.includes('/core/clock.ts')) continue;
    const file = where.replace(/^\(|\)$/g, '').replace(/^file:\/\//, '');
    const node = file.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/);
    return node ? node[1]! : file.replace(/^.*?\/(bridge|core|kube|test)\//, '$1/').replace(/:\d+$/, '');
  }
  if (frames.some((line) => line.includes('undici'))) return 'undici inside Node (node:internal/deps/undici)';
  if (frames.some((line) => line.includes('/core/clock.ts'))) return 'core/clock.ts, again: the timer fired early';
  return '(unknown)';
}

// Each timer's origin, taken when it is made; every run of a callback counted by kind (promise
// reactions and next-tick callbacks are not wakes: they run within one).
const timerOrigin = new Map<number, string>();
const typeOf = new Map<number, string>();
const notWakes = new Set(['PROMISE', 'TickObject', 'Microtask']);
Error.stackTraceLimit = 40;
const counting = { on: false, byKind: new Map<string, number>() };
const count = (what: string) => counting.byKind.set(what, (counting.byKind.get(what) ?? 0) + 1);
createHook({
  init(id, type) {
    typeOf.set(id, type);
    if (type === 'Timeout') timerOrigin.set(id, origin(new Error().stack ?? ''));
  },
  before(id) {
    if (!counting.on) return;
    const timer = timerOrigin.get(id);
    const type = typeOf.get(id) ?? '(unknown)';
    if (timer === undefined) return notWakes.has(type) ? undefined : count(type);
    if (!timer.startsWith('test/bench/wakes.ts')) count(`timer ${timer}`);
  },
  destroy(id) {
    timerOrigin.delete(id);
    typeOf.delete(id);
  },
}).enable();

const contextSwitches = () => Number(readFileSync(`/proc/self/task/${process.pid}/status`, 'utf8').match(/^voluntary_ctxt_switches:\s+(\d+)/m)?.[1] ?? NaN);

// Twelve kinds, each on a fake apiserver of its own, behind one API client.
const servers = Array.from({ length: reconcilers }, (_, i) => new FakeApiServer({ kind: `Widget${i}`, plural: `widgets${i}` }));
const apis = servers.map((s) => s.api());
const serverOf = (path: string) => Number(path.match(/\/widgets(\d+)(?:\/|$)/)?.[1]);
const api = {
  connection: { reset() {}, server: 'https://fake', headers: () => ({}) },
  resource: (apiVersion: string, kind: string) => apis[Number(kind.replace('Widget', ''))]!.resource(apiVersion, kind),
  request: (...args: Parameters<KubeApi['request']>) => {
    const i = serverOf(args[1]);
    return Number.isNaN(i) ? Promise.reject(new Error(`${args[0]} ${args[1]}: not served by the fake`)) : apis[i]!.request(...args);
  },
  stream: (...args: Parameters<KubeApi['stream']>) => apis[serverOf(args[0])]!.stream(...args),
} as unknown as KubeApi;
for (const server of servers) for (let o = 0; o < objects; o++) server.put(`obj-${o}`, { generation: 1 });

let delivered = 0;
const receiver = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    delivered++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const sink = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`;

const configs = servers.map((s, i) =>
  parseReconciler({
    metadata: { name: `reconciler-${i}` },
    spec: { for: { apiVersion: 'example.com/v1', kind: s.resource.kind }, sink: { uri: sink }, resyncPeriodSeconds: Number(values.period), ...(values.batch ? { resyncSchedule: 'batch' } : {}) },
  }),
);
const quiet = { info() {}, warn() {}, error() {} };
const bridge = await startBridge({ api, reconcilers: configs, logger: quiet, metricsAddr: '127.0.0.1:0' });

// Settled: every object delivered once, then nothing but resyncs for the settling time.
const t0 = Date.now();
while (delivered < reconcilers * objects) {
  if (Date.now() - t0 > 60_000) throw new Error(`only ${delivered} of ${reconcilers * objects} objects delivered in 60 s`);
  await sleep(100);
}
await sleep(Number(values.settle) * 1000);

const deliveredBefore = delivered;
const switchesBefore = contextSwitches();
const cpuBefore = process.cpuUsage();
counting.on = true;
await sleep(idleSeconds * 1000);
counting.on = false;
const switches = contextSwitches() - switchesBefore;
const cpu = process.cpuUsage(cpuBefore);
const deliveries = delivered - deliveredBefore;

const perSecond = (n: number) => (n / idleSeconds).toFixed(2).padStart(7);
console.log(`${reconcilers} Reconcilers × ${objects} objects, resync every ${values.period} s${values.batch ? ' (batch)' : ''}; ${idleSeconds} s idle, Node ${process.version}`);
console.log(`  main thread woken (voluntary context switches)  ${perSecond(switches)} /s`);
console.log(`  deliveries (resyncs)                            ${perSecond(deliveries)} /s`);
console.log(`  CPU                                             ${(((cpu.user + cpu.system) / 1000 / idleSeconds) * 60 / 1000).toFixed(3).padStart(7)} s a minute`);
console.log('  callbacks run:');
for (const [what, n] of [...counting.byKind].sort((a, b) => b[1] - a[1])) console.log(`    ${perSecond(n)} /s  ${what}`);

await bridge.stop();
receiver.closeAllConnections();
receiver.close();
process.exit(0);
