// Sending one reconcile event to a function and classifying the outcome per the contract.
// Uses undici's fetch directly (not the CloudEvents SDK's transport, which hides the status
// code) — the same client the bridge talks to the apiserver with, rather than a second copy.
import { fetch } from 'undici';
import { authenticate, classifyResponse, type Credentials, type DeliveryOutcome, type HttpMessage } from './contract.ts';

export interface DeliveryResult {
  outcome: DeliveryOutcome;
  /** HTTP status, or undefined when no response came (timeout, refused connection). */
  status?: number;
  durationMs: number;
}

export interface SendOptions {
  url: string;
  message: HttpMessage;
  credentials: Credentials;
  timeoutMs: number;
  now?: () => number;
}

/** POSTs the event; never throws: every failure becomes an outcome. */
export async function sendReconcileEvent(options: SendOptions): Promise<DeliveryResult> {
  const now = options.now ?? Date.now;
  const started = now();
  const { headers, body } = authenticate(options.message, options.credentials);
  try {
    const res = await fetch(options.url, { method: 'POST', headers, body, signal: AbortSignal.timeout(options.timeoutMs), redirect: 'manual' });
    const text = await res.text();
    return { outcome: classifyResponse(res.status, res.headers, text, now()), status: res.status, durationMs: now() - started };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    const why =
      e.name === 'TimeoutError' || e.name === 'AbortError'
        ? `no answer within ${options.timeoutMs} ms`
        : `request failed: ${e.cause?.code ?? e.cause?.message ?? e.message}`;
    return { outcome: { kind: 'retry', why }, durationMs: now() - started };
  }
}
