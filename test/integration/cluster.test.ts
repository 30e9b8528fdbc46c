// The local cluster is a real Kubernetes: controllers, scheduler, a real kubelet running real
// containers, garbage collector, CRD validation and RBAC all behave as on any cluster.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { applyYaml, expectApiError, installCrd, kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { waitFor } from '../../core/clock.ts';

describe('local control plane', { concurrency: true }, () => {
  test('the real node is Ready: registered by its kubelet, running containerd, with the node IP on the pod bridge', async () => {
    const cluster = await testCluster();
    const node = await cluster.core.readNode({ name: 'kfn-node-0' });
    assert.equal(node.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
    assert.match(node.status?.nodeInfo?.containerRuntimeVersion ?? '', /^containerd:\/\//);
    assert.equal(node.status?.nodeInfo?.kubeletVersion, cluster.state.kubernetes);
    assert.equal(node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address, '10.244.0.1');
    assert.equal(node.metadata?.annotations?.['kwok.x-k8s.io/node'], undefined, 'not a kwok node');
    assert.ok(!node.spec?.taints?.length, 'schedulable, untainted');
  });

  test('a Deployment of 3 replicas reaches 3 ready replicas', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'deploy');
    await applyYaml(
      cluster.kc,
      `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: kfn.local/nginx:1.22}]
`,
      ns,
    );
    const apps = cluster.kc.makeApiClient(AppsV1Api);
    const deployment = await waitFor('Deployment web to have 3 ready replicas', async () => {
      const d = await apps.readNamespacedDeployment({ name: 'web', namespace: ns });
      return d.status?.readyReplicas === 3 ? d : undefined;
    }, { timeoutMs: 90_000 });
    assert.equal(deployment.status?.availableReplicas, 3);
    const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' });
    assert.equal(pods.items.length, 3);
    for (const pod of pods.items) {
      assert.equal(pod.status?.phase, 'Running', `pod ${pod.metadata?.name} runs`);
      assert.equal(pod.spec?.nodeName, 'kfn-node-0', 'scheduled by kube-scheduler onto the real node');
      assert.match(pod.status?.podIP ?? '', /^10\.244\.0\.\d+$/, 'an address from the node\'s pod subnet');
      assert.ok(pod.status?.containerStatuses?.[0]?.containerID?.startsWith('containerd://'), 'a real container');
    }
  });

  test('deleting a Deployment deletes its ReplicaSets and pods (garbage collector)', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'gc');
    await applyYaml(
      cluster.kc,
      `
apiVersion: apps/v1
kind: Deployment
metadata: {name: owner}
spec:
  replicas: 2
  selector: {matchLabels: {app: owner}}
  template:
    metadata: {labels: {app: owner}}
    spec:
      containers: [{name: c, image: kfn.local/busybox:1.35, command: [sleep, "3600"]}]
`,
      ns,
    );
    const apps = cluster.kc.makeApiClient(AppsV1Api);
    await waitFor('2 pods of Deployment owner', async () => {
      const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=owner' });
      return pods.items.length === 2 || undefined;
    });
    await apps.deleteNamespacedDeployment({ name: 'owner', namespace: ns, propagationPolicy: 'Background' });
    await waitFor('the ReplicaSet and pods of the deleted Deployment to be gone', async () => {
      const [rs, pods] = await Promise.all([
        apps.listNamespacedReplicaSet({ namespace: ns }),
        cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=owner' }),
      ]);
      if (rs.items.length || pods.items.length) throw new Error(`${rs.items.length} ReplicaSets and ${pods.items.length} pods remain`);
      return true;
    }, { timeoutMs: 60_000 });
  });

  test('deleting a custom resource deletes the objects it owns (garbage collector)', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'gc-cr');
    const group = `${uniqueName('gc')}.kfn.test`;
    await installCrd(t, cluster, group, 'Widget', { type: 'object', properties: { size: { type: 'integer' } } });
    // The garbage collector rediscovers API resources every 30 s, so for a kind this new it may
    // learn of the owner's deletion only at its next resync: allow for that in the timeout.
    const [owner] = await applyYaml(cluster.kc, `{apiVersion: ${group}/v1, kind: Widget, metadata: {name: w1}, spec: {size: 1}}`, ns);
    await cluster.core.createNamespacedConfigMap({
      namespace: ns,
      body: {
        metadata: {
          name: 'owned-by-w1',
          ownerReferences: [{ apiVersion: `${group}/v1`, kind: 'Widget', name: 'w1', uid: owner!.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
        },
        data: { k: 'v' },
      },
    });
    const custom = cluster.kc.makeApiClient(CustomObjectsApi);
    await custom.deleteNamespacedCustomObject({ group, version: 'v1', namespace: ns, plural: 'widgets', name: 'w1' });
    await waitFor('ConfigMap owned-by-w1 to be garbage-collected', async () => {
      const list = await cluster.core.listNamespacedConfigMap({ namespace: ns, fieldSelector: 'metadata.name=owned-by-w1' });
      return list.items.length === 0;
    }, { timeoutMs: 90_000 });
  });

  test('a CRD with an OpenAPI schema rejects an invalid object with the apiserver message', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'crd');
    const group = `${uniqueName('schema')}.kfn.test`;
    await installCrd(t, cluster, group, 'Gadget', {
      type: 'object',
      required: ['image'],
      properties: { image: { type: 'string', minLength: 1 }, replicas: { type: 'integer', minimum: 1, maximum: 10 } },
    });
    const custom = cluster.kc.makeApiClient(CustomObjectsApi);
    const create = (spec: object) =>
      custom.createNamespacedCustomObject({ group, version: 'v1', namespace: ns, plural: 'gadgets', body: { apiVersion: `${group}/v1`, kind: 'Gadget', metadata: { name: uniqueName('g') }, spec } });

    const tooMany = await expectApiError(() => create({ image: 'nginx', replicas: 11 }));
    assert.equal(tooMany.code, 422);
    assert.equal(tooMany.reason, 'Invalid');
    assert.match(tooMany.message, /spec\.replicas: Invalid value: 11: spec\.replicas in body should be less than or equal to 10/);

    const noImage = await expectApiError(() => create({ replicas: 2 }));
    assert.equal(noImage.code, 422);
    assert.match(noImage.message, /spec\.image: Required value/);

    await create({ image: 'nginx', replicas: 2 });
  });

  test('a ServiceAccount is forbidden without a RoleBinding and allowed with one (RBAC)', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'rbac');
    await cluster.core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: 'reader' } } });
    const token = await requestServiceAccountToken(kubeApi(cluster.kc), { namespace: ns, name: 'reader' }, 600);
    const readerConfig = new KubeConfig();
    readerConfig.loadFromString(kubeconfigForToken(cluster.paths.kubeconfig, token));
    const asReader = readerConfig.makeApiClient(CoreV1Api);

    const denied = await expectApiError(() => asReader.listNamespacedConfigMap({ namespace: ns }));
    assert.equal(denied.code, 403);
    assert.match(denied.message, new RegExp(`User "system:serviceaccount:${ns}:reader" cannot list resource "configmaps"`));

    const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: ns,
      body: { metadata: { name: 'configmap-reader' }, rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list'] }] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: 'reader-reads-configmaps' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'configmap-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'reader', namespace: ns }],
      },
    });
    const list = await waitFor('the RoleBinding to take effect', () => asReader.listNamespacedConfigMap({ namespace: ns }));
    assert.ok(list.items.some((cm) => cm.metadata?.name === 'kube-root-ca.crt'), 'the root CA publisher put kube-root-ca.crt in the namespace');
    // The binding grants reading only.
    const write = await expectApiError(() => asReader.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'x' } } }));
    assert.equal(write.code, 403);
  });

  test("a Job's pod completes and the Job reports success", async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'job');
    await applyYaml(
      cluster.kc,
      `
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: kfn.local/busybox:1.35, command: [sh, -c, "echo ran as $(id -u) on $(hostname)"]}]
`,
      ns,
    );
    const batch = cluster.kc.makeApiClient(BatchV1Api);
    const job = await waitFor('Job once to complete', async () => {
      const j = await batch.readNamespacedJob({ name: 'once', namespace: ns });
      return j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True') ? j : undefined;
    }, { timeoutMs: 90_000 });
    assert.equal(job.status?.succeeded, 1);
    const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=once' });
    assert.equal(pods.items[0]?.status?.phase, 'Succeeded');
    const log = await cluster.core.readNamespacedPodLog({ name: pods.items[0]!.metadata!.name!, namespace: ns });
    assert.equal(log, `ran as 0 on ${pods.items[0]!.metadata!.name}\n`, 'the container really ran (its output, read through the kubelet)');
  });

  test("a Job whose container exits non-zero fails, with the container's exit code", async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'job-fail');
    await applyYaml(
      cluster.kc,
      `
apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: kfn.local/busybox:1.35, command: [sh, -c, "exit 3"]}]
`,
      ns,
    );
    const batch = cluster.kc.makeApiClient(BatchV1Api);
    const job = await waitFor('Job doomed to fail', async () => {
      const j = await batch.readNamespacedJob({ name: 'doomed', namespace: ns });
      return j.status?.conditions?.some((c) => c.type === 'Failed' && c.status === 'True') ? j : undefined;
    }, { timeoutMs: 90_000 });
    assert.equal(job.status?.failed, 1);
    const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=doomed' });
    assert.equal(pods.items[0]?.status?.containerStatuses?.[0]?.state?.terminated?.exitCode, 3);
  });
});
