// Dotted field paths (`status`, `spec.selector`, `metadata.annotations`): the one walker of
// them, for every use — the bridge's routing by a primary's selector or reference field, the
// projection of an object to the fields a function observes, the SDK's guard on the fields an
// event does not carry, and the sensitive fields an invocation record hashes.
//
// A path is dotted, or already split (`['spec', 'password']`, as Kind.sensitive holds it).
// `*` is a wildcard only where many values are wanted (valuesAt, mapValuesAt): each item of a
// list or value of an object. `*` alone among a kind's observed fields, the whole object, is
// settled before any path is walked (observedFields, core/reconciler-spec.ts).

/** A field path: dotted, or as its parts. */
export type FieldPath = string | readonly string[];

const partsOf = (path: FieldPath): readonly string[] => (typeof path === 'string' ? path.split('.') : path);

/** An object or a list: a value whose fields or items can be read by key (`spec.ports.0`). */
const isContainer = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

/**
 * The one value at `path`; undefined when a field on the way is missing or not an object. A list
 * on the way is read by index (`spec.ports.0`), and `*` is a field name like any other.
 */
export function valueAt(obj: unknown, path: FieldPath): unknown {
  let cur = obj;
  for (const part of partsOf(path)) cur = isContainer(cur) ? cur[part] : undefined;
  return cur;
}

/**
 * Every value at `path`, none for a missing field: `*` stands for each item of a list or value of
 * an object. With `eachItem`, so does any list on the way or at the end, without a `*`: a
 * Reconciler's referenceField `spec.backends.name` reads the name of each backend.
 */
export function valuesAt(obj: unknown, path: FieldPath, options: { eachItem?: boolean } = {}): unknown[] {
  const spread = (v: unknown): unknown[] => (options.eachItem && Array.isArray(v) ? v : [v]);
  let found = spread(obj);
  for (const part of partsOf(path)) found = found.flatMap((v) => (isContainer(v) ? (part === '*' ? Object.values(v) : [v[part]]).flatMap(spread) : []));
  return found.filter((v) => v !== undefined);
}

/**
 * A copy of `obj` with each value at `path` (`*` as in valuesAt) replaced by `change(value, at)`,
 * `at` the field names that led to it. Only the objects on the way are copied, and a missing
 * field stays missing. A list is entered through `*` alone, so that a copy never turns one into
 * an object.
 */
export function mapValuesAt(obj: unknown, path: FieldPath, change: (value: unknown, at: string[]) => unknown): unknown {
  const walk = (v: unknown, rest: readonly string[], at: string[]): unknown => {
    if (!rest.length) return v === undefined ? v : change(v, at);
    if (!isContainer(v)) return v;
    const [head, ...tail] = rest as [string, ...string[]];
    if (Array.isArray(v)) return head === '*' ? v.map((item, i) => walk(item, tail, [...at, String(i)])) : v;
    const keys = head === '*' ? Object.keys(v) : head in v ? [head] : [];
    return keys.length ? { ...v, ...Object.fromEntries(keys.map((k) => [k, walk(v[k], tail, [...at, k])])) } : v;
  };
  return walk(obj, partsOf(path), []);
}

/**
 * Sets `value` at `path` in `target`, making the objects on the way that are missing (or not
 * objects) and copying the others: they may be shared with the object they were read from.
 */
export function setValueAt(target: Record<string, unknown>, path: FieldPath, value: unknown): void {
  const parts = partsOf(path);
  let into = target;
  for (const part of parts.slice(0, -1)) {
    const next = into[part];
    into = into[part] = isContainer(next) ? { ...next } : {};
  }
  into[parts.at(-1)!] = value;
}

/**
 * Copies the value at each of `paths` in `source` into `target`: a projection of an object to
 * the fields a function declares it reads. A path absent in `source` is left out.
 */
export function pickFields<T extends Record<string, unknown>>(target: T, source: Record<string, unknown>, paths: readonly string[]): T {
  for (const path of paths) {
    const value = valueAt(source, path);
    if (value !== undefined) setValueAt(target, path, value);
  }
  return target;
}

/** Paths as a tree whose leaves stand for everything under them. */
export type PathTree = { [field: string]: PathTree | true };

/** `['status', 'spec.selector']` → {status: true, spec: {selector: true}}; `spec` would take in `spec.selector`, in either order. */
export function pathTree(paths: readonly FieldPath[]): PathTree {
  const tree: PathTree = {};
  for (const path of paths) {
    const parts = partsOf(path);
    if (parts.some((_, i) => valueAt(tree, parts.slice(0, i + 1)) === true)) continue;
    setValueAt(tree, parts, true);
  }
  return tree;
}
