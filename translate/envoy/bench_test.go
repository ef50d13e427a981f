package envoy

import (
	"context"
	"testing"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// BenchmarkTranslateFromScratch translates a mesh of 1,000 services (a ServiceEntry with two
// endpoints, a DestinationRule with two subsets and a VirtualService splitting between them,
// each) from nothing: about 8,000 Envoy resources.
func BenchmarkTranslateFromScratch(b *testing.B) { benchFromScratch(b, nil) }

// BenchmarkTranslateFromScratchOneScope is the same with the view of the namespace of every
// host built too (scope.go): each host's local domains, the port's route configuration again.
func BenchmarkTranslateFromScratchOneScope(b *testing.B) { benchFromScratch(b, []string{"bench"}) }

func benchFromScratch(b *testing.B, scopes []string) {
	in := generatedMesh(1000)
	var outputs int
	b.ReportAllocs()
	for b.Loop() {
		tr := NewTranslator(TranslatorOptions{Scopes: scopes})
		for coll, rs := range in {
			feed(tr, coll, rs, nil)
		}
		delta, _ := tr.Translate()
		outputs = len(delta.Resources())
	}
	b.ReportMetric(float64(outputs), "outputs")
}

// BenchmarkTranslateOneVirtualServiceChange changes one VirtualService of the same mesh,
// translated already, and reports how many outputs each change touched and how many hosts
// it rebuilt.
func BenchmarkTranslateOneVirtualServiceChange(b *testing.B) { benchOneChange(b, nil) }

// BenchmarkTranslateOneVirtualServiceChangeOneScope is the same change with the view of the
// hosts' namespace built (its port route configuration is built again on every change), and
// OtherScope with the view of a namespace of no host (nothing differs: nothing more to do).
func BenchmarkTranslateOneVirtualServiceChangeOneScope(b *testing.B) {
	benchOneChange(b, []string{"bench"})
}

func BenchmarkTranslateOneVirtualServiceChangeOtherScope(b *testing.B) {
	benchOneChange(b, []string{"default"})
}

func benchOneChange(b *testing.B, scopes []string) {
	in := generatedMesh(1000)
	tr := NewTranslator(TranslatorOptions{Scopes: scopes})
	for coll, rs := range in {
		feed(tr, coll, rs, nil)
	}
	tr.Translate()
	coll := collectionOf(kindVirtualService)
	var touched, hosts, n int
	b.ReportAllocs()
	for b.Loop() {
		n++
		feed(tr, coll, []*mcpapi.Resource{changedVirtualService(n%1000, n)}, nil)
		delta, st := tr.Translate()
		touched += len(delta.Resources())
		for _, names := range delta.Removed {
			touched += len(names)
		}
		hosts += st.Hosts
	}
	b.ReportMetric(float64(touched)/float64(n), "outputs/op")
	b.ReportMetric(float64(hosts)/float64(n), "hosts/op")
}

// BenchmarkControllerOneVirtualServiceChange is the same change through the store: write
// the VirtualService, wait until the controller has written the derived resources.
func BenchmarkControllerOneVirtualServiceChange(b *testing.B) {
	st := store.New(store.Options{})
	if _, err := st.Apply(testOwner, upserts(generatedMesh(1000))...); err != nil {
		b.Fatal(err)
	}
	ctrl := New(Options{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	<-ctrl.Synced(st.View().Revision())
	coll := collectionOf(kindVirtualService)
	var written, n int
	b.ReportAllocs()
	for b.Loop() {
		n++
		res, err := st.Apply(testOwner, store.Update{Collection: coll, Resources: []*mcpapi.Resource{changedVirtualService(n%1000, n)}})
		if err != nil {
			b.Fatal(err)
		}
		<-ctrl.Synced(res.Revision)
		written += ctrl.Stats().LastWritten
	}
	b.ReportMetric(float64(written)/float64(n), "written/op")
}
