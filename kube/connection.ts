// How a process reaches an apiserver: a server URL, TLS settings and credentials
// (connectionFromOptions), over a Transport. Which cluster, and its settings and credentials
// from a kubeconfig or a pod's ServiceAccount, is the loader's (kubeconfig.ts). Written here
// rather than taken from @kubernetes/client-node, whose full import costs the bridge about
// 80 MiB of resident memory for the few things it needs.
//
// Requests go through a Transport. The default is Node's built-in HTTP client (HTTP/1.1 with
// keep-alive): it costs a process nothing to load, where undici takes about 80 ms, most of a
// function's cold start. The bridge, which holds a watch per kind and namespace open, passes
// the undici transport of undici.ts instead: HTTP/2 where the apiserver offers it, one
// connection for all of them.
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Readable } from 'node:stream';
import { nodeHttp } from '../core/node-http.ts';

const { Agent: HttpAgent, request: httpRequest } = nodeHttp;

/** One HTTP request to the apiserver, as a transport sends it. */
export interface HttpRequest {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/** The answer's status and its body as a stream (read whole, bounded, or line by line). */
export interface Reply {
  statusCode: number;
  body: Readable;
}

/** TLS settings of a connection, for the transport's connection pool. */
export interface TlsSettings {
  ca?: string;
  cert?: string;
  key?: string;
  rejectUnauthorized: boolean;
}

/** Sends requests over a connection pool; `reset` drops the pool's connections. */
export interface Transport {
  send(request: HttpRequest): Promise<Reply>;
  reset(): void;
}

export type TransportFactory = (tls: TlsSettings) => Transport;

export interface Connection {
  server: string;
  /** Sends one request with the connection's TLS settings (the caller adds `headers()`). */
  send(request: HttpRequest): Promise<Reply>;
  /**
   * Drops every connection and starts afresh. For a connection that went silent: with HTTP/2
   * all requests share it, so aborting one request would leave the next on the same dead socket.
   */
  reset(): void;
  /** Authorization headers for the next request (a token file is re-read at most every minute; an exec plugin runs when its credential has expired). */
  headers(): Record<string, string> | Promise<Record<string, string>>;
  /** Where it came from, for messages. */
  source: string;
}

export interface ConnectionOptions {
  server: string;
  ca?: string;
  insecureSkipTlsVerify?: boolean;
  token?: string;
  tokenFile?: string;
  cert?: string;
  key?: string;
  username?: string;
  password?: string;
  source?: string;
  /** Credentials from a plugin: the Authorization header, asked before each request. */
  authenticate?: () => Promise<Record<string, string>>;
  /** How requests are sent (default: Node's built-in HTTP client). */
  transport?: TransportFactory;
}

/**
 * How long a request may wait at each step before it fails, so that a cluster that does not
 * answer is reported in seconds rather than after the operating system gives up. None of them
 * limits an answer once it has begun: a watch stays open as long as its own liveness rules say.
 */
export interface ConnectionLimits {
  /** For the TCP connection to be made (default 10 s). */
  connectMs: number;
  /** For the TLS handshake, once connected (default 10 s). */
  handshakeMs: number;
  /**
   * For the answer's status and headers, once the request is sent (default 60 s: the
   * apiserver's own limit for a request, past which it answers 504 itself).
   */
  firstAnswerMs: number;
}

export const defaultConnectionLimits: ConnectionLimits = { connectMs: 10_000, handshakeMs: 10_000, firstAnswerMs: 60_000 };

/** A request that got no further than a step within its limit (ConnectionLimits). */
export class NoAnswer extends Error {
  readonly step: 'connect' | 'handshake' | 'answer';
  readonly code = 'KFN_NO_ANSWER';
  readonly ms: number;
  constructor(step: NoAnswer['step'], ms: number, url: URL) {
    const seconds = `${ms / 1000} s`;
    super(step === 'connect' ? `no connection to ${url.host} within ${seconds}` : step === 'handshake' ? `no TLS handshake within ${seconds} from ${url.host}` : `${url.host} did not answer within ${seconds}`);
    this.step = step;
    this.ms = ms;
  }
}

/**
 * Node's built-in HTTP client with a keep-alive pool: HTTP/1.1, a socket per request in flight.
 * A body is sent with its length (no chunked encoding); the signal aborts the request and,
 * once answered, its body. Each step before the answer has its limit (ConnectionLimits).
 */
export function nodeTransportWith(limits: Partial<ConnectionLimits> = {}): TransportFactory {
  const { connectMs, handshakeMs, firstAnswerMs } = { ...defaultConnectionLimits, ...limits };
  return (tls) => {
    // An idle socket is closed after 30 s (as the bridge's undici pool does), before a server's own
    // idle timeout can close it under a request that was just given it.
    const pool = { keepAlive: true, timeout: 30_000 };
    const newAgents = () => ({ http: new HttpAgent(pool), https: new HttpsAgent({ ...pool, ...tls }) });
    let agents = newAgents();
    return {
      send(r) {
        const secure = r.url.protocol === 'https:';
        const headers: Record<string, string> = { ...r.headers };
        if (r.body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(r.body));
        return new Promise<Reply>((resolve, reject) => {
          const req = (secure ? httpsRequest : httpRequest)(r.url, { method: r.method, headers, agent: secure ? agents.https : agents.http, signal: r.signal });
          // One timer at a time, for the step the request is at: connect, handshake, first answer.
          let timer: NodeJS.Timeout | undefined;
          const step = (name: NoAnswer['step'], ms: number) => {
            clearTimeout(timer);
            timer = setTimeout(() => req.destroy(new NoAnswer(name, ms, r.url)), ms);
          };
          req.once('socket', (socket) => {
            if (!socket.connecting) return step('answer', firstAnswerMs); // a kept-alive socket
            step('connect', connectMs);
            socket.once('connect', () => (secure ? step('handshake', handshakeMs) : step('answer', firstAnswerMs)));
            if (secure) socket.once('secureConnect', () => step('answer', firstAnswerMs));
          });
          req.once('response', (res: IncomingMessage) => {
            clearTimeout(timer);
            resolve({ statusCode: res.statusCode ?? 0, body: res });
          });
          req.once('error', (err) => {
            clearTimeout(timer);
            reject(err);
          });
          req.once('close', () => clearTimeout(timer));
          req.end(r.body);
        });
      },
      reset() {
        const old = agents;
        agents = newAgents();
        old.http.destroy();
        old.https.destroy();
      },
    };
  };
}

/** Node's HTTP client with the default limits: what the CLI and functions use. */
export const nodeTransport: TransportFactory = nodeTransportWith();

/** A connection from its settings and credentials as they are given (the loader's, from a kubeconfig; a test's). */
export function connectionFromOptions(o: ConnectionOptions): Connection {
  const transport = (o.transport ?? nodeTransport)({ ca: o.ca, cert: o.cert, key: o.key, rejectUnauthorized: !o.insecureSkipTlsVerify });
  let token = o.token;
  let readAt = 0;
  return {
    server: o.server.replace(/\/$/, ''),
    send: (request) => transport.send(request),
    reset: () => transport.reset(),
    source: o.source ?? o.server,
    headers(): Record<string, string> | Promise<Record<string, string>> {
      if (o.authenticate) return o.authenticate();
      if (o.tokenFile && Date.now() - readAt > 60_000) {
        token = readFileSync(o.tokenFile, 'utf8').trim();
        readAt = Date.now();
      }
      if (token) return { Authorization: `Bearer ${token}` };
      if (o.username !== undefined) return { Authorization: `Basic ${Buffer.from(`${o.username}:${o.password ?? ''}`).toString('base64')}` };
      return {};
    },
  };
}
