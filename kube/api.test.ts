// The client's bounded reads, against a local HTTP server standing in for a misbehaving
// apiserver (the real one is in the integration tests).
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { connectionFromOptions } from './connection.ts';
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
