// The bridge's health server: /healthz (the process answers), /readyz (it can do its part: a
// leader once its Reconcilers and initial lists are in, a standby at once) and /metrics.
import type { Server } from 'node:http';
import { nodeHttp } from '../core/node-http.ts';
import type { BridgeMetrics } from './metrics.ts';

export interface HealthServer {
  server: Server;
  /** host:port it listens on (the port the system chose, for port 0). */
  address: string | undefined;
  close(): Promise<void>;
}

/** `host:port`, or a bare port on 127.0.0.1. */
export function parseAddr(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  const host = i > 0 ? addr.slice(0, i) : '127.0.0.1';
  const port = Number(i >= 0 ? addr.slice(i + 1) : addr);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--metrics-addr must be host:port, not "${addr}"`);
  return { host, port };
}

export async function startHealthServer(addr: string, metrics: BridgeMetrics, ready: () => boolean): Promise<HealthServer> {
  const { host, port } = parseAddr(addr);
  const server = nodeHttp.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') return void res.writeHead(200).end('ok');
    if (path === '/readyz') {
      const ok = ready();
      return void res.writeHead(ok ? 200 : 503).end(ok ? 'ok' : 'initial lists not complete');
    }
    if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
        (err) => res.writeHead(500).end(String(err)),
      );
      return;
    }
    res.writeHead(404).end('not found: try /healthz, /readyz or /metrics');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`cannot listen on ${host}:${port} for /metrics: ${err.message}`)));
    server.listen(port, host, resolve);
  });
  const a = server.address();
  return {
    server,
    address: typeof a === 'object' && a ? `${a.address}:${a.port}` : undefined,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
