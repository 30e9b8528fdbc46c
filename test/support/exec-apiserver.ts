// An apiserver's pods/exec and pod reads over real HTTP, for unit tests of what reads files and
// logs out of pods (never for testing Kubernetes itself: the e2e tests use the real cluster). An
// exec is a WebSocket speaking the channel protocol (v4.channel.k8s.io) as the apiserver does:
// each stream opened with a message of its byte alone, standard output and error as messages
// on channels 1 and 2, the command's end as a Status on channel 3, then a close. The command runs
// on this machine, in a folder standing for the pod's file system (its absolute paths are taken
// under it), so a script run in a "pod" reads real files.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';

export interface FakePod {
  name: string;
  phase?: string;
  containers: { name: string; command?: string[]; args?: string[] }[];
  restartCount?: number;
  /** Where the pod's absolute paths are, on this machine. */
  root?: string;
  /** Its log, by container (`previous`: the log before its last restart). */
  logs?: Record<string, { current: string; previous?: string }>;
  labels: Record<string, string>;
}

export interface ExecApiServer {
  url: string;
  /** A kubeconfig for it, with a bearer token it checks. */
  kubeconfig: string;
  pods: FakePod[];
  /** Who may exec (per verb); default every verb. */
  allowed: Set<string>;
  /** Each exec's pod, container and command, in order. */
  execs: { pod: string; container: string; command: string[] }[];
  close(): Promise<void>;
}

const token = 'test-token';

/** One WebSocket frame from a server: unmasked, binary (or close, `opcode` 8). */
function frame(payload: Buffer, opcode = 2): Buffer {
  const head = payload.length < 126 ? Buffer.from([0x80 | opcode, payload.length]) : payload.length < 65536 ? Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 255]) : Buffer.concat([Buffer.from([0x80 | opcode, 127]), (() => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(payload.length));
    return b;
  })()]);
  return Buffer.concat([head, payload]);
}

const onChannel = (channel: number, data: Buffer | string) => frame(Buffer.concat([Buffer.from([channel]), Buffer.from(data)]));

export async function startExecApiServer(namespace: string, pods: FakePod[]): Promise<ExecApiServer> {
  const state = { pods, allowed: new Set(['get', 'create']), execs: [] as ExecApiServer['execs'] };
  const json = (res: import('node:http').ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const podObject = (p: FakePod) => ({
    metadata: { name: p.name, namespace, labels: p.labels },
    spec: { containers: p.containers },
    status: { phase: p.phase ?? 'Running', containerStatuses: p.containers.map((c) => ({ name: c.name, restartCount: p.restartCount ?? 0 })) },
  });
  const server: Server = createServer((req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`) return json(res, 401, { kind: 'Status', status: 'Failure', message: 'Unauthorized', code: 401 });
    const url = new URL(req.url!, 'http://x');
    const podsPath = `/api/v1/namespaces/${namespace}/pods`;
    const list = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/.exec(url.pathname);
    if (req.method === 'GET' && list) {
      const [key, value] = (url.searchParams.get('labelSelector') ?? '=').split('=');
      const here = list[1] === namespace ? state.pods : [];
      return json(res, 200, { kind: 'PodList', items: here.filter((p) => !key || p.labels[key] === value).map(podObject) });
    }
    const log = new RegExp(`^${podsPath}/([^/]+)/log$`).exec(url.pathname);
    if (req.method === 'GET' && log) {
      const pod = state.pods.find((p) => p.name === log[1]);
      const container = url.searchParams.get('container') ?? pod?.containers[0]?.name ?? '';
      const logs = pod?.logs?.[container];
      if (!pod || !logs) return json(res, 404, { kind: 'Status', status: 'Failure', message: 'not found', code: 404 });
      if (url.searchParams.get('previous') === 'true' && logs.previous === undefined) return json(res, 400, { kind: 'Status', status: 'Failure', message: 'previous terminated container not found', code: 400 });
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end(url.searchParams.get('previous') === 'true' ? logs.previous : logs.current);
    }
    const one = new RegExp(`^${podsPath}/([^/]+)$`).exec(url.pathname);
    if (req.method === 'GET' && one) {
      const pod = state.pods.find((p) => p.name === one[1]);
      return pod ? json(res, 200, podObject(pod)) : json(res, 404, { kind: 'Status', status: 'Failure', message: 'not found', code: 404 });
    }
    if (req.method === 'POST' && url.pathname === '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews') {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const review = JSON.parse(body) as { spec: { resourceAttributes: { verb: string } } };
        json(res, 201, { ...review, status: { allowed: state.allowed.has(review.spec.resourceAttributes.verb) } });
      });
      return;
    }
    json(res, 404, { kind: 'Status', status: 'Failure', message: `no route ${req.method} ${url.pathname}`, code: 404 });
  });
  // Upgraded sockets are no longer the HTTP server's to close.
  const upgraded = new Set<Socket>();
  server.on('upgrade', (req: IncomingMessage, socket: Socket) => {
    upgraded.add(socket);
    socket.on('close', () => upgraded.delete(socket));
    const url = new URL(req.url!, 'http://x');
    const exec = new RegExp(`^/api/v1/namespaces/${namespace}/pods/([^/]+)/exec$`).exec(url.pathname);
    const pod = state.pods.find((p) => p.name === exec?.[1]);
    const refuse = (status: number, why: string) => socket.end(`HTTP/1.1 ${status} ${why}\r\ncontent-length: 0\r\n\r\n`);
    if (req.headers.authorization !== `Bearer ${token}`) return refuse(401, 'Unauthorized');
    if (!pod) return refuse(404, 'Not Found');
    if (!state.allowed.has('get') || !state.allowed.has('create')) return refuse(403, 'Forbidden');
    if (!String(req.headers['sec-websocket-protocol'] ?? '').split(/,\s*/).includes('v4.channel.k8s.io')) return refuse(400, 'Bad Request');
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    socket.write(['HTTP/1.1 101 Switching Protocols', 'Upgrade: websocket', 'Connection: Upgrade', `Sec-WebSocket-Accept: ${accept}`, 'Sec-WebSocket-Protocol: v4.channel.k8s.io', '', ''].join('\r\n'));
    const container = url.searchParams.get('container') ?? '';
    const command = url.searchParams.getAll('command');
    state.execs.push({ pod: pod.name, container, command });
    for (const c of [1, 2, 3]) socket.write(frame(Buffer.from([c])));
    // The pod's node is this one; its absolute paths are under its root.
    const [program, ...rest] = command;
    const args = rest.map((a) => (a.startsWith('/') && pod.root ? join(pod.root, a) : a));
    const child = spawn(/(^|\/)node$/.test(program ?? '') ? process.execPath : program!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d: Buffer) => socket.write(onChannel(1, d)));
    child.stderr.on('data', (d: Buffer) => socket.write(onChannel(2, d)));
    child.on('error', (err) => {
      socket.write(onChannel(3, JSON.stringify({ metadata: {}, status: 'Failure', message: `exec: ${err.message}`, reason: 'InternalError' })));
      socket.end(frame(Buffer.from([0x03, 0xe8]), 8));
    });
    child.on('close', (code) => {
      const status = code === 0 ? { metadata: {}, status: 'Success' } : { metadata: {}, status: 'Failure', message: `command terminated with non-zero exit code: exit status ${code}`, reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: String(code) }] } };
      socket.write(onChannel(3, JSON.stringify(status)));
      socket.end(frame(Buffer.from([0x03, 0xe8]), 8));
    });
    socket.on('error', () => child.kill());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const kubeconfig = [
    'apiVersion: v1',
    'kind: Config',
    'current-context: test',
    'contexts: [{name: test, context: {cluster: test, user: test}}]',
    `clusters: [{name: test, cluster: {server: "${url}"}}]`,
    `users: [{name: test, user: {token: ${token}}}]`,
    '',
  ].join('\n');
  return {
    url,
    kubeconfig,
    get pods() {
      return state.pods;
    },
    allowed: state.allowed,
    execs: state.execs,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        for (const socket of upgraded) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
