package store

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// serviceEntries builds n realistic ServiceEntries (one host, two ports, three endpoints).
func serviceEntries(n int, generation string) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, n)
	for i := range n {
		se := &networking.ServiceEntry{
			Hosts:      []string{fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%50)},
			Ports:      []*networking.ServicePort{{Number: 80, Protocol: "HTTP", Name: "http"}, {Number: 9090, Protocol: "GRPC", Name: "grpc"}},
			Resolution: networking.ServiceEntry_STATIC,
			Location:   networking.ServiceEntry_MESH_INTERNAL,
		}
		for j := range 3 {
			se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
				Address: fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256+j),
				Labels:  map[string]string{"app": fmt.Sprintf("svc-%d", i), "version": "v" + generation},
			})
		}
		// Deterministic, as every producer in this project encodes bodies: map order must not
		// change the bytes, or the content hash of an unchanged resource would move.
		body := &anypb.Any{}
		if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
			panic(err)
		}
		out[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: fmt.Sprintf("ns-%d/svc-%d", i%50, i)}, Body: body}
	}
	return out
}

// BenchmarkApplyFullState10k applies a full state of 10,000 ServiceEntries to an empty store.
func BenchmarkApplyFullState10k(b *testing.B) {
	rs := serviceEntries(10000, "1")
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := New(Options{})
		fresh := cloneAll(rs)
		b.StartTimer()
		if _, err := s.Apply("p", Update{Collection: collA, Full: true, Resources: fresh}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/resource")
}

// BenchmarkReapplyUnchanged10k re-applies the same 10,000 ServiceEntries: it must write nothing.
func BenchmarkReapplyUnchanged10k(b *testing.B) {
	s := New(Options{})
	if _, err := s.Apply("p", Update{Collection: collA, Full: true, Resources: serviceEntries(10000, "1")}); err != nil {
		b.Fatal(err)
	}
	rs := serviceEntries(10000, "1")
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.Apply("p", Update{Collection: collA, Full: true, Resources: rs})
		if err != nil || r.Changed != 0 {
			b.Fatalf("unchanged re-apply: changed=%d err=%v", r.Changed, err)
		}
	}
}

// BenchmarkChangesSince1Of100k reads one change among 100,000 resources.
func BenchmarkChangesSince1Of100k(b *testing.B) {
	s := New(Options{})
	r1, err := s.Apply("p", Update{Collection: collA, Full: true, Resources: serviceEntries(100000, "1")})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Apply("p", Update{Collection: collA, Resources: serviceEntries(1, "2")}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ch, err := s.View().ChangesSince(collA, r1.Revision)
		if err != nil || len(ch.Upserts) != 1 {
			b.Fatalf("changes: %d, %v", len(ch.Upserts), err)
		}
	}
}

// BenchmarkChangesSinceAll100k reads all of 100,000 resources and half of them as changes
// (a stream's first response, the translator's first read; a later change of half the mesh).
func BenchmarkChangesSinceAll100k(b *testing.B) {
	s := New(Options{})
	if _, err := s.Apply("p", Update{Collection: collA, Full: true, Resources: serviceEntries(100000, "1")}); err != nil {
		b.Fatal(err)
	}
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			if ch, err := s.View().ChangesSince(collA, 0); err != nil || len(ch.Upserts) != 100000 {
				b.Fatalf("changes: %d, %v", len(ch.Upserts), err)
			}
		}
	})
	half := serviceEntries(100000, "2")[:50000]
	r, err := s.Apply("p", Update{Collection: collA, Resources: half})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("half", func(b *testing.B) {
		for b.Loop() {
			if ch, err := s.View().ChangesSince(collA, r.Revision-1); err != nil || len(ch.Upserts) != 50000 {
				b.Fatalf("changes: %d, %v", len(ch.Upserts), err)
			}
		}
	})
}

func cloneAll(rs []*mcpapi.Resource) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, len(rs))
	for i, r := range rs {
		out[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: r.Metadata.Name}, Body: r.Body}
	}
	return out
}

// encodeAll encodes resources as their producer would (Update.Encoded), so that a benchmark
// measures the write itself, not the encoding.
func encodeAll(b *testing.B, rs []*mcpapi.Resource) []Encoded {
	out := make([]Encoded, len(rs))
	for i, r := range rs {
		e, err := Encode(r)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// BenchmarkApplyEncodedFullState10k indexes a full state of 10,000 encoded ServiceEntries in
// an empty store: the write path without validation or encoding.
func BenchmarkApplyEncodedFullState10k(b *testing.B) {
	es := encodeAll(b, serviceEntries(10000, "1"))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := New(Options{})
		b.StartTimer()
		if _, err := s.Apply("p", Update{Collection: collA, Full: true, Encoded: es}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/resource")
}

// BenchmarkApplyEncodedIncremental100Of10k applies increments to an owner holding 10,000
// ServiceEntries: 100 changed, and 10 removed or added back, by turns.
func BenchmarkApplyEncodedIncremental100Of10k(b *testing.B) {
	s := New(Options{})
	if _, err := s.Apply("p", Update{Collection: collA, Full: true, Encoded: encodeAll(b, serviceEntries(10000, "1"))}); err != nil {
		b.Fatal(err)
	}
	last := encodeAll(b, serviceEntries(10000, "1"))[9990:]
	var removed []string
	for _, e := range last {
		removed = append(removed, e.Name())
	}
	turns := [2]Update{
		{Collection: collA, Encoded: encodeAll(b, serviceEntries(100, "2")), Removed: removed},
		{Collection: collA, Encoded: append(encodeAll(b, serviceEntries(100, "1")), last...)},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r, err := s.Apply("p", turns[i%2]); err != nil || r.Changed != 110 {
			b.Fatalf("increment: changed=%d err=%v", r.Changed, err)
		}
		i++
	}
}

// BenchmarkReplaceOwnerEncoded10k replaces the whole state of an owner holding 10,000
// ServiceEntries in one collection and 1,000 in another: 100 ServiceEntries change by turns,
// the rest is compared and left alone.
func BenchmarkReplaceOwnerEncoded10k(b *testing.B) {
	s := New(Options{})
	base := encodeAll(b, serviceEntries(10000, "1"))
	other := encodeAll(b, serviceEntries(1000, "1"))
	if _, err := s.ReplaceOwnerEncoded("p", map[string][]Encoded{collA: base, collB: other}); err != nil {
		b.Fatal(err)
	}
	changed := slices.Clone(base)
	copy(changed, encodeAll(b, serviceEntries(100, "2")))
	gens := [2][]Encoded{changed, base}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r, err := s.ReplaceOwnerEncoded("p", map[string][]Encoded{collA: gens[i%2], collB: other}); err != nil || r.Changed != 100 {
			b.Fatalf("replace: changed=%d err=%v", r.Changed, err)
		}
		i++
	}
}

// BenchmarkFirstLoadEncoded200k is a producer's first full state of 200,000 ServiceEntries,
// handed over in no particular order (as a map of files or of translation units yields them),
// into an empty store.
func BenchmarkFirstLoadEncoded200k(b *testing.B) {
	es := encodeAll(b, serviceEntries(200000, "1"))
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	b.ReportAllocs()
	base := heapAlloc()
	var s *Store
	for b.Loop() {
		s = New(Options{})
		if r, err := s.ReplaceOwnerEncoded("p", map[string][]Encoded{collA: slices.Clone(es)}); err != nil || r.Changed != len(es) {
			b.Fatalf("load: changed=%d err=%v", r.Changed, err)
		}
	}
	// What the store holds of its own per resource (entries and trees; the encodings were
	// made before): what a million services cost beyond their bytes.
	b.ReportMetric(float64(heapAlloc()-base)/float64(len(es)), "B-held/resource")
	runtime.KeepAlive(s)
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
