// Every `kfn` command, in the order `kfn --help` lists them, with its one line of summary: written
// here and nowhere else (cli/help.test.ts), so that `kfn --help` loads no command. Commands are
// loaded when run, so that `kfn bridge` carries none of the cluster tooling.
import type { Command } from './command.ts';

export interface CommandEntry {
  name: string;
  summary: string;
  load(): Promise<Command>;
}

export const commands: CommandEntry[] = [
  { name: 'demo', summary: 'start a cluster, the bridge, the functions and samples; show deliveries live', load: async () => (await import('./demo.ts')).demoCommand },
  { name: 'cluster', summary: 'build, start, stop and inspect the local Kubernetes control plane', load: async () => (await import('./cluster.ts')).clusterCommand },
  { name: 'bridge', summary: 'run the bridge: Kubernetes watch events → reconcile CloudEvents', load: async () => (await import('./bridge.ts')).bridgeCommand },
  { name: 'init', summary: 'write a new operator project that depends on kfn (npm create kfn@latest <dir>)', load: async () => (await import('./init.ts')).initCommand },
  { name: 'new', summary: 'write a new function folder: the kind, its reconcile, samples, README and a unit test', load: async () => (await import('./new.ts')).newCommand },
  { name: 'serve', summary: 'run one reconcile function as an HTTP server', load: async () => (await import('./serve.ts')).serveCommand },
  { name: 'deploy', summary: 'run functions in the local cluster as Deployments, their Reconcilers pointing at them', load: async () => (await import('./deploy.ts')).deployCommand },
  { name: 'undeploy', summary: 'remove what kfn deploy created for functions or a shared host (their CRDs and objects stay unless --crds)', load: async () => (await import('./undeploy.ts')).undeployCommand },
  { name: 'build', summary: 'build functions into Lambda deployment packages (zip)', load: async () => (await import('./build.ts')).buildCommand },
  { name: 'image', summary: 'build the bridge and function images; import them into the local node or push them to a registry', load: async () => (await import('./image.ts')).imageCommand },
  { name: 'knative', summary: 'install Knative Serving (with Traefik) on the local cluster, or show its status', load: async () => (await import('./knative.ts')).knativeCommand },
  { name: 'dev', summary: 'run functions on a local dev server: reload on save, a bridge in process, a live web UI of deliveries', load: async () => (await import('./dev.ts')).devCommand },
  { name: 'diff', summary: 'show what a function would change for one object now (server-side dry run)', load: async () => (await import('./diff.ts')).diffCommand },
  { name: 'replay', summary: 'replay recorded reconciles: offline against their reads, as a server-side dry run, or live', load: async () => (await import('./replay.ts')).replayCommand },
  { name: 'manifests', summary: 'write (and apply) CRDs, Reconcilers, RBAC, webhooks and workloads for the functions', load: async () => (await import('./manifests.ts')).manifestsCommand },
];
