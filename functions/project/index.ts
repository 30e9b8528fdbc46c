// Project (xyz.com/v1): spec.image runs as a Deployment; spec.password goes into a Secret that
// the Deployment reads — never into a ConfigMap, a log line, the journal or the status.
// status.Ready is the seed's boolean, beside the standard Ready condition.
import { Deployment, Pod, Secret, defineKind, defineReconciler, explainedFields, explainWorkload, t, type ObjectOf } from '../sdk/index.ts';

export const Project = defineKind({
  group: 'xyz.com',
  version: 'v1',
  kind: 'Project',
  spec: t.Object({
    image: t.String({ minLength: 1 }),
    // Sensitive: invocation records hold a digest, and no message the SDK writes shows it.
    password: t.String({ minLength: 1, sensitive: true }),
  }),
  status: t.Object({ Ready: t.Optional(t.Boolean()) }),
  printerColumns: [
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
    { name: 'Ready', type: 'boolean', jsonPath: '.status.Ready' },
  ],
});
type Proj = ObjectOf<typeof Project>;

const secretName = (p: Proj) => `${p.metadata.name}-credentials`;

export default defineReconciler({
  name: 'project',
  for: Project,
  owns: [Secret, Deployment],
  // Its events carry the Deployment's pod selector besides annotations and status: explainWorkload lists its pods by it.
  observe: [{ kind: Deployment, fields: explainedFields }],
  // Lists its pods when not Ready, to say why (explainWorkload: an image that cannot be pulled, a crash loop, …).
  uses: [{ kind: Pod, verbs: ['list'] }],
  async reconcile(project, ctx) {
    const labels = { 'app.kubernetes.io/name': 'project', 'app.kubernetes.io/instance': project.metadata.name };
    const live = ctx.owned(Deployment, project.metadata.name);
    const available = (live?.status?.availableReplicas ?? 0) >= 1;
    const why = available ? undefined : await explainWorkload(ctx, Deployment, live);
    return {
      children: [
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: secretName(project), labels }, type: 'Opaque', data: { password: Buffer.from(project.spec.password).toString('base64') } },
        {
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name: project.metadata.name, labels },
          spec: {
            replicas: 1,
            selector: { matchLabels: labels },
            template: {
              metadata: { labels },
              spec: {
                containers: [
                  {
                    name: 'web',
                    image: project.spec.image,
                    env: [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: secretName(project), key: 'password' } } }],
                  },
                ],
              },
            },
          },
        },
      ],
      status: { Ready: available },
      ready: available || { ready: false, reason: 'DeploymentNotAvailable', message: why ?? `waiting for Deployment ${project.metadata.name}` },
    };
  },
});
