// PodBuggerTool (apps.jicki.cn/v1alpha1): pods whose labels match the tool's selector get an
// ephemeral debug container running the tool's image — once per pod — through the
// pods/ephemeralcontainers subresource. The bridge maps Pod events to tools by the selector
// stored in each tool (mapping selectorField: spec.selector). Status lists the debugged pods.
import { Pod, defineKind, defineReconciler, selectorMatches, t } from '../sdk/index.ts';

const requirement = t.Object({ key: t.String(), operator: t.Union([t.Literal('In'), t.Literal('NotIn'), t.Literal('Exists'), t.Literal('DoesNotExist')]), values: t.Optional(t.Array(t.String())) });

export const PodBuggerTool = defineKind({
  group: 'apps.jicki.cn',
  version: 'v1alpha1',
  kind: 'PodBuggerTool',
  spec: t.Object({
    selector: t.Object({ matchLabels: t.Optional(t.Record(t.String(), t.String())), matchExpressions: t.Optional(t.Array(requirement)) }),
    image: t.String({ minLength: 1, default: 'kfn.local/busybox:1.35' }),
  }),
  status: t.Object({ debuggedPods: t.Optional(t.Array(t.String())) }),
  printerColumns: [
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
    { name: 'Debugged', type: 'string', jsonPath: '.status.debuggedPods' },
  ],
});

export default defineReconciler({
  name: 'podbuggertool',
  for: PodBuggerTool,
  watches: [{ ...Pod, mapping: { selectorField: 'spec.selector' }, list: true }],
  uses: [{ kind: Pod, verbs: ['patch'], subresource: 'ephemeralcontainers' }],
  async reconcile(tool, ctx) {
    const ns = tool.metadata.namespace!;
    const debugName = `podbugger-${tool.metadata.name}`.slice(0, 63);
    const pods = (await ctx.list(Pod, { namespace: ns })).filter((p) => !p.metadata.deletionTimestamp && selectorMatches(tool.spec.selector, p.metadata.labels));
    const debugged: string[] = [];
    for (const pod of pods) {
      if (!pod.spec?.ephemeralContainers?.some((c) => c.name === debugName)) {
        if (pod.status?.phase !== 'Running') continue; // only running pods can take a debug container
        await ctx.api.request('PATCH', `/api/v1/namespaces/${ns}/pods/${pod.metadata.name}/ephemeralcontainers`, {
          body: { spec: { ephemeralContainers: [{ name: debugName, image: tool.spec.image, stdin: true, tty: true, targetContainerName: pod.spec?.containers[0]?.name }] } },
          contentType: 'application/strategic-merge-patch+json',
        });
        ctx.log.info({ pod: pod.metadata.name }, 'debug container added');
      }
      debugged.push(pod.metadata.name);
    }
    return { status: { debuggedPods: debugged.sort() } };
  },
});
