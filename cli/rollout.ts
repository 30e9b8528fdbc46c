// Waiting until a deployed function (or a shared host) runs: its Deployment available and its
// Service routed to it, or its Knative Service Ready. Each wait ends at a deadline shared by the
// functions of one deploy, and says what it last saw.
import { Agent, fetch as undiciFetch } from 'undici';
import type { KubeApi } from '../kube/api.ts';
import { waitFor, WaitAbandoned } from '../core/clock.ts';
import { whyNotReady, type ReadCondition } from '../core/conditions.ts';
import { functionLabel, hostLabel } from '../core/names.ts';
import { hostResourceName } from '../functions/sdk/manifests.ts';

/** Waits until the function's Deployment kfn-fn-<name> is available at its latest generation, then until its Service answers. */
export async function waitDeployment(api: KubeApi, namespace: string, name: string, deadline: number): Promise<void> {
  await waitWorkload(api, namespace, { what: `function ${name}`, name: `kfn-fn-${name}`, pods: `${functionLabel}=${name}` }, deadline);
}

/** Waits until a shared host's Deployment kfn-host-<host> is available, then until its Service answers. */
export async function waitHost(api: KubeApi, namespace: string, host: string, deadline: number): Promise<void> {
  await waitWorkload(api, namespace, { what: `host ${host}`, name: hostResourceName(host), pods: `${hostLabel}=${host}` }, deadline);
}

/** The Deployment and Service `name` (the same name), and the label selector of its pods. */
interface Workload {
  what: string;
  name: string;
  pods: string;
}

async function waitWorkload(api: KubeApi, namespace: string, workload: Workload, deadline: number): Promise<void> {
  const { what, name } = workload;
  const path = `/apis/apps/v1/namespaces/${namespace}/deployments/${name}`;
  type Deployment = { metadata: { generation: number }; spec?: { replicas?: number }; status?: { observedGeneration?: number; updatedReplicas?: number; availableReplicas?: number; unavailableReplicas?: number } };
  // Scaled to zero by the bridge (an idle function redeployed): nothing runs to wait for; the
  // bridge wakes it when a change is to be delivered.
  if ((await api.request<Deployment>('GET', path)).spec?.replicas === 0) return;
  await waitFor(
    `${what} to become available`,
    async () => {
      const d = await api.request<Deployment>('GET', path);
      const s = d.status ?? {};
      return s.observedGeneration === d.metadata.generation && s.updatedReplicas === 1 && s.availableReplicas === 1 && !s.unavailableReplicas;
    },
    { deadline, intervalMs: 500, context: () => `See \`kubectl -n ${namespace} describe deployment ${name}\` and its pod's log.` },
  );
  // Available pods are not yet a routed Service: wait until kube-proxy sends the Service's
  // address to them (this machine reaches ClusterIPs too), so the first delivery succeeds.
  const svc = await api.request<{ spec: { clusterIP: string } }>('GET', `/api/v1/namespaces/${namespace}/services/${name}`);
  await waitFor(`the Service ${name} (${svc.spec.clusterIP}) to answer /healthz`, () => answers(`http://${svc.spec.clusterIP}/healthz`), { deadline, intervalMs: 250 }).catch(async (err: Error) => {
    // Whether the pod answers on its own tells kube-proxy's part from the pod's.
    throw new Error(`${err.message}\n${await podAnswers(api, namespace, workload.pods)}; see \`kubectl -n ${namespace} get endpointslices\` and .kfn/cluster/logs/kube-proxy.log`);
  });
}

/** Each look on a connection of its own: a connection attempt made before kube-proxy had the rules must not be the one every later look waits behind. */
async function answers(url: string): Promise<boolean> {
  const dispatcher = new Agent({ connect: { timeout: 1000 }, keepAliveTimeout: 1 });
  try {
    return await undiciFetch(url, { signal: AbortSignal.timeout(1500), dispatcher }).then((r) => r.ok, () => false);
  } finally {
    void dispatcher.destroy().catch(() => undefined);
  }
}

async function podAnswers(api: KubeApi, namespace: string, selector: string): Promise<string> {
  const pods = await api.request<{ items: { status?: { podIP?: string } }[] }>('GET', `/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: selector } }).catch(() => ({ items: [] }));
  const podIP = pods.items[0]?.status?.podIP;
  if (!podIP) return 'no pod found';
  return (await answers(`http://${podIP}:8080/healthz`)) ? `its pod ${podIP} answers directly, so the Service is not routed yet` : `its pod ${podIP} does not answer either`;
}

interface KnativeServiceObject {
  metadata: { generation: number };
  status?: { observedGeneration?: number; url?: string; conditions?: ReadCondition[] };
}

/** Waits until the Knative Service is Ready for its latest generation; a failed revision fails at once with Knative's reason. */
export async function waitKnativeService(api: KubeApi, namespace: string, name: string, deadline: number): Promise<KnativeServiceObject> {
  let ready: ReadCondition | undefined;
  return waitFor(
    `Knative Service ${namespace}/${name} to be Ready`,
    async () => {
      const ksvc = await api.request<KnativeServiceObject>('GET', `/apis/serving.knative.dev/v1/namespaces/${namespace}/services/${name}`);
      ready = ksvc.status?.conditions?.find((c) => c.type === 'Ready');
      const current = ksvc.status?.observedGeneration === ksvc.metadata.generation;
      if (current && ready?.status === 'True') return ksvc;
      // Knative says False only once a revision has failed (Unknown while it deploys).
      const why = current ? whyNotReady(ksvc.status?.conditions) : undefined;
      if (why) throw new WaitAbandoned(`Knative Service ${namespace}/${name} is not Ready: ${why}; see \`kubectl -n ${namespace} get ksvc,revisions,pods\` and the revision pod's log`);
      return undefined;
    },
    { deadline, intervalMs: 500, context: () => `Ready=${ready?.status ?? 'unknown'}${ready?.reason ? `, ${ready.reason}: ${ready.message ?? ''}` : ''}` },
  );
}
