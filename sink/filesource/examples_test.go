package filesource

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbridge/mcpbridge/kinds"
)

// TestExamples decodes the repository's examples/, which `make run` serves: every document
// must decode, and the mesh must be the one the examples describe.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	count := map[string]int{}
	names := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, errs := Decode(data, f)
		for _, err := range errs {
			t.Errorf("fault: %v", err)
		}
		for _, o := range objs {
			count[o.Kind.Collection]++
			names[o.Kind.Kind+" "+o.Name()] = true
			if err := kinds.ValidateResource(o.Kind.Collection, o.Resource); err != nil {
				t.Errorf("%s %s: %v", o.Kind.Kind, o.Name(), err)
			}
		}
	}
	want := map[string]int{
		"istio/networking/v1alpha3/serviceentries":   5,
		"istio/networking/v1alpha3/workloadentries":  3,
		"istio/networking/v1alpha3/virtualservices":  3,
		"istio/networking/v1alpha3/destinationrules": 4,
		"istio/networking/v1alpha3/gateways":         1,
	}
	if !maps.Equal(count, want) {
		t.Errorf("resources per collection = %v\nwant %v", count, want)
	}
	for _, n := range []string{
		"ServiceEntry bookinfo/reviews", "ServiceEntry bookinfo/external-api",
		"WorkloadEntry bookinfo/reviews-v3", "VirtualService bookinfo/bookinfo",
		"DestinationRule bookinfo/reviews", "Gateway bookinfo/bookinfo-gateway",
	} {
		if !names[n] {
			t.Errorf("examples lack %s", n)
		}
	}
}
