// Authentication of a reconcile request: an HMAC signature over the event id, its time and the
// exact body (header `kfn-signature: v1=<hex>`), or a bearer token; the secret is the
// Reconciler's spec.auth Secret, shared by the bridge and the function.
import { createHmac, timingSafeEqual } from 'node:crypto';

export const signatureHeader = 'kfn-signature';

/** An HTTP request as the contract sees it: lower-case headers and the exact body. */
export interface HttpMessage {
  headers: Record<string, string>;
  body: string;
}

/** What the HMAC signs: the event id, its time and the exact body, newline-separated. */
function signedPayload(id: string, time: string, body: string): string {
  return `${id}\n${time}\n${body}`;
}

/** The `kfn-signature` header value: `v1=<hex HMAC-SHA256>`. */
export function sign(secret: string, id: string, time: string, body: string): string {
  return `v1=${createHmac('sha256', secret).update(signedPayload(id, time, body)).digest('hex')}`;
}

export type Credentials = { kind: 'hmac'; secret: string } | { kind: 'bearer'; token: string } | { kind: 'none' };

/** Adds authentication headers to a message for the given credentials. */
export function authenticate(message: HttpMessage, credentials: Credentials): HttpMessage {
  const headers = { ...message.headers };
  if (credentials.kind === 'hmac') headers[signatureHeader] = sign(credentials.secret, headers['ce-id'] ?? '', headers['ce-time'] ?? '', message.body);
  if (credentials.kind === 'bearer') headers.authorization = `Bearer ${credentials.token}`;
  return { headers, body: message.body };
}

function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && timingSafeEqual(ab, bb);
}

/**
 * Checks a request's authentication: undefined when it passes, otherwise why it does not (the
 * function answers 401 with it). `credentials.kind === 'none'` accepts anything and is only for
 * explicit development mode.
 */
export function authenticationProblem(headers: Record<string, string>, body: string, credentials: Credentials): string | undefined {
  if (credentials.kind === 'none') return undefined;
  if (credentials.kind === 'bearer') {
    const given = headers.authorization ?? '';
    if (!given.startsWith('Bearer ') || !constantTimeEqual(given.slice(7), credentials.token)) {
      return 'missing or wrong bearer token: the bridge and the function must share the Reconciler auth secret';
    }
    return undefined;
  }
  const given = headers[signatureHeader];
  if (!given) return `unsigned request: no ${signatureHeader} header (is the Reconciler's spec.auth set?)`;
  // Structured mode carries id and time in the body; binary mode in headers.
  let id = headers['ce-id'];
  let time = headers['ce-time'];
  if (id === undefined && (headers['content-type'] ?? '').startsWith('application/cloudevents+json')) {
    try {
      const parsed = JSON.parse(body) as { id?: string; time?: string };
      id = parsed.id;
      time = parsed.time;
    } catch {
      /* reported as a bad signature below, then as malformed */
    }
  }
  const expected = sign(credentials.secret, id ?? '', time ?? '', body);
  if (!constantTimeEqual(given, expected)) return 'bad signature: the request was not signed with this function\'s secret, or was altered';
  return undefined;
}
