// Functions as Knative Services on Knative Serving (built from its Go modules, Traefik as the
// ingress), the bridge in the cluster delivering to each Service's address; MyApp's rules and
// default held by the apiserver with its function at zero. Serial: the
// in-cluster bridge takes every Reconciler in the cluster.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { JournalEntry } from '../../core/journal.ts';
import { ApiError, type KubeApi } from '../../kube/api.ts';
import { deployFunctions } from '../../cli/deploy.ts';
import { nodePorts } from '../support/ports.ts';
import { followBridgeJournal, installBridge } from '../../cli/incluster.ts';
import { installOnLocalCluster } from '../../cli/knative.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { knativeNamespace, knativeStatus } from '../../cluster/knative.ts';
import { startRegistry } from '../../cluster/registry.ts';
import { kubeApi, testCluster, testNamespace, untilDefaultsApply, type TestCluster } from '../support/cluster.ts';
import { myAppRefusals } from '../support/rules-cases.ts';
import { waitFor } from '../../core/clock.ts';
import { runDemo } from '../support/demo.ts';
import type { ReadCondition as Condition } from '../../core/conditions.ts';
import { identityForAnnotation } from '../../core/names.ts';

const exec = promisify(execFile);
const system = 'kfn-system';
/** The identity of the Reconcilers this test writes by hand. */
const testIdentity = { name: 'kfn-test-knative', namespace: system };
const log = (line: string) => console.error(`[knative] ${line}`);
const nextPort = nodePorts('e2e/knative');

describe('functions on Knative Serving', () => {
  let cluster: TestCluster;
  let api: KubeApi;
  const journal: JournalEntry[] = [];
  let follow: AbortController | undefined;
  const kubectl = (args: string[], input?: string) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, ...args]);
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c));
      child.stderr.on('data', (c: Buffer) => (stderr += c));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(input ?? '');
    });
  const reconcilerReady = async (name: string) => (await api.request<{ status?: { conditions?: Condition[] } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`)).status?.conditions?.find((c) => c.type === 'Ready');

  before(async () => {
    cluster = await testCluster();
    api = kubeApi(cluster.kc);
    // Built on first use (about 10 minutes cold), then applied; a second install is a no-op.
    await installOnLocalCluster({ log });
    await installBridge(api, cluster.state.binDir, 'kfn-test', log);
    await waitFor('the bridge to hold its Lease', async () => (await api.request<{ spec?: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/${system}/leases/kfn-bridge`).catch(() => undefined))?.spec?.holderIdentity, { timeoutMs: 120_000 });
    follow = followBridgeJournal(api, system, (e) => journal.push(e));
  });

  after(async () => {
    follow?.abort();
    for (const name of ['myweb', 'myapp', 'crashy', 'lost']) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined);
    for (const kind of ['mutatingadmissionpolicies', 'mutatingadmissionpolicybindings']) await api.request('DELETE', `/apis/admissionregistration.k8s.io/v1beta1/${kind}/kfn-myapp-myapps.app.example.com`).catch(() => undefined);
    await api.request('DELETE', '/apis/rbac.authorization.k8s.io/v1/clusterroles/kfn-test-knative-sinks').catch(() => undefined);
    await api.request('DELETE', `/api/v1/namespaces/${system}`).catch(() => undefined);
    await waitFor(`namespace ${system} to be gone`, () => api.request('GET', `/api/v1/namespaces/${system}`).then(() => undefined, () => true), { timeoutMs: 180_000 });
  });

  test('Knative and Traefik run as pods; its webhook accepts what kfn writes and refuses a broken Service', async (t) => {
    const status = await knativeStatus(api);
    assert.ok(status?.every((s) => s.ready), `every component available: ${JSON.stringify(status)}`);
    const pods = await api.request<{ items: { spec: { nodeName: string; containers: { image: string }[] }; status: { phase: string } }[] }>('GET', `/api/v1/namespaces/${knativeNamespace}/pods`);
    assert.ok(pods.items.length >= 4 && pods.items.every((p) => p.status.phase === 'Running' && p.spec.nodeName === 'kfn-node-0' && p.spec.containers[0]!.image.startsWith('kfn.local/knative-')), 'real pods on the real node, images built here');

    const ns = await testNamespace(t, cluster, 'kn-webhook');
    const { stdout: manifests } = await exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'manifests', 'functions/myweb', '--target', 'knative', '--namespace', ns], { cwd: repoRoot });
    // Knative's webhook validates a Service by a dry-run Pod under its ServiceAccount, which a
    // dry run of the whole file does not create: the account exists first, as in a real apply.
    await api.request('POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'kfn-fn-myweb' } } });
    const accepted = await kubectl(['apply', '--dry-run=server', '-f', '-'], manifests);
    assert.equal(accepted.code, 0, accepted.stderr);
    assert.match(accepted.stdout, new RegExp(`service.serving.knative.dev/kfn-fn-myweb (created|configured|unchanged) \\(server dry run\\)`));
    const broken = manifests.replace(/name: KFN_AUTH_SECRET\w*/, 'name: K_SERVICE');
    const refused = await kubectl(['apply', '--dry-run=server', '-f', '-'], broken);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /admission webhook "validation\.webhook\.serving\.knative\.dev" denied the request: validation failed: "K_SERVICE" is a reserved environment variable/);
  });

  test('scale to zero: the function has no pod, an object is created, the delivery wakes it, the object becomes Ready', async (t) => {
    const ns = await testNamespace(t, cluster, 'kn-zero');
    // From the local registry, by tag: Knative's controller resolves the tag to a digest there,
    // as in production (only kfn.local skips that), and the revision runs the digest.
    const registry = await startRegistry({ paths: cluster.paths, log });
    await deployFunctions([join(repoRoot, 'functions', 'myweb')], { namespace: system, namespaces: [ns], target: 'knative', windowSeconds: 6, registry: { prefix: registry.host }, log });
    const ready = await kubectl(['-n', system, 'wait', 'ksvc/kfn-fn-myweb', '--for=condition=Ready', '--timeout=60s']);
    assert.equal(ready.code, 0, ready.stderr);
    const revisions = await api.request<{ items: { spec: { containers: { image: string }[] }; status?: { containerStatuses?: { imageDigest?: string }[] } }[] }>('GET', `/apis/serving.knative.dev/v1/namespaces/${system}/revisions`, { query: { labelSelector: 'serving.knative.dev/service=kfn-fn-myweb' } });
    const revision = revisions.items.at(-1)!;
    assert.match(revision.spec.containers[0]!.image, new RegExp(`^${registry.host.replace(/\./g, '\\.')}/fn-myweb:\\S+$`), 'the Service names the tag');
    assert.match(revision.status?.containerStatuses?.[0]?.imageDigest ?? '', new RegExp(`^${registry.host.replace(/\./g, '\\.')}/fn-myweb@sha256:[0-9a-f]{64}$`), 'Knative resolved it to a digest from the registry');
    const ksvc = await api.request<{ status: { url: string; address: { url: string } } }>('GET', `/apis/serving.knative.dev/v1/namespaces/${system}/services/kfn-fn-myweb`);
    assert.equal(ksvc.status.url, `http://kfn-fn-myweb.${system}.svc.cluster.local`);
    const reconciler = await api.request<{ spec: { sink: { ref?: { kind: string; name: string } } } }>('GET', '/apis/kfn.dev/v1alpha1/reconcilers/myweb');
    assert.deepEqual(reconciler.spec.sink.ref && { kind: reconciler.spec.sink.ref.kind, name: reconciler.spec.sink.ref.name }, { kind: 'Service', name: 'kfn-fn-myweb' });

    const fnPods = async () => (await api.request<{ items: { metadata: { name: string } }[] }>('GET', `/api/v1/namespaces/${system}/pods?labelSelector=serving.knative.dev/service=kfn-fn-myweb`)).items;
    await waitFor('the function to scale to zero', async () => (await fnPods()).length === 0 || undefined, { timeoutMs: 150_000, intervalMs: 1000 });

    const port = await nextPort(api);
    const written = Date.now();
    await api.request('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
      body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'woken' }, spec: { nodePortNumber: port, pageContentHtml: '<h1>from zero</h1>' } },
    });
    const done = await waitFor('the bridge to deliver the creation', async () => journal.find((e) => e.key === `${ns}/woken` && e.outcome === 'done' && e.reason === 'created'), { timeoutMs: 120_000 });
    assert.equal(done.sink, `${ksvc.status.address.url}`, 'delivered to the Knative Service address');
    assert.ok((await fnPods()).length >= 1, 'the delivery started a pod');
    const wait = await kubectl(['-n', ns, 'wait', 'myweb/woken', '--for=condition=Ready', '--timeout=90s']);
    assert.equal(wait.code, 0, wait.stderr);
    t.diagnostic(`cold start: write → function answered in ${Date.parse(done.time) - written} ms (delivery ${done.durationMs} ms, attempt ${done.attempt})`);

    // Inside this test: the second deploy is the same as the first only while its watch-namespace exists.
    await t.test('a second deploy with nothing changed changes nothing: Knative\'s own Service is left alone, and it returns in seconds', async (st) => {
      // myweb as deployed above, with the same options: the deploy of `kfn deploy --all
      // --target knative` run twice. Knative's Service for the Route has the function's name and
      // labels; taking it for the Deployment target's cost a minute per function.
      type Meta = { metadata: { uid: string; generation?: number; ownerReferences?: { kind: string }[] } };
      const ksvcPath = `/apis/serving.knative.dev/v1/namespaces/${system}/services/kfn-fn-myweb`;
      const servicePath = `/api/v1/namespaces/${system}/services/kfn-fn-myweb`;
      const before = { ksvc: await api.request<Meta>('GET', ksvcPath), service: await api.request<Meta>('GET', servicePath) };
      assert.deepEqual(before.service.metadata.ownerReferences?.map((r) => r.kind), ['Route'], 'the Service under the function\'s name is the one Knative made for its Route');
      const said: string[] = [];
      const started = Date.now();
      await deployFunctions([join(repoRoot, 'functions', 'myweb')], { namespace: system, namespaces: [ns], target: 'knative', windowSeconds: 6, registry: { prefix: registry.host }, log: (line) => (said.push(line), log(line)) });
      const seconds = (Date.now() - started) / 1000;
      st.diagnostic(`second deploy: ${seconds.toFixed(1)} s`);
      assert.deepEqual(said.filter((l) => /Removing|still being removed/.test(l)), [], 'nothing is removed');
      const after = { ksvc: await api.request<Meta>('GET', ksvcPath), service: await api.request<Meta>('GET', servicePath) };
      assert.equal(after.service.metadata.uid, before.service.metadata.uid, 'Knative\'s Service is the same object');
      assert.equal(after.ksvc.metadata.uid, before.ksvc.metadata.uid);
      assert.equal(after.ksvc.metadata.generation, before.ksvc.metadata.generation, 'the Knative Service is unchanged (no new revision)');
      await assert.rejects(api.request('GET', `/apis/apps/v1/namespaces/${system}/deployments/kfn-fn-myweb`), (err: { status?: number }) => err.status === 404, 'no Deployment target object appeared');
      assert.ok(seconds < 30, `a deploy with nothing changed returns in seconds, not ${seconds.toFixed(1)} s`);
    });
  });

  test("MyApp's rules with its function at zero: the apiserver refuses by its CRD's rules and writes its declared default, with no pod up", async (t) => {
    const ns = await testNamespace(t, cluster, 'kn-rules');
    const registry = await startRegistry({ paths: cluster.paths, log });
    const said: string[] = [];
    await deployFunctions([join(repoRoot, 'functions', 'myapp')], { namespace: system, namespaces: [ns], target: 'knative', windowSeconds: 6, registry: { prefix: registry.host }, log: (line) => (said.push(line), log(line)) });
    assert.ok(said.some((l) => /^myapp: 2 rules of MyApp run in the apiserver \(CEL in its CRD\), with the function at zero too$/.test(l)), said.join('\n'));
    assert.ok(said.some((l) => /^myapp: its defaults are written by the apiserver itself \(MutatingAdmissionPolicy kfn-myapp-myapps\.app\.example\.com\)/.test(l)), said.join('\n'));
    assert.ok(!said.some((l) => /webhook/.test(l)), `nothing needs the function up: ${said.join('\n')}`);
    const fnPods = async () => (await api.request<{ items: unknown[] }>('GET', `/api/v1/namespaces/${system}/pods`, { query: { labelSelector: 'serving.knative.dev/service=kfn-fn-myapp' } })).items;
    await waitFor('the function to scale to zero', async () => (await fnPods()).length === 0 || undefined, { timeoutMs: 150_000, intervalMs: 1000 });

    const myapps = `/apis/app.example.com/v1/namespaces/${ns}/myapps`;
    const body = (name: string, spec: object) => ({ apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name }, spec });
    // Defaulting, by the apiserver's policy (a dry run: nothing stored, nothing delivered).
    await untilDefaultsApply<{ spec: { image: string } }>(api, myapps, (n) => body(`probe-${n}`, { replicas: 1, image: 'kfn.local/nginx' }), (o) => o.spec.image === 'kfn.local/nginx:latest', 'the apiserver to apply the deployed policy');
    // Validation, by the CRD's rules, on the defaulted object.
    const answer = await api.request('POST', myapps, { body: body('big', { replicas: 11, image: 'Nginx' }) }).then(() => undefined, (err: unknown) => err);
    assert.ok(answer instanceof ApiError && answer.status === 422, `refused as invalid (${String(answer)})`);
    for (const refusal of myAppRefusals) assert.ok(answer.message.includes(refusal), `the apiserver says ${JSON.stringify(refusal)}; it said: ${answer.message}`);
    assert.equal((await fnPods()).length, 0, 'answered with the function at zero');
    t.diagnostic(`at zero: ${answer.message}`);
  });

  test('a function that crashes on start: Knative\'s reason reaches the Reconciler and the bridge backs off', async (t) => {
    const ns = await testNamespace(t, cluster, 'kn-crash');
    // The bridge may read the two sinks of this test and the next, and watch their MyWebs in any
    // namespace (as kfn manifests grants it for its own: the myweb function deployed above is
    // limited to its namespace, and so is the bridge's grant for it).
    await api.request('POST', '/apis/rbac.authorization.k8s.io/v1/clusterroles', {
      body: {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: { name: 'kfn-test-knative-sinks', labels: { 'kfn.dev/aggregate-to-bridge': 'true' } },
        rules: [
          { apiGroups: ['serving.knative.dev'], resources: ['services'], verbs: ['get'], resourceNames: ['kfn-fn-crashy', 'kfn-fn-nowhere'] },
          { apiGroups: ['operator.k8s-summit.org'], resources: ['mywebs'], verbs: ['list', 'watch'] },
        ],
      },
    }).catch(() => undefined);
    // The identity the bridge delivers for (bridge/identity.ts): it agrees to serve this test's
    // Reconcilers and may list MyWebs.
    for (const body of [
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: testIdentity.name, namespace: system, annotations: { [identityForAnnotation]: 'crashy,lost' } } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'kfn-test-knative-identity' }, rules: [{ apiGroups: ['operator.k8s-summit.org'], resources: ['mywebs'], verbs: ['get', 'list'] }] },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'kfn-test-knative-identity' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'kfn-test-knative-identity' }, subjects: [{ kind: 'ServiceAccount', ...testIdentity }] },
    ]) {
      const path = body.kind === 'ServiceAccount' ? `/api/v1/namespaces/${system}/serviceaccounts` : `/apis/rbac.authorization.k8s.io/v1/${body.kind === 'ClusterRole' ? 'clusterroles' : 'clusterrolebindings'}`;
      await api.request('POST', path, { body }).catch(() => undefined);
    }
    await api.request('POST', `/apis/serving.knative.dev/v1/namespaces/${system}/services`, {
      body: {
        apiVersion: 'serving.knative.dev/v1',
        kind: 'Service',
        metadata: { name: 'kfn-fn-crashy' },
        spec: { template: { spec: { containers: [{ image: 'kfn.local/node:24', args: ['-e', "console.error('cannot start: no configuration'); process.exit(3)"] }] } } },
      },
    });
    await api.request('POST', '/apis/kfn.dev/v1alpha1/reconcilers', {
      body: {
        apiVersion: 'kfn.dev/v1alpha1',
        kind: 'Reconciler',
        metadata: { name: 'crashy' },
        spec: { for: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' }, namespaces: [ns], sink: { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'kfn-fn-crashy', namespace: system } }, timeoutSeconds: 10, resyncPeriodSeconds: 0, serviceAccount: testIdentity },
      },
    });
    await api.request('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
      body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'never' }, spec: { nodePortNumber: await nextPort(api), pageContentHtml: 'x' } },
    });
    // Before Knative gives up on the revision the Service has no address yet, and the Reconciler
    // says so first (seen in CI): wait for the verdict that names Knative's reason.
    let last: string | undefined;
    const condition = await waitFor('the Reconciler to say its sink is not Ready, with Knative\'s reason', async () => {
      const c = await reconcilerReady('crashy');
      last = c?.message;
      return c?.status === 'False' && c.reason === 'SinkNotReady' && /is not Ready: RevisionMissing/.test(c.message ?? '') ? c : undefined;
    }, { timeoutMs: 180_000, intervalMs: 1000 }).catch((err: Error) => {
      throw new Error(`${err.message}; the Reconciler's last Ready message: ${last ?? '(none)'}`);
    });
    assert.match(condition.message!, /sink Service kfn-system\/kfn-fn-crashy \(serving\.knative\.dev\/v1\) is not Ready: RevisionMissing/);
    assert.match(condition.message!, /cannot start: no configuration/, 'the container\'s own last words, through Knative');

    // Backoff, not a hot loop: over 30 s of a sink that stays broken, few attempts, spaced ever wider.
    const mine = () => journal.filter((e) => e.reconciler === 'crashy' && e.key === `${ns}/never`);
    const startCount = mine().length;
    await new Promise((r) => setTimeout(r, 30_000));
    const during = mine().slice(startCount);
    assert.ok(during.length <= 8, `at most 8 attempts in 30 s, not ${during.length}`);
    const attempts = mine().map((e) => e.attempt);
    assert.deepEqual(attempts, [...attempts].sort((a, b) => a - b), 'one object, attempts counted up');
    // The waits between one attempt's end and the next one's start grow (each attempt itself
    // may take up to timeoutSeconds while Knative's activator holds it). Resync is off for this
    // Reconciler: a resync delivers at once, backoff or not, as controller-runtime's does.
    const recent = mine().slice(-4);
    assert.ok(recent.length >= 3, `at least 3 attempts to compare, not ${recent.length}`);
    const waits = recent.slice(1).map((e, i) => Date.parse(e.time) - e.durationMs - Date.parse(recent[i]!.time));
    const told = recent.map((e) => `${e.time} ${e.reason} #${e.attempt} ${e.status ?? 'no answer'} ${e.durationMs} ms ${e.why ?? ''}`).join('\n');
    for (let i = 1; i < waits.length; i++) assert.ok(waits[i]! >= waits[i - 1]! - 500, `waits between attempts grow: ${waits.join(', ')} ms\n${told}`);
    assert.equal((await reconcilerReady('crashy'))?.reason, 'SinkNotReady');
    await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/crashy');
    await api.request('DELETE', `/apis/serving.knative.dev/v1/namespaces/${system}/services/kfn-fn-crashy`);
  });

  test('a sink ref to a Service that does not exist: the Reconciler says which', async (t) => {
    const ns = await testNamespace(t, cluster, 'kn-lost');
    await api.request('POST', '/apis/kfn.dev/v1alpha1/reconcilers', {
      body: {
        apiVersion: 'kfn.dev/v1alpha1',
        kind: 'Reconciler',
        metadata: { name: 'lost' },
        spec: { for: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb' }, namespaces: [ns], sink: { ref: { apiVersion: 'serving.knative.dev/v1', kind: 'Service', name: 'kfn-fn-nowhere', namespace: system } }, serviceAccount: testIdentity },
      },
    });
    await api.request('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
      body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'orphan' }, spec: { nodePortNumber: await nextPort(api), pageContentHtml: 'x' } },
    });
    const condition = await waitFor('the Reconciler to name the missing sink', async () => {
      const c = await reconcilerReady('lost');
      return c?.status === 'False' && c.reason === 'SinkNotReady' ? c : undefined;
    }, { timeoutMs: 60_000 });
    assert.equal(condition.message, `sink Service kfn-system/kfn-fn-nowhere (serving.knative.dev/v1) does not exist; create it, or correct the Reconciler's spec.sink.ref`);
    await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/lost');
  });

  test('every example, each function a Knative Service (npm start -- --knative)', async () => {
    follow?.abort();
    const { code, output } = await runDemo(cluster, '--knative');
    assert.equal(code, 0, output);
    assert.match(output, /Function myweb \(MyWeb\) as Knative Service kfn-system\/kfn-fn-myweb/);
    assert.match(output, /All \d+ samples are Ready\./);
    assert.match(output, /MyWeb kfn-demo\/hello created → myweb → 200 in \d+ ms/);
  });
});
