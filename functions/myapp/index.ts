// MyApp (app.example.com/v1), the seed's simplest reconcile loop: spec.replicas and spec.image
// become a Deployment of the same name. Create it when missing (scenario A), update it when
// the image or replica count changes (B), do nothing when it is right (C), and let it go with
// the MyApp (D: the garbage collector deletes what the MyApp controls).
import { Deployment, Pod, defineKind, defineReconciler, explainedFields, explainWorkload, t, type Desired, type ObjectOf } from '../sdk/index.ts';

/** At most this many replicas: more is refused by the apiserver (a CEL rule of the CRD). */
export const maxReplicas = 10;

// A container image reference: lowercase repository path, then an optional tag or digest (RE2,
// as CEL's matches() takes it).
const imageReference = '^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?$';

export const MyApp = defineKind({
  group: 'app.example.com',
  version: 'v1',
  kind: 'MyApp',
  spec: t.Object({
    // The seed's validating webhook, now rules the apiserver runs itself (CEL in the CRD): they
    // hold with the function scaled to zero, and every problem is refused at once, by its field.
    replicas: t.Integer({ minimum: 0, default: 1, 'x-kubernetes-validations': [{ rule: `self <= ${maxReplicas}`, message: `must be ≤ ${maxReplicas}` }] }),
    image: t.String({ minLength: 1, maxLength: 512, 'x-kubernetes-validations': [{ rule: `self.matches('${imageReference}')`, message: 'is not an image reference (lowercase name, then :tag or @sha256:digest)' }] }),
  }),
  status: t.Object({ readyReplicas: t.Optional(t.Integer()) }),
  printerColumns: [
    { name: 'Replicas', type: 'integer', jsonPath: '.spec.replicas' },
    { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
  ],
});
type App = ObjectOf<typeof MyApp>;

const deployment = (app: App): Desired<typeof Deployment> => {
  const labels = { 'app.kubernetes.io/name': 'myapp', 'app.kubernetes.io/instance': app.metadata.name };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: app.metadata.name, labels },
    spec: {
      replicas: app.spec.replicas,
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { containers: [{ name: 'app', image: app.spec.image }] } },
    },
  };
};

export default defineReconciler({
  name: 'myapp',
  for: MyApp,
  owns: [Deployment],
  // Its events carry the Deployment's pod selector besides annotations and status: explainWorkload lists its pods by it.
  observe: [{ kind: Deployment, fields: explainedFields }],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  // The webhook half of the seed's operator = CRD + webhook + controller. Defaulting: an image
  // named without a tag gets the one the node would pull anyway, written down (`nginx` →
  // `nginx:latest`), so the stored object says what runs. Declared in CEL: the apiserver writes
  // it itself where it serves MutatingAdmissionPolicy (kfn deploy discovers it), with the
  // function at zero too; elsewhere the function's defaulting webhook applies the same. (The
  // CRD's rules above check the defaulted image: validation comes after every mutation.)
  defaults: [
    {
      when: "has(object.spec) && has(object.spec.image) && object.spec.image != '' && !object.spec.image.contains('@') && !object.spec.image.matches(':[^/]+$')",
      set: { '/spec/image': "object.spec.image + ':latest'" },
    },
  ],
  async reconcile(app, ctx) {
    const live = ctx.owned(Deployment, app.metadata.name);
    const ready = live?.status?.readyReplicas ?? 0;
    const why = ready === app.spec.replicas ? undefined : await explainWorkload(ctx, Deployment, live);
    return {
      children: [deployment(app)],
      status: { readyReplicas: ready },
      ready: ready === app.spec.replicas || { ready: false, reason: 'ReplicasNotReady', message: `${ready}/${app.spec.replicas} replicas ready${why ? `: ${why}` : ''}` },
    };
  },
});
