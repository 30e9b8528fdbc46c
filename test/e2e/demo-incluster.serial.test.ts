// `npm start` on the local cluster: the bridge from manifests/ and every function as pods, the
// samples Ready, the deliveries narrated from the leading bridge's journal, and everything it
// put in the cluster removed when it stops. Serial: the in-cluster bridge takes every
// Reconciler in the cluster.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kubeApi, testCluster } from '../support/cluster.ts';
import { runDemo } from '../support/demo.ts';

test('the demo runs the bridge and the functions as pods and stops what it started', async () => {
  const cluster = await testCluster();
  const { code, output } = await runDemo(cluster);
  assert.equal(code, 0, output);
  assert.match(output, /Bridge: Deployment kfn-system\/kfn-bridge \(1 replica, leader election\), from manifests\//);
  assert.match(output, /Function myweb runs in the cluster: Deployment and Service kfn-system\/kfn-fn-myweb/);
  assert.match(output, /MyWeb kfn-demo\/hello created → myweb → 200 in \d+ ms: applied ConfigMap\/hello-page, Deployment\/hello, Service\/hello/, 'narrated from the bridge pod\'s journal');
  assert.match(output, /All \d+ samples are Ready\./);
  assert.doesNotMatch(output, /Admission webhooks of \S+ registered/, "no example needs a webhook: MyResource's check is its CRD's, MyApp's defaults the apiserver's");
  assert.match(output, /myapp: its defaults are written by the apiserver itself \(MutatingAdmissionPolicy kfn-myapp-myapps\.app\.example\.com\)/, 'and has the apiserver run the declared defaults');
  const api = kubeApi(cluster.kc);
  await assert.rejects(api.request('GET', '/api/v1/namespaces/kfn-system'), /404|not found/i, 'the bridge and the functions are gone');
  const reconcilers = await api.request<{ items: unknown[] }>('GET', '/apis/kfn.dev/v1alpha1/reconcilers');
  assert.equal(reconcilers.items.length, 0, 'no Reconciler left behind');
  // Nothing of admission is left: a function's webhook left behind, with failurePolicy Fail and
  // no pod to answer, would refuse every write of its kind; nor the policies of MyApp's defaults.
  for (const path of ['admissionregistration.k8s.io/v1/mutatingwebhookconfigurations', 'admissionregistration.k8s.io/v1/validatingwebhookconfigurations', 'admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies', 'admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings']) {
    const left = await api.request<{ items: { metadata: { name: string } }[] }>('GET', `/apis/${path}`, { query: { labelSelector: 'app.kubernetes.io/managed-by=kfn' } });
    assert.deepEqual(left.items.map((i) => i.metadata.name), [], `no ${path.split('/').at(-1)} left behind`);
  }
});
