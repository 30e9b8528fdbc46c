// kfn's commands and files as its user types them where kfn runs. kfn runs from its package in a
// user's project — `npx kfn …`, its manifests and chart under node_modules/kfn/lib/ — or from
// its own checkout — `npm run kfn -- …`, the repository's manifests/ and charts/. A message that
// tells the user what to run spells it here, so that it is true in both: "start it with `npm
// run kfn -- cluster up`" sent a project's user to a script their project does not have.
// cli/invocation.test.ts finds a message that spells either by hand.
import { isAbsolute, join, relative } from 'node:path';
import { compiled, repoRoot } from '../cluster/paths.ts';

/** Where kfn runs from: its compiled package or its checkout, the root of its tree, and the user's folder. */
export interface KfnInstall {
  compiled: boolean;
  /** The tree the files are in: the package's lib/, or the checkout. */
  root: string;
  cwd: string;
}

const here = (): KfnInstall => ({ compiled, root: repoRoot, cwd: process.cwd() });

/** `kfn <args>` as the user runs it: `npx kfn cluster up`, in kfn's checkout `npm run kfn -- cluster up`. */
export function kfnCommand(args: string, at: KfnInstall = here()): string {
  return `${at.compiled ? 'npx kfn' : 'npm run kfn --'} ${args}`;
}

/** The same, for a command whose output is used (`eval "$(…)"`): without npm's own lines before it. */
export function kfnCommandForOutput(args: string, at: KfnInstall = here()): string {
  return `${at.compiled ? 'npx kfn' : 'npm run --silent kfn --'} ${args}`;
}

/**
 * A file or folder of kfn's (`manifests/crds/`) as the user names it from their folder:
 * `node_modules/kfn/lib/manifests/crds/` in a project, `manifests/crds/` in the checkout; its
 * whole path from a folder it is not under.
 */
export function kfnFile(path: string, at: KfnInstall = here()): string {
  const absolute = join(at.root, path);
  const shown = relative(at.cwd, absolute);
  const name = !shown || shown.startsWith('..') || isAbsolute(shown) ? absolute : shown;
  return path.endsWith('/') && !name.endsWith('/') ? `${name}/` : name;
}

/** kfn's Helm chart: the bridge and the Reconciler CRD, for any cluster. */
export function kfnChart(at: KfnInstall = here()): string {
  return kfnFile('charts/kfn', at);
}

/** The command that installs the Reconciler CRD. */
export function reconcilerCrdInstall(at: KfnInstall = here()): string {
  return `kubectl apply -f ${kfnFile('manifests/crds/', at)}`;
}

/** The commands that run the bridge in kfn's local cluster: its image imported into the node, then kfn's manifests. */
export function localBridgeInstall(at: KfnInstall = here()): string {
  return `${kfnCommand('image build bridge', at)} && kubectl apply -k ${kfnFile('manifests/', at)}`;
}
