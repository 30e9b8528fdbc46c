// `kfn demo` (npm start): the whole system on one machine. A cluster (kubectl's if it answers,
// else, in kfn's checkout, the local one, built on first use), the CRDs and Reconcilers, the bridge and
// the functions — on the local cluster as pods (the bridge from manifests/, each function a
// Deployment under its own ServiceAccount), elsewhere or with --local as processes on this
// machine — sample objects, and a live account of every delivery until Ctrl-C stops what it
// started.
import { join } from 'node:path';
import { repoRoot } from '../cluster/paths.ts';
import { deployFunctions } from './deploy.ts';
import { clusterFlags, clusterFlagsUsage, localClusterFlag, parseCommandArgs, UsageError, wantsHelp, type Command } from './command.ts';
import { functionDirs } from './functions.ts';
import { Demo, type DemoSteps } from './demo-run.ts';

const usage = `Usage: kfn demo [options]

Starts everything and shows it working: a cluster (kubectl's: --kubeconfig, $KUBECONFIG or
~/.kube/config, if it answers; otherwise, in kfn's checkout, the local one, built on first run;
--local-cluster asks for the local one), the CRDs and Reconcilers, the bridge and the functions,
and each function's samples.yaml; then prints every delivery (event → function → what changed
→ status) until Ctrl-C, which stops everything the demo started.

On the local cluster the bridge and the functions run as pods: the bridge image is built and
the shipped manifests/ applied (1 replica, leader-elected), each function is deployed as with
\`kfn deploy\`. On another cluster, or with --local, they run as processes on this machine
(faster to start; each function still under its own ServiceAccount token).

Options:
  --function NAME     only this example (default: every folder under functions/)
  --local             run the bridge and the functions as local processes
  --knative           on the local cluster, run each function as a Knative Service that scales
                      to zero (installs Knative Serving and Traefik first if needed)
  --exit-when-ready   stop once every sample reports Ready=True (for scripts and tests)
${clusterFlagsUsage(18, true)}
  -h, --help          show this help`;

const flags = { function: { type: 'string' }, 'exit-when-ready': { type: 'boolean' }, local: { type: 'boolean' }, knative: { type: 'boolean' }, ...clusterFlags, ...localClusterFlag } as const;

export const demoCommand: Command = {
  name: 'demo',
  usage,
  options: flags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(usage), 0);
    const { values } = parseCommandArgs('demo', argv, flags);
    if (values.knative && values.local) throw new UsageError('kfn demo: --knative runs the functions in the cluster; it cannot go with --local');
    const dirs = functionDirs(join(repoRoot, 'functions')).filter((d) => !values.function || d.endsWith(`/${values.function}`));
    if (dirs.length === 0) throw new UsageError(`kfn demo: no function named ${values.function} under functions/`);
    const steps: DemoSteps = { deploy: deployFunctions, installKnative: async (options) => (await import('./knative.ts')).installOnLocalCluster(options) };
    const demo = new Demo(dirs, { local: !!values.local, knative: !!values.knative, steps });
    try {
      const api = await demo.connect({ kubeconfig: values.kubeconfig, context: values.context, 'local-cluster': values['local-cluster'] });
      await demo.prepare(api);
      if (demo.inCluster) await demo.startInCluster(api);
      else await demo.startLocally(api);
      await demo.applySamples(api);
      await demo.showDeliveries(api, !!values['exit-when-ready']);
      return 0;
    } finally {
      await demo.stop();
    }
  },
};

