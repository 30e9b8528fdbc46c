// A kind's CEL rules, a function's guards on other kinds (ValidatingAdmissionPolicies) and its
// declared defaults (MutatingAdmissionPolicies), on the real apiserver, give the answers
// checkRules, checkAdmission and applyDefaults give without a cluster
// (test/support/rules-cases.ts): the CRD that defineKind writes is accepted with its rules, each
// case's object is refused with each refusal checkRules names (a server-side dry run: nothing is
// stored) or accepted when it names none; an update is tried against an object stored as `old`.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { crdOf } from '../../functions/sdk/kind.ts';
import { checkRules } from '../../functions/sdk/testing.ts';
import { ApiError, applyObject, servedResource, type KubeApi } from '../../kube/api.ts';
import type { Reconciler } from '../../functions/sdk/reconciler.ts';
import { kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { Box, boxes, defaultCases, guardCases, guarding, myAppDefaultCases, myAppRefusals, ruleCases, Shop } from '../support/rules-cases.ts';
import MyAppFunction, { MyApp } from '../../functions/myapp/index.ts';
import { MyResource } from '../../functions/myresource/index.ts';
import { defaultsManifests, policyManifests } from '../../functions/sdk/policies.ts';
import { applyDefaults, checkAdmission } from '../../functions/sdk/testing.ts';
import { servedMutatingPolicies } from '../../cli/functions.ts';
import { waitFor } from '../../core/clock.ts';

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

test("a function's guards, as the apiserver runs them, refuse and allow what checkAdmission says, in the same words", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const ns = await testNamespace(t, cluster, 'guards');
  const policies = policyManifests(guarding, [ns]);
  for (const p of policies) await applyObject(api, p as never, 'kfn-test');
  t.after(async () => {
    for (const p of policies as { kind: string; metadata: { name: string } }[]) await api.request('DELETE', `/apis/admissionregistration.k8s.io/v1/${p.kind === 'ValidatingAdmissionPolicy' ? 'validatingadmissionpolicies' : 'validatingadmissionpolicybindings'}/${p.metadata.name}`).catch(() => undefined);
  });
  const path = (o: { apiVersion: string; kind: string }) => (o.kind === 'Deployment' ? `/apis/apps/v1/namespaces/${ns}/deployments` : `/api/v1/namespaces/${ns}/configmaps`);
  // One policy per guarded kind, each loaded by the apiserver a moment after it is created: until
  // then that kind's requests all pass. So before the cases, each kind's first refused case is
  // tried until it is refused (a guard that never refuses still fails, after 30 s).
  const attempt = (c: (typeof guardCases)[number], name: string): Promise<unknown> => {
    const target = (c.object ?? c.oldObject)!;
    const at = `${path(target)}/${name}`;
    const answer =
      c.operation === 'CREATE' ? api.request('POST', path(target), { query: { dryRun: 'All' }, body: { ...c.object!, metadata: { ...c.object!.metadata, name } } })
      // A merge patch of the new spec: the Deployment's controller writes to it meanwhile, so a
      // PUT on the version stored could meet a conflict instead of the policy.
      : c.operation === 'UPDATE' ? api.request('PATCH', at, { query: { dryRun: 'All' }, body: { spec: c.object!.spec }, contentType: 'application/merge-patch+json' })
      : api.request('DELETE', at, { query: { dryRun: 'All' } });
    return answer.then(() => undefined, (err: unknown) => err);
  };
  const stored = async (c: (typeof guardCases)[number]): Promise<string> => {
    const name = uniqueName((c.object ?? c.oldObject)!.metadata.name);
    if (c.oldObject) await api.request('POST', path(c.oldObject), { body: { ...c.oldObject, metadata: { ...c.oldObject.metadata, name } } });
    return name;
  };
  const kindOf = (c: (typeof guardCases)[number]) => (c.object ?? c.oldObject)!.kind;
  for (const kind of new Set(guardCases.map(kindOf))) {
    const probe = guardCases.find((c) => c.refusals.length && kindOf(c) === kind);
    if (!probe) continue;
    const name = await stored(probe);
    // Refused in the policy's words: another error (a 429, a reset) is not the policy in force.
    const refused = async () => {
      const answer = await attempt(probe, name);
      return (answer instanceof ApiError && probe.refusals.every((r) => answer.message.includes(r))) || undefined;
    };
    await waitFor(`the policy on ${kind} to be in force (${probe.name}: refused)`, refused, { timeoutMs: 30_000, intervalMs: 200 });
  }
  for (const c of guardCases) {
    const local = checkAdmission(guarding, { operation: c.operation, object: c.object, oldObject: c.oldObject });
    assert.equal(local.length, c.refusals.length, `${c.name}: checkAdmission`);
    const answer = await attempt(c, await stored(c));
    if (!c.refusals.length) {
      assert.equal(answer, undefined, `${c.name}: the apiserver allows it too (${String(answer)})`);
      continue;
    }
    assert.ok(answer instanceof ApiError, `${c.name}: refused (${String(answer)})`);
    for (const line of local) {
      assert.ok(answer.message.includes(line), `${c.name}: the apiserver says ${JSON.stringify(line)} too; it said: ${answer.message}`);
    }
    t.diagnostic(`${c.name}: ${answer.status} ${answer.message}`);
  }
});

test("MyApp's rules hold with no function running: its CRD alone refuses what checkRules refuses, in the same words", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  // The CRD `kfn manifests` writes; other tests of MyApp share it, so it stays.
  await applyObject(api, crdOf(MyApp) as never, 'kfn-test');
  await servedResource(api, MyApp.apiVersion, MyApp.kind, { timeoutMs: 30_000 });
  const ns = await testNamespace(t, cluster, 'myapp-rules');
  const myapps = `/apis/${MyApp.apiVersion}/namespaces/${ns}/myapps`;
  const body = (spec: object) => ({ apiVersion: MyApp.apiVersion, kind: MyApp.kind, metadata: { name: uniqueName('app') }, spec });
  const bad = { replicas: 11, image: 'Nginx:latest' };
  assert.deepEqual(checkRules(MyApp, { spec: bad }), myAppRefusals);
  const answer = await api.request('POST', myapps, { query: { dryRun: 'All' }, body: body(bad) }).then(() => undefined, (err: unknown) => err);
  assert.ok(answer instanceof ApiError && answer.status === 422, `refused as invalid (${String(answer)})`);
  for (const refusal of myAppRefusals) assert.ok(answer.message.includes(refusal), `the apiserver says ${JSON.stringify(refusal)} too; it said: ${answer.message}`);
  t.diagnostic(`with no function: ${answer.message}`);
  await api.request('POST', myapps, { query: { dryRun: 'All' }, body: body({ replicas: 10, image: 'kfn.local/nginx:1.22' }) });
});

test("MyResource's memory check holds with no function running: its CRD (Kubernetes' quantity library) refuses what checkRules refuses, in the same words", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  // The CRD `kfn manifests` writes; MyResource's other tests share it, so it stays.
  await applyObject(api, crdOf(MyResource) as never, 'kfn-test');
  await servedResource(api, MyResource.apiVersion, MyResource.kind, { timeoutMs: 30_000 });
  const ns = await testNamespace(t, cluster, 'myresource-rules');
  const objects = `/apis/${MyResource.apiVersion}/namespaces/${ns}/myresources`;
  for (const memory of [256, '3000Ki', '3.5Mi', '8Gi', '1024Mi', '4Gi', '4Mi']) {
    const spec = { image: 'kfn.local/busybox:1.35', memory };
    const local = checkRules(MyResource, { spec });
    const answer = await api.request('POST', objects, { query: { dryRun: 'All' }, body: { apiVersion: MyResource.apiVersion, kind: MyResource.kind, metadata: { name: uniqueName('res') }, spec } }).then(() => undefined, (err: unknown) => err);
    if (!local.length) {
      assert.equal(answer, undefined, `${memory}: the apiserver accepts it too (${String(answer)})`);
      continue;
    }
    assert.ok(answer instanceof ApiError && answer.status === 422, `${memory}: refused as invalid (${String(answer)})`);
    for (const refusal of local) assert.ok(answer.message.includes(refusal), `${memory}: the apiserver says ${JSON.stringify(refusal)} too; it said: ${answer.message}`);
    assert.equal(answer.message.match(/spec\.memory: /g)?.length, local.length, `${memory}: no refusal checkRules does not name; the apiserver said: ${answer.message}`);
    t.diagnostic(`${memory}: ${answer.message}`);
  }
});

test("MyApp's defaults with no function running: the apiserver's MutatingAdmissionPolicy stores what applyDefaults says, and its CRD's rules check the defaulted object", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  await applyObject(api, crdOf(MyApp) as never, 'kfn-test');
  await servedResource(api, MyApp.apiVersion, MyApp.kind, { timeoutMs: 30_000 });
  const ns = await testNamespace(t, cluster, 'myapp-defaults');
  const fn = await withDefaultsPolicy(t, api, MyAppFunction, ns);
  const myapps = `/apis/${MyApp.apiVersion}/namespaces/${ns}/myapps`;
  const object = (name: string, spec: { replicas: number; image: string }) => ({ apiVersion: MyApp.apiVersion, kind: MyApp.kind, metadata: { name }, spec });
  type Stored = { metadata: { name: string }; spec: { image: string } };
  // The apiserver takes a moment to load a new policy: until then it stores what it is sent.
  await waitFor('the policy to be in force', async () => (await api.request<Stored>('POST', myapps, { query: { dryRun: 'All' }, body: object(uniqueName('probe'), { replicas: 1, image: 'nginx' }) })).spec.image === 'nginx:latest' || undefined, { timeoutMs: 30_000 });
  for (const c of myAppDefaultCases) {
    const sent = object(uniqueName('app'), { replicas: 1, image: c.image });
    assert.equal(applyDefaults(fn, { operation: 'CREATE', object: sent })!.spec.image, c.stored, `${c.image}: applyDefaults`);
    const stored = await api.request<Stored>('POST', myapps, { query: { dryRun: 'All' }, body: sent });
    assert.equal(stored.spec.image, c.stored, `${c.image}: the apiserver stores ${c.stored} too`);
  }
  // On an update too.
  await api.request('POST', myapps, { body: object('web', { replicas: 1, image: 'nginx:1.22' }) });
  const updated = await api.request<Stored>('PATCH', `${myapps}/web`, { body: { spec: { image: 'kfn.local/busybox' } }, contentType: 'application/merge-patch+json' });
  assert.equal(updated.spec.image, 'kfn.local/busybox:latest');
  // Validation comes after every mutation: the CRD's rules see the defaulted image.
  const answer = await api.request('POST', myapps, { query: { dryRun: 'All' }, body: object('bad', { replicas: 11, image: 'Nginx' }) }).then(() => undefined, (err: unknown) => err);
  assert.ok(answer instanceof ApiError && answer.status === 422, `refused as invalid (${String(answer)})`);
  for (const refusal of myAppRefusals) assert.ok(answer.message.includes(refusal), `the apiserver says ${JSON.stringify(refusal)}; it said: ${answer.message}`);
  t.diagnostic(`defaulted, then refused: ${answer.message}`);
});

test("a function's declared defaults, as the apiserver's MutatingAdmissionPolicy runs them, store what applyDefaults says: in order, maps, an item appended; not on a metadata-only update", async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  await applyObject(api, crdOf(Box) as never, 'kfn-test');
  t.after(() => api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${Box.plural}.${Box.group}`).catch(() => undefined));
  await servedResource(api, Box.apiVersion, Box.kind, { timeoutMs: 30_000 });
  const ns = await testNamespace(t, cluster, 'defaults');
  const fn = await withDefaultsPolicy(t, api, boxes, ns);
  const path = `/apis/${Box.apiVersion}/namespaces/${ns}/boxes`;
  type Stored = { metadata: { name: string; labels?: Record<string, string> }; spec: Record<string, unknown> };
  const body = (name: string, spec: Record<string, unknown>) => ({ apiVersion: Box.apiVersion, kind: Box.kind, metadata: { name }, spec });
  await waitFor('the policy to be in force', async () => (await api.request<Stored>('POST', path, { query: { dryRun: 'All' }, body: body(uniqueName('probe'), {}) })).spec.size === 1 || undefined, { timeoutMs: 30_000 });
  for (const c of defaultCases) {
    const sent = body(uniqueName('box'), c.spec);
    const local = applyDefaults(fn, { operation: 'CREATE', object: sent })!;
    assert.deepEqual({ spec: local.spec, labels: (local.metadata as { labels?: unknown }).labels }, { labels: undefined, ...c.stored }, `${c.name}: applyDefaults`);
    const stored = await api.request<Stored>('POST', path, { query: { dryRun: 'All' }, body: sent });
    assert.deepEqual({ spec: stored.spec, labels: stored.metadata.labels }, { labels: undefined, ...c.stored }, `${c.name}: the apiserver stores the same`);
  }
  // A metadata-only update is left alone (a default would have replaced the labels); a spec update is defaulted.
  await api.request('POST', path, { body: body('kept', {}) });
  const relabelled = await api.request<Stored>('PATCH', `${path}/kept`, { body: { metadata: { labels: { team: 'a' } } }, contentType: 'application/merge-patch+json' });
  assert.deepEqual(relabelled.metadata.labels, { size: '1', team: 'a' });
  const resized = await api.request<Stored>('PATCH', `${path}/kept`, { body: { spec: { size: 4 } }, contentType: 'application/merge-patch+json' });
  assert.deepEqual(resized.metadata.labels, { size: '4' });
});

/**
 * `fn`'s declared defaults as the apiserver's policy, bound to `ns`, removed when the test ends.
 * Named (and labelled) as a function of its own: kfn's tools remove a function's policies that
 * its manifests no longer name, and other tests deploy the examples meanwhile.
 */
async function withDefaultsPolicy(t: TestContext, api: KubeApi, declared: Reconciler, ns: string): Promise<Reconciler> {
  // The local cluster turns MutatingAdmissionPolicy on (beta in Kubernetes 1.34 and 1.35).
  const version = await servedMutatingPolicies(api);
  assert.ok(version, 'the local cluster serves MutatingAdmissionPolicy');
  const fn = { ...declared, name: uniqueName(declared.name) };
  const policies = defaultsManifests(fn, version, [ns]) as { kind: string; metadata: { name: string } }[];
  for (const p of policies) await applyObject(api, p as never, 'kfn-test');
  t.after(async () => {
    for (const p of policies) await api.request('DELETE', `/apis/${version}/${p.kind === 'MutatingAdmissionPolicy' ? 'mutatingadmissionpolicies' : 'mutatingadmissionpolicybindings'}/${p.metadata.name}`).catch(() => undefined);
  });
  return fn;
}
