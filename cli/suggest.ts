// "Did you mean": the one place that decides which known name a mistyped command or flag most
// likely meant, so that every command answers a typo the same way.

/**
 * The Damerau–Levenshtein distance in its optimal-string-alignment form: the fewest insertions,
 * deletions, substitutions and swaps of two neighbouring characters that turn `a` into `b`
 * (a swap counts once: "deplyo" is one edit from "deploy", as a typist sees it).
 */
export function editDistance(a: string, b: string): number {
  // d[i][j]: the distance between the first i characters of a and the first j of b.
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidate `input` most likely meant, ignoring case: the nearest within two edits (fewer
 * than the input's length, or anything short would match anything short), else the only one
 * that begins with it; undefined when none is likely enough to name.
 */
export function closest(input: string, candidates: readonly string[]): string | undefined {
  const typed = input.toLowerCase();
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    const distance = editDistance(typed, candidate.toLowerCase());
    if (distance <= 2 && distance < typed.length && (!best || distance < best.distance)) best = { candidate, distance };
  }
  if (best) return best.candidate;
  const begun = typed.length >= 2 ? candidates.filter((c) => c.toLowerCase().startsWith(typed)) : [];
  return begun.length === 1 ? begun[0] : undefined;
}
