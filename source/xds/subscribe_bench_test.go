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
	subscribeInBatches(b, 100, 500, 500)
}

// One delta stream subscribes to the endpoints of 1,000,000 stored clusters in 77 requests of
// 13,000, as an Envoy in a mesh of a million services does as its clusters arrive: the
// subscription's set of names grows to a million.
func BenchmarkSubscribe1MNamesInBatchesOf13000(b *testing.B) {
	subscribeInBatches(b, 77, 13000, 0)
}

// subscribeInBatches stores batches×known load assignments and has one delta stream
// subscribe to them in batches requests of known stored names and unknown names more,
// acknowledging each answer; it reports the time of the requests.
func subscribeInBatches(b *testing.B, batches, known, unknown int) {
	s := startServerLogging(b, nil)
	var rs []*mcpapi.Resource
	for i := range batches * known {
		n := fmt.Sprintf("c%d", i)
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n}, Body: anyOf(&endpoint.ClusterLoadAssignment{ClusterName: n})})
	}
	if _, err := s.store.Apply("bench", store.Update{Collection: EndpointType, Resources: rs}); err != nil {
		b.Fatal(err)
	}
	rs = nil
	var total time.Duration
	for b.Loop() {
		c := newDelta(b, s.addr)
		start := time.Now()
		for batch := range batches {
			names := make([]string, 0, known+unknown)
			for i := range known {
				names = append(names, fmt.Sprintf("c%d", batch*known+i))
			}
			for i := range unknown {
				names = append(names, fmt.Sprintf("unknown%d", batch*unknown+i))
			}
			c.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names})
			m := c.Recv()
			if len(m.Resources) != known+unknown {
				b.Fatalf("batch %d answered with %d resources, want %d (%d found, %d missing)", batch, len(m.Resources), known+unknown, known, unknown)
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
