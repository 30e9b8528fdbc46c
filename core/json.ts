// JSON values as kfn reads them: a JSON object told apart from a list, and JSON Pointers
// (RFC 6901: `/spec/owns/0/kind`), which JSON Patch and TypeBox's errors use to name a field.
// One definition each, imported everywhere.

/** A JSON object: not null, not a list. */
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One reference token of a JSON Pointer, escaped: `~` → `~0`, then `/` → `~1`. */
export const escapePointerToken = (token: string): string => token.replaceAll('~', '~0').replaceAll('/', '~1');

/** One reference token of a JSON Pointer, unescaped: `~1` → `/`, then `~0` → `~` (in that order, so `~01` is `~1`). */
export const unescapePointerToken = (token: string): string => token.replaceAll('~1', '/').replaceAll('~0', '~');

/** The unescaped reference tokens of a JSON Pointer: `/a~1b/0` → `['a/b', '0']`, `''` (the whole document) → `[]`. */
export const pointerTokens = (pointer: string): string[] => pointer.split('/').slice(1).map(unescapePointerToken);

/** A JSON Pointer below `root`, as a message names the field: `/shelves/0/slots` below `spec` → `spec.shelves[0].slots`. */
export function pointerAsField(root: string, pointer: string): string {
  return `${root}${pointerTokens(pointer).map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`)).join('')}`;
}
