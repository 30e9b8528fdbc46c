// `kfn serve`: run one function locally as an HTTP server, as Knative would.
import { connectCluster } from '../kube/cluster-failures.ts';
import { describeCluster } from '../kube/kubeconfig.ts';
import { KubeApi } from '../kube/api.ts';
import { serve } from '../functions/sdk/node/index.ts';
import { hasWebhooks } from '../functions/sdk/webhooks.ts';
import { clusterFlags, clusterFlagsUsage, parseCommandArgs, parsePort, UsageError, wantsHelp, type Command } from './command.ts';
import { loadFunction } from './functions.ts';
import { startTracing } from '../core/tracing.ts';

const serveUsage = `Usage: kfn serve <function dir> [options]

Runs one reconcile function as an HTTP server, as Knative would. It reads the cluster as
kubectl does (docs/kubeconfig.md), and authenticates events with $KFN_AUTH_SECRET (HMAC) or
$KFN_AUTH_TOKEN (bearer).

Options:
  --port N        port to listen on (default $PORT or 8080)
  --host H        address to listen on (default 127.0.0.1)
${clusterFlagsUsage(14)}
  --insecure      accept unsigned events (local development only)
  --webhook-cert-dir D  serve the function's webhooks (default, validate, conversion) over HTTPS
                  with D/tls.crt and D/tls.key (re-read when they change)
  --webhook-port N      port of the HTTPS listener (default 9443)
  -h, --help      show this help`;

const serveFlags = { port: { type: 'string' }, host: { type: 'string' }, ...clusterFlags, insecure: { type: 'boolean' }, 'webhook-port': { type: 'string' }, 'webhook-cert-dir': { type: 'string' } } as const;

export const serveCommand: Command = {
  name: 'serve',
  usage: serveUsage,
  options: serveFlags,
  async run(argv) {
    if (wantsHelp(argv)) return (console.log(serveUsage), 0);
    const { values, positionals } = parseCommandArgs('serve', argv, serveFlags, true);
    if (positionals.length !== 1) throw new UsageError(`kfn serve: expected one function folder, e.g. functions/myweb\n\n${serveUsage}`);
    if (values.insecure) process.env.KFN_INSECURE = '1';
    const reconciler = await loadFunction(positionals[0]!);
    const port = parsePort('--port', values.port) ?? Number(process.env.PORT ?? 8080);
    // Its failures are the SDK's to judge and log, per reconcile: the connection is left plain.
    const cluster = connectCluster(values, { explain: false });
    console.error(`kfn serve: ${describeCluster(cluster)}`);
    const api = new KubeApi(cluster.connection);
    const tracing = await startTracing(`kfn-fn-${reconciler.name}`);
    const certDir = values['webhook-cert-dir'];
    const webhookPort = parsePort('--webhook-port', values['webhook-port']) ?? 9443;
    if (certDir && !hasWebhooks(reconciler)) throw new UsageError(`kfn serve: ${reconciler.name} has no webhooks (no default(), validate() or previous versions of its kind); drop --webhook-cert-dir`);
    const server = await serve(reconciler, { port, hostname: values.host ?? '127.0.0.1', api, ...(certDir ? { webhooks: { port: webhookPort, certDir } } : {}) });
    console.error(`kfn serve: ${reconciler.name} (${reconciler.for.apiVersion} ${reconciler.for.kind}) listening on http://${values.host ?? '127.0.0.1'}:${port}/${certDir ? `, webhooks on https://${values.host ?? '127.0.0.1'}:${webhookPort}/` : ''}`);
    await new Promise<void>((done) => {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => server.close(() => done()));
    });
    await tracing?.shutdown();
    return 0;
  },
};
