// The conversion webhook of a kind with previous versions: ConversionReview v1 in, the objects
// at the desired version out. The apiserver stores the current version and asks the function
// (POST /convert) whenever an object is read or written at another one.
import type { Kind, VersionedObject } from './kind.ts';
import { MalformedReview, readReview } from './admission.ts';

export interface ConversionReview {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'ConversionReview';
  request?: { uid: string; desiredAPIVersion: string; objects: VersionedObject[] };
  response?: { uid: string; convertedObjects: VersionedObject[]; result: { status: 'Success' | 'Failure'; message?: string } };
}

/** Reads and checks a ConversionReview request (a malformed one is a 400, as for admission). */
export function parseConversionReview(body: string): ConversionReview & { request: NonNullable<ConversionReview['request']> } {
  const { review, request: r } = readReview(body, 'apiextensions.k8s.io/v1', 'ConversionReview');
  if (typeof r.uid !== 'string' || typeof r.desiredAPIVersion !== 'string' || !Array.isArray(r.objects)) {
    throw new MalformedReview('the ConversionReview needs request.uid, request.desiredAPIVersion and request.objects');
  }
  return review as unknown as ConversionReview & { request: NonNullable<ConversionReview['request']> };
}

/** One object of `kind` converted to `desired` (group/version): through the current version when neither end is it. */
export function convertObject(kind: Kind, obj: VersionedObject, desired: string): VersionedObject {
  const group = kind.group;
  const versionOf = (apiVersion: string | undefined) => {
    const [g, v] = (apiVersion ?? '').split('/');
    if (g !== group || !v) throw new Error(`cannot convert ${apiVersion ?? 'an object without apiVersion'}: ${kind.kind} is in group ${group}`);
    return v;
  };
  const from = versionOf(obj.apiVersion);
  const to = versionOf(desired);
  const previous = kind.options.previousVersions ?? [];
  const step = (version: string) => {
    const p = previous.find((x) => x.version === version);
    if (!p && version !== kind.version) throw new Error(`${kind.kind} has no version ${version} (it serves ${[kind.version, ...previous.map((x) => x.version)].join(', ')})`);
    return p;
  };
  const fromStep = step(from);
  const toStep = step(to);
  if (from === to) return obj;
  // Metadata is the apiserver's: it must come back as it went (labels and annotations aside).
  const keep = (converted: VersionedObject, apiVersion: string): VersionedObject => ({ ...converted, apiVersion, kind: obj.kind, metadata: obj.metadata });
  const current = fromStep ? keep(fromStep.up(structuredClone(obj)), kind.apiVersion) : obj;
  return toStep ? keep(toStep.down(structuredClone(current)), desired) : current;
}

/**
 * Answers a ConversionReview: every object converted, or a Failure naming the object that could
 * not be (the apiserver then refuses the request with that message).
 */
export function convertReview(kind: Kind, review: ReturnType<typeof parseConversionReview>): ConversionReview {
  const { uid, desiredAPIVersion, objects } = review.request;
  const answer = (response: Omit<NonNullable<ConversionReview['response']>, 'uid'>): ConversionReview => ({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'ConversionReview', response: { uid, ...response } });
  const converted: VersionedObject[] = [];
  for (const obj of objects) {
    try {
      converted.push(convertObject(kind, obj, desiredAPIVersion));
    } catch (err) {
      const name = (obj.metadata as { name?: string } | undefined)?.name ?? '(unnamed)';
      return answer({ convertedObjects: [], result: { status: 'Failure', message: `converting ${kind.kind} ${name} from ${obj.apiVersion} to ${desiredAPIVersion}: ${(err as Error).message}` } });
    }
  }
  return answer({ convertedObjects: converted, result: { status: 'Success' } });
}
