// Sending one reconcile event to a function and classifying the outcome per the contract.
// Uses undici's request API directly (not the CloudEvents SDK's transport, which hides the
// status code; not fetch, whose WHATWG objects and web streams cost more than the rest of a
// delivery) — the same client the bridge talks to the apiserver with, rather than a second copy.
import { request, type Dispatcher } from '../kube/undici.ts';
import { authenticate, type Credentials, type HttpMessage } from '../core/authentication.ts';
import { classifyResponse, maxAnswerBytes, type DeliveryOutcome } from '../core/response.ts';
import type { RequestSigner } from './sigv4.ts';

export interface DeliveryResult {
  outcome: DeliveryOutcome;
  /** HTTP status, or undefined when no response came (timeout, refused connection). */
  status?: number;
  durationMs: number;
  /**
   * The request may have reached the function and no answer of the function's came (a timeout,
   * a connection broken after sending, a 502 or 504 from a proxy in front): it may still be at
   * work on the event.
   */
  mayBeRunning?: boolean;
  /** Why no response came, when none did: what kfn_bridge_sink_failures_total counts it as. */
  transport?: 'timeout' | 'credentials' | 'tls' | 'connection';
}

export interface SendOptions {
  url: string;
  message: HttpMessage;
  credentials: Credentials;
  timeoutMs: number;
  /** Adds a signature for the sink's front door (AWS SigV4 for a Lambda Function URL with AWS_IAM). */
  signer?: RequestSigner;
  /** The connections to use: an https sink with a caBundle trusts only that CA (bridge/sink.ts). Default: undici's global agent. */
  dispatcher?: Dispatcher;
}

/**
 * A body as text, read up to `max` bytes: a sink that streams without end costs the bridge no
 * more. `truncated` when there was more (an answer cut short is no answer).
 */
async function readCapped(body: AsyncIterable<Buffer> & { destroy(): unknown }, max: number): Promise<{ text: string; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk.subarray(0, max - size));
    size += chunk.length;
    if (size > max) {
      body.destroy();
      break;
    }
  }
  return { text: Buffer.concat(chunks).toString('utf8'), truncated: size > max };
}

/** The TLS handshake refused the sink's certificate: nothing was sent, and the sink, not the object, needs a fix. */
const certificateRefused = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Failures before the request could reach the function: nothing can be running. */
const neverSent = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ERR_INVALID_URL', ...certificateRefused]);

/** POSTs the event; never throws: every failure becomes an outcome. */
export async function sendReconcileEvent(options: SendOptions): Promise<DeliveryResult> {
  // Durations on the monotonic clock; an HTTP date in Retry-After is read against wall time.
  const now = () => Math.round(performance.now());
  const started = now();
  const authenticated = authenticate(options.message, options.credentials);
  const { body } = authenticated;
  // A timer of our own, cleared once the answer is read: AbortSignal.timeout's timer and signal
  // would live for the whole timeout after every delivery (thousands at once after a list).
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new DOMException(`no answer within ${options.timeoutMs} ms`, 'TimeoutError')), options.timeoutMs);
  try {
    const headers = options.signer ? await options.signer(options.url, authenticated.headers, body) : authenticated.headers;
    // No redirect is followed (a sink that redirects is misconfigured; its 3xx is its answer).
    // The transport's own timeouts never cut a delivery shorter than the bridge's deadline.
    const transportTimeoutMs = options.timeoutMs + 1000;
    const res = await request(options.url, { method: 'POST', headers, body, signal: deadline.signal, headersTimeout: transportTimeoutMs, bodyTimeout: transportTimeoutMs, ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}) });
    const { text, truncated } = await readCapped(res.body, maxAnswerBytes);
    const status = res.statusCode;
    if (options.signer && (status === 401 || status === 403)) {
      // The front door refused the signature, not the function the event: not this object's
      // fault, and fixable (credentials, policy), so it is retried with backoff.
      const why = `HTTP ${status} from ${new URL(options.url).host}: the AWS SigV4-signed request was refused (${text.slice(0, 200)}); check that the bridge's AWS credentials belong to a principal allowed lambda:InvokeFunctionUrl on this function, and spec.sink.awsIam.region`;
      return { outcome: { kind: 'retry', why, sinkProblem: why }, status, durationMs: now() - started };
    }
    // A 502 or 504 from a proxy in front (Knative's queue-proxy, an ingress), or the function's
    // 409 (a copy of this delivery reached it before): the function may still be working on it.
    const header = (name: string) => {
      const value = res.headers[name];
      return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
    };
    return { outcome: classifyResponse(status, { get: header }, text, Date.now(), truncated), status, durationMs: now() - started, ...(status === 502 || status === 504 || status === 409 ? { mayBeRunning: true } : {}) };
  } catch (err) {
    const e = err as Error & { code?: string; cause?: { code?: string; message?: string } };
    const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError';
    const code = e.cause?.code ?? e.code;
    const why = timedOut
      ? `no answer within ${options.timeoutMs} ms`
      : e.name === 'CredentialsProviderError'
        ? `no AWS credentials to sign with (spec.sink.awsIam): ${e.message}`
        : `request failed: ${code ?? e.cause?.message ?? e.message}`;
    const mayBeRunning = timedOut || (e.name !== 'CredentialsProviderError' && !(code && neverSent.has(code)));
    if (code && certificateRefused.has(code)) {
      const sinkProblem = `the TLS certificate of ${new URL(options.url).host} was refused (${code}: ${e.cause?.message ?? e.message}): it is not signed by a CA of the Reconciler's spec.sink.caBundle (or, without one, a public root), or does not name the host; retrying`;
      return { outcome: { kind: 'retry', why: sinkProblem, sinkProblem }, durationMs: now() - started, transport: 'tls' };
    }
    const transport = timedOut ? 'timeout' : e.name === 'CredentialsProviderError' ? 'credentials' : 'connection';
    return { outcome: { kind: 'retry', why }, durationMs: now() - started, transport, ...(mayBeRunning ? { mayBeRunning } : {}) };
  } finally {
    clearTimeout(timer);
  }
}

/** Why a delivery got no answer of the function's own, as kfn_bridge_sink_failures_total counts it; undefined when the function answered. */
export const sinkFailureReasons = ['timeout', 'connection', 'tls', 'credentials', 'unauthorized', 'throttled', 'unavailable', 'gateway', 'duplicate', 'misrouted', 'invalid_answer', 'clock_skew'] as const;
export type SinkFailure = (typeof sinkFailureReasons)[number];

/**
 * The sink failure a delivery's result shows, if any. A function's own answers are not sink
 * failures: done, requeue, its refusals (4xx, terminal) and its errors (500 with or without
 * writes) are reconciles, counted by controller_runtime_reconcile_*.
 */
export function sinkFailureOf(result: DeliveryResult): SinkFailure | undefined {
  const { outcome, status } = result;
  if (outcome.kind !== 'retry') return undefined;
  if (outcome.invalidAnswer) return 'invalid_answer';
  // The function refused the event for its time alone: nothing was reconciled, and the fix is a
  // clock, not the object.
  if (outcome.clockSkewMs !== undefined) return 'clock_skew';
  if (status === undefined) return result.transport ?? 'connection';
  if (status === 401 || status === 403) return 'unauthorized';
  if (status === 429) return 'throttled';
  if (status === 503) return 'unavailable';
  if (status === 502 || status === 504) return 'gateway';
  if (status === 409) return 'duplicate';
  if (status >= 500) return undefined;
  // A redirect, 404 or 405: the sink's URL does not reach the function.
  return 'misrouted';
}
