// The client's bounded reads, against a local HTTP server standing in for a misbehaving
// apiserver (the real one is in the integration tests).
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import { test } from 'node:test';
import { connectionFromOptions, nodeTransport } from './connection.ts';
import { undiciTransport } from './undici.ts';
import { KubeApi, LineSplitter, listAll, ResponseTooLarge } from './api.ts';

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

test('a stream is cut into lines wherever its chunks end: multi-byte characters, CRLF, blank lines, a long line in many chunks, a last line without newline', () => {
  const long = `{"long":"${'é'.repeat(5000)}"}`;
  const text = `{"a":"ü€𝄞"}\r\n\n  \n{"b":2}\n${long}\n{"c":3}`;
  const bytes = Buffer.from(text);
  const expected = ['{"a":"ü€𝄞"}', '', '  ', '{"b":2}', long, '{"c":3}'];
  // Every place a first cut can fall, the rest in chunks of 7 bytes: a chunk ends inside a character, a CRLF, a line.
  for (let cut = 0; cut <= bytes.length; cut += cut < 40 ? 1 : 97) {
    const lines: string[] = [];
    const splitter = new LineSplitter((line) => lines.push(line));
    splitter.push(bytes.subarray(0, cut));
    for (let i = cut; i < bytes.length; i += 7) splitter.push(bytes.subarray(i, i + 7));
    assert.deepEqual(lines, expected.slice(0, -1), `cut at ${cut}: every line with its newline, before the end`);
    splitter.end();
    assert.deepEqual(lines, expected, `cut at ${cut}`);
  }
  // A stream that ends with its newline has no last line to hand on; one chunk holding it all gives the same lines.
  const whole: string[] = [];
  const splitter = new LineSplitter((line) => whole.push(line));
  splitter.push(Buffer.from(`${text}\n`));
  splitter.end();
  assert.deepEqual(whole, expected);
});

test('a watch stream: its last line without newline is parsed, an unparseable line rejects and closes the stream, a log line goes to onText, a broken answer rejects', async (t) => {
  let closed = 0;
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.on('close', () => closed++);
    if (req.url === '/last') return void res.end('{"n":1}\n{"n":2}');
    if (req.url === '/log') return void res.end('plain text\r\n{"n":3}\n');
    if (req.url === '/broken') {
      res.write('{"n":4}\n');
      return void setTimeout(() => res.socket?.destroy(), 20);
    }
    // A line, an unparseable one and another in one write, then a stream that would go on (/more: only that).
    if (req.url !== '/more') res.write('{"n":5}\n<html>not json</html>\n{"n":6}\n');
    const more = setInterval(() => res.write('{"n":7}\n'), 20);
    res.on('close', () => clearInterval(more));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => (server.closeAllConnections(), server.close()));
  for (const [name, transport] of [['node', nodeTransport], ['undici', undiciTransport]] as const) {
    const api = new KubeApi(connectionFromOptions({ server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, transport }));
    const lines: unknown[] = [];
    const texts: string[] = [];
    await api.stream('/last', {}, (line) => lines.push(line));
    await api.stream('/log', { onText: (text) => texts.push(text) }, (line) => lines.push(line));
    assert.deepEqual(lines.slice(), [{ n: 1 }, { n: 2 }, { n: 3 }], name);
    assert.deepEqual(texts, ['plain text'], name);
    lines.length = 0;
    const before = closed;
    await assert.rejects(api.stream('/garbage', {}, (line) => lines.push(line)), /unparseable watch line from \/garbage: <html>not json<\/html>/, name);
    assert.deepEqual(lines.slice(), [{ n: 5 }], `${name}: nothing after the unparseable line`);
    for (let i = 0; i < 100 && closed === before; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(closed, before + 1, `${name}: the stream was closed, not left open`);
    // A broken answer rejects with the transport's error, not as a clean end, after the lines before the break.
    lines.length = 0;
    await assert.rejects(api.stream('/broken', {}, (line) => lines.push(line)), (err: Error) => !/unparseable|closed before its end/.test(err.message), name);
    assert.deepEqual(lines.slice(), [{ n: 4 }], name);
    // A handler that throws ends the stream with its error, and closes it.
    const thrown = closed;
    await assert.rejects(
      api.stream('/more', {}, () => {
        throw new Error('the handler failed');
      }),
      /the handler failed/,
      name,
    );
    for (let i = 0; i < 100 && closed === thrown; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(closed, thrown + 1, `${name}: closed after the handler threw`);
    // An abort through the signal rejects, however many lines came before it.
    const abort = new AbortController();
    let seen = 0;
    await assert.rejects(api.stream('/more', { signal: abort.signal }, () => ++seen === 3 && abort.abort()), name);
    assert.ok(seen >= 3, name);
  }
});
