// The controller-runtime peer of kfn's MyWeb function: the same children (page ConfigMap, nginx
// Deployment, NodePort Service, each owned by the MyWeb), the same status (completed,
// observedGeneration, a Ready condition), written the way a kubebuilder operator writes them:
// controllerutil.CreateOrUpdate per child (a read from the cache, a write only when a field
// this operator sets differs) and a status update only when the status changed. Reads come from
// controller-runtime's default cache; its defaults otherwise (one reconcile at a time, no
// client-side rate limit).
//
//	myweb-operator --kubeconfig FILE [--namespace NS] [--metrics-bind-address ADDR]
//	               [--max-concurrent-reconciles N] [--watch-only [--metadata-only]] [--page-only] [--team T] [--controllers N]
//
// --page-only makes the page ConfigMap alone and reports Ready at once (P8's throughput by shards:
// a MyWeb's NodePort would cap the count at the port range, and the pods would measure the
// kube-controller-manager).
// --watch-only keeps the cache and the watches but returns from every reconcile at once (for
// measuring what holding N objects costs); with --metadata-only the watches and the cache hold
// only the objects' metadata (metav1.PartialObjectMetadata, as builder.OnlyMetadata makes them).
// The first reconcile prints `first-reconcile <unix ns>`; the cache holding every watched kind,
// `synced <unix ns>`.
// --team T reconciles only the MyWebs labelled kfn.bench/team=T (one of twelve operators, each a
// team's); --controllers N runs N such controllers in one manager, controller i for team i, as
// one kubebuilder manager runs several controllers over one shared cache (the fleet at rest).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

type reconciler struct {
	client.Client
	scheme    *runtime.Scheme
	watchOnly bool
	pageOnly  bool
	team      string
	first     atomic.Bool
}

const teamLabel = "kfn.bench/team"

func labelsOf(web *MyWeb) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "myweb", "app.kubernetes.io/instance": web.Name}
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.first.CompareAndSwap(false, true) {
		fmt.Printf("first-reconcile %d\n", time.Now().UnixNano())
	}
	if r.watchOnly {
		return ctrl.Result{}, nil
	}
	web := &MyWeb{}
	if err := r.Get(ctx, req.NamespacedName, web); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A child's event enqueues its owner whatever its team: the team is checked here too.
	if r.team != "" && web.Labels[teamLabel] != r.team {
		return ctrl.Result{}, nil
	}
	labels := labelsOf(web)

	page := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: web.Name + "-page", Namespace: web.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, page, func() error {
		page.Labels = labels
		page.Data = map[string]string{"index.html": web.Spec.PageContentHTML}
		return controllerutil.SetControllerReference(web, page, r.scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}
	if r.pageOnly {
		return ctrl.Result{}, r.updateStatus(ctx, web, true)
	}

	sum := sha256.Sum256([]byte(web.Spec.PageContentHTML))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: web.Name, Namespace: web.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error {
		dep.Labels = labels
		dep.Spec.Replicas = ptr.To[int32](1)
		if dep.CreationTimestamp.IsZero() {
			dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
		}
		dep.Spec.Template.Labels = labels
		dep.Spec.Template.Annotations = map[string]string{"myweb.kfn.dev/page-sha256": hex.EncodeToString(sum[:])[:16]}
		pod := &dep.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			pod.Containers = []corev1.Container{{}}
		}
		c := &pod.Containers[0]
		c.Name = "nginx"
		c.Image = web.Spec.Image
		c.Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "page", MountPath: "/usr/share/nginx/html"}}
		pod.Volumes = []corev1.Volume{{Name: "page", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: web.Name + "-page"},
			DefaultMode:          ptr.To[int32](0o644),
		}}}}
		return controllerutil.SetControllerReference(web, dep, r.scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: web.Name, Namespace: web.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Labels = labels
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Selector = labels
		svc.Spec.Ports = []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: web.Spec.NodePortNumber, Protocol: corev1.ProtocolTCP}}
		return controllerutil.SetControllerReference(web, svc, r.scheme)
	}); err != nil {
		return ctrl.Result{}, err
	}

	return ctrl.Result{}, r.updateStatus(ctx, web, dep.Status.AvailableReplicas >= 1)
}

// updateStatus writes completed, observedGeneration and the Ready condition, only when they changed.
func (r *reconciler) updateStatus(ctx context.Context, web *MyWeb, available bool) error {
	status := *web.Status.DeepCopy()
	status.Completed = available
	status.ObservedGeneration = web.Generation
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled", Message: "", ObservedGeneration: web.Generation}
	if !available {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "DeploymentNotAvailable", "waiting for Deployment "+web.Name+" to be available"
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	if equality.Semantic.DeepEqual(status, web.Status) {
		return nil
	}
	web.Status = status
	return r.Status().Update(ctx, web)
}

func (s MyWebStatus) DeepCopy() *MyWebStatus {
	w := &MyWeb{Status: s}
	return &w.DeepCopy().Status
}

func main() {
	var namespace, metricsAddr, team string
	var watchOnly, metadataOnly, pageOnly bool
	var workers, controllers int
	flag.StringVar(&namespace, "namespace", "", "watch this namespace only (default: all)")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "where to serve /metrics (0: nowhere)")
	flag.IntVar(&workers, "max-concurrent-reconciles", 1, "reconciles at once")
	flag.BoolVar(&watchOnly, "watch-only", false, "cache and watch, but do nothing in reconcile")
	flag.BoolVar(&metadataOnly, "metadata-only", false, "with --watch-only: watch and cache only the objects' metadata")
	flag.BoolVar(&pageOnly, "page-only", false, "make the page ConfigMap alone (no Deployment, no Service) and report Ready")
	flag.StringVar(&team, "team", "", "reconcile only the MyWebs labelled "+teamLabel+"=TEAM (default: all)")
	flag.IntVar(&controllers, "controllers", 0, "run N controllers in this manager, controller i for team i (default: one, for --team)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	// Reconcile reads whole MyWebs: a metadata-only cache would grow a second, whole one on its first read.
	if metadataOnly && !watchOnly {
		must(fmt.Errorf("--metadata-only needs --watch-only"))
	}

	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(addKnownTypes(scheme))
	options := ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: metricsAddr}, HealthProbeBindAddress: "0"}
	if namespace != "" {
		options.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), options)
	must(err)
	// What a controller watches: MyWebs, then the kinds it owns; whole, or their metadata alone.
	watched := func() []client.Object {
		kinds := []client.Object{&MyWeb{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.Service{}}
		if metadataOnly {
			for i, kind := range kinds {
				kinds[i] = metadataOf(kind, scheme)
			}
		}
		return kinds
	}
	add := func(name, team string) {
		r := &reconciler{Client: mgr.GetClient(), scheme: scheme, watchOnly: watchOnly, pageOnly: pageOnly, team: team}
		ofTeam := predicate.NewPredicateFuncs(func(o client.Object) bool { return team == "" || o.GetLabels()[teamLabel] == team })
		// builder.OnlyMetadata: the watches and the cache take PartialObjectMetadata, while the
		// owner type stays MyWeb (a PartialObjectMetadata owner is in no scheme).
		only := []builder.OwnsOption{}
		forOpts := []builder.ForOption{builder.WithPredicates(ofTeam)}
		if metadataOnly {
			only = append(only, builder.OnlyMetadata)
			forOpts = append(forOpts, builder.OnlyMetadata)
		}
		b := ctrl.NewControllerManagedBy(mgr).For(&MyWeb{}, forOpts...)
		for _, owned := range []client.Object{&corev1.ConfigMap{}, &appsv1.Deployment{}, &corev1.Service{}} {
			b = b.Owns(owned, only...)
		}
		must(b.WithOptions(controller.Options{MaxConcurrentReconciles: workers}).Named(name).Complete(r))
	}
	if controllers > 0 {
		for i := range controllers {
			add(fmt.Sprintf("myweb-%d", i), fmt.Sprint(i))
		}
	} else {
		add("myweb", team)
	}
	// The controllers' informers are the cache's, one per kind: GetInformer returns each once it
	// has synced (and would start it if no controller had yet).
	must(mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for _, kind := range watched() {
			if _, err := mgr.GetCache().GetInformer(ctx, kind); err != nil {
				return err
			}
		}
		fmt.Printf("synced %d\n", time.Now().UnixNano())
		return nil
	})))
	must(mgr.Start(ctrl.SetupSignalHandler()))
}

// metadataOf is the metadata-only form of a kind's objects, as builder.OnlyMetadata projects it.
func metadataOf(obj client.Object, scheme *runtime.Scheme) client.Object {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	must(err)
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
