// MyWeb's page alone (bench:compare P8's throughput by shards): the page ConfigMap of the MyWeb
// example, and Ready at once. The controller-runtime peer's --page-only does the same; neither
// makes a Deployment or a NodePort Service, whose port range would cap the MyWebs at 2,768 and
// whose pods would measure the kube-controller-manager instead.
import { ConfigMap, defineReconciler } from '../../../functions/sdk/index.ts';
import { MyWeb } from '../../../functions/myweb/index.ts';

export default defineReconciler({
  name: 'mywebpage',
  for: MyWeb,
  owns: [ConfigMap],
  observe: [{ kind: ConfigMap, fields: [] }],
  reconcile(web) {
    return {
      children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${web.metadata.name}-page`, labels: { 'app.kubernetes.io/name': 'myweb', 'app.kubernetes.io/instance': web.metadata.name } }, data: { 'index.html': web.spec.pageContentHtml } }],
      status: { completed: true },
      ready: true,
    };
  },
});
