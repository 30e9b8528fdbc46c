// A kind with two versions, for the conversion tests (unit and on the apiserver): v1 says what
// unit a chest size is in; v1alpha1 had centimetres only.
import { defineKind, t } from '../index.ts';

export const shirtKind = (group = 'shop.kfn.test') =>
  defineKind({
    group,
    version: 'v1',
    kind: 'Shirt',
    spec: t.Object({ chest: t.Object({ value: t.Integer(), unit: t.Union([t.Literal('cm'), t.Literal('in')]) }) }),
    status: t.Object({}),
    previousVersions: [
      {
        version: 'v1alpha1',
        spec: t.Object({ chestCm: t.Integer() }),
        up: (o) => ({ ...o, spec: { chest: { value: (o.spec as { chestCm: number }).chestCm, unit: 'cm' } } }),
        down: (o) => {
          const chest = (o.spec as { chest: { value: number; unit: string } }).chest;
          return { ...o, spec: { chestCm: chest.unit === 'in' ? Math.round(chest.value * 2.54) : chest.value } };
        },
      },
    ],
  });
