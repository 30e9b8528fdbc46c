// The real node: Services and NodePorts through kube-proxy, cluster DNS, the API from inside a
// pod, the kubelet's own identity under the Node authorizer and NodeRestriction, limits
// enforced by the kernel, and fake nodes that only tolerating pods reach.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { nodePorts } from '../support/ports.ts';
import { AppsV1Api, CoreV1Api, KubeConfig, type V1PodSpec } from '@kubernetes/client-node';
import { applyYaml, expectApiError, kubeApi, testCluster, testNamespace } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

/** Runs a pod to completion and returns its phase and log. */
async function runPod(cluster: Awaited<ReturnType<typeof testCluster>>, ns: string, name: string, spec: V1PodSpec): Promise<{ phase: string; log: string }> {
  await cluster.core.createNamespacedPod({ namespace: ns, body: { metadata: { name }, spec: { restartPolicy: 'Never', ...spec } } });
  const phase = await waitFor(`pod ${name} to finish`, async () => {
    const p = await cluster.core.readNamespacedPod({ name, namespace: ns });
    return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed' ? p.status.phase : undefined;
  }, { timeoutMs: 90_000 });
  return { phase, log: await cluster.core.readNamespacedPodLog({ name, namespace: ns }) };
}

describe('the real node', { concurrency: true }, () => {
  test('a NodePort Service answers on 127.0.0.1; a ClusterIP Service answers pods by its DNS name', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'svc');
    const nodePort = await nodePorts('integration/node')(kubeApi(cluster.kc));
    await applyYaml(
      cluster.kc,
      `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: kfn.local/nginx:1.22, readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 1}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: 80, nodePort: ${nodePort}}]}
`,
      ns,
    );
    const apps = cluster.kc.makeApiClient(AppsV1Api);
    await waitFor('Deployment web available', async () => ((await apps.readNamespacedDeployment({ name: 'web', namespace: ns })).status?.availableReplicas === 2) || undefined, { timeoutMs: 90_000 });
    const page = await waitFor(`http://127.0.0.1:${nodePort}/ to answer`, async () => {
      const res = await fetch(`http://127.0.0.1:${nodePort}/`, { signal: AbortSignal.timeout(2000) });
      return res.ok ? res.text() : undefined;
    });
    assert.match(page, /nginx on kfn/);
    const { phase, log } = await runPod(cluster, ns, 'client', {
      containers: [{ name: 'c', image: 'kfn.local/busybox:1.35', command: ['sh', '-c', `nslookup web.${ns}.svc.cluster.local && wget -qO- http://web/ && wget -qO- http://web.${ns}.svc.cluster.local/`] }],
    });
    assert.equal(phase, 'Succeeded', log);
    const service = await cluster.core.readNamespacedService({ name: 'web', namespace: ns });
    assert.match(log, new RegExp(`Address: ${service.spec!.clusterIP!.replaceAll('.', '\\.')}`), 'DNS gives the ClusterIP');
    assert.equal(log.match(/nginx on kfn/g)?.length, 2, 'both requests through the Service answered');
  });

  test('a pod reaches the API server as the kubernetes Service, under its ServiceAccount', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'incluster');
    const script = [
      "const sa = '/var/run/secrets/kubernetes.io/serviceaccount';",
      "const token = require('fs').readFileSync(sa + '/token', 'utf8');",
      "fetch('https://' + process.env.KUBERNETES_SERVICE_HOST + ':' + process.env.KUBERNETES_SERVICE_PORT + '/api/v1/namespaces/' + require('fs').readFileSync(sa + '/namespace', 'utf8') + '/pods', { headers: { authorization: 'Bearer ' + token } })",
      '  .then(async (r) => console.log(r.status, (await r.json()).message))',
      '  .catch((e) => { console.error(e.cause ?? e); process.exit(1); });',
    ].join('\n');
    const { phase, log } = await runPod(cluster, ns, 'api-client', {
      containers: [{ name: 'c', image: 'kfn.local/node:24', args: ['-e', script], env: [{ name: 'NODE_EXTRA_CA_CERTS', value: '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt' }] }],
    });
    assert.equal(phase, 'Succeeded', log);
    // TLS verified against the cluster CA, authenticated as the pod's ServiceAccount, refused by RBAC.
    assert.match(log, new RegExp(`^403 pods is forbidden: User "system:serviceaccount:${ns}:default" cannot list resource "pods"`));
  });

  test('the kubelet runs as system:node:kfn-node-0 and may change only its own Node (NodeRestriction)', async () => {
    const cluster = await testCluster();
    const kc = new KubeConfig();
    kc.loadFromFile(join(cluster.paths.dir, 'kubeconfigs', 'kubelet.kubeconfig'));
    assert.doesNotMatch(readFileSync(join(cluster.paths.dir, 'tokens.csv'), 'utf8').split('\n').find((l) => l.includes('system:node:'))!, /system:masters/);
    const asKubelet = kc.makeApiClient(CoreV1Api);
    const own = await asKubelet.readNode({ name: 'kfn-node-0' });
    assert.equal(own.metadata?.name, 'kfn-node-0');
    const other = await expectApiError(() => asKubelet.createNode({ body: { metadata: { name: 'kfn-impostor' } } }));
    assert.equal(other.code, 403);
    assert.match(other.message, /node "kfn-node-0" is not allowed to modify node "kfn-impostor"/);
    const secrets = await expectApiError(() => asKubelet.listSecretForAllNamespaces());
    assert.equal(secrets.code, 403, 'the Node authorizer denies listing every Secret');
  });

  test('a memory limit is enforced by the kernel: a pod over it is OOMKilled', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'oom');
    const { phase } = await runPod(cluster, ns, 'hog', {
      // tail keeps one endless line of /dev/zero in memory: it grows until the kernel kills it
      // (a Node hog may instead stop on its own heap limit, an "Error" rather than an OOM kill).
      // It starts after a pause: a container killed before containerd has finished starting it
      // can lose the OOM event and be reported as "Error" with 137 (a known containerd race).
      containers: [{ name: 'c', image: 'kfn.local/busybox:1.35', command: ['sh', '-c', 'sleep 2; exec tail /dev/zero'], resources: { limits: { memory: '32Mi' } } }],
    });
    assert.equal(phase, 'Failed');
    const pod = await cluster.core.readNamespacedPod({ name: 'hog', namespace: ns });
    const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
    assert.equal(terminated?.reason, 'OOMKilled');
    assert.equal(terminated?.exitCode, 137);
  });

  test('an image that is not on the node surfaces as ErrImagePull / ImagePullBackOff', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'noimage');
    await cluster.core.createNamespacedPod({ namespace: ns, body: { metadata: { name: 'ghost' }, spec: { containers: [{ name: 'c', image: 'kfn.local/does-not-exist:1' }] } } });
    const reason = await waitFor('the pod to report its image could not be pulled', async () => {
      const p = await cluster.core.readNamespacedPod({ name: 'ghost', namespace: ns });
      const r = p.status?.containerStatuses?.[0]?.state?.waiting?.reason;
      return r === 'ErrImagePull' || r === 'ImagePullBackOff' ? r : undefined;
    }, { timeoutMs: 60_000 });
    assert.ok(reason);
  });

  test('fake nodes take only pods that tolerate their taint', async (t) => {
    const cluster = await testCluster();
    assert.ok(cluster.state.fakeNodes >= 1, 'the test cluster runs with fake nodes: testCluster() asks for them (testClusterOptions), and clusterUp adds them to a running cluster that lacks them');
    const ns = await testNamespace(t, cluster, 'fake');
    await applyYaml(
      cluster.kc,
      `
apiVersion: apps/v1
kind: Deployment
metadata: {name: many}
spec:
  replicas: 20
  selector: {matchLabels: {app: many}}
  template:
    metadata: {labels: {app: many}}
    spec:
      nodeSelector: {type: kwok}
      tolerations: [{key: kfn.dev/fake-node, operator: Exists, effect: NoSchedule}]
      containers: [{name: c, image: kfn.local/does-not-exist:1}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: real}
spec:
  replicas: 2
  selector: {matchLabels: {app: real}}
  template:
    metadata: {labels: {app: real}}
    spec:
      containers: [{name: c, image: kfn.local/busybox:1.35, command: [sleep, "3600"]}]
`,
      ns,
    );
    const apps = cluster.kc.makeApiClient(AppsV1Api);
    await waitFor('20 fake pods and 2 real pods ready', async () => {
      const [many, real] = await Promise.all(['many', 'real'].map((name) => apps.readNamespacedDeployment({ name, namespace: ns })));
      return many!.status?.readyReplicas === 20 && real!.status?.readyReplicas === 2 ? true : undefined;
    }, { timeoutMs: 90_000 });
    const pods = await cluster.core.listNamespacedPod({ namespace: ns });
    for (const pod of pods.items) {
      const fake = pod.metadata!.labels!.app === 'many';
      assert.equal(pod.spec!.nodeName!.startsWith('kfn-fake-'), fake, `${pod.metadata!.name} on ${pod.spec!.nodeName}`);
    }
  });
});
