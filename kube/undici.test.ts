// The bridge's undici, taken from its own modules (undici.ts): request and Agent work as the
// package's entry has them, and the bridge never loads the entry (fetch, WebSocket, caches).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { Agent, request } from './undici.ts';

test('request sends to the URL\'s path and query, through the default Agent or the one given, and gives the answer as a stream', async (t) => {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url} ${body}`);
      res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const agent = new Agent({ keepAliveTimeout: 1000 });
  t.after(async () => {
    await agent.close();
    server.closeAllConnections();
    server.close();
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/a/b?c=d`;
  const first = await request(url, { method: 'POST', body: 'hi', headers: { 'content-type': 'text/plain' } });
  assert.equal(first.statusCode, 201);
  assert.deepEqual(await first.body.json(), { ok: true });
  const second = await request(new URL(url), { method: 'GET', dispatcher: agent });
  assert.equal(await second.body.text(), '{"ok":true}');
  assert.deepEqual(seen, ['POST /a/b?c=d hi', 'GET /a/b?c=d ']);
});

test("the bridge's modules load undici's Agent and request alone: not its package entry, nor its fetch", () => {
  const script = `
    await import(${JSON.stringify(`${repoRoot}/bridge/main.ts`)});
    const { createRequire } = await import('node:module');
    const loaded = Object.keys(createRequire(import.meta.url).cache).filter((f) => f.includes('/node_modules/undici/'));
    console.log(JSON.stringify(loaded));`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const loaded = JSON.parse(run.stdout) as string[];
  assert.ok(loaded.some((f) => f.endsWith('/lib/dispatcher/agent.js')), `undici's Agent is among them: ${loaded.length} files`);
  assert.deepEqual(loaded.filter((f) => f.endsWith('/undici/index.js') || f.includes('/lib/web/')), [], 'neither the entry nor fetch');
});
