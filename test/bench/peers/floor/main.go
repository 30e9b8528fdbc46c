// The floors a controller is measured against, as bare client-go programs:
//
//	floor watch --kubeconfig FILE --namespace NS --group G --version V --resource R
//	    Lists, then watches from the list's resourceVersion, and prints one line per event as it
//	    arrives: `<ADDED|MODIFIED|DELETED> <name> <generation> <unix ns>` (after `synced <n>`).
//	    Nothing is decoded beyond what the line needs: the latency of a watch alone.
//
//	floor converge --kubeconfig FILE --namespace NS [--parallel 16]
//	    Does for every MyWeb in NS only the writes a MyWeb controller must make: server-side
//	    applies of its ConfigMap, Deployment and Service, then, as each Deployment becomes
//	    available (watched), its status with Ready=True. No reads of children, no cache, no
//	    queue: the convergence floor. Prints `done <writes> <unix ns>` when every MyWeb is Ready.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: floor watch|converge --kubeconfig FILE --namespace NS …"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file")
	namespace := fs.String("namespace", "", "namespace")
	group := fs.String("group", "", "watch: API group")
	version := fs.String("version", "v1", "watch: API version")
	resource := fs.String("resource", "", "watch: resource (plural)")
	parallel := fs.Int("parallel", 16, "converge: writes in flight")
	fail(fs.Parse(os.Args[2:]))
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	fail(err)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	client, err := dynamic.NewForConfig(cfg)
	fail(err)
	ctx := context.Background()
	switch os.Args[1] {
	case "watch":
		watchFloor(ctx, client.Resource(schema.GroupVersionResource{Group: *group, Version: *version, Resource: *resource}).Namespace(*namespace))
	case "converge":
		converge(ctx, client, *namespace, *parallel)
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

func watchFloor(ctx context.Context, res dynamic.ResourceInterface) {
	out := bufio.NewWriter(os.Stdout)
	list, err := res.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	fail(err)
	fmt.Fprintf(out, "synced %d\n", len(list.Items))
	out.Flush()
	rv := list.GetResourceVersion()
	for {
		w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		fail(err)
		for ev := range w.ResultChan() {
			now := time.Now().UnixNano()
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue // an error event: the watch ends and is restarted from rv
			}
			rv = obj.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			fmt.Fprintf(out, "%s %s %d %d\n", ev.Type, obj.GetName(), obj.GetGeneration(), now)
			out.Flush()
		}
	}
}

var (
	cmGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	svcGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	depGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	webGVR = schema.GroupVersionResource{Group: "operator.k8s-summit.org", Version: "v1", Resource: "mywebs"}
)

type obj = map[string]any

func children(web *unstructured.Unstructured) []struct {
	gvr  schema.GroupVersionResource
	body obj
} {
	name := web.GetName()
	html, _, _ := unstructured.NestedString(web.Object, "spec", "pageContentHtml")
	image, _, _ := unstructured.NestedString(web.Object, "spec", "image")
	port, _, _ := unstructured.NestedInt64(web.Object, "spec", "nodePortNumber")
	labels := obj{"app.kubernetes.io/name": "myweb", "app.kubernetes.io/instance": name}
	owner := []any{obj{"apiVersion": "operator.k8s-summit.org/v1", "kind": "MyWeb", "name": name, "uid": string(web.GetUID()), "controller": true, "blockOwnerDeletion": true}}
	meta := func(n string) obj { return obj{"name": n, "labels": labels, "ownerReferences": owner} }
	sum := sha256.Sum256([]byte(html))
	return []struct {
		gvr  schema.GroupVersionResource
		body obj
	}{
		{cmGVR, obj{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name + "-page"), "data": obj{"index.html": html}}},
		{depGVR, obj{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name), "spec": obj{
			"replicas": 1, "selector": obj{"matchLabels": labels},
			"template": obj{
				"metadata": obj{"labels": labels, "annotations": obj{"myweb.kfn.dev/page-sha256": hex.EncodeToString(sum[:])[:16]}},
				"spec": obj{
					"containers": []any{obj{"name": "nginx", "image": image, "ports": []any{obj{"containerPort": 80}}, "volumeMounts": []any{obj{"name": "page", "mountPath": "/usr/share/nginx/html"}}}},
					"volumes":    []any{obj{"name": "page", "configMap": obj{"name": name + "-page"}}},
				},
			},
		}}},
		{svcGVR, obj{"apiVersion": "v1", "kind": "Service", "metadata": meta(name), "spec": obj{"type": "NodePort", "selector": labels, "ports": []any{obj{"port": 80, "targetPort": 80, "nodePort": port}}}}},
	}
}

func converge(ctx context.Context, client dynamic.Interface, ns string, parallel int) {
	webs, err := client.Resource(webGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	fail(err)
	var writes atomic.Int64
	apply := func(res dynamic.ResourceInterface, body obj, sub ...string) {
		u := &unstructured.Unstructured{Object: body}
		data, err := u.MarshalJSON()
		fail(err)
		for {
			_, err = res.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "floor", Force: ptrTrue()}, sub...)
			writes.Add(1)
			if err == nil {
				return
			}
			fmt.Fprintln(os.Stderr, err) // retried: the floor does not give up on a transient error
			time.Sleep(100 * time.Millisecond)
		}
	}
	byName := map[string]*unstructured.Unstructured{}
	for i := range webs.Items {
		byName[webs.Items[i].GetName()] = &webs.Items[i]
	}
	// Deployments becoming available → that MyWeb's status, from a watch started before any write.
	deps := client.Resource(depGVR).Namespace(ns)
	w, err := deps.Watch(ctx, metav1.ListOptions{})
	fail(err)
	ready := make(chan struct{})
	go func() {
		done := map[string]bool{}
		statusWork := make(chan *unstructured.Unstructured, len(byName))
		var wg sync.WaitGroup
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for web := range statusWork {
					apply(client.Resource(webGVR).Namespace(ns), obj{"apiVersion": "operator.k8s-summit.org/v1", "kind": "MyWeb", "metadata": obj{"name": web.GetName()}, "status": obj{
						"completed": true, "observedGeneration": web.GetGeneration(),
						"conditions": []any{obj{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "", "observedGeneration": web.GetGeneration(), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
					}}, "status")
				}
			}()
		}
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			available, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas")
			web := byName[d.GetName()]
			if available >= 1 && web != nil && !done[d.GetName()] {
				done[d.GetName()] = true
				statusWork <- web
				if len(done) == len(byName) {
					break
				}
			}
		}
		close(statusWork)
		wg.Wait()
		close(ready)
	}()
	work := make(chan *unstructured.Unstructured)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for web := range work {
				for _, c := range children(web) {
					apply(client.Resource(c.gvr).Namespace(ns), c.body)
				}
			}
		}()
	}
	for _, web := range byName {
		work <- web
	}
	close(work)
	wg.Wait()
	<-ready
	fmt.Printf("done %d %d\n", writes.Load(), time.Now().UnixNano())
}

func ptrTrue() *bool { t := true; return &t }

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
