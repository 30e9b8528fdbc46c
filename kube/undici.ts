// The bridge's transport to the apiserver: undici's pool, which speaks HTTP/2 where the
// apiserver offers it, so the bridge's many open watches and its requests share one connection.
// Its request API rather than its fetch: no WHATWG Request, Headers and web-stream objects per
// request, and the body is a Node stream; for a bridge relaying thousands of watch events that
// is a third or more of the JavaScript work per exchange. Functions and the CLI do not load it
// (about 80 ms of a process's start): they use connection.ts's Node transport.
//
// The bridge takes undici's Agent and request from here (its deliveries too, bridge/delivery.ts),
// loaded from their own modules (and the global dispatcher's), not from the package's entry, which loads all of undici (fetch,
// WebSocket, its caches and mocks: about half of its 966 KB of source, which a process holds for as
// long as it runs): 2.5 MiB less anonymous memory for a bridge at rest. Those paths are undici's
// files, not its API, so package.json pins its exact version, and kube/undici.test.ts fails if a
// path moves or the entry is loaded after all.
import type { Dispatcher } from 'undici';
import Agent from 'undici/lib/dispatcher/agent.js';
import dispatcherRequest from 'undici/lib/api/api-request.js';
import { getGlobalDispatcher } from 'undici/lib/global.js';
import type { TransportFactory } from './connection.ts';

export { Agent };
export type { Dispatcher };

/** Options of `request`: undici's, with the dispatcher that sends it (default: undici's global one). */
export type RequestOptions = Omit<Dispatcher.RequestOptions, 'origin' | 'path'> & { dispatcher?: Dispatcher };

/** undici's `request(url, options)`, as its package entry has it. */
export function request(url: string | URL, options: RequestOptions): Promise<Dispatcher.ResponseData> {
  const { dispatcher, ...rest } = options;
  const target = typeof url === 'string' ? new URL(url) : url;
  return dispatcherRequest.call(dispatcher ?? getGlobalDispatcher(), { ...rest, origin: target.origin, path: `${target.pathname}${target.search}` });
}

export const undiciTransport: TransportFactory = (tls) => {
  const newAgent = () => new Agent({ connect: { ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized }, keepAliveTimeout: 30_000 });
  let agent = newAgent();
  return {
    async send(r) {
      const res = await request(r.url, { method: r.method as 'GET', headers: r.headers, body: r.body, dispatcher: agent, signal: r.signal });
      return { statusCode: res.statusCode, body: res.body };
    },
    reset() {
      const old = agent;
      agent = newAgent();
      void old.destroy().catch(() => undefined);
    },
  };
};
