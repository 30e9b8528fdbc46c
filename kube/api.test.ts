// The client's bounded reads, against a local HTTP server standing in for a misbehaving
// apiserver (the real one is in the integration tests).
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import { test } from 'node:test';
import { connectionFromOptions, nodeTransport } from './connection.ts';
import { undiciTransport } from './undici.ts';
import { KubeApi, listAll, ResponseTooLarge } from './api.ts';

test('an answer over maxBytes is dropped after maxBytes, not read whole; a small one is read', async (t) => {
  let sent = 0;
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    if (req.url!.startsWith('/small')) return void res.end('{"items":[]}');
    // An answer without end: 64 KiB at a time, as long as anyone reads.
    const more = () => {
      while (sent < 256 << 20 && res.write(`"${'x'.repeat(65_534)}",`)) sent += 65_536;
      if (sent >= 256 << 20) res.end();
    };
    res.on('drain', more);
    res.write('{"items":[');
    more();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => (server.closeAllConnections(), server.close()));
  const api = new KubeApi(connectionFromOptions({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
  await assert.rejects(api.request('GET', '/huge', { maxBytes: 1 << 20 }), (err) => err instanceof ResponseTooLarge && /larger than 1048576 bytes/.test(err.message));
  assert.ok(sent < 32 << 20, `the server got to send ${sent >> 20} MiB of 256 before the reader hung up`);
  assert.deepEqual(await api.request('GET', '/small', { maxBytes: 1 << 20 }), { items: [] });
  assert.deepEqual(await listAll(api, '/small', { maxPageBytes: 100 }), []);
});

// Both transports: the default (Node's HTTP client, what functions and the CLI use) and the
// bridge's (undici). Each sends a body with its length, reads watch lines as they come, aborts,
// and after reset() opens a new connection rather than reusing a pooled one.
for (const [name, transport] of [
  ['node', nodeTransport],
  ['undici', undiciTransport],
] as const) {
  test(`the ${name} transport: bodies, watch lines, abort, reset`, async (t) => {
    const peers = new Set<string>();
    const server = createServer((req, res) => {
      peers.add(`${req.socket.remoteAddress}:${req.socket.remotePort}`);
      if (req.url!.startsWith('/watch')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"type":"ADDED","object":{"n":1}}\n');
        setTimeout(() => res.end('{"type":"ADDED","object":{"n":2}}\n'), 50);
        return;
      }
      if (req.url!.startsWith('/never')) return; // no answer: for the abort
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        res.writeHead(!body || req.headers['content-length'] === String(Buffer.byteLength(body)) ? 200 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ method: req.method, body, chunked: req.headers['transfer-encoding'] === 'chunked' }));
      });
    });
    const open = new Set<Socket>();
    server.keepAliveTimeout = 60_000;
    server.on('connection', (s: Socket) => (open.add(s), s.once('close', () => open.delete(s))));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.after(() => (server.closeAllConnections(), server.close()));
    const connection = connectionFromOptions({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, transport });
    const api = new KubeApi(connection);
    assert.deepEqual(await api.request('PATCH', '/echo', { body: { é: 'ü' } }), { method: 'PATCH', body: '{"é":"ü"}', chunked: false });
    await api.request('GET', '/echo');
    // undici may open a second connection while the first is being handed back; Node's pool reuses it.
    if (name === 'node') assert.equal(peers.size, 1, 'the second request reused the pooled connection');
    const lines: unknown[] = [];
    await api.stream('/watch', {}, (line) => lines.push(line));
    assert.deepEqual(lines, [{ type: 'ADDED', object: { n: 1 } }, { type: 'ADDED', object: { n: 2 } }]);
    const pooled = [...open];
    assert.ok(pooled.length > 0);
    connection.reset();
    await api.request('GET', '/echo');
    const signal = AbortSignal.timeout(2000); // the server itself would keep them for a minute
    await Promise.all(pooled.map((s) => (s.destroyed ? undefined : once(s, 'close', { signal })))).catch(() => undefined);
    assert.ok([...open].every((s) => !pooled.includes(s)), 'reset() closed every pooled connection; the request after it went over a new one');
    await assert.rejects(api.request('GET', '/never', { signal: AbortSignal.timeout(50) }), (err: Error) => err.name === 'TimeoutError' || err.name === 'AbortError');

  });
}

test('an answer is parsed once for its caller; a tap gets it parsed only if it looks (a copy of its own), and the same Exchange otherwise', async (t) => {
  const server = createServer((req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end('{"metadata":{"name":"a","resourceVersion":"7"}}'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => (server.closeAllConnections(), server.close()));
  const seen: import('./api.ts').Exchange[] = [];
  const api = new KubeApi(connectionFromOptions({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })).withTap({ request: (e) => void seen.push(e) });
  const parse = JSON.parse;
  let parses = 0;
  JSON.parse = ((...args: Parameters<typeof parse>) => (parses++, parse(...args))) as typeof parse;
  let answer: { metadata: { name: string } };
  try {
    answer = await api.request('PATCH', '/x', { body: { a: 1 } });
  } finally {
    JSON.parse = parse;
  }
  assert.equal(parses, 1, 'one parse: the tap did not look at the answer');
  answer.metadata.name = 'changed by the caller';
  assert.deepEqual(seen[0]!.response, { metadata: { name: 'a', resourceVersion: '7' } }, 'the tap reads the answer as it came');
  assert.deepEqual({ ...seen[0] }.body, { a: 1 });
});
