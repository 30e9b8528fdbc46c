// NodePorts for the tests' Services. A NodePort belongs to the whole cluster, not to a
// namespace, and the test files run in parallel against one cluster: two files that pick the
// same number clash, and the later Service is refused ("provided port is already allocated") —
// a MyWeb then stays Ready=False and its test times out. So each file that needs NodePorts takes
// them from a block of its own, listed here; no two blocks overlap, and none holds the samples'
// fixed ports (30080–30082, which the demo deploys as they are).
//
// Blocks alone do not cover a port the apiserver picks itself (a LoadBalancer or NodePort Service
// that names none, as ReverseWordsApp's does; it picks from the whole range), nor the Services of
// an earlier run whose namespaces are still being deleted. So a number is handed out only if no
// Service in the cluster holds it at that moment: ask for it just before the Service that uses
// it is written. Asking for more than the block holds (counting the numbers skipped) fails at
// once rather than reusing one: grow the block in this table instead.
//
// The benches (test/bench) choose their own NodePorts and need the cluster to themselves.
import type { KubeApi } from '../../kube/api.ts';

/** The cluster's NodePort range (the apiserver's default `--service-node-port-range`). */
export const nodePortRange = { first: 30000, last: 32767 } as const;

/** The NodePorts the samples (functions/*\/samples.yaml) use as they are. */
export const samplePorts = { first: 30080, last: 30082 } as const;

/** Each test file's block: first port and how many. */
export const portBlocks = {
  'e2e/myweb': { first: 30100, size: 200 },
  'e2e/dev': { first: 30300, size: 20 },
  'e2e/lambda-delivery': { first: 30320, size: 40 },
  'e2e/examples': { first: 30360, size: 40 },
  'e2e/lambda': { first: 30400, size: 40 },
  'e2e/tracing': { first: 30440, size: 10 },
  'e2e/observability': { first: 30450, size: 10 },
  'e2e/incluster': { first: 30460, size: 10 },
  'e2e/knative': { first: 30470, size: 10 },
  'integration/diff': { first: 30480, size: 10 },
  'integration/node': { first: 30490, size: 10 },
  'e2e/scale-to-zero': { first: 30500, size: 10 },
  'e2e/replay-production': { first: 30510, size: 10 },
} as const satisfies Record<string, { first: number; size: number }>;

export type PortOwner = keyof typeof portBlocks;

/** The NodePorts the cluster's Services hold now. */
export async function nodePortsInUse(api: Pick<KubeApi, 'request'>): Promise<Set<number>> {
  const services = await api.request<{ items: { spec?: { ports?: { nodePort?: number }[] } }[] }>('GET', '/api/v1/services');
  return new Set(services.items.flatMap((s) => (s.spec?.ports ?? []).flatMap((p) => (p.nodePort ? [p.nodePort] : []))));
}

/**
 * A source of NodePorts from `owner`'s block: each call gives the next number of the block that
 * no Service holds now (asked through `api`), in order from the block's start.
 */
export function nodePorts(owner: PortOwner): (api: Pick<KubeApi, 'request'>) => Promise<number> {
  const { first, size } = portBlocks[owner];
  let offset = 0;
  return async (api) => {
    const used = await nodePortsInUse(api);
    while (offset < size && used.has(first + offset)) offset++;
    if (offset >= size) throw new Error(`test NodePorts: ${owner} needs more than the ${size} ports of its block (${first}–${first + size - 1}), counting ${[...used].filter((p) => p >= first && p < first + size).length} held by Services now; make its block in test/support/ports.ts larger`);
    return first + offset++;
  };
}
