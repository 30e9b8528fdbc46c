// Where kfn keeps its files. kfn runs either from a checkout (its TypeScript as it is) or
// installed from its package (`lib/`: the same tree compiled to JavaScript, with the files it
// reads beside the code, as Node runs no TypeScript under node_modules). `repoRoot` is the root
// of that tree; work files go to `.kfn/` at the checkout's root, or of the project kfn is run
// in; a local cluster's state directory is `.kfn/cluster/` of the checkout, or `~/.kfn/cluster`
// for an installed kfn (one cluster per machine: its ports are fixed), or $KFN_CLUSTER_DIR.
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, relative } from 'node:path';

/** True when this is the compiled tree of an installed package, not a checkout. */
export const compiled = import.meta.filename.endsWith('.js');
export const repoRoot = join(import.meta.dirname, '..');
/** kfn's version: the package's, the bridge image's tag, what `kfn --version` says. */
export const kfnVersion = (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
/** Where kfn writes its work files (bundles, builds, the demo's and the dev server's files). */
export const workRoot = compiled ? join(process.cwd(), '.kfn') : join(repoRoot, '.kfn');

/**
 * A source file of kfn's own as it runs here, for a child process or a bundle entry: the
 * TypeScript file in a checkout, its compiled JavaScript in a package.
 */
export function codePath(...parts: string[]): string {
  const path = join(repoRoot, ...parts);
  return compiled ? path.replace(/\.ts$/, '.js') : path;
}

export interface ClusterPaths {
  dir: string;
  state: string;
  kubeconfig: string;
  logs: string;
  pki: string;
  lock: string;
}

export function clusterPaths(dir = process.env.KFN_CLUSTER_DIR || (compiled ? join(homedir(), '.kfn', 'cluster') : join(repoRoot, '.kfn', 'cluster'))): ClusterPaths {
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
