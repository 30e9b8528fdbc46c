// The floors a controller is measured against, as bare client-go programs:
//
//	floor watch --kubeconfig FILE --namespace NS --group G --version V --resource R
//	    Lists, then watches from the list's resourceVersion, and prints one line per event as it
//	    arrives: `<ADDED|MODIFIED|DELETED> <name> <generation> <unix ns>` (after `synced <n>`).
//	    Nothing is decoded beyond what the line needs: the latency of a watch alone.
//
//	floor receive
//	    An HTTP receiver on 127.0.0.1 for kfn's deliveries and ApiServerSource's CloudEvents,
//	    timestamping each on arrival in a process of its own: prints `listening <port>`, then
//	    `<path> <name> <generation> <unix ns>` per request. kfn's deliveries are answered "done".
//
//	floor converge --kubeconfig FILE --namespace NS --count N [--parallel 16]
//	    Does for each MyWeb created in NS (watched) only the writes a MyWeb controller must
//	    make: server-side applies of its ConfigMap, Deployment and Service, then, as each
//	    Deployment becomes available (watched), its status with Ready=True. No reads of children,
//	    no cache, no queue: the convergence floor. Prints `done <writes> <unix ns>` after N.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
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
	count := fs.Int("count", 0, "converge: MyWebs to wait for")
	fail(fs.Parse(os.Args[2:]))
	if os.Args[1] == "receive" {
		receive()
		return
	}
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
		converge(ctx, client, *namespace, *parallel, *count)
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

func receive() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	fail(err)
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	out.Flush()
	fail(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		at := time.Now().UnixNano()
		var msg struct {
			Primary *struct {
				Name       string
				Generation int64
			} `json:"primary"`
			Metadata *struct {
				Name       string
				Generation int64
			} `json:"metadata"`
		}
		_ = json.Unmarshal(body, &msg)
		name, generation := "", int64(0)
		if msg.Primary != nil {
			name, generation = msg.Primary.Name, msg.Primary.Generation
			w.Header().Set("content-type", "application/json")
			_, _ = w.Write([]byte(`{"result":"done","changes":[]}`))
		} else if msg.Metadata != nil {
			name, generation = msg.Metadata.Name, msg.Metadata.Generation
			w.WriteHeader(http.StatusAccepted)
		}
		mu.Lock()
		fmt.Fprintf(out, "%s %s %d %d\n", r.URL.Path, name, generation, at)
		out.Flush()
		mu.Unlock()
	})))
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

func converge(ctx context.Context, client dynamic.Interface, ns string, parallel, count int) {
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
	// Both watches start before the first MyWeb is created.
	webWatch, err := client.Resource(webGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	fail(err)
	depWatch, err := client.Resource(depGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	fail(err)
	var mu sync.Mutex
	byName := map[string]*unstructured.Unstructured{}
	childWork := make(chan *unstructured.Unstructured, count)
	statusWork := make(chan *unstructured.Unstructured, count)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for web := range childWork {
				for _, c := range children(web) {
					apply(client.Resource(c.gvr).Namespace(ns), c.body)
				}
			}
		}()
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
	go func() {
		for ev := range webWatch.ResultChan() {
			web, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type != watch.Added {
				continue
			}
			mu.Lock()
			byName[web.GetName()] = web
			mu.Unlock()
			childWork <- web
		}
	}()
	done := map[string]bool{}
	for ev := range depWatch.ResultChan() {
		d, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		available, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas")
		mu.Lock()
		web := byName[d.GetName()]
		mu.Unlock()
		if available >= 1 && web != nil && !done[d.GetName()] {
			done[d.GetName()] = true
			statusWork <- web
			if len(done) == count {
				break
			}
		}
	}
	close(statusWork)
	close(childWork)
	wg.Wait()
	fmt.Printf("done %d %d\n", writes.Load(), time.Now().UnixNano())
}

func ptrTrue() *bool { t := true; return &t }

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
