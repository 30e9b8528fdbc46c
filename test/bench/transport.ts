// npm run bench:transport — what the hop between the bridge and a function costs in CPU, over
// HTTP/1.1 with keep-alive (what kfn speaks) and over HTTP/2 without TLS (h2c, prior knowledge, as
// Knative's activator speaks to a pod whose port is named h2c), without a cluster:
//
//   bridge side    a process with the bridge's V8 flags sending reconcile events with the
//                  bridge's own delivery code (sendReconcileEvent: the HMAC signature, undici's
//                  request, the answer read and checked), one undici Agent per protocol;
//   function side  a process with the function images' V8 flags serving them with the SDK's
//                  request listener (as its serve does: functions/sdk/listener.ts), or with
//                  `--function-server hono` through Hono's Node adapter (as it did before), on
//                  node:http or node:http2, each event read, verified and decoded by the SDK's
//                  own parseReconcileRequest and answered "done" with its children's hashes.
//
// The event is a contract-2 event of the size the bridge sends for a MyWeb (the MyWeb and its
// three children, projected). Each round sends N events with C in flight and reads each
// process's CPU (user + system, /proc) from the first to the last; rounds alternate protocols,
// so a machine that grows busier costs both alike. The figure is each side's CPU per delivery
// and h2c's ratio to HTTP/1.1 in the same run.
//
//   npm run bench:transport -- [--deliveries 5000] [--concurrency 1,8] [--rounds 2]
//                              [--bridge-node-options="…"] [--function-node-options="…"]
//                              [--function-server sdk|hono]
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer as createHttp1Server } from 'node:http';
import { createServer as createH2cServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { Agent, H2CClient } from 'undici';
import { bridgeNodeOptionsAt } from '../../bridge/main.ts';
import { sendReconcileEvent } from '../../bridge/delivery.ts';
import { functionNodeFlags } from '../../cli/artifacts/oci-image.ts';
import type { Credentials } from '../../core/authentication.ts';
import { encodeReconcileEvent, parseReconcileRequest, type ObservedObject, type ObservedState } from '../../core/event.ts';
import { bridgeMemoryLimitMiB, processCpuMs } from './common.ts';
import { setDirectRoutes, type DirectRoute } from '../../functions/sdk/app.ts';
import { requestListener, type RequestListener } from '../../functions/sdk/listener.ts';

/** How the function side serves: the SDK's request listener, or Hono's Node adapter. */
export type FunctionServer = 'sdk' | 'hono';

export type Protocol = 'http1' | 'h2c';
export const protocols: readonly Protocol[] = ['http1', 'h2c'];

/** One round: N deliveries with C in flight over one protocol, each side's CPU per delivery (ms). */
export interface TransportRound {
  protocol: Protocol;
  concurrency: number;
  deliveries: number;
  seconds: number;
  bridgeMs: number;
  functionMs: number;
}

const secret = 'bench-transport';
const credentials: Credentials = { kind: 'hmac', secret };

/** A MyWeb and its three children as a contract-2 event carries them (their fields as MyWeb projects them). */
function observedMyWeb(i: number): ObservedState {
  const meta = (kind: string, name: string): ObservedObject['metadata'] => ({ name, namespace: 'bench', uid: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, resourceVersion: String(100_000 + i), generation: 1, labels: { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/owner-uid': `u-${i}` }, annotations: { 'kfn.dev/applied-hash': `${kind}-${i}`.padEnd(64, '0') } });
  const primary: ObservedObject = { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: meta('MyWeb', `web-${i}`), spec: { image: 'nginx:1.27', replicas: 2, port: 30000 + (i % 2000), page: `<h1>page ${i}</h1>`.repeat(4) }, status: { conditions: [{ type: 'Ready', status: 'True', reason: 'Reconciled', observedGeneration: 1, lastTransitionTime: '2026-11-28T00:00:00Z' }] } };
  const children: ObservedObject[] = [
    { apiVersion: 'apps/v1', kind: 'Deployment', metadata: meta('Deployment', `web-${i}`), status: { replicas: 2, readyReplicas: 2, updatedReplicas: 2, availableReplicas: 2, observedGeneration: 1, conditions: [{ type: 'Available', status: 'True' }, { type: 'Progressing', status: 'True' }] } },
    { apiVersion: 'v1', kind: 'Service', metadata: meta('Service', `web-${i}`), spec: { type: 'NodePort', ports: [{ port: 80, targetPort: 80, nodePort: 30000 + (i % 2000) }] } },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('ConfigMap', `web-${i}-page`) },
  ];
  return { primary, kinds: children.map((c) => ({ apiVersion: c.apiVersion, kind: c.kind, resourceVersion: String(100_000 + i), fields: [] })), children };
}

/** The function's answer to an event: done, with its children's hashes. */
function answerEvent(headers: Record<string, string | string[] | undefined>, body: string) {
  const received = parseReconcileRequest(headers, body, credentials);
  const children = (received.data.observed?.children ?? []).map((child) => ({ ref: { apiVersion: child.apiVersion, kind: child.kind, name: child.metadata.name, namespace: child.metadata.namespace }, hash: (child.metadata.annotations as Record<string, string> | undefined)?.['kfn.dev/applied-hash'] ?? 'h' }));
  return { result: 'done', changes: [], children };
}

/** The function side: serves reconcile events over `protocol` on 127.0.0.1, says its port on stdout. */
function serveEvents(protocol: Protocol, how: FunctionServer): void {
  const app = new Hono();
  app.post('/', async (c) => c.json(answerEvent(Object.fromEntries(c.req.raw.headers), await c.req.text())));
  const delivery: DirectRoute = { maxBodyBytes: 1 << 20, answer: async (headers, body) => ({ status: 200, json: answerEvent(headers, await body()) }), tooLarge: () => ({ status: 413 }) };
  setDirectRoutes(app, (method, path) => (method === 'POST' && path === '/' ? delivery : undefined));
  const listener: RequestListener = how === 'sdk' ? requestListener(app) : getRequestListener(app.fetch);
  // Node's HTTP/2 compatibility API gives the listener what it reads of a request and writes of an answer.
  const server = protocol === 'h2c' ? createH2cServer({}, listener as unknown as Parameters<typeof createH2cServer>[1]) : createHttp1Server({ keepAliveTimeout: 30_000 }, listener);
  server.listen(0, '127.0.0.1', () => console.log(`port ${(server.address() as AddressInfo).port}`));
  // The parent holds our stdin: when it goes (ended or killed), so do we.
  process.stdin.on('end', () => process.exit(0)).resume();
}

/** The bridge side: sends `deliveries` events to `url` with `concurrency` in flight; says the seconds taken on stdout. */
async function sendEvents(url: string, protocol: Protocol, deliveries: number, concurrency: number): Promise<void> {
  // One connection at most for h2c (every delivery a stream on it), as many as are in flight for HTTP/1.1.
  const dispatcher = protocol === 'h2c' ? new H2CClient(url, { pipelining: Math.max(concurrency, 1) }) : new Agent({ keepAliveTimeout: 30_000 });
  const send = async (i: number) => {
    const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: 'bench', name: `web-${i}` }, reason: 'updated', observedAt: Date.now() }, 1, 'kfn://bench', Date.now() + 30_000, observedMyWeb(i), 30_000);
    const { outcome, status } = await sendReconcileEvent({ url, message, credentials, timeoutMs: 30_000, dispatcher });
    if (outcome.kind !== 'done') throw new Error(`delivery ${i}: ${status ?? 'no answer'} ${JSON.stringify(outcome)}`);
  };
  // Warm both ends (connections, the compilers) before the clock starts.
  for (let i = 0; i < 200; i++) await send(i);
  console.log('warm');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  const started = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < deliveries) await send(next++);
  }));
  console.log(`seconds ${(performance.now() - started) / 1000}`);
  await dispatcher.close();
}

/** A line of a child's stdout that starts with `word`, its rest; throws if the child exits first or says nothing for `timeoutMs`. */
function lineOf(child: ChildProcess, word: string, timeoutMs = 120_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const stop = (err?: Error) => {
      clearTimeout(timer);
      child.off('exit', exited);
      lines.close();
      if (err) reject(err);
    };
    const exited = (code: number | null) => stop(new Error(`process ${child.pid} exited (${code}) before saying "${word}"`));
    const timer = setTimeout(() => stop(new Error(`process ${child.pid} did not say "${word}" within ${timeoutMs / 1000} s`)), timeoutMs);
    child.once('exit', exited);
    lines.on('line', (line) => {
      if (!line.startsWith(word)) return;
      stop();
      resolve(line.slice(word.length).trim());
    });
  });
}

const self = import.meta.filename;
const spawnSide = (nodeOptions: string[], args: string[]) => spawn(process.execPath, [...nodeOptions, self, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });

/** One round in two fresh processes: the function side, then the bridge side sending to it. */
async function round(protocol: Protocol, deliveries: number, concurrency: number, flags: { bridge: string[]; function: string[] }, server: FunctionServer): Promise<TransportRound> {
  const fn = spawnSide(flags.function, ['--serve', protocol, '--function-server', server]);
  let bridge: ChildProcess | undefined;
  try {
    const port = await lineOf(fn, 'port');
    bridge = spawnSide(flags.bridge, ['--send', `http://127.0.0.1:${port}/`, '--protocol', protocol, '--deliveries', String(deliveries), '--concurrency', String(concurrency)]);
    await lineOf(bridge, 'warm');
    const before = { bridge: processCpuMs(bridge.pid!), function: processCpuMs(fn.pid!) };
    // However slow the round: 50 deliveries a second at the least, two minutes at the least.
    const done = lineOf(bridge, 'seconds', Math.max(120_000, (deliveries / 50) * 1000));
    bridge.stdin!.write('go\n');
    const seconds = Number(await done);
    const bridgeMs = (processCpuMs(bridge.pid!) - before.bridge) / deliveries;
    const functionMs = (processCpuMs(fn.pid!) - before.function) / deliveries;
    return { protocol, concurrency, deliveries, seconds, bridgeMs, functionMs };
  } finally {
    bridge?.kill('SIGKILL');
    fn.kill('SIGKILL');
  }
}

/**
 * Rounds of each protocol at each concurrency, alternating (http1, h2c, h2c, http1, …) so that
 * neither always goes first. The bridge side runs with `flags.bridge`, the function side with
 * `flags.function`.
 */
export async function transportCost(options: { deliveries: number; concurrency: number[]; rounds: number; flags: { bridge: string[]; function: string[] }; server?: FunctionServer; log: (line: string) => void }): Promise<TransportRound[]> {
  const rows: TransportRound[] = [];
  for (const concurrency of options.concurrency) {
    for (let r = 0; r < options.rounds; r++) {
      for (const protocol of r % 2 === 0 ? protocols : [...protocols].reverse()) {
        const row = await round(protocol, options.deliveries, concurrency, options.flags, options.server ?? 'sdk');
        options.log(`transport ${protocol} ×${concurrency}: ${row.deliveries} deliveries in ${row.seconds.toFixed(2)} s; bridge ${row.bridgeMs.toFixed(3)} ms, function ${row.functionMs.toFixed(3)} ms of CPU each`);
        rows.push(row);
      }
    }
  }
  return rows;
}

/** The table: per concurrency and protocol, the mean of its rounds (every column over the same rounds), and h2c's ratio to HTTP/1.1. */
export function transportLines(rows: TransportRound[]): string[] {
  const lines = ['  protocol   in flight   deliveries/s   bridge ms CPU each   function ms CPU each   both   × HTTP/1.1'];
  for (const concurrency of [...new Set(rows.map((r) => r.concurrency))]) {
    const of = (protocol: Protocol) => {
      const mine = rows.filter((r) => r.concurrency === concurrency && r.protocol === protocol);
      const mean = (value: (r: TransportRound) => number) => mine.reduce((sum, r) => sum + value(r), 0) / mine.length;
      const bridge = mean((r) => r.bridgeMs);
      const fn = mean((r) => r.functionMs);
      return { bridge, fn, both: bridge + fn, rate: mean((r) => r.deliveries / r.seconds) };
    };
    const base = of('http1');
    for (const protocol of protocols) {
      const m = of(protocol);
      lines.push(`  ${protocol.padEnd(8)}   ${`×${concurrency}`.padStart(9)}   ${m.rate.toFixed(0).padStart(12)}   ${m.bridge.toFixed(3).padStart(18)}   ${m.fn.toFixed(3).padStart(20)}   ${m.both.toFixed(3).padStart(5)}   ${(m.both / base.both).toFixed(2).padStart(8)}×`);
    }
  }
  return lines;
}

if (process.argv[1] === self) {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      send: { type: 'string' },
      protocol: { type: 'string', default: 'http1' },
      deliveries: { type: 'string', default: '5000' },
      concurrency: { type: 'string', default: '1,8' },
      rounds: { type: 'string', default: '2' },
      'bridge-node-options': { type: 'string', default: bridgeNodeOptionsAt(bridgeMemoryLimitMiB()) },
      'function-node-options': { type: 'string', default: functionNodeFlags.join(' ') },
      'function-server': { type: 'string', default: 'sdk' },
    },
  });
  const server = values['function-server'] as FunctionServer;
  if (server !== 'sdk' && server !== 'hono') throw new Error(`--function-server takes sdk or hono, not "${server}"`);
  const protocolOf = (value: string | undefined): Protocol => {
    if (!protocols.includes(value as Protocol)) throw new Error(`--protocol takes ${protocols.join(' or ')}, not "${value}"`);
    return value as Protocol;
  };
  if (values.serve) serveEvents(protocolOf(values.serve), server);
  else if (values.send) await sendEvents(values.send, protocolOf(values.protocol), Number(values.deliveries), Number(values.concurrency));
  else {
    const words = (s: string) => s.split(' ').filter(Boolean);
    const rows = await transportCost({
      deliveries: Number(values.deliveries),
      concurrency: values.concurrency.split(',').map(Number),
      rounds: Number(values.rounds),
      flags: { bridge: words(values['bridge-node-options']), function: words(values['function-node-options']) },
      server,
      log: (line) => console.error(`  ${line}`),
    });
    console.log(`The hop from bridge to function: ${rows[0]?.deliveries} contract-2 MyWeb events per round, the mean of ${values.rounds} rounds each, the function served by ${server === 'sdk' ? "the SDK's request listener" : "Hono's Node adapter"}`);
    for (const line of transportLines(rows)) console.log(line);
  }
}
