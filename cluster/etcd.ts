// etcd's own API, through its gRPC gateway: compaction and reads at a revision, for the tests
// that need history to be gone (a 410 Gone on resume).
import { clusterPaths, type ClusterPaths } from './paths.ts';
import { requireState } from './state.ts';

export async function etcdRequest(port: number, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  if (!res.ok) throw new Error(`etcd ${path} answered ${res.status}: ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/**
 * Compacts etcd's history up to its current revision, so that older resourceVersions can no
 * longer be read from storage. Returns the compacted revision. A running apiserver's watch
 * cache may still serve watches from before it; `restartApiserver` drops that cache.
 */
export async function compactEtcd(options: { paths?: ClusterPaths } = {}): Promise<number> {
  const state = requireState(options.paths ?? clusterPaths());
  // The gRPC gateway takes base64 keys; any range read returns the store's current revision.
  const range = await etcdRequest(state.ports.etcd, '/v3/kv/range', { key: Buffer.from('/').toString('base64'), limit: 1 });
  const revision = Number((range.header as { revision?: string } | undefined)?.revision);
  if (!Number.isFinite(revision) || revision <= 0) throw new Error(`etcd returned no revision: ${JSON.stringify(range)}`);
  await etcdRequest(state.ports.etcd, '/v3/kv/compaction', { revision, physical: true });
  return revision;
}

/** Reads one key from etcd at `revision`; rejects with etcd's message if it was compacted. */
export async function etcdReadAt(revision: number, options: { paths?: ClusterPaths; key?: string } = {}): Promise<void> {
  const state = requireState(options.paths ?? clusterPaths());
  await etcdRequest(state.ports.etcd, '/v3/kv/range', { key: Buffer.from(options.key ?? '/').toString('base64'), limit: 1, revision });
}
