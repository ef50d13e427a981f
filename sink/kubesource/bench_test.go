package kubesource

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/kubetest"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var drGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}

const benchObjects = 10000

// BenchmarkServeTenThousandObjects measures how long the source takes from Run to a store
// holding 10,000 Istio objects of an API server (ServiceEntries, VirtualServices and
// DestinationRules in 10 namespaces), reported as s-served; the target is 5 s.
func BenchmarkServeTenThousandObjects(b *testing.B) {
	namespaces := make([]string, 10)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-%d", i)
	}
	srv := kubetest.Start(b, namespaces...)
	srv.InstallIstioCRDs(b)
	createObjects(b, srv, namespaces)
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		total += serveOnce(b, srv)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-served")
}

// createObjects creates benchObjects objects, a third of each kind, on 16 connections.
func createObjects(b *testing.B, srv *kubetest.Server, namespaces []string) {
	c := srv.Dynamic(b)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < benchObjects; i += 16 {
				ns := namespaces[i%len(namespaces)]
				obj, gvr := benchObject(i, ns)
				if _, err := c.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func benchObject(i int, ns string) (*unstructured.Unstructured, schema.GroupVersionResource) {
	host := fmt.Sprintf("svc-%d.%s.example.com", i, ns)
	meta := map[string]any{"name": fmt.Sprintf("obj-%d", i), "namespace": ns, "labels": map[string]any{"app": fmt.Sprintf("app-%d", i)}}
	switch i % 3 {
	case 0:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry", "metadata": meta,
			"spec": map[string]any{
				"hosts": []any{host}, "resolution": "STATIC",
				"ports":     []any{map[string]any{"number": int64(8080), "name": "http", "protocol": "HTTP"}},
				"endpoints": []any{map[string]any{"address": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}},
			},
		}}, seGVR
	case 1:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta,
			"spec": map[string]any{
				"hosts": []any{host},
				"http":  []any{map[string]any{"timeout": "5s", "route": []any{map[string]any{"destination": map[string]any{"host": host}}}}},
			},
		}}, vsGVR
	default:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": meta,
			"spec": map[string]any{"host": host, "trafficPolicy": map[string]any{"connectionPool": map[string]any{"tcp": map[string]any{"maxConnections": int64(100)}}}},
		}}, drGVR
	}
}

// serveOnce runs a source over a new store until it is ready, checks that the store holds
// every object, and returns how long it took.
func serveOnce(b *testing.B, srv *kubetest.Server) time.Duration {
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	src, err := New(Options{Kubeconfig: srv.Kubeconfig, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- src.Run(ctx) }()
	select {
	case <-src.Ready():
	case <-time.After(time.Minute):
		b.Fatalf("not ready after a minute: %v", src.Faults())
	}
	took := time.Since(start)
	b.StopTimer()
	n := 0
	for _, coll := range []string{seColl, "istio/networking/v1alpha3/virtualservices", "istio/networking/v1alpha3/destinationrules"} {
		n += st.View().Collection(coll).Count
	}
	if n != benchObjects || len(src.Faults()) > 0 {
		b.Fatalf("served %d objects, want %d; faults %v", n, benchObjects, src.Faults())
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return took
}
