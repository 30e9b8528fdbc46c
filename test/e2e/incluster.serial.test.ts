// kfn in the cluster, as a user installs it: the bridge image built and imported
// (`kfn image build bridge`), `kubectl apply -k manifests/` with a standby added (2 replicas, one
// leader delivering), functions deployed with `kfn deploy` as a Deployment + Service (myweb pushed to the local
// registry, with a user and password, and pulled by the node by digest), and a MyWeb
// reconciled by them, its page served by nginx on its NodePort. Serial: an in-cluster bridge takes every
// Reconciler in the cluster, so it must not run beside the other tests' Reconcilers.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../../cluster/paths.ts';
import { nodePorts } from '../support/ports.ts';
import { kubeApi, testCluster, testNamespace, untilDefaultsApply, untilWebhookRefuses } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

const exec = promisify(execFile);

interface Pod {
  metadata: { name: string };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
}

test('the bridge from manifests/ and a function from kfn deploy, both as pods, reconcile a MyWeb', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const kubectl = (...args: string[]) => exec(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, ...args]);
  const kfn = (...args: string[]) => exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { cwd: repoRoot, env: { ...process.env, KUBECONFIG: cluster.paths.kubeconfig }, maxBuffer: 16 * 1024 * 1024 });
  const ns = await testNamespace(t, cluster, 'incluster');
  t.after(async () => {
    await api.request('DELETE', '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kfn-fn-chores').catch(() => undefined);
    await api.request('DELETE', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/chores.chores.kfn.test').catch(() => undefined);
    for (const kind of ['mutatingadmissionpolicies', 'mutatingadmissionpolicybindings']) await api.request('DELETE', `/apis/admissionregistration.k8s.io/v1beta1/${kind}/kfn-myapp-myapps.app.example.com`).catch(() => undefined);
    for (const name of ['myapp', 'myresource', 'chores']) await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined);
    await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/myweb').catch(() => undefined);
    await api.request('DELETE', '/api/v1/namespaces/kfn-system').catch(() => undefined);
    await waitFor('namespace kfn-system to be gone', () => api.request('GET', '/api/v1/namespaces/kfn-system').then(() => undefined, () => true), { timeoutMs: 120_000 });
  });

  await kfn('image', 'build', 'bridge');
  await kubectl('apply', '-k', join(repoRoot, 'manifests'));
  // manifests/ runs one replica; with a standby beside it, only the Lease holder may deliver.
  await kubectl('-n', 'kfn-system', 'scale', 'deployment/kfn-bridge', '--replicas=2');
  const bridgePods = await waitFor('2 bridge pods ready', async () => {
    const pods = await api.request<{ items: Pod[] }>('GET', '/api/v1/namespaces/kfn-system/pods?labelSelector=app.kubernetes.io/name=kfn-bridge');
    const ready = pods.items.filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
    return ready.length === 2 ? ready : undefined;
  }, { timeoutMs: 120_000 });
  const lease = await waitFor('a bridge to hold the Lease', async () => {
    const l = await api.request<{ spec?: { holderIdentity?: string } }>('GET', '/apis/coordination.k8s.io/v1/namespaces/kfn-system/leases/kfn-bridge');
    return l.spec?.holderIdentity;
  });
  const leader = bridgePods.find((p) => lease.startsWith(p.metadata.name));
  assert.ok(leader, `the Lease holder ${lease} is one of the bridge pods`);

  // A bridge that speaks another event contract: kfn deploy refuses, before building anything.
  const contract = (value: string) => api.request('PATCH', '/apis/apps/v1/namespaces/kfn-system/deployments/kfn-bridge', { body: { metadata: { annotations: { 'kfn.dev/contract': value } } }, contentType: 'application/merge-patch+json' });
  await contract('99');
  const refused = await kfn('deploy', 'functions/myweb').then(() => undefined, (err: { stderr: string }) => err.stderr);
  assert.match(refused ?? 'deployed', /the bridge kfn-system\/kfn-bridge speaks event contract v99, and these functions \(kfn \S+\) speak v1 and v2: upgrade the bridge/);
  await contract('1');

  // The local registry, asking for a user and password as a real one does: the bridge image is
  // pushed with the credentials of a Docker config, myweb deployed from it (`--registry local`),
  // pulled by the node by digest.
  const registry = await kfn('cluster', 'registry', '--auth');
  const registryHost = registry.stdout.trim();
  const [, user, password] = registry.stderr.match(/user (\S+), password (\S+)\./) ?? [];
  assert.ok(user && password, registry.stderr);
  const dockerConfig = mkdtempSync(join(tmpdir(), 'kfn-docker-config-'));
  t.after(() => rmSync(dockerConfig, { recursive: true, force: true }));
  writeFileSync(join(dockerConfig, 'config.json'), JSON.stringify({ auths: { [registryHost]: { auth: Buffer.from(`${user}:${password}`).toString('base64') } } }));
  const pushed = await exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'image', 'push', 'bridge', '--registry', `${registryHost}/kfn`], { cwd: repoRoot, env: { ...process.env, DOCKER_CONFIG: dockerConfig } });
  assert.match(pushed.stdout.trim(), new RegExp(`^${registryHost.replace(/\./g, '\\.')}/kfn/bridge@sha256:[0-9a-f]{64}$`));
  t.diagnostic(pushed.stderr.trim().split('\n').at(-1)!);
  const noCredentials = await exec(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'image', 'push', 'bridge', '--registry', `${registryHost}/kfn`], { cwd: repoRoot, env: { ...process.env, DOCKER_CONFIG: join(dockerConfig, 'none') } }).then(() => undefined, (err: { stderr: string }) => err.stderr);
  assert.match(noCredentials ?? 'pushed without credentials', /asks for a user and password \(no credentials for it in the Docker config\): log in/);

  const web = await kfn('deploy', 'functions/myweb', '--registry', 'local', '--watch-namespace', ns);
  assert.match(web.stderr, new RegExp(`Pushed ${registryHost.replace(/\./g, '\\.')}/fn-myweb:\\S+ \\(sha256:`));
  assert.match(web.stderr, /Function myweb runs in the cluster: Deployment and Service kfn-system\/kfn-fn-myweb/);
  const fnPod = await waitFor('the myweb function\'s pod, running', async () => {
    const pods = await api.request<{ items: (Pod & { spec: { containers: { image: string }[]; imagePullSecrets?: { name: string }[] }; status?: { containerStatuses?: { imageID: string }[] } })[] }>('GET', '/api/v1/namespaces/kfn-system/pods', { query: { labelSelector: 'kfn.dev/function=myweb' } });
    return pods.items.find((p) => p.status?.phase === 'Running');
  }, { timeoutMs: 60_000 });
  const image = fnPod.spec.containers[0]!.image;
  assert.match(image, new RegExp(`^${registryHost.replace(/\./g, '\\.')}/fn-myweb@sha256:[0-9a-f]{64}$`), 'the pod runs the image from the registry, by digest');
  assert.ok(fnPod.status?.containerStatuses?.[0]?.imageID.endsWith(image.split('@')[1]!), `the node ran that digest (${fnPod.status?.containerStatuses?.[0]?.imageID})`);
  assert.deepEqual(fnPod.spec.imagePullSecrets, [{ name: 'kfn-registry' }], 'with the registry\'s credentials');
  const pulled = await waitFor('the kubelet\'s Pulled event', async () => {
    const events = await api.request<{ items: { reason: string; message: string }[] }>('GET', '/api/v1/namespaces/kfn-system/events', { query: { fieldSelector: `involvedObject.name=${fnPod.metadata.name}` } });
    return events.items.find((e) => e.reason === 'Pulled');
  }, { timeoutMs: 30_000 });
  assert.match(pulled.message, new RegExp(`Successfully pulled image "${image.replace(/[.]/g, '\\.')}"`));
  t.diagnostic(`kubelet: ${pulled.message}`);

  // Declared defaults on a cluster that serves MutatingAdmissionPolicy: the apiserver writes
  // them itself, so the function has no webhook (and no certificate) for them.
  const { stderr } = await kfn('deploy', 'functions/myapp', '--watch-namespace', ns);
  assert.match(stderr, /myapp: its defaults are written by the apiserver itself \(MutatingAdmissionPolicy kfn-myapp-myapps\.app\.example\.com\), with the function at zero too/);
  assert.doesNotMatch(stderr, /webhook/i);
  const myapps = `/apis/app.example.com/v1/namespaces/${ns}/myapps`;
  // The apiserver takes a moment to load a new policy: wait until it defaults.
  await untilDefaultsApply<{ spec: { image: string } }>(api, myapps, (n) => ({ apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: `probe-${n}` }, spec: { replicas: 1, image: 'kfn.local/nginx' } }), (o) => o.spec.image === 'kfn.local/nginx:latest', 'the apiserver to apply the deployed policy');
  const app = await api.request<{ spec: { image: string } }>('POST', myapps, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'app' }, spec: { replicas: 1, image: 'kfn.local/nginx' } } });
  assert.equal(app.spec.image, 'kfn.local/nginx:latest');
  await assert.rejects(api.request('POST', myapps, { body: { apiVersion: 'app.example.com/v1', kind: 'MyApp', metadata: { name: 'big' }, spec: { replicas: 11, image: 'kfn.local/nginx:1.22' } } }), /spec\.replicas: Invalid value: 11: must be ≤ 10/);
  // (The defaulted image is not on the node; reconciling it is enough here.)
  await waitFor('the deployed myapp function to reconcile the defaulted MyApp', async () => {
    const d = await api.request<{ spec: { template: { spec: { containers: { image: string }[] } } } }>('GET', `/apis/apps/v1/namespaces/${ns}/deployments/app`).catch(() => undefined);
    return d?.spec.template.spec.containers[0]!.image === 'kfn.local/nginx:latest' || undefined;
  }, { timeoutMs: 60_000 });

  // The webhook of a deployed function (a check only code makes: a Chore's cron schedule): the
  // apiserver calls its pod through its Service, over TLS with the certificate kfn deploy made.
  const hooked = await kfn('deploy', 'test/support/webhook-fn', '--watch-namespace', ns);
  assert.match(hooked.stderr, /Creating the webhook certificate of chores \(Secret kfn-system\/kfn-fn-chores-webhook-tls\): no certificate yet/);
  assert.match(hooked.stderr, /Admission webhooks of chores registered: validate\.chores\.chores\.kfn\.test\b/);
  const chores = `/apis/chores.kfn.test/v1/namespaces/${ns}/chores`;
  const refusal = await untilWebhookRefuses(api, chores, (n) => ({ apiVersion: 'chores.kfn.test/v1', kind: 'Chore', metadata: { name: `late-${n}` }, spec: { schedule: '0 25 * * *' } }), 'the apiserver to call the deployed webhook');
  assert.match(refusal.message, /spec\.schedule: hour 25 is not within 0–23/);
  // A second deploy keeps the certificate (it is good for a year).
  const again = await kfn('deploy', 'test/support/webhook-fn', '--watch-namespace', ns);
  assert.doesNotMatch(again.stderr, /webhook certificate/);
  // MyResource's memory check is its CRD's (Kubernetes' quantity library): no webhook, so its function may rest.
  const unhooked = await kfn('deploy', 'functions/myresource', '--watch-namespace', ns);
  assert.doesNotMatch(unhooked.stderr, /webhook/i);
  await assert.rejects(api.request('GET', '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kfn-fn-myresource'), /404|not found/i, 'no webhook registered for MyResource');
  const reconciler = await api.request<{ spec: { sink: { uri?: string } } }>('GET', '/apis/kfn.dev/v1alpha1/reconcilers/myweb');
  assert.equal(reconciler.spec.sink.uri, 'http://kfn-fn-myweb.kfn-system.svc.cluster.local/');

  const port = await nodePorts('e2e/incluster')(api);
  await api.request('POST', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`, {
    body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'site' }, spec: { nodePortNumber: port, pageContentHtml: '<h1>served by pods</h1>' } },
  });
  await kubectl('-n', ns, 'wait', '--for=condition=Ready', 'myweb/site', '--timeout=90s');
  const page = await waitFor(`the page on 127.0.0.1:${port}`, async () => {
    const res = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(2000) });
    return res.ok ? res.text() : undefined;
  });
  assert.equal(page, '<h1>served by pods</h1>');

  // One delivering bridge: only the leader started the Reconciler; the function's pod did the work.
  const logs = await Promise.all(bridgePods.map((p) => api.text('GET', `/api/v1/namespaces/kfn-system/pods/${p.metadata.name}/log`)));
  const started = bridgePods.filter((_, i) => logs[i]!.includes('"reconciler":"myweb"') && logs[i]!.includes('reconciler started'));
  assert.deepEqual(started.map((p) => p.metadata.name), [leader.metadata.name]);
  const fnLog = (await kubectl('-n', 'kfn-system', 'logs', 'deployment/kfn-fn-myweb')).stdout;
  assert.match(fnLog, new RegExp(`"object":"MyWeb ${ns}/site","reason":"created"`));

  // The bridge's memory request covers what the leader really uses (scheduling on a real node
  // counts requests: a request below the working set overcommits the node).
  const metrics = await api.text('GET', `/api/v1/namespaces/kfn-system/pods/${leader.metadata.name}:8081/proxy/metrics`);
  const rss = Number(metrics.match(/^process_resident_memory_bytes (\d+)/m)?.[1]);
  const spec = await api.request<{ spec: { containers: { resources: { requests: { memory: string } } }[] } }>('GET', `/api/v1/namespaces/kfn-system/pods/${leader.metadata.name}`);
  const request = spec.spec.containers[0]!.resources.requests.memory;
  const requestBytes = Number(request.replace(/Mi$/, '')) * 2 ** 20;
  assert.ok(rss > 0 && rss < requestBytes, `leader RSS ${(rss / 2 ** 20).toFixed(0)} MiB within its memory request ${request}`);
  t.diagnostic(`bridge leader RSS ${(rss / 2 ** 20).toFixed(0)} MiB, request ${request}`);

  // The webhook configurations belong to the function's Reconciler: removing the Reconciler
  // alone removes them, so none with failurePolicy Fail is left calling a function that is gone.
  await api.request('GET', '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kfn-fn-chores');
  await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/chores');
  await waitFor('the webhook configuration of chores to go with its Reconciler', () => api.request('GET', '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kfn-fn-chores').then(() => false, (err) => /404|not found/i.test(String(err))), { timeoutMs: 60_000 });

  // kfn undeploy removes everything kfn deploy created for a function, and leaves its kind's
  // CRD and objects (the user's data).
  const undeployed = await kfn('undeploy', 'functions/myweb', '--kubeconfig', cluster.paths.kubeconfig);
  assert.match(undeployed.stderr, /myweb: removed Reconciler myweb/);
  const left: string[] = [];
  for (const path of ['/apis/apps/v1/deployments', '/api/v1/services', '/api/v1/serviceaccounts', '/api/v1/secrets', '/apis/rbac.authorization.k8s.io/v1/clusterroles', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', '/apis/rbac.authorization.k8s.io/v1/rolebindings', '/apis/kfn.dev/v1alpha1/reconcilers']) {
    const items = await waitFor(`${path} of myweb to be gone`, async () => {
      const list = await api.request<{ items: { metadata: { name: string; namespace?: string; deletionTimestamp?: string } }[] }>('GET', path, { query: { labelSelector: 'kfn.dev/function=myweb' } });
      const live = list.items.filter((o) => !o.metadata.deletionTimestamp);
      return live.length === 0 ? live : undefined;
    }, { timeoutMs: 60_000 }).catch(() => [{ metadata: { name: path } }]);
    left.push(...items.map((o) => o.metadata.name));
  }
  assert.deepEqual(left, [], 'nothing labelled for myweb is left');
  await assert.rejects(api.request('GET', '/api/v1/namespaces/kfn-system/secrets/kfn-fn-myweb'), /404|not found/i, 'its auth Secret is gone');
  await api.request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mywebs.operator.k8s-summit.org');
  await api.request('GET', `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs/site`);
  const again2 = await kfn('undeploy', 'myweb', '--kubeconfig', cluster.paths.kubeconfig);
  assert.match(again2.stderr, /nothing of myweb was found in the cluster/);
  // --crds takes the kind's CRD too, and with it every object of the kind.
  const withCrds = await kfn('undeploy', 'functions/myapp', '--crds', '--kubeconfig', cluster.paths.kubeconfig);
  assert.match(withCrds.stderr, /myapp: removed CustomResourceDefinition myapps\.app\.example\.com/);
  assert.match(withCrds.stderr, /myapp: removed MutatingAdmissionPolicy kfn-myapp-myapps\.app\.example\.com\b/);
  assert.match(withCrds.stderr, /myapp: removed MutatingAdmissionPolicyBinding kfn-myapp-myapps\.app\.example\.com\b/);
  await waitFor('the MyApp CRD to be gone', () => api.request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/myapps.app.example.com').then(() => undefined, (err) => /404|not found/i.test(String(err)) || undefined), { timeoutMs: 60_000 });
});
