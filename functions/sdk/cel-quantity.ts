// Kubernetes' CEL quantity library, as the apiserver offers it to a CRD's rules and to admission
// policies: `isQuantity('512Mi')`, `quantity('512Mi')`, `sign(q)`, and on a quantity
// `isInteger()`, `asInteger()`, `asApproximateFloat()`, `add`, `sub` (a quantity or an int),
// `compareTo`, `isGreaterThan`, `isLessThan`; two quantities are equal (`==`) by value
// (`quantity('1Gi') == quantity('1024Mi')`), though a CRD's cost estimate refuses `==` on them
// (compareTo(...) == 0 passes). Values are exact (kube/quantity.ts: a numerator over
// a power of ten, nothing finer than 1n, as the apiserver keeps them).
//
// A CEL value of a type of its own must be a protobuf message for @bufbuild/cel, so a quantity is
// one: `kubernetes.Quantity`, the apiserver's type name, its numerator and scale in lowest terms,
// so that equal values are equal messages. Whether it is whole (below) is kept beside the message,
// not in it: it must not make two equal values unequal.
//
// `isInteger()` and `asInteger()` answer as the apiserver's do, which depends on the form written,
// not only the value: apimachinery keeps "1000m", "1.0" or "1.5Gi" in a form that is not an int64
// at scale 0 (its AsInt64 says no), so neither is an integer there, while "1k" and "2Mi" are. A
// sum or difference is one when both sides are.
import { CelScalar, celFunc, celMethod, objectType } from '@bufbuild/cel';
import { create, createFileRegistry, type DescMessage } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { reflect, type ReflectMessage } from '@bufbuild/protobuf/reflect';
import { exactQuantity, type Exact } from '../../kube/quantity.ts';

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
          { name: 'numerator', number: 1, type: STRING, label: OPTIONAL, jsonName: 'numerator' },
          { name: 'scale', number: 2, type: INT32, label: OPTIONAL, jsonName: 'scale' },
        ],
      },
    ],
  }),
  () => undefined,
);
const schema = registry.getMessage('kubernetes.Quantity') as DescMessage;
const QUANTITY = objectType(schema);

interface Value extends Exact {
  /** Whether apimachinery holds it as an int64 at scale 0 (above). */
  whole: boolean;
}

const int64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n };
const fitsInt64 = (n: bigint) => n >= int64.min && n <= int64.max;

/** A value in lowest terms (no trailing zero kept in the numerator while there is a scale), as a CEL value. */
function quantityValue({ numerator, scale, whole }: Value): ReflectMessage {
  while (scale > 0 && numerator % 10n === 0n) {
    numerator /= 10n;
    scale--;
  }
  const message = create(schema, { numerator: String(numerator), scale } as never);
  wholes.set(message, whole && scale === 0 && fitsInt64(numerator));
  return reflect(schema, message);
}
const wholes = new WeakMap<object, boolean>();

function valueOf(q: ReflectMessage): Value {
  const m = q.message as unknown as { numerator: string; scale: number };
  return { numerator: BigInt(m.numerator || '0'), scale: m.scale, whole: wholes.get(m) ?? false };
}

const form = /^[+-]?0*(\d*)(?:\.(\d*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|(n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$/;
const powers: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/**
 * Whether apimachinery's ParseQuantity keeps `text` as an int64 at scale 0: a binary suffix with
 * no fraction, or a decimal form whose power of ten covers its fraction's digits, in at most 18
 * digits.
 */
function parsedWhole(text: string): boolean {
  const m = form.exec(text);
  if (!m) return false;
  const [, digits = '', fraction = '', binary, decimal, exponent] = m;
  if (binary) return fraction.length === 0;
  const power = decimal ? powers[decimal]! : Number(exponent ?? 0);
  return digits.length + fraction.length <= 18 && power - fraction.length >= 0;
}

/** Both values over the same power of ten. */
function aligned(a: Exact, b: Exact): [bigint, bigint, number] {
  const scale = Math.max(a.scale, b.scale);
  return [a.numerator * 10n ** BigInt(scale - a.scale), b.numerator * 10n ** BigInt(scale - b.scale), scale];
}

const compare = (a: ReflectMessage, b: ReflectMessage) => {
  const [x, y] = aligned(valueOf(a), valueOf(b));
  return x < y ? -1n : x > y ? 1n : 0n;
};
const sum = (a: Value, b: Value, sign: bigint) => {
  const [x, y, scale] = aligned(a, b);
  return quantityValue({ numerator: x + sign * y, scale, whole: a.whole && b.whole });
};
const integerOf = (q: ReflectMessage): bigint | undefined => {
  const { numerator, scale, whole } = valueOf(q);
  return whole && scale === 0 && fitsInt64(numerator) ? numerator : undefined;
};

export const quantityFuncs = [
  celFunc('isQuantity', [CelScalar.STRING], CelScalar.BOOL, (s) => exactQuantity(s) !== undefined),
  celFunc('quantity', [CelScalar.STRING], QUANTITY, (s) => {
    const q = exactQuantity(s);
    if (!q) throw new Error(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`);
    return quantityValue({ ...q, whole: parsedWhole(s) });
  }),
  // A function, not a method, in the apiserver: `sign(quantity('-1'))`.
  celFunc('sign', [QUANTITY], CelScalar.INT, (q) => {
    const n = valueOf(q).numerator;
    return n < 0n ? -1n : n > 0n ? 1n : 0n;
  }),
  celMethod('isInteger', QUANTITY, [], CelScalar.BOOL, function () {
    return integerOf(this) !== undefined;
  }),
  celMethod('asInteger', QUANTITY, [], CelScalar.INT, function () {
    const n = integerOf(this);
    if (n === undefined) throw new Error('cannot convert value to integer');
    return n;
  }),
  celMethod('asApproximateFloat', QUANTITY, [], CelScalar.DOUBLE, function () {
    const { numerator, scale } = valueOf(this);
    return Number(numerator) / 10 ** scale;
  }),
  celMethod('add', QUANTITY, [QUANTITY], QUANTITY, function (other) {
    return sum(valueOf(this), valueOf(other), 1n);
  }),
  celMethod('add', QUANTITY, [CelScalar.INT], QUANTITY, function (other) {
    return sum(valueOf(this), { numerator: other, scale: 0, whole: true }, 1n);
  }),
  celMethod('sub', QUANTITY, [QUANTITY], QUANTITY, function (other) {
    return sum(valueOf(this), valueOf(other), -1n);
  }),
  celMethod('sub', QUANTITY, [CelScalar.INT], QUANTITY, function (other) {
    return sum(valueOf(this), { numerator: other, scale: 0, whole: true }, -1n);
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
