// Field-level differences between two JSON values, and between two lists of writes: what
// `kfn replay` and the dev UI show ("~ spec.replicas: 1 → 3").
import { isObject } from '../../core/json.ts';
import type { Exchange } from '../../kube/api.ts';

export interface FieldChange {
  path: string;
  change: 'added' | 'removed' | 'changed';
  from?: unknown;
  to?: unknown;
}

function join(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  if (/^[A-Za-z_$][\w$-]*$/.test(key)) return path ? `${path}.${key}` : key;
  return `${path}[${JSON.stringify(key)}]`;
}

/** Every leaf that differs from `before` to `after`, in a stable order. */
export function diffValues(before: unknown, after: unknown, path = ''): FieldChange[] {
  if (before === undefined && after === undefined) return [];
  if (before === undefined) return [{ path: path || '.', change: 'added', to: after }];
  if (after === undefined) return [{ path: path || '.', change: 'removed', from: before }];
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((k) => diffValues(before[k], after[k], join(path, k)));
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const out: FieldChange[] = [];
    for (let i = 0; i < Math.max(before.length, after.length); i++) out.push(...diffValues(before[i], after[i], join(path, i)));
    return out;
  }
  return JSON.stringify(before) === JSON.stringify(after) ? [] : [{ path: path || '.', change: 'changed', from: before, to: after }];
}

/**
 * The fields of `desired` that `live` lacks or holds differently: what an apply of `desired`
 * would change, read without the fields the apiserver fills in. Removed fields are not shown
 * here (SSA removes what kfn owned and no longer sends; the write decision covers that).
 */
export function desiredChanges(live: unknown, desired: unknown, path = ''): FieldChange[] {
  if (isObject(desired)) {
    // A new object: each of its fields is added (one line per leaf, as for an existing one).
    if (!isObject(live) && live !== undefined) return [{ path: path || '.', change: 'changed', from: live, to: desired }];
    const keys = Object.keys(desired).sort();
    if (!keys.length && live === undefined) return [{ path: path || '.', change: 'added', to: desired }];
    return keys.flatMap((k) => desiredChanges(isObject(live) ? live[k] : undefined, desired[k], join(path, k)));
  }
  if (Array.isArray(desired) && live === undefined) {
    if (!desired.length) return [{ path: path || '.', change: 'added', to: desired }];
    return desired.flatMap((d, i) => desiredChanges(undefined, d, join(path, i)));
  }
  if (Array.isArray(desired)) {
    if (!Array.isArray(live)) return [{ path: path || '.', change: live === undefined ? 'added' : 'changed', from: live, to: desired }];
    const out: FieldChange[] = [];
    for (let i = 0; i < desired.length; i++) out.push(...desiredChanges(live[i], desired[i], join(path, i)));
    return out;
  }
  if (live === undefined) return [{ path: path || '.', change: 'added', to: desired }];
  // Quantities and numbers given as strings compare by their text, as the apiserver keeps them.
  return String(live) === String(desired) ? [] : [{ path: path || '.', change: 'changed', from: live, to: desired }];
}

function short(value: unknown): string {
  const text = JSON.stringify(value) ?? 'undefined';
  return text.length > 120 ? `${text.slice(0, 117)}…` : text;
}

/** One line per change: `+ path: value`, `- path: value`, `~ path: from → to`. */
export function formatChanges(changes: FieldChange[], indent = '    '): string[] {
  return changes.map((c) =>
    c.change === 'added' ? `${indent}+ ${c.path}: ${short(c.to)}` : c.change === 'removed' ? `${indent}- ${c.path}: ${short(c.from)}` : `${indent}~ ${c.path}: ${short(c.from)} → ${short(c.to)}`,
  );
}

export interface WriteComparison {
  /** `PATCH /apis/apps/v1/namespaces/default/deployments/web` (POSTs add the created object's name). */
  key: string;
  status: 'same' | 'changed' | 'added' | 'removed';
  changes: FieldChange[];
  then?: Exchange;
  now?: Exchange;
}

function writeKey(write: Exchange): string {
  const name = write.method === 'POST' && isObject(write.body) && isObject(write.body.metadata) ? `/${String(write.body.metadata.name)}` : '';
  return `${write.method} ${write.path}${name}`;
}

/**
 * Pairs the writes made then with the writes made now (by method, path and, for creations, the
 * name) and says of each whether its body is the same. The dry-run flag itself is not a difference.
 */
export function compareWrites(then: Exchange[], now: Exchange[]): WriteComparison[] {
  const pending = new Map<string, Exchange[]>();
  for (const w of then) {
    const key = writeKey(w);
    pending.set(key, [...(pending.get(key) ?? []), w]);
  }
  const out: WriteComparison[] = [];
  for (const w of now) {
    const key = writeKey(w);
    const earlier = pending.get(key)?.shift();
    if (!earlier) {
      out.push({ key, status: 'added', changes: diffValues(undefined, w.body), now: w });
      continue;
    }
    const changes = diffValues(earlier.body, w.body);
    out.push({ key, status: changes.length ? 'changed' : 'same', changes, then: earlier, now: w });
  }
  for (const [key, rest] of pending) for (const w of rest) out.push({ key, status: 'removed', changes: diffValues(w.body, undefined), then: w });
  return out;
}

/** True when every write compares the same. */
export function writesEqual(comparisons: WriteComparison[]): boolean {
  return comparisons.every((c) => c.status === 'same');
}
