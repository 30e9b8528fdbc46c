// Which objects under a function's names are kfn's own, from fixtures shaped as the apiserver
// returns them; and what a deploy removes from the other target, against an apiserver held in
// memory: a redeploy to the same target removes nothing and says nothing, a move removes only
// what kfn made.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FakeClock } from '../core/clock.ts';
import type { KubeObject } from '../kube/api.ts';
import { ObjectsByPath } from '../test/support/objects-by-path.ts';
import { isKfnsOwn, removeOtherTarget, removeOwnWorkload } from './targets.ts';

const ns = 'kfn-system';
const kfnLabels = { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/function': 'myweb' };
const paths = {
  deployment: `/apis/apps/v1/namespaces/${ns}/deployments/kfn-fn-myweb`,
  service: `/api/v1/namespaces/${ns}/services/kfn-fn-myweb`,
  ksvc: `/apis/serving.knative.dev/v1/namespaces/${ns}/services/kfn-fn-myweb`,
  account: `/api/v1/namespaces/${ns}/serviceaccounts/kfn-fn-myweb`,
};

/** kfn deploy's Deployment of myweb (as functionWorkload writes it). */
const kfnDeployment: KubeObject = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 'd1', labels: { ...kfnLabels } } };
/** kfn deploy's Service of myweb, in front of that Deployment. */
const kfnService: KubeObject = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 's1', labels: { ...kfnLabels } }, spec: { type: 'ClusterIP', selector: { ...kfnLabels } } };
/** kfn deploy's Knative Service of myweb. */
const kfnKnativeService: KubeObject = { apiVersion: 'serving.knative.dev/v1', kind: 'Service', metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 'k1', labels: { ...kfnLabels } } };
/**
 * The Service Knative makes for that Knative Service's Route, under the same name: it carries
 * the Knative Service's labels (copied to the Route, then to it) and is owned by the Route.
 */
const knativeService: KubeObject = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: {
    name: 'kfn-fn-myweb',
    namespace: ns,
    uid: 's2',
    labels: { ...kfnLabels, 'serving.knative.dev/route': 'kfn-fn-myweb', 'serving.knative.dev/service': 'kfn-fn-myweb' },
    ownerReferences: [{ apiVersion: 'serving.knative.dev/v1', kind: 'Route', name: 'kfn-fn-myweb', uid: 'r1', controller: true }],
  },
  spec: { type: 'ExternalName', externalName: 'kourier-internal.kfn-ingress.svc.cluster.local' },
};

describe('which objects under a function\'s names are kfn\'s own', () => {
  test('kfn\'s Deployment, Service and Knative Service are', () => {
    for (const obj of [kfnDeployment, kfnService, kfnKnativeService]) assert.equal(isKfnsOwn(obj, 'myweb'), true, `${obj.kind} ${obj.apiVersion}`);
  });
  test('the Service Knative made for a Knative Service is not, though it carries kfn\'s labels', () => {
    assert.equal(isKfnsOwn(knativeService, 'myweb'), false);
  });
  test('objects of another function, of another manager, or with no labels are not', () => {
    assert.equal(isKfnsOwn({ ...kfnDeployment, metadata: { ...kfnDeployment.metadata, labels: { ...kfnLabels, 'kfn.dev/function': 'other' } } }, 'myweb'), false);
    assert.equal(isKfnsOwn({ ...kfnService, metadata: { ...kfnService.metadata, labels: { 'kfn.dev/function': 'myweb', 'app.kubernetes.io/managed-by': 'Helm' } } }, 'myweb'), false);
    assert.equal(isKfnsOwn({ ...kfnService, metadata: { name: 'kfn-fn-myweb', namespace: ns } }, 'myweb'), false);
  });
});

/** Deleting a Knative Service takes the Service its Route made with it. */
class FakeObjects extends ObjectsByPath {
  protected override afterDelete(path: string): void {
    const made = this.objects.get(paths.service);
    if (path === paths.ksvc && made?.metadata.ownerReferences?.some((r) => r.kind === 'Route')) this.objects.delete(paths.service);
  }
}

describe('what a deploy removes from the other target', () => {
  const run = async (api: FakeObjects, target: 'deployment' | 'knative') => {
    const said: string[] = [];
    const removed = await removeOtherTarget(api, ns, 'myweb', target, (l) => said.push(l), { clock: new FakeClock() });
    return { said, removed: removed.map((r) => r.kind) };
  };

  test('a second deploy to Knative leaves Knative\'s own Service alone and says nothing', async () => {
    const api = new FakeObjects({ [paths.ksvc]: kfnKnativeService, [paths.service]: knativeService });
    assert.deepEqual(await run(api, 'knative'), { said: [], removed: [] });
    assert.deepEqual(api.deleted, []);
    assert.equal(api.objects.get(paths.service)?.metadata.uid, 's2');
  });

  test('a second deploy as a Deployment, with or without Knative installed, removes nothing', async () => {
    const api = new FakeObjects({ [paths.deployment]: kfnDeployment, [paths.service]: kfnService });
    assert.deepEqual(await run(api, 'deployment'), { said: [], removed: [] });
    assert.deepEqual(api.deleted, []);
  });

  test('a move to Knative removes kfn\'s Deployment and Service', async () => {
    const api = new FakeObjects({ [paths.deployment]: kfnDeployment, [paths.service]: kfnService });
    assert.deepEqual(await run(api, 'knative'), { said: ['Removing myweb\'s Deployment and Service first (it moves to Knative)'], removed: ['Deployment', 'Service'] });
    assert.deepEqual(api.deleted, [paths.deployment, paths.service]);
  });

  test('a move to a Deployment removes kfn\'s Knative Service, whose own Service goes with it', async () => {
    const api = new FakeObjects({ [paths.ksvc]: kfnKnativeService, [paths.service]: knativeService });
    assert.deepEqual(await run(api, 'deployment'), { said: ['Removing myweb\'s Knative Service first (it moves to a Deployment)'], removed: ['Knative Service'] });
    assert.deepEqual(api.deleted, [paths.ksvc], 'only the Knative Service is deleted by kfn');
    assert.equal(api.objects.size, 0);
  });

  test('a Service of the function\'s name that kfn did not make stays', async () => {
    const users = { ...kfnService, metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 'u1' } };
    const api = new FakeObjects({ [paths.deployment]: kfnDeployment, [paths.service]: users });
    assert.deepEqual(await run(api, 'knative'), { said: ['Removing myweb\'s Deployment first (it moves to Knative)'], removed: ['Deployment'] });
    assert.deepEqual(api.deleted, [paths.deployment]);
  });
});

describe('what joining a shared host removes', () => {
  const kfnAccount: KubeObject = { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 'a1', labels: { ...kfnLabels } } };

  test("the function's own Deployment, Service and ServiceAccount go; nothing waits for them", async () => {
    const api = new FakeObjects({ [paths.deployment]: kfnDeployment, [paths.service]: kfnService, [paths.account]: kfnAccount });
    const said: string[] = [];
    const removed = await removeOwnWorkload(api, ns, 'myweb', 'ops', (l) => said.push(l));
    assert.deepEqual(removed.map((r) => r.kind), ['Deployment', 'Service', 'ServiceAccount']);
    assert.deepEqual(said, ["Removing myweb's Deployment, Service and ServiceAccount (it runs in host ops now)"]);
    assert.equal(api.objects.size, 0);
  });

  test('from Knative: its Knative Service goes (Knative\'s own Service with it); an account kfn did not make stays', async () => {
    const users = { ...kfnAccount, metadata: { name: 'kfn-fn-myweb', namespace: ns, uid: 'u2' } };
    const api = new FakeObjects({ [paths.ksvc]: kfnKnativeService, [paths.service]: knativeService, [paths.account]: users });
    const removed = await removeOwnWorkload(api, ns, 'myweb', 'ops', () => undefined);
    assert.deepEqual(removed.map((r) => r.kind), ['Knative Service']);
    assert.deepEqual(api.deleted, [paths.ksvc]);
    assert.equal(api.objects.get(paths.account)?.metadata.uid, 'u2');
  });

  test('a second deploy of the host finds nothing of its own and says nothing', async () => {
    const said: string[] = [];
    assert.deepEqual(await removeOwnWorkload(new FakeObjects({}), ns, 'myweb', 'ops', (l) => said.push(l)), []);
    assert.deepEqual(said, []);
  });
});

