// The function as an AWS Lambda handler (Hono's Lambda adapter): Function URLs, API Gateway,
// ALB. Its Kubernetes connection comes from $KFN_KUBECONFIG.
import type { Hono } from 'hono';
import { handle } from 'hono/aws-lambda';
import { createApp, type FunctionOptions } from '../app.ts';
import type { Reconciler } from '../reconciler.ts';
import { KubeApi } from '../../../kube/api.ts';
import { connectionFromKubeconfigText, kubeconfigParserReady, loadConnection } from '../../../kube/kubeconfig.ts';
import { startTracing, type Tracing } from '../../../core/tracing.ts';

/**
 * The Kubernetes connection of a function running outside any cluster (a Lambda): the kubeconfig
 * in $KFN_KUBECONFIG (its text — a ServiceAccount token, never the admin's), else the usual
 * --kubeconfig/$KUBECONFIG/~/.kube/config chain.
 */
export function lambdaConnection(env: NodeJS.ProcessEnv = process.env) {
  if (env.KFN_KUBECONFIG) return connectionFromKubeconfigText(env.KFN_KUBECONFIG, '$KFN_KUBECONFIG');
  return loadConnection();
}

/** The function as an AWS Lambda handler (Function URLs, API Gateway, ALB): `export const handler = lambdaHandler(reconciler)`. */
export function lambdaHandler(reconciler: Reconciler, options: FunctionOptions = {}) {
  let app: Hono | undefined;
  let tracing: Promise<Tracing | undefined> | undefined;
  // Built on the first invocation, so that a configuration error is that invocation's error (and
  // in the function's log) rather than an init failure Lambda retries without saying why.
  return async (event: Parameters<ReturnType<typeof handle>>[0], context: Parameters<ReturnType<typeof handle>>[1]) => {
    // Spans over OTLP when the environment says where; sent before the answer, since Lambda
    // freezes the process between invocations (a batch left for later may never go).
    // A tracing setup that failed is said once and left off: the reconciles go on.
    const traced = await (tracing ??= startTracing(`kfn-fn-${reconciler.name}`).catch((err: Error) => (console.error(`kfn: tracing is off: ${err.message}`), undefined)));
    if (!app) {
      // The bundle loads the YAML parser only if the kubeconfig needs it (kube/kubeconfig.ts).
      if (!options.api && !options.connect) await kubeconfigParserReady(process.env.KFN_KUBECONFIG ? { text: process.env.KFN_KUBECONFIG } : {});
      app = createApp(reconciler, { connect: () => new KubeApi(lambdaConnection()), ...options });
    }
    try {
      return await handle(app)(event, context);
    } finally {
      await traced?.flush();
    }
  };
}
