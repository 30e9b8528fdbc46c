// A stand-in reconcile function on 127.0.0.1 for bridge tests: it checks every request against
// the contract (the CloudEvents SDK validates the event; the signature is verified), records
// what arrived, and answers as the test says.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { ContractError, parseReconcileRequest, type ReceivedReconcile } from '../../core/event.ts';
import { type Credentials } from '../../core/authentication.ts';

export interface Delivery {
  id: string;
  reason: string;
  attempt: number;
  name: string;
  namespace?: string;
  generation?: number;
  resourceVersion?: string;
  trigger?: string;
  /** The request path (a test may give each bridge its own sink path to tell them apart). */
  path: string;
  receivedAt: number;
  received: ReceivedReconcile;
}

export type Answer = (d: Delivery, res: ServerResponse) => void | Promise<void>;

export const answerDone: Answer = (_d, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
};

export interface Receiver {
  url: string;
  deliveries: Delivery[];
  /** Requests refused as not matching the contract (status and message). */
  refused: { status: number; message: string }[];
  answer: Answer;
  /** What it checks signatures with; a test may rotate it. */
  credentials: Credentials;
  /** Deliveries in flight per object key right now, and the most ever seen at once. */
  maxConcurrentPerKey(): number;
  of(name: string): Delivery[];
}

export async function startReceiver(t: TestContext, credentials: Credentials): Promise<Receiver> {
  const inFlight = new Map<string, number>();
  let maxPerKey = 0;
  const receiver: Receiver = {
    url: '',
    deliveries: [],
    refused: [],
    answer: answerDone,
    credentials,
    maxConcurrentPerKey: () => maxPerKey,
    of: (name) => receiver.deliveries.filter((d) => d.name === name),
  };
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', async () => {
      let received: ReceivedReconcile;
      try {
        received = parseReconcileRequest(req.headers, body, receiver.credentials);
      } catch (err) {
        const status = err instanceof ContractError ? err.status : 500;
        receiver.refused.push({ status, message: (err as Error).message });
        res.writeHead(status).end((err as Error).message);
        return;
      }
      const p = received.data.primary;
      const key = `${p.namespace ?? ''}/${p.name}`;
      const n = (inFlight.get(key) ?? 0) + 1;
      inFlight.set(key, n);
      maxPerKey = Math.max(maxPerKey, n);
      const delivery: Delivery = {
        id: received.event.id,
        reason: received.reason,
        attempt: received.attempt,
        name: p.name,
        namespace: p.namespace,
        generation: p.generation,
        resourceVersion: p.resourceVersion,
        trigger: received.data.trigger ? `${received.data.trigger.kind}/${received.data.trigger.name}` : undefined,
        path: req.url ?? '/',
        receivedAt: Date.now(),
        received,
      };
      receiver.deliveries.push(delivery);
      try {
        await receiver.answer(delivery, res);
      } finally {
        inFlight.set(key, (inFlight.get(key) ?? 1) - 1);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return receiver;
}
