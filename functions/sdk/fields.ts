// Is a server-side apply needed? Two questions, both answered without a write:
//
//   1. Does the live object hold every field the function wants (values compared the way the
//      apiserver stores them: quantities by value, numbers as strings where it converts)?
//   2. Does kfn's field manager still own a field the function no longer wants? Then applying
//      is what removes it: server-side apply deletes fields its manager owned and dropped.
//
// The second question is read from the live object's managedFields (the manager's fieldsV1
// set), so a dropped label, env var, limit or ConfigMap key is a change, while an idle resync
// still makes no write at all.
import { sameQuantity } from '../../kube/quantity.ts';

function sameScalar(live: unknown, desired: unknown): boolean {
  return live === desired || (typeof desired === 'number' && String(desired) === live) || (typeof desired === 'string' && typeof live === 'string' && sameQuantity(live, desired));
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * True when `live` already holds every field of `desired` (extra fields in live are fine).
 * Quantities compare by value, since the apiserver stores them in canonical form.
 */
export function contains(live: unknown, desired: unknown): boolean {
  if (desired === null || typeof desired !== 'object') return sameScalar(live, desired);
  if (Array.isArray(desired)) {
    return Array.isArray(live) && live.length === desired.length && desired.every((d, i) => contains(live[i], d));
  }
  if (!isRecord(live)) return false;
  return Object.entries(desired).every(([k, v]) => v === undefined || contains(live[k], v));
}

/** A fieldsV1 set: `f:<field>`, `k:<list-map key JSON>`, `v:<set value JSON>`, `i:<index>`, `.`. */
export type FieldSet = { [path: string]: FieldSet };

/**
 * True when every field of `owned` is still present in `desired`. List items owned by key
 * (`k:{"name":"x"}`) match a desired item whose key fields are equal; a key field the desired
 * item leaves out matches too (the apiserver fills defaults such as a port's protocol into keys).
 */
export function covers(desired: unknown, owned: FieldSet): boolean {
  for (const [path, sub] of Object.entries(owned)) {
    if (path === '.') continue;
    const kind = path.slice(0, 2);
    const rest = path.slice(2);
    let next: unknown;
    if (kind === 'f:') {
      if (!isRecord(desired) || desired[rest] === undefined || desired[rest] === null) return false;
      next = desired[rest];
    } else if (kind === 'k:') {
      if (!Array.isArray(desired)) return false;
      let key: Record<string, unknown>;
      try {
        key = JSON.parse(rest) as Record<string, unknown>;
      } catch {
        return false;
      }
      next = desired.find((item) => isRecord(item) && Object.entries(key).every(([k, v]) => item[k] === undefined || sameScalar(v, item[k]) || sameScalar(item[k], v)));
      if (next === undefined) return false;
    } else if (kind === 'v:') {
      if (!Array.isArray(desired)) return false;
      let value: unknown;
      try {
        value = JSON.parse(rest);
      } catch {
        return false;
      }
      if (!desired.some((item) => contains(value, item) && contains(item, value))) return false;
      continue;
    } else if (kind === 'i:') {
      const index = Number(rest);
      if (!Array.isArray(desired) || !(index < desired.length)) return false;
      next = desired[index];
    } else {
      return false; // a path form this code does not know: apply, and let the apiserver decide
    }
    if (sub && Object.keys(sub).length > 0 && !covers(next, sub)) return false;
  }
  return true;
}

interface ManagedFieldsEntry {
  manager?: string;
  operation?: string;
  apiVersion?: string;
  subresource?: string;
  fieldsV1?: FieldSet;
}

/**
 * Whether applying `desired` as `manager` would change `live`: a field is missing or differs,
 * or the manager owns a field `desired` no longer sets (the apply removes it). An object the
 * manager has never applied at this apiVersion is written once, which records the ownership.
 * `subresource` is `'status'` for the status.
 */
export function applyNeeded(live: { metadata?: Record<string, unknown> } | undefined, desired: { apiVersion?: string; [field: string]: unknown }, manager: string, subresource = ''): boolean {
  if (!live || !contains(live, stripIdentity(desired, subresource))) return true;
  const entries = (Array.isArray(live.metadata?.managedFields) ? live.metadata.managedFields : []) as ManagedFieldsEntry[];
  const mine = entries.filter((e) => e.manager === manager && e.operation === 'Apply' && (e.subresource ?? '') === subresource);
  if (mine.length !== 1 || mine[0]!.apiVersion !== desired.apiVersion) return true;
  return !covers(desired, mine[0]!.fieldsV1 ?? {});
}

/** apiVersion and kind are not stored on every read (a list's items lack them). */
function stripIdentity(desired: { apiVersion?: string }, subresource: string): unknown {
  const { apiVersion: _a, kind: _k, ...rest } = desired as Record<string, unknown>;
  if (subresource === 'status') return { status: rest.status };
  return rest;
}
