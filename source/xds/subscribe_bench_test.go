package xds

import (
	"fmt"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// One delta stream subscribes 100,000 endpoint names in 100 requests of 1,000 (half of them
// among the 50,000 load assignments stored, half unknown), acknowledging each answer. The
// issue's bound: 1 s in all. seconds is the time of the 100 requests.
func BenchmarkSubscribe100kNamesInBatchesOf1000(b *testing.B) {
	s := startServerLogging(b, nil)
	var rs []*mcpapi.Resource
	for i := range 50000 {
		n := fmt.Sprintf("c%d", i)
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n}, Body: anyOf(&endpoint.ClusterLoadAssignment{ClusterName: n})})
	}
	if _, err := s.store.Apply("bench", store.Update{Collection: EndpointType, Resources: rs}); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for b.Loop() {
		c := newDelta(b, s.addr)
		start := time.Now()
		for batch := range 100 {
			names := make([]string, 0, 1000)
			for i := range 500 {
				names = append(names, fmt.Sprintf("c%d", batch*500+i), fmt.Sprintf("unknown%d", batch*500+i))
			}
			c.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names})
			m := c.Recv()
			if len(m.Resources) != 1000 {
				b.Fatalf("batch %d answered with %d resources, want 1,000 (500 found, 500 missing)", batch, len(m.Resources))
			}
			c.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: m.Nonce})
		}
		total += time.Since(start)
		c.Cancel()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "seconds")
}

// One state-of-the-world ADS stream sends 10,000 requests, each for a distinct unknown type
// URL, and waits for the 10,000 answers. The bound: 1 s in all.
func BenchmarkSubscribe10kTypeURLs(b *testing.B) {
	s := startServerLogging(b, nil)
	var total time.Duration
	for b.Loop() {
		c := newSotW(b, s.addr)
		start := time.Now()
		subscribeTypes(b, c, 10000)
		total += time.Since(start)
		c.Cancel()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "seconds")
}
