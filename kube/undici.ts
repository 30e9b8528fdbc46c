// The bridge's transport to the apiserver: undici's pool, which speaks HTTP/2 where the
// apiserver offers it, so the bridge's many open watches and its requests share one connection.
// Its request API rather than its fetch: no WHATWG Request, Headers and web-stream objects per
// request, and the body is a Node stream; for a bridge relaying thousands of watch events that
// is a third or more of the JavaScript work per exchange. Functions and the CLI do not load it
// (about 80 ms of a process's start): they use connection.ts's Node transport.
import { Agent, request } from 'undici';
import type { TransportFactory } from './connection.ts';

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
