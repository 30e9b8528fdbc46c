// @kubernetes/client-node, an optional peer dependency of kfn: loaded only for a kubeconfig user
// with an exec or auth-provider plugin (how EKS, GKE and AKS kubeconfigs authenticate), which it
// runs. It is 65 MB installed, so a project installs it only when it meets such a kubeconfig, and
// kfn then says so. Imported by a name esbuild does not follow: no function bundle carries it (in
// a cluster a function authenticates by its ServiceAccount, never by a plugin).
import type * as ClientNode from '@kubernetes/client-node';

export const clientNode = '@kubernetes/client-node';

/** What to do when it is not installed: for what it is needed, and the one command. */
export class ClientNodeMissing extends Error {}

/**
 * The library, imported on first use; when it is not installed, a ClientNodeMissing that says
 * `why` it is needed and how to install it. `load` imports a module by name (a test's stand-in).
 */
export async function importClientNode(why: string, load: (name: string) => Promise<unknown> = (name) => import(name)): Promise<typeof ClientNode> {
  try {
    return (await load(clientNode)) as typeof ClientNode;
  } catch (err) {
    const { code, message } = err as { code?: string; message?: string };
    if (code !== 'ERR_MODULE_NOT_FOUND' || !message?.includes(clientNode)) throw err;
    throw new ClientNodeMissing(`${why}, which kfn runs through ${clientNode}; it is not installed here. Install it in your project (npm install --save-dev ${clientNode}) and run kfn again.`, { cause: err });
  }
}
