package kubetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CreateIstioObjects creates n Istio objects for scale runs, spread over the namespaces, a third
// each ServiceEntries (STATIC, one endpoint), VirtualServices and DestinationRules, on 16
// connections. It returns how many of each collection it made.
func (s *Server) CreateIstioObjects(t testing.TB, namespaces []string, n int) map[string]int {
	t.Helper()
	c := s.Dynamic(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				ns := namespaces[i%len(namespaces)]
				obj, gvr := istioObject(i, ns)
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
		t.Fatal(err)
	}
	out := map[string]int{}
	for i := range n {
		out[collections[i%3]]++
	}
	return out
}

var collections = [3]string{
	"istio/networking/v1alpha3/serviceentries",
	"istio/networking/v1alpha3/virtualservices",
	"istio/networking/v1alpha3/destinationrules",
}

func istioObject(i int, ns string) (*unstructured.Unstructured, schema.GroupVersionResource) {
	host := fmt.Sprintf("svc-%d.%s.example.com", i, ns)
	meta := map[string]any{"name": fmt.Sprintf("obj-%d", i), "namespace": ns, "labels": map[string]any{"app": fmt.Sprintf("app-%d", i)}}
	gvr := func(plural string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: plural}
	}
	switch i % 3 {
	case 0:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry", "metadata": meta,
			"spec": map[string]any{
				"hosts": []any{host}, "resolution": "STATIC",
				"ports":     []any{map[string]any{"number": int64(8080), "name": "http", "protocol": "HTTP"}},
				"endpoints": []any{map[string]any{"address": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}},
			},
		}}, gvr("serviceentries")
	case 1:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": meta,
			"spec": map[string]any{
				"hosts": []any{host},
				"http":  []any{map[string]any{"timeout": "5s", "route": []any{map[string]any{"destination": map[string]any{"host": host}}}}},
			},
		}}, gvr("virtualservices")
	default:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule", "metadata": meta,
			"spec": map[string]any{"host": host, "trafficPolicy": map[string]any{"connectionPool": map[string]any{"tcp": map[string]any{"maxConnections": int64(100)}}}},
		}}, gvr("destinationrules")
	}
}
