// Kubernetes' CEL quantity library, as the apiserver offers it to a CRD's rules and to admission
// policies: `isQuantity('512Mi')`, `quantity('512Mi')`, `sign(q)`, and on a quantity
// `isInteger()`, `asInteger()`, `asApproximateFloat()`, `add`, `sub` (a quantity or an int),
// `compareTo`, `isGreaterThan`, `isLessThan`; two quantities read from text are equal (`==`) by
// value (`quantity('1Gi') == quantity('1024Mi')`).
//
// The answers follow apimachinery's resource.Quantity, which the apiserver's library wraps, down
// to the form a value is kept in: ParseQuantity keeps a value that fits as an int64 times a power
// of ten (`1000m` is 1000 × 10⁻³, `1k` is 1 × 10³) and anything else as an arbitrary decimal
// (`1.5Gi`, more than 18 digits, finer than 1n); `isInteger()` is true only for the first kind
// at a power of ten of zero or more, so `1000m`, `1.0` and `1.5Gi` are not integers there. Sums
// keep that form as apimachinery's do (a zero side takes the other's form). A binary value above
// 2⁶³-1 is capped to it; anything finer than 1n rounds away from zero to it.
//
// A CEL value of a type of its own must be a protobuf message for @bufbuild/cel, so a quantity is
// one: `kubernetes.Quantity`, the apiserver's type name, holding its exact value as digits times a
// power of ten in lowest terms, so that equal values are equal messages. The form it is kept in lives beside the message, not in
// it, so that it does not make two equal values unequal.
//
// Where kfn differs: arithmetic that would need a power of ten beyond ±10,000 (the sum of
// `1e99999999` and 1, a number of more than 18 digits times such a power) is refused with an
// evaluation error, where the apiserver computes it: it would take this evaluator's
// arbitrary-precision arithmetic seconds of CPU (comparisons need none: they go by magnitude
// first). `==` between a quantity read from text and one from add/sub is true here by value; the
// apiserver has no such overload. And the message's fields (`digits`, `exponent`) can be read
// here; the apiserver's quantity has none.
import { CelScalar, celFunc, celMethod, objectType } from '@bufbuild/cel';
import { create, createFileRegistry, type DescMessage } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { reflect, type ReflectMessage } from '@bufbuild/protobuf/reflect';

const STRING = 9;
const INT32 = 5;
const OPTIONAL = 1;
const registry = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: 'kfn/kubernetes-quantity.proto',
    package: 'kubernetes',
    syntax: 'proto3',
    messageType: [
      {
        name: 'Quantity',
        field: [
          { name: 'digits', number: 1, type: STRING, label: OPTIONAL, jsonName: 'digits' },
          { name: 'exponent', number: 2, type: INT32, label: OPTIONAL, jsonName: 'exponent' },
        ],
      },
    ],
  }),
  () => undefined,
);
const schema = registry.getMessage('kubernetes.Quantity') as DescMessage;
const QUANTITY = objectType(schema);

/** How apimachinery keeps a quantity: an int64 times 10^scale, or an arbitrary decimal (unscaled / 10^scale). */
type Form = { kind: 'int'; value: bigint; scale: number } | { kind: 'dec'; unscaled: bigint; scale: number };

const int64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n };
const fitsInt64 = (n: bigint) => n >= int64.min && n <= int64.max;
/** The largest power of ten this evaluator computes with (above). */
const maxPower = 10_000;
const pow10 = (n: number) => {
  if (Math.abs(n) > maxPower) throw new Error(`a quantity's power of ten beyond ±${maxPower} is more than kfn's evaluator computes with`);
  return 10n ** BigInt(n);
};

const decimalSuffixes: Record<string, number> = { n: -9, u: -6, m: -3, '': 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const binarySuffixes: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };

/** The parts of a quantity's text as apimachinery's parseQuantityString reads them, or undefined. */
function parts(text: string): { positive: boolean; value: string; num: string; denom: string; suffix: string } | undefined {
  const m = /^([+-]?)(0*)(\d*)(?:\.(\d*))?([eEinumkKMGTP]*(?:[+-]?\d+)?)$/.exec(text);
  if (!m) return undefined;
  const [, sign = '', , digits = '', fraction, suffix = ''] = m;
  // An all-zero number (and a bare sign) is 0, with nothing after it read.
  if (!digits && fraction === undefined && !suffix) return { positive: sign !== '-', value: '0', num: '0', denom: '', suffix: '' };
  const value = text.slice(0, text.length - suffix.length);
  return { positive: sign !== '-', value, num: digits || '0', denom: fraction ?? '', suffix };
}

/** A quantity's form as ParseQuantity leaves it, or undefined when it is not one. */
export function parseForm(text: string): Form | undefined {
  if (!text) return undefined;
  if (text === '0') return { kind: 'int', value: 0n, scale: 0 };
  const p = parts(text);
  if (!p) return undefined;
  let base: 2 | 10;
  let exponent: number;
  let format: 'decimal' | 'binary';
  if (p.suffix in decimalSuffixes) [base, exponent, format] = [10, decimalSuffixes[p.suffix]!, 'decimal'];
  else if (p.suffix in binarySuffixes) [base, exponent, format] = [2, binarySuffixes[p.suffix]!, 'binary'];
  else if (/^[eE][+-]?\d+$/.test(p.suffix)) {
    // apimachinery reads the exponent as an int64 and keeps it as an int32, what is above dropped.
    const parsed = BigInt(p.suffix.slice(1));
    if (!fitsInt64(parsed)) return undefined;
    exponent = Number(BigInt.asIntN(32, parsed));
    [base, format] = [10, 'decimal'];
  } else return undefined;
  // The fast path: an int64 times a power of ten.
  let precision: number;
  let scale = 0;
  let mantissa = 1n;
  if (format === 'decimal') {
    scale = exponent;
    precision = 18 - (p.num.length + p.denom.length);
  } else if (exponent >= 0 && p.denom.length === 0) {
    mantissa = 1n << BigInt(exponent);
    // (1Mi has about 6 decimal digits: what is left of 15 for the number.)
    precision = 15 - p.num.length - Math.trunc((exponent * 3) / 10) - 1;
  } else precision = -1;
  if (precision >= 0) {
    scale -= p.denom.length;
    if (scale >= -9) {
      const value = BigInt(p.num + p.denom) * mantissa;
      if (fitsInt64(value)) return { kind: 'int', value: p.positive ? value : -value, scale };
    }
  }
  // An arbitrary decimal: the number as written, times its suffix, finer than 1n rounded away from
  // zero, a binary one capped at 2^63-1.
  let unscaled = BigInt(`${p.num}${p.denom}`);
  let decScale = p.denom.length;
  if (base === 10) decScale -= exponent;
  else unscaled *= 1n << BigInt(exponent);
  if (unscaled !== 0n) {
    // Below 1n by more digits than it has: 1n once rounded.
    if (decScale - 9 > String(unscaled).length) unscaled = 1n;
    else if (decScale > 9) {
      const unit = pow10(decScale - 9);
      unscaled = (unscaled + unit - 1n) / unit;
    } else unscaled *= pow10(9 - decScale);
    decScale = 9;
  }
  if (format === 'binary' && unscaled > int64.max * 10n ** 9n) unscaled = int64.max * 10n ** 9n;
  return { kind: 'dec', unscaled: p.positive ? unscaled : -unscaled, scale: decScale };
}

/** A form's exact value: digits × 10^exponent, in lowest terms (no trailing zero; 0 as 0 × 10⁰). */
function exactOf(form: Form): { digits: bigint; exponent: number } {
  let [digits, exponent] = form.kind === 'int' ? [form.value, form.scale] : [form.unscaled, -form.scale];
  if (digits === 0n) return { digits, exponent: 0 };
  while (digits % 10n === 0n) {
    digits /= 10n;
    exponent++;
  }
  return { digits, exponent };
}

const forms = new WeakMap<object, Form>();

/** A form as a CEL value: its exact value in lowest terms, the form beside it. */
function quantityValue(form: Form): ReflectMessage {
  const { digits, exponent } = exactOf(form);
  const message = create(schema, { digits: String(digits), exponent } as never);
  forms.set(message, form);
  return reflect(schema, message);
}

function formOf(q: ReflectMessage): Form {
  const known = forms.get(q.message);
  if (known) return known;
  // A message made some other way (a literal): its exact value as a decimal.
  const m = q.message as unknown as { digits: string; exponent: number };
  return { kind: 'dec', unscaled: BigInt(m.digits || '0'), scale: -m.exponent };
}

/** Both forms' digits over the same power of ten (the smaller). */
function aligned(a: Form, b: Form): [bigint, bigint, number] {
  const x = exactOf(a);
  const y = exactOf(b);
  const exponent = Math.min(x.exponent, y.exponent);
  return [x.digits * pow10(x.exponent - exponent), y.digits * pow10(y.exponent - exponent), exponent];
}

const signOf = (n: bigint) => (n < 0n ? -1n : n > 0n ? 1n : 0n);
/** The position of a nonzero value's first digit: its order of magnitude. */
const magnitude = (x: { digits: bigint; exponent: number }) => String(x.digits < 0n ? -x.digits : x.digits).length + x.exponent;

const compare = (a: ReflectMessage, b: ReflectMessage) => {
  const x = exactOf(formOf(a));
  const y = exactOf(formOf(b));
  const [sx, sy] = [signOf(x.digits), signOf(y.digits)];
  if (sx !== sy) return sx < sy ? -1n : 1n;
  if (sx === 0n) return 0n;
  // Values of one sign and different magnitudes compare without arithmetic.
  if (magnitude(x) !== magnitude(y)) return (magnitude(x) < magnitude(y)) === (sx > 0n) ? -1n : 1n;
  const [p, q] = aligned(formOf(a), formOf(b));
  return signOf(p - q);
};

/** apimachinery's Add: two int64 forms stay one when the sum fits (a zero side takes the other's form), else a decimal. */
function add(a: Form, b: Form): Form {
  if (a.kind === 'int' && b.kind === 'int') {
    if (b.value === 0n) return a;
    if (a.value === 0n) return b;
    const scale = Math.min(a.scale, b.scale);
    // Shifted by more than 18 places a nonzero int64 is no int64.
    if (Math.max(a.scale, b.scale) - scale <= 18) {
      const x = a.value * 10n ** BigInt(a.scale - scale);
      const y = b.value * 10n ** BigInt(b.scale - scale);
      if (fitsInt64(x) && fitsInt64(y) && fitsInt64(x + y)) return { kind: 'int', value: x + y, scale };
    }
  }
  // As decimals (an int64 form's scale is its power of ten negated), summed at the finer scale.
  const [x, xs] = a.kind === 'int' ? [a.value, -a.scale] : [a.unscaled, a.scale];
  const [y, ys] = b.kind === 'int' ? [b.value, -b.scale] : [b.unscaled, b.scale];
  const scale = Math.max(xs, ys);
  return { kind: 'dec', unscaled: x * pow10(scale - xs) + y * pow10(scale - ys), scale };
}
const negated = (f: Form): Form => (f.kind === 'int' ? { ...f, value: -f.value } : { ...f, unscaled: -f.unscaled });
const ofInt = (n: bigint): Form => ({ kind: 'int', value: n, scale: 0 });

/** apimachinery's AsInt64: an int64 form at a power of ten of zero or more that stays within int64. */
function integerOf(q: ReflectMessage): bigint | undefined {
  const f = formOf(q);
  if (f.kind !== 'int' || f.scale < 0) return undefined;
  if (f.value === 0n) return 0n;
  if (f.scale > 18) return undefined;
  const n = f.value * 10n ** BigInt(f.scale);
  return fitsInt64(n) ? n : undefined;
}

/** Whether `text` is a quantity to apimachinery (one whose power of ten kfn does not compute with is). */
function isQuantity(text: string): boolean {
  try {
    return parseForm(text) !== undefined;
  } catch {
    return true;
  }
}

export const quantityFuncs = [
  celFunc('isQuantity', [CelScalar.STRING], CelScalar.BOOL, isQuantity),
  celFunc('quantity', [CelScalar.STRING], QUANTITY, (s) => {
    const form = parseForm(s);
    if (!form) throw new Error(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`);
    return quantityValue(form);
  }),
  // A function, not a method, in the apiserver: `sign(quantity('-1'))`.
  celFunc('sign', [QUANTITY], CelScalar.INT, (q) => signOf(exactOf(formOf(q)).digits)),
  celMethod('isInteger', QUANTITY, [], CelScalar.BOOL, function () {
    return integerOf(this) !== undefined;
  }),
  celMethod('asInteger', QUANTITY, [], CelScalar.INT, function () {
    const n = integerOf(this);
    if (n === undefined) throw new Error('cannot convert value to integer');
    return n;
  }),
  celMethod('asApproximateFloat', QUANTITY, [], CelScalar.DOUBLE, function () {
    // As apimachinery: the kept digits as a float64, times 10 to the kept power.
    const f = formOf(this);
    const [digits, power] = f.kind === 'int' ? [f.value, f.scale] : [f.unscaled, -f.scale];
    return power === 0 ? Number(digits) : Number(digits) * 10 ** power;
  }),
  celMethod('add', QUANTITY, [QUANTITY], QUANTITY, function (other) {
    return quantityValue(add(formOf(this), formOf(other)));
  }),
  celMethod('add', QUANTITY, [CelScalar.INT], QUANTITY, function (other) {
    return quantityValue(add(formOf(this), ofInt(other)));
  }),
  celMethod('sub', QUANTITY, [QUANTITY], QUANTITY, function (other) {
    return quantityValue(add(formOf(this), negated(formOf(other))));
  }),
  celMethod('sub', QUANTITY, [CelScalar.INT], QUANTITY, function (other) {
    return quantityValue(add(formOf(this), ofInt(-other)));
  }),
  celMethod('compareTo', QUANTITY, [QUANTITY], CelScalar.INT, function (other) {
    return compare(this, other);
  }),
  celMethod('isGreaterThan', QUANTITY, [QUANTITY], CelScalar.BOOL, function (other) {
    return compare(this, other) > 0n;
  }),
  celMethod('isLessThan', QUANTITY, [QUANTITY], CelScalar.BOOL, function (other) {
    return compare(this, other) < 0n;
  }),
];

/** The registry that knows `kubernetes.Quantity`, for the CEL environment. */
export const quantityRegistry = registry;
