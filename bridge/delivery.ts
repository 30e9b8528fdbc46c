// Sending one reconcile event to a function and classifying the outcome per the contract.
// Uses undici's request API directly (not the CloudEvents SDK's transport, which hides the
// status code; not fetch, whose WHATWG objects and web streams cost more than the rest of a
// delivery) — the same client the bridge talks to the apiserver with, rather than a second copy.
import { request } from 'undici';
import { authenticate, type Credentials, type HttpMessage } from '../core/authentication.ts';
import { classifyResponse, type DeliveryOutcome } from '../core/response.ts';
import type { RequestSigner } from './sigv4.ts';

export interface DeliveryResult {
  outcome: DeliveryOutcome;
  /** HTTP status, or undefined when no response came (timeout, refused connection). */
  status?: number;
  durationMs: number;
  /** The sink's front door refused the request's signature (SigV4). */
  refusedSignature?: boolean;
  /** No answer within the timeout: the function may still be working on it. */
  timedOut?: boolean;
}

export interface SendOptions {
  url: string;
  message: HttpMessage;
  credentials: Credentials;
  timeoutMs: number;
  now?: () => number;
  /** Adds a signature for the sink's front door (AWS SigV4 for a Lambda Function URL with AWS_IAM). */
  signer?: RequestSigner;
}

/** POSTs the event; never throws: every failure becomes an outcome. */
export async function sendReconcileEvent(options: SendOptions): Promise<DeliveryResult> {
  const now = options.now ?? Date.now;
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
    const res = await request(options.url, { method: 'POST', headers, body, signal: deadline.signal });
    const text = await res.body.text();
    const status = res.statusCode;
    if (options.signer && (status === 401 || status === 403)) {
      // The front door refused the signature, not the function the event: not this object's
      // fault, and fixable (credentials, policy), so it is retried with backoff.
      const why = `HTTP ${status} from ${new URL(options.url).host}: the AWS SigV4-signed request was refused (${text.slice(0, 200)}); check that the bridge's AWS credentials belong to a principal allowed lambda:InvokeFunctionUrl on this function, and spec.sink.awsIam.region`;
      return { outcome: { kind: 'retry', why }, status, durationMs: now() - started, refusedSignature: true };
    }
    // A 504 from a proxy in front (Knative's queue-proxy, an ingress) is a timeout too: the
    // function behind it may still be working on the event.
    const header = (name: string) => {
      const value = res.headers[name];
      return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
    };
    return { outcome: classifyResponse(status, { get: header }, text, now()), status, durationMs: now() - started, ...(status === 504 ? { timedOut: true } : {}) };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError';
    const why = timedOut
      ? `no answer within ${options.timeoutMs} ms`
      : e.name === 'CredentialsProviderError'
        ? `no AWS credentials to sign with (spec.sink.awsIam): ${e.message}`
        : `request failed: ${e.cause?.code ?? e.cause?.message ?? e.message}`;
    return { outcome: { kind: 'retry', why }, durationMs: now() - started, ...(timedOut ? { timedOut } : {}) };
  } finally {
    clearTimeout(timer);
  }
}
