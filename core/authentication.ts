// Authentication of a reconcile request: an HMAC signature over every attribute the function
// acts on — the event id, its time, reason, attempt, deadline and the time it has left — and the
// exact body (header `kfn-signature: v3=<hex>`), or a bearer token; the secret is the
// Reconciler's spec.auth Secret, shared by the bridge and the function. (Signature v1 covered id,
// time and body only; v2 left the time left out: in binary mode a captured request could be
// sent again with another one.)
import { createHmac, timingSafeEqual } from 'node:crypto';

export const signatureHeader = 'kfn-signature';

/** An HTTP request as the contract sees it: lower-case headers and the exact body. */
export interface HttpMessage {
  headers: Record<string, string>;
  body: string;
}

/** The attributes a signature covers besides the body, in the order they are signed. */
export const signedAttributes = ['id', 'time', 'kfnreason', 'kfnattempt', 'kfndeadline', 'kfntimeleft'] as const;

export type SignedAttributes = Partial<Record<(typeof signedAttributes)[number], string>>;

/** What the HMAC signs: the scheme, each signed attribute (empty when absent) and the exact body, newline-separated. */
function signedPayload(attributes: SignedAttributes, body: string): string {
  return ['v3', ...signedAttributes.map((a) => attributes[a] ?? ''), body].join('\n');
}

/** The `kfn-signature` header value: `v3=<hex HMAC-SHA256>`. */
export function sign(secret: string, attributes: SignedAttributes, body: string): string {
  return `v3=${createHmac('sha256', secret).update(signedPayload(attributes, body)).digest('hex')}`;
}

/**
 * The signed attributes of a request: binary mode carries them in `ce-` headers; structured
 * mode in the body (which is signed whole anyway).
 */
function attributesOf(headers: Record<string, string>, body: string): SignedAttributes {
  if (headers['ce-id'] === undefined && (headers['content-type'] ?? '').startsWith('application/cloudevents+json')) {
    try {
      const parsed = JSON.parse(body) as Record<string, unknown>;
      return Object.fromEntries(signedAttributes.flatMap((a) => (parsed[a] === undefined ? [] : [[a, String(parsed[a])]])));
    } catch {
      return {}; // reported as a bad signature, then as malformed
    }
  }
  return Object.fromEntries(signedAttributes.flatMap((a) => (headers[`ce-${a}`] === undefined ? [] : [[a, headers[`ce-${a}`]!]])));
}

/** `previous`: keys still accepted (not signed with) while a rotation settles. */
export type Credentials = { kind: 'hmac'; secret: string; previous?: string[] } | { kind: 'bearer'; token: string } | { kind: 'none' };

/** Adds authentication headers to a message for the given credentials. */
export function authenticate(message: HttpMessage, credentials: Credentials): HttpMessage {
  const headers = { ...message.headers };
  if (credentials.kind === 'hmac') headers[signatureHeader] = sign(credentials.secret, attributesOf(headers, message.body), message.body);
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
  const attributes = attributesOf(headers, body);
  if (given.startsWith('v1=')) return 'a v1 signature, which leaves the reason, attempt and deadline unsigned: this function takes v3 (run a bridge of the same kfn version)';
  if (given.startsWith('v2=')) return 'a v2 signature, which leaves the time the function has (kfntimeleft) unsigned: this function takes v3 (run a bridge of the same kfn version)';
  if (![credentials.secret, ...(credentials.previous ?? [])].some((secret) => constantTimeEqual(given, sign(secret, attributes, body)))) return 'bad signature: the request was not signed with this function\'s secret, or was altered';
  return undefined;
}
