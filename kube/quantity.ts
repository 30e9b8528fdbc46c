// Kubernetes quantities ("512Mi", "250m", "1e3", 2), read as apimachinery's resource.Quantity
// reads them, and compared exactly: the apiserver stores a quantity in its canonical form
// ("1024Mi" comes back as "1Gi"), so a desired value and the stored one agree by value, not text.
//
//   quantity ::= signedNumber suffix
//   suffix   ::= binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m "" k M G T P E) | (e|E) signedNumber
//   number   ::= digits | digits "." digits | digits "." | "." digits

const pattern = /^([+-]?)(\d*)(?:\.(\d*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$/;
const binary: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };
const decimal: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/** A quantity's exact value: numerator / 10^scale (scale 0 to 9). */
interface Exact {
  numerator: bigint;
  scale: number;
}

/**
 * A quantity's exact value, as the apiserver keeps it (nothing finer than 1n); undefined if it is
 * not one, or if its power of ten is beyond ±10,000 (arbitrary-precision arithmetic on such a
 * number would take seconds).
 */
function exactQuantity(q: unknown): Exact | undefined {
  if (typeof q === 'number') return Number.isFinite(q) ? exactQuantity(String(q)) : undefined;
  if (typeof q !== 'string') return undefined;
  const m = pattern.exec(q);
  if (!m) return undefined;
  const [, sign, whole = '', fraction = '', suffix, exponent] = m;
  if (!whole && !fraction) return undefined; // a number needs a digit on one side of the point
  let numerator = BigInt(`${sign === '-' ? '-' : ''}${whole}${fraction}` || '0');
  let scale = fraction.length;
  if (suffix && suffix in binary) numerator *= 2n ** BigInt(binary[suffix]!);
  else scale -= suffix ? decimal[suffix]! : Number(exponent ?? 0);
  if (Math.abs(scale) > 10_000) return undefined;
  if (scale < 0) {
    numerator *= 10n ** BigInt(-scale);
    scale = 0;
  }
  if (scale > 9) {
    // The apiserver keeps nothing finer than 1n: it rounds away from zero to it, and so do we.
    const unit = 10n ** BigInt(scale - 9);
    const magnitude = numerator < 0n ? -numerator : numerator;
    const rounded = (magnitude + unit - 1n) / unit;
    numerator = numerator < 0n ? -rounded : rounded;
    scale = 9;
  }
  return { numerator, scale };
}

/** A Kubernetes quantity's value ("512Mi" → 536870912, "250m" → 0.25, "1e3" → 1000, 2 → 2); undefined if it is not one. */
export function parseQuantity(q: unknown): number | undefined {
  const e = exactQuantity(q);
  return e === undefined ? undefined : Number(e.numerator) / 10 ** e.scale;
}

/** True when both are quantities of exactly the same value ("1024Mi" and "1Gi", "0.5" and "500m"). */
export function sameQuantity(a: unknown, b: unknown): boolean {
  const x = exactQuantity(a);
  const y = exactQuantity(b);
  if (!x || !y) return false;
  const scale = Math.max(x.scale, y.scale);
  return x.numerator * 10n ** BigInt(scale - x.scale) === y.numerator * 10n ** BigInt(scale - y.scale);
}
