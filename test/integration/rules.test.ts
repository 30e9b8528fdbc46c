// A kind's CEL rules on the real apiserver give the answers checkRules gives without a cluster
// (test/support/rules-cases.ts): the CRD that defineKind writes is accepted with its rules, each
// case's object is refused with each refusal checkRules names (a server-side dry run: nothing is
// stored) or accepted when it names none; an update is tried against an object stored as `old`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crdOf } from '../../functions/sdk/kind.ts';
import { checkRules } from '../../functions/sdk/testing.ts';
import { ApiError, applyObject, servedResource } from '../../kube/api.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { ruleCases, Shop } from '../support/rules-cases.ts';

test('the apiserver refuses and accepts what checkRules says it would, in the same words', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  await applyObject(api, crdOf(Shop) as never, 'kfn-test');
  t.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${Shop.plural}.${Shop.group}`).catch(() => undefined));
  await servedResource(api, Shop.apiVersion, Shop.kind, { timeoutMs: 30_000 });
  const ns = await testNamespace(t, cluster, 'rules');
  const shops = `/apis/${Shop.apiVersion}/namespaces/${ns}/shops`;
  const body = (name: string, spec: Record<string, unknown>, resourceVersion?: string) => ({ apiVersion: Shop.apiVersion, kind: Shop.kind, metadata: { name, ...(resourceVersion ? { resourceVersion } : {}) }, spec });
  for (const c of ruleCases) {
    const local = checkRules(Shop, { spec: c.spec }, c.old && { spec: c.old });
    assert.deepEqual(local, c.refusals, `${c.name}: checkRules`);
    const name = uniqueName('shop');
    let attempt: Promise<unknown>;
    if (c.old) {
      const stored = await api.request<{ metadata: { resourceVersion: string } }>('POST', shops, { body: body(name, c.old) });
      attempt = api.request('PUT', `${shops}/${name}`, { query: { dryRun: 'All' }, body: body(name, c.spec, stored.metadata.resourceVersion) });
    } else {
      attempt = api.request('POST', shops, { query: { dryRun: 'All' }, body: body(name, c.spec) });
    }
    const answer = await attempt.then(() => undefined, (err: unknown) => err);
    if (!c.refusals.length) {
      assert.equal(answer, undefined, `${c.name}: the apiserver accepts it too (${String(answer)})`);
      continue;
    }
    assert.ok(answer instanceof ApiError && answer.status === 422, `${c.name}: refused as invalid (${String(answer)})`);
    for (const refusal of c.refusals) assert.ok(answer.message.includes(refusal), `${c.name}: the apiserver says ${JSON.stringify(refusal)} too; it said: ${answer.message}`);
    t.diagnostic(`${c.name}: ${answer.message}`);
  }
});
