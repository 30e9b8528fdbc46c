// Admission webhooks from the same function: `default(obj)` and the declared `defaults` where no
// policy runs them (mutating), and `validate(obj, old)` (validating) of a reconciler, answered as AdmissionReview v1. The apiserver calls them over
// TLS before it stores an object; the answer is computed, nothing is written.
//
//   POST /admission/default   → allowed, with a JSONPatch of what default() changed
//   POST /admission/validate  → allowed, or denied with every problem as "field: message"
import { isDeepStrictEqual } from 'node:util';
import { escapePointerToken, isObject } from '../../core/json.ts';
import type { Problem, Reconciler } from './reconciler.ts';
import { hasDefaulting } from './policies.ts';

export interface AdmissionReview {
  apiVersion: 'admission.k8s.io/v1';
  kind: 'AdmissionReview';
  request?: {
    uid: string;
    kind: { group: string; version: string; kind: string };
    operation: 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';
    name?: string;
    namespace?: string;
    object?: Record<string, unknown> | null;
    oldObject?: Record<string, unknown> | null;
    dryRun?: boolean;
  };
  response?: {
    uid: string;
    allowed: boolean;
    patchType?: 'JSONPatch';
    patch?: string;
    warnings?: string[];
    status?: { code: number; reason: string; message: string; details?: { causes: { field: string; message: string; reason: string }[] } };
  };
}

/** A webhook request that is not a review kfn can answer (AdmissionReview or ConversionReview): the webhook says 400 and why. */
export class MalformedReview extends Error {}

export type JsonPatchOp = { op: 'add' | 'replace'; path: string; value: unknown } | { op: 'remove'; path: string };

const pointer = (parts: (string | number)[]) => parts.map((p) => `/${escapePointerToken(String(p))}`).join('');

/** The JSON Patch (RFC 6902) that turns `from` into `to`: objects field by field, a changed list whole. */
export function jsonPatch(from: unknown, to: unknown, at: (string | number)[] = []): JsonPatchOp[] {
  if (isDeepStrictEqual(from, to)) return [];
  if (!isObject(from) || !isObject(to)) return [{ op: 'replace', path: pointer(at), value: to }];
  const ops: JsonPatchOp[] = [];
  for (const key of Object.keys(from)) if (!(key in to) || to[key] === undefined) ops.push({ op: 'remove', path: pointer([...at, key]) });
  for (const [key, value] of Object.entries(to)) {
    if (value === undefined) continue;
    if (!(key in from) || from[key] === undefined) ops.push({ op: 'add', path: pointer([...at, key]), value });
    else ops.push(...jsonPatch(from[key], value, [...at, key]));
  }
  return ops;
}

/**
 * A webhook review's body as JSON of the expected apiVersion and kind, with an object `request`;
 * anything else is a MalformedReview saying what came instead.
 */
export function readReview(body: string, apiVersion: string, kind: string): { review: Record<string, unknown>; request: Record<string, unknown> } {
  let review: unknown;
  try {
    review = JSON.parse(body);
  } catch {
    throw new MalformedReview(`the body is not JSON: expected an ${apiVersion} ${kind}`);
  }
  if (!isObject(review) || review.apiVersion !== apiVersion || review.kind !== kind) {
    throw new MalformedReview(`expected apiVersion ${apiVersion}, kind ${kind}; got ${isObject(review) ? `${String(review.apiVersion)} ${String(review.kind)}` : typeof review}`);
  }
  return { review, request: isObject(review.request) ? review.request : {} };
}

/** Reads and checks an AdmissionReview request body. */
export function parseAdmissionReview(body: string): Required<Pick<AdmissionReview, 'request'>> & AdmissionReview {
  const { review, request } = readReview(body, 'admission.k8s.io/v1', 'AdmissionReview');
  if (typeof request.uid !== 'string' || !request.uid) throw new MalformedReview('the AdmissionReview has no request.uid');
  if (!['CREATE', 'UPDATE', 'DELETE', 'CONNECT'].includes(request.operation as string)) throw new MalformedReview(`request.operation ${String(request.operation)} is not CREATE, UPDATE, DELETE or CONNECT`);
  return review as unknown as Required<Pick<AdmissionReview, 'request'>> & AdmissionReview;
}

/** "spec.replicas: must be ≤ 10" → field and message; a problem without a "path: " prefix has no field. */
function causeOf(p: Problem): { field: string; message: string } {
  if (typeof p !== 'string') return p;
  const m = /^([A-Za-z0-9_.[\]-]+): (.*)$/s.exec(p);
  return m ? { field: m[1]!, message: m[2]! } : { field: '', message: p };
}

function objectName(obj: Record<string, unknown> | null | undefined): string {
  const meta = (obj?.metadata ?? {}) as { name?: string; generateName?: string };
  return meta.name ?? (meta.generateName ? `${meta.generateName}…` : '(unnamed)');
}

/**
 * Answers one AdmissionReview for `reconciler`: `mode` default runs `default(obj)` and returns
 * the patch of what it changed; validate runs `validate(obj, old)` and denies with every problem.
 * A function that throws is the webhook failing (the caller answers 500; the apiserver then
 * applies the webhook's failurePolicy).
 */
export async function admit(reconciler: Reconciler, mode: 'default' | 'validate', review: ReturnType<typeof parseAdmissionReview>): Promise<AdmissionReview> {
  const { request } = review;
  const answer = (response: Omit<NonNullable<AdmissionReview['response']>, 'uid'>): AdmissionReview => ({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: request.uid, ...response } });
  const expected = reconciler.for;
  if (request.kind.kind !== expected.kind || request.kind.group !== expected.group) {
    return answer({ allowed: false, status: { code: 400, reason: 'BadRequest', message: `this webhook admits ${expected.kind}.${expected.group}, not ${request.kind.kind}.${request.kind.group}` } });
  }
  const obj = request.object ?? undefined;
  if (!obj || request.operation === 'DELETE' || request.operation === 'CONNECT') return answer({ allowed: true });
  if (mode === 'default') {
    if (!hasDefaulting(reconciler)) return answer({ allowed: true });
    // The declared defaults first, as the apiserver's policies would have run them; then default().
    const { object: _o, oldObject: _old, ...rest } = request;
    // Loaded here, not at start: only a function with declared defaults evaluates CEL (policy-cel.ts).
    const { applyDefaults } = await import('./policy-cel.ts');
    const copy = applyDefaults(reconciler, { operation: request.operation, object: structuredClone(obj) as never, ...(request.oldObject ? { oldObject: request.oldObject as never } : {}), request: rest })!;
    const returned = reconciler.default ? await reconciler.default(copy as never) : undefined;
    const defaulted = (returned ?? copy) as Record<string, unknown>;
    const ops = jsonPatch(obj, defaulted);
    if (ops.length === 0) return answer({ allowed: true });
    return answer({ allowed: true, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(ops)).toString('base64') });
  }
  if (!reconciler.validate) return answer({ allowed: true });
  const problems = ((await reconciler.validate(obj as never, (request.oldObject ?? undefined) as never)) ?? []).map(causeOf);
  if (problems.length === 0) return answer({ allowed: true });
  const text = problems.map((p) => (p.field ? `${p.field}: ${p.message}` : p.message)).join(', ');
  return answer({
    allowed: false,
    status: {
      code: 422,
      reason: 'Invalid',
      message: `${expected.kind}.${expected.group} "${objectName(obj)}" is invalid: ${text}`,
      details: { causes: problems.map((p) => ({ field: p.field, message: p.message, reason: 'FieldValueInvalid' })) },
    },
  });
}
