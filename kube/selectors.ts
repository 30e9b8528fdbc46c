// Which labels a label selector selects, in Kubernetes' semantics: as an object (matchLabels,
// matchExpressions, or a Service-style plain map) and as the string the API takes.

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

/**
 * Kubernetes label-selector semantics: an empty selector matches everything, a missing one
 * nothing. A plain string map (a Service-style selector) is read as matchLabels.
 */
export function selectorMatches(selector: unknown, labels: Record<string, string> = {}): boolean {
  if (typeof selector !== 'object' || selector === null || Array.isArray(selector)) return false;
  const s = selector as LabelSelector & Record<string, unknown>;
  const structured = 'matchLabels' in s || 'matchExpressions' in s;
  const matchLabels = structured ? (s.matchLabels ?? {}) : (s as Record<string, string>);
  for (const [k, v] of Object.entries(matchLabels)) if (labels[k] !== v) return false;
  for (const e of (structured ? s.matchExpressions : undefined) ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const value = labels[e.key];
    switch (e.operator) {
      case 'In':
        if (!has || !(e.values ?? []).includes(value!)) return false;
        break;
      case 'NotIn':
        if (has && (e.values ?? []).includes(value!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false; // an operator we do not know matches nothing, as the apiserver rejects it
    }
  }
  return true;
}

/** Label selectors as strings: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`. */
export function labelSelectorMatches(selector: string | undefined, labels: Record<string, string> = {}): boolean {
  if (!selector) return true;
  const terms = selector.match(/[^,(]+(\([^)]*\))?/g) ?? [];
  return terms.every((raw) => {
    const term = raw.trim();
    let m: RegExpMatchArray | null;
    if ((m = term.match(/^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/))) {
      const values = m[3]!.split(',').map((v) => v.trim());
      const has = m[1]! in labels && values.includes(labels[m[1]!]!);
      return m[2] === 'in' ? has : !has;
    }
    if ((m = term.match(/^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$/))) return m[2] === '!=' ? labels[m[1]!] !== m[3] : labels[m[1]!] === m[3];
    if (term.startsWith('!')) return !(term.slice(1) in labels);
    return term in labels;
  });
}
