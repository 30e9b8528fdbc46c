// Knative Eventing's ApiServerSource receive adapter (knative.dev/eventing/pkg/adapter/apiserver,
// the code its Deployment runs: reflectors per resource and namespace, a delegate that turns
// each add/update/delete into a CloudEvent and sends it at once), started with a kubeconfig on
// this machine. Upstream's own main (adapter.MainWithContext) also opens a health-probe server
// on :8080 and a profiling server on :8008 on every interface, and starts OIDC and trust-bundle
// informers; this start-up leaves those out and sends with a plain CloudEvents HTTP client. The
// adapter reads its usual environment: NAME, NAMESPACE, K_SINK and K_SOURCE_CONFIG.
//
//	apiserver-adapter --kubeconfig FILE
package main

import (
	"flag"
	"fmt"
	"os"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/kelseyhightower/envconfig"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/eventing/pkg/adapter/apiserver"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/signals"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	fail(err)
	cfg.QPS, cfg.Burst = -1, 0
	ctx := signals.NewContext()
	ctx = injection.WithConfig(ctx, cfg)
	ctx, _ = injection.Default.SetupInformers(ctx, cfg)
	env := apiserver.NewEnvConfig()
	fail(envconfig.Process("", env))
	ce, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(env.GetSink()))
	fail(err)
	fail(apiserver.NewAdapter(ctx, env, ce).Start(ctx))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiserver-adapter:", err)
		os.Exit(1)
	}
}
