// Where kfn keeps its files: the checkout it runs from, and a local cluster's state directory
// (default `.kfn/cluster/` at the repository root, or $KFN_CLUSTER_DIR).
import { join, relative } from 'node:path';
export const repoRoot = join(import.meta.dirname, '..');

export interface ClusterPaths {
  dir: string;
  state: string;
  kubeconfig: string;
  logs: string;
  pki: string;
  lock: string;
}

export function clusterPaths(dir = process.env.KFN_CLUSTER_DIR || join(repoRoot, '.kfn', 'cluster')): ClusterPaths {
  return {
    dir,
    state: join(dir, 'state.json'),
    kubeconfig: join(dir, 'kubeconfig'),
    logs: join(dir, 'logs'),
    pki: join(dir, 'pki'),
    // Beside the state directory, not in it: `down` removes the directory while holding the lock.
    lock: `${dir}.lock`,
  };
}

/** A path as the user should read it: relative to the current directory when that is shorter. */
export function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') && rel.length < path.length ? rel : path;
}
