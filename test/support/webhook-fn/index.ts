// A function whose check only code can make, so it is served as a validating admission webhook:
// the tests of kfn's webhook path (a deployed function's certificate and registration, kfn
// manifests' webhook objects) use it. A Chore runs on a cron schedule; its five fields must each
// be `*`, numbers, ranges or lists in range, with an optional step.
import { defineKind, defineReconciler, t } from '../../../functions/sdk/index.ts';

export const Chore = defineKind({
  group: 'chores.kfn.test',
  version: 'v1',
  kind: 'Chore',
  spec: t.Object({ schedule: t.String({ maxLength: 128 }) }),
  status: t.Object({}),
});

const fields = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12 },
  { name: 'day of week', min: 0, max: 6 },
];

/** What is wrong with a cron schedule, or undefined. */
export function scheduleProblem(schedule: string): string | undefined {
  const parts = schedule.trim().split(/\s+/);
  if (parts.length !== fields.length) return `has ${parts.length} fields, not ${fields.length} (minute hour day-of-month month day-of-week)`;
  for (const [i, part] of parts.entries()) {
    const { name, min, max } = fields[i]!;
    for (const item of part.split(',')) {
      const m = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(item);
      if (!m) return `${name} "${item}" is not *, a number, a range or a list`;
      for (const n of [m[2], m[3]].filter((v) => v !== undefined).map(Number)) if (n < min || n > max) return `${name} ${n} is not within ${min}–${max}`;
      if (m[4] !== undefined && Number(m[4]) === 0) return `${name} "${item}" steps by 0`;
    }
  }
  return undefined;
}

export default defineReconciler({
  name: 'chores',
  for: Chore,
  validate(chore) {
    const problem = scheduleProblem(chore.spec.schedule);
    return problem ? [`spec.schedule: ${problem}`] : [];
  },
  reconcile: () => ({}),
});
