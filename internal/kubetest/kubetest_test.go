package kubetest

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The server keeps its state over a restart: a test that restarts the API server under a
// client finds the objects it made before.
func TestRestartKeepsTheCRDsAndTheirObjects(t *testing.T) {
	s := Start(t, "istio-system")
	s.InstallIstioCRDs(t)
	gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}
	if _, err := s.Dynamic(t).Resource(gvr).Namespace("istio-system").Create(context.Background(), serviceEntry(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	list, err := s.Dynamic(t).Resource(gvr).Namespace("istio-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing ServiceEntries after the restart: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].GetName() != "kept" {
		t.Fatalf("after the restart: %d ServiceEntries, want the one created before", len(list.Items))
	}
}

func serviceEntry() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
		"metadata": map[string]any{"name": "kept"},
		"spec":     map[string]any{"hosts": []any{"kept.example.com"}, "ports": []any{map[string]any{"number": int64(80), "name": "http"}}},
	}}
}
