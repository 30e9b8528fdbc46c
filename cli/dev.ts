// `kfn dev`: the functions on a local Hono server that reloads them on save, a bridge in this
// process delivering to them, and a live web UI of every delivery — its event, reads, children
// (desired next to live), writes, status, logs, errors — with replay (live or dry-run).
// The server and its steps are cli/dev-server.ts and the dev-* modules beside it.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { workRoot } from '../cluster/paths.ts';
import { clusterFlags, clusterFlagsUsage, localClusterFlag, parseCommandArgs, parsePort, UsageError, wantsHelp, type Command } from './command.ts';
import { chooseCluster, writeClusterKubeconfig } from './cluster-choice.ts';
import { startDevServer } from './dev-server.ts';
import { functionDirs, functionEntry } from './functions.ts';
import { typecheckFlag, typecheckUsage } from './typecheck.ts';

const usage = `Usage: kfn dev [function dir …] [options]

Runs the functions (default: every folder under functions/) on a local dev server, with a
bridge in this process delivering the cluster's events to them, and a live web UI of every
delivery. Saving a function's code reloads it: the next delivery runs the new code, nothing
restarts; code that does not build or type-check (the project's tsconfig.json, checked as
the code is bundled) is reported, and the version before keeps running. Its CRD and RBAC
follow the code. Each function works under its own ServiceAccount's token, so RBAC is what
it will be in the cluster.

The cluster is kubectl's (docs/kubeconfig.md): --kubeconfig, else $KUBECONFIG, else
~/.kube/config; --context picks a context. With --local-cluster, or when no kubeconfig is found
and it runs, it is kfn's own local cluster. Every invocation is recorded (to .kfn/dev/records.jsonl): \`kfn replay\` replays them.

Options:
  --port N          port of the dev server and its UI (default 8070)
  -n, --namespace N  where the functions' ServiceAccounts and Secrets go, as for kfn deploy
                     (default kfn-system)
  --watch-namespace N
                    deliver only objects in namespace N (repeatable; default: all namespaces),
                    as kfn deploy's
${clusterFlagsUsage(16, true)}
  --records F       append the records to F instead (--records=off: none)
${typecheckUsage(16)}
  -h, --help        show this help`;

const flags = { port: { type: 'string' }, namespace: { type: 'string', short: 'n' }, 'watch-namespace': { type: 'string', multiple: true }, ...clusterFlags, ...localClusterFlag, records: { type: 'string' }, ...typecheckFlag } as const;

export const devCommand: Command = {
  name: 'dev',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values, positionals } = parseCommandArgs('dev', argv, flags, true);
    const dirs = positionals.length ? positionals : functionDirs();
    for (const d of dirs) if (!functionEntry(d)) throw new UsageError(`kfn dev: ${d} is not a function folder (no index.ts)`);
    const cluster = await chooseCluster({ kubeconfig: values.kubeconfig, context: values.context, 'local-cluster': values['local-cluster'] }, { startLocalInCheckout: 'when-none', actsIn: () => values.namespace ?? 'kfn-system' });
    mkdirSync(join(workRoot, 'dev'), { recursive: true });
    const dev = await startDevServer({
      dirs,
      // The functions' own kubeconfigs are made for the chosen context's cluster.
      kubeconfig: writeClusterKubeconfig(cluster, join(workRoot, 'dev', 'admin.kubeconfig')),
      api: cluster.api,
      port: parsePort('--port', values.port) ?? 8070,
      systemNamespace: values.namespace,
      namespaces: values['watch-namespace'],
      recordFile: values.records === 'off' ? false : values.records,
      typecheck: !values['no-typecheck'],
      log: (line) => console.error(line),
    });
    console.error(`\nkfn dev: UI at ${dev.url}/ — save a function to reload it; Ctrl-C to stop`);
    await new Promise<void>((done) => {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => done());
    });
    console.error('kfn dev: stopping');
    await dev.stop();
    return 0;
  },
};

