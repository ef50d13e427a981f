package kinds

import (
	"testing"

	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

var seKind, _ = ByCollection("istio/networking/v1alpha3/serviceentries")

// fastAgrees fails t if the fast path calls valid a body that the full validation refuses,
// and reports whether the fast path took it.
func fastAgrees(t testing.TB, md *mcpapi.Metadata, value []byte) bool {
	t.Helper()
	if seKind.CheckBody(value) != nil {
		return false // the fast path only reads well-formed bodies
	}
	if !fastServiceEntryValid(md, value) {
		return false
	}
	m := &networking.ServiceEntry{}
	if err := proto.Unmarshal(value, m); err != nil {
		t.Fatalf("the fast path took a body that does not unmarshal: %v", err)
	}
	if err := seKind.Validate(md, m); err != nil {
		t.Fatalf("the fast path took a ServiceEntry that the full validation refuses: %v\n%v", err, m)
	}
	return true
}

// TestServiceEntryFastPathTakesCommonShapes: the shapes producers push at scale go the fast
// way (else the fast path is dead code that no benchmark would notice), and every
// ServiceEntry of the validation cases is judged by it as by the full validation.
func TestServiceEntryFastPathTakesCommonShapes(t *testing.T) {
	md := &mcpapi.Metadata{Name: "ns/se"}
	for _, se := range []*networking.ServiceEntry{
		bigServiceEntry(3),
		seSpec(nil),
		seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_NONE
			se.Addresses = []string{"10.0.0.0/8"}
		}),
		seSpec(func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Address: "api.internal", Ports: map[string]uint32{"https": 8443}}}
		}),
		seSpec(func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_STATIC
			se.Endpoints = []*networking.WorkloadEntry{{Network: "vpc-2", Labels: map[string]string{"app.kubernetes.io/name": "api"}}}
		}),
	} {
		b, err := proto.Marshal(se)
		if err != nil {
			t.Fatal(err)
		}
		if !fastAgrees(t, md, b) {
			t.Errorf("the fast path did not take %v", se)
		}
	}
	for _, c := range validationCases["ServiceEntry"] {
		b, err := proto.Marshal(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		m := md
		if c.meta != nil {
			m = c.meta
		}
		if took := fastAgrees(t, m, b); took && c.field != "" {
			t.Errorf("%s: the fast path took a ServiceEntry refused for %s", c.name, c.field)
		}
	}
	// Metadata istiod refuses is left to the full validation.
	b, _ := proto.Marshal(seSpec(nil))
	for _, bad := range []*mcpapi.Metadata{{Name: "no-namespace"}, {Name: "a/b/c"},
		{Name: "ns/se", Annotations: map[string]string{"internal.istio.io/parents": "x"}}} {
		if fastServiceEntryValid(bad, b) {
			t.Errorf("metadata %v: the fast path took it", bad)
		}
	}
}

// FuzzServiceEntryFastPathAgrees: whatever bytes and metadata, the fast path never calls valid
// what the full validation refuses.
func FuzzServiceEntryFastPathAgrees(f *testing.F) {
	for _, c := range validationCases["ServiceEntry"] {
		b, err := proto.Marshal(c.spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "ns/se")
	}
	b, _ := proto.Marshal(bigServiceEntry(5))
	f.Add(b, "ns/big")
	f.Add(b, "big")
	f.Fuzz(func(t *testing.T, value []byte, name string) {
		fastAgrees(t, &mcpapi.Metadata{Name: name}, value)
	})
}

func BenchmarkServiceEntryFastPath(b *testing.B) {
	r := resourceOf(b, bigServiceEntry(9))
	if !fastServiceEntryValid(r.Metadata, r.Body.Value) {
		b.Fatal("not taken")
	}
	b.ReportAllocs()
	for b.Loop() {
		if !fastServiceEntryValid(r.Metadata, r.Body.Value) {
			b.Fatal("not taken")
		}
	}
}
