// MyResource (mygroup.example.com/v1alpha1): the seed's first controller. It owns a ConfigMap
// and a Job running spec.image with spec.memory as its memory limit, and status.state follows
// the Job. A Job's template cannot change, so the Job's name carries a hash of the spec: an
// edit starts a new Job and the old one is pruned.
import { createHash } from 'node:crypto';
import { ConfigMap, Job, Pod, defineKind, defineReconciler, explainedFields, explainWorkload, quantity, t, type ObjectOf } from '../sdk/index.ts';

/** The least and the most memory a MyResource may ask for. */
export const minMemory = '4Mi';
export const maxMemory = '4Gi';
// A bare number too small is bytes, and the refusal says what it likely meant. (A CRD's message
// cannot print a computed number: the apiserver's cost estimate refuses `string()` of one.)
const tooLittle = `string(self).matches('^[0-9]+$') ? 'is ' + string(self) + ' bytes, too little to run a container; did you mean ' + string(self) + 'Mi?' : 'is less than ${minMemory}, too little to run a container'`;

export const MyResource = defineKind({
  group: 'mygroup.example.com',
  version: 'v1alpha1',
  kind: 'MyResource',
  shortNames: ['my', 'myres'],
  categories: ['all'],
  spec: t.Object({
    image: t.String({ minLength: 1 }),
    // A memory limit that cannot be meant is refused before it is stored, by the apiserver itself
    // (CEL in the CRD, with Kubernetes' quantity library), so it holds with the function at zero:
    // a bare number is bytes (the Job's container would be killed at once), and more than 4Gi is
    // more than a task of this kind may ask.
    memory: t.Unsafe<number | string>({
      ...quantity(),
      pattern: '^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$',
      maxLength: 32,
      'x-kubernetes-validations': [
        { rule: `!isQuantity(string(self)) || !quantity(string(self)).isLessThan(quantity('${minMemory}'))`, messageExpression: tooLittle },
        { rule: `!isQuantity(string(self)) || !quantity(string(self)).isGreaterThan(quantity('${maxMemory}'))`, message: `must be at most ${maxMemory}` },
      ],
    }),
  }),
  status: t.Object({ state: t.Optional(t.String()) }),
  printerColumns: [
    { name: 'image', type: 'string', jsonPath: '.spec.image' },
    { name: 'memory', type: 'string', jsonPath: '.spec.memory' },
    { name: 'age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
  ],
});
type Res = ObjectOf<typeof MyResource>;

interface LiveJob {
  status?: { active?: number; succeeded?: number; failed?: number; conditions?: { type: string; status: string }[] };
}

const jobName = (r: Res) => `${r.metadata.name}-${createHash('sha256').update(JSON.stringify(r.spec)).digest('hex').slice(0, 8)}`;

/** The seed's states, from the Job's status. */
function stateOf(job: LiveJob | undefined): string {
  const done = (type: string) => job?.status?.conditions?.some((c) => c.type === type && c.status === 'True');
  if (!job) return 'Pending';
  if (done('Complete')) return 'Succeeded';
  if (done('Failed')) return 'Failed';
  return job.status?.active ? 'Running' : 'Pending';
}

export default defineReconciler({
  name: 'myresource',
  for: MyResource,
  owns: [ConfigMap, Job],
  // Its events carry the Job's pod selector besides annotations and status: explainWorkload lists its pods by it.
  observe: [{ kind: Job, fields: explainedFields }],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  async reconcile(res, ctx) {
    const memory = String(res.spec.memory);
    const live = ctx.owned(Job, jobName(res));
    const state = stateOf(live);
    const why = state === 'Succeeded' ? undefined : await explainWorkload(ctx, Job, live);
    return {
      children: [
        { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: res.metadata.name }, data: { image: res.spec.image, memory } },
        {
          apiVersion: 'batch/v1',
          kind: 'Job',
          metadata: { name: jobName(res) },
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                containers: [{ name: 'main', image: res.spec.image, resources: { limits: { memory } }, envFrom: [{ configMapRef: { name: res.metadata.name } }] }],
              },
            },
          },
        },
      ],
      status: { state },
      ready: state === 'Succeeded' || { ready: false, reason: `Job${state}`, message: why ? `Job ${jobName(res)} is ${state}: ${why}` : `Job ${jobName(res)} is ${state}` },
    };
  },
});
