// What tsc must say about children and reads (functions/sdk/types.test.ts compiles this file;
// the project's own type check leaves testdata out). The first line of code after
// `// expect TSnnnn <words>` must have that error with those words in its message; a line
// without an expectation must have no error.
import { ConfigMap, Deployment, Job, child, defineKind, defineReconciler, t, type Desired } from '../../index.ts';

const Shop = defineKind({ group: 'shop.example.com', version: 'v1', kind: 'Shop', spec: t.Object({ replicas: t.Integer() }), status: t.Object({}) });

// A typed helper: the model's fields, checked.
export const good = (name: string): Desired<typeof Deployment> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name },
  spec: { replicas: 2, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'web', image: 'nginx' }] } } },
});

export const misspelled = (name: string): Desired<typeof Deployment> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name },
  // expect TS2561 'replica' does not exist
  spec: { replica: 2, selector: {}, template: {} },
});

export const wrongType = child(Deployment, {
  metadata: { name: 'x' },
  // expect TS2322 not assignable to type 'number'
  spec: { replicas: 'two', selector: {}, template: {} },
});

export const missingRequired = child(Job, {
  metadata: { name: 'x' },
  // expect TS2741 containers
  spec: { template: { spec: {} } },
});

export const misspelledDeep = child(Deployment, {
  metadata: { name: 'x' },
  // expect TS2561 'imagee' does not exist
  spec: { selector: {}, template: { spec: { containers: [{ name: 'web', imagee: 'nginx' }] } } },
});

export default defineReconciler({
  for: Shop,
  owns: [ConfigMap, Deployment],
  reconcile(shop, ctx) {
    // Reads are typed by the kind: no cast.
    const ready: number | undefined = ctx.owned(Deployment, shop.metadata.name)?.status?.readyReplicas;
    // expect TS2551 'readyReplica' does not exist
    const typo = ctx.owned(Deployment, shop.metadata.name)?.status?.readyReplica;
    // expect TS2339 'spec' does not exist
    const notThere = ctx.owned(ConfigMap, shop.metadata.name)?.spec;
    void [ready, typo, notThere];
    return { children: [good(shop.metadata.name), { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c' }, data: { a: 'b' } }] };
  },
});

export const notOwned = defineReconciler({
  for: Shop,
  owns: [ConfigMap, Deployment],
  // A child of a kind the reconciler does not own.
  // expect TS2322 Type '"Job"' is not assignable to type '"ConfigMap" | "Deployment"'
  reconcile: () => ({ children: [{ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'j' }, spec: { template: {} } }] }),
});

export const otherVersion = defineReconciler({
  for: Shop,
  owns: [Deployment],
  // An owned kind at a version the reference does not name.
  // expect TS2322 Type '"apps/v1beta1"' is not assignable to type '"apps/v1"'
  reconcile: () => ({ children: [{ apiVersion: 'apps/v1beta1', kind: 'Deployment', metadata: { name: 'd' } }] }),
});

export const untyped = defineReconciler({
  for: Shop,
  // A kind without a model: its children are any object of that kind.
  owns: [{ apiVersion: 'example.com/v1', kind: 'Widget' }],
  reconcile: () => ({ children: [{ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' }, anything: { goes: true } }] }),
});
