package store

import (
	"fmt"
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

func cloneAll(rs []*mcpapi.Resource) []*mcpapi.Resource {
	out := make([]*mcpapi.Resource, len(rs))
	for i, r := range rs {
		out[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: r.Metadata.Name}, Body: r.Body}
	}
	return out
}
