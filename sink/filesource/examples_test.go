package filesource

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

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

// TestOwnedDecodeIsDecode: the file source's decode, whose strings are views into the read
// and whose documents' encodings share chunks, gives the objects and faults Decode gives,
// for the examples, a thousand ServiceEntries (several chunks' worth of encodings) and
// documents with faults; and what it decoded stays the same when the decode goes on past it.
func TestOwnedDecodeIsDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	inputs := map[string][]byte{"thousand.yaml": thousandServiceEntries()}
	inputs["thousand-twice.yaml"] = append(thousandServiceEntries(), append([]byte("\n---\n"), thousandServiceEntries()...)...)
	var big strings.Builder // a document whose encoding outgrows any block
	big.WriteString("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: big, namespace: b}\nspec:\n  hosts: [big.example]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints:\n")
	for i := range 12000 {
		fmt.Fprintf(&big, "  - address: 10.%d.%d.%d\n", i/65536, i/256%256, i%256)
	}
	inputs["small-then-big.yaml"] = append([]byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: small, namespace: b}\nspec: {hosts: [s.example]}\n---\n"),
		append([]byte(big.String()), append([]byte("\n---\n"), thousandServiceEntries()...)...)...)
	inputs["faults.yaml"] = []byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: b, labels: {x: y}}\nspec: {hosts: [a.example], ports: [{number: 99999, name: http}]}\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: c}\nspec: {hosts: [c.example], resolution: DNS}\n")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(f)] = data
	}
	for name, data := range inputs {
		want, wantErrs := Decode(data, name)
		got, gotErrs := decodeOwned(slices.Clone(data), name, nil)
		if len(got) != len(want) || len(gotErrs) != len(wantErrs) {
			t.Fatalf("%s: %d objects, %d faults; Decode: %d, %d", name, len(got), len(gotErrs), len(want), len(wantErrs))
		}
		for i := range want {
			if !proto.Equal(got[i].Resource, want[i].Resource) || got[i].Kind != want[i].Kind || got[i].Doc != want[i].Doc {
				t.Fatalf("%s: object %d is %v, Decode's %v", name, i, got[i].Resource, want[i].Resource)
			}
		}
		for i := range wantErrs {
			if gotErrs[i].Error() != wantErrs[i].Error() {
				t.Fatalf("%s: fault %d is %q, Decode's %q", name, i, gotErrs[i], wantErrs[i])
			}
		}
	}
}

// TestOwnedDecodeOfASmallFileAllocatesLittle: the blocks the file source's decode writes
// encodings to are sized for the file, so that a mesh kept as a file a service (a million
// small files) is not a block of 256 KiB a file: a one-document file takes about what Decode
// takes.
func TestOwnedDecodeOfASmallFileAllocatesLittle(t *testing.T) {
	data := []byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: b}\nspec:\n  hosts: [a.example]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: STATIC\n  endpoints: [{address: 10.0.0.1}]\n")
	bytesPer := func(decode func([]byte, string) ([]Object, []error)) uint64 {
		const runs = 50
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			if objs, errs := decode(data, "a.yaml"); len(objs) != 1 || len(errs) != 0 {
				t.Fatalf("%d objects, faults %v", len(objs), errs)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / runs
	}
	copying, owned := bytesPer(Decode), bytesPer(func(d []byte, f string) ([]Object, []error) { return decodeOwned(d, f, nil) })
	if owned > 2*copying+4096 {
		t.Errorf("the file source's decode of one document allocates %d bytes, Decode %d", owned, copying)
	}
}
