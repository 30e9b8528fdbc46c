// A function's app as a Node request listener: the routes it is busiest with (a delivery,
// /healthz, /metrics: app.ts, DirectRoute) answered here from Node's own request and response;
// every other request (the webhooks, a path no route serves) through Hono's Node adapter,
// loaded on the first such request. The adapter makes a web Request and Response of every
// request, and loading it loads Node's fetch (undici): about 15 ms of a cold start before the
// first answer, and a few MB that a function serving deliveries alone never needs.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Hono } from 'hono';
import { BodyTooLarge, contentTypeOf, directRoutesOf, type DirectAnswer, type DirectRoute } from './app.ts';

/** Hono's answer to an error its app did not handle: logged, and a plain 500. */
const internalError = (err: unknown): DirectAnswer => {
  console.error(err);
  return { status: 500, text: 'Internal Server Error' };
};

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

export function requestListener(app: Hono): RequestListener {
  const direct = directRoutesOf(app);
  let viaHono: Promise<RequestListener> | undefined;
  return (req, res) => {
    const url = req.url ?? '/';
    const query = url.indexOf('?');
    const path = query < 0 ? url : url.slice(0, query);
    const route = direct?.(req.method ?? 'GET', path);
    if (route) return void answer(route, path, req, res);
    viaHono ??= import('@hono/node-server').then((adapter) => adapter.getRequestListener(app.fetch) as RequestListener);
    viaHono.then((listener) => listener(req, res)).catch((err: unknown) => write(res, internalError(err)));
  };
}

async function answer(route: DirectRoute, path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let a: DirectAnswer;
  try {
    a = await route.answer(req.headers, () => readBody(req, route.maxBodyBytes));
  } catch (err) {
    // Past the limit what is left of the body is read and dropped, and the connection closes after the answer.
    a = err instanceof BodyTooLarge ? { ...route.tooLarge(path), headers: { connection: 'close' } } : internalError(err);
  }
  try {
    write(res, a);
  } catch (err) {
    console.error(err);
    res.destroy();
  }
}

/** The body as text, refused (BodyTooLarge) past `max` bytes: at once for a declared length, else as it counts. */
function readBody(req: IncomingMessage, max: number): Promise<string> {
  if (Number(req.headers['content-length']) > max) return Promise.reject(new BodyTooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= max) return void chunks.push(chunk);
      req.off('data', onData);
      req.resume();
      reject(new BodyTooLarge());
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.once('error', reject);
  });
}

/** Writes an answer as the Hono app would send it (app.ts, honoAnswer): JSON, or text of its type. */
function write(res: ServerResponse, a: DirectAnswer): void {
  if (res.headersSent) return void res.end();
  const body = a.json !== undefined ? JSON.stringify(a.json) : (a.text ?? '');
  res.writeHead(a.status, { 'content-type': contentTypeOf(a), 'content-length': Buffer.byteLength(body), ...a.headers });
  res.end(body);
}
