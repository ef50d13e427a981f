package app

import (
	"context"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

const (
	seType    = "networking.istio.io/v1alpha3/ServiceEntry"
	bridgeTTL = time.Second // the shortest xds.ttl allows
)

func servedServiceEntry(name, host string) *mcpapi.Resource {
	body := &anypb.Any{}
	se := &networking.ServiceEntry{Hosts: []string{host}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC, Endpoints: []*networking.WorkloadEntry{{Address: "10.0.0.1"}}}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// heartbeated is what one window of a delta stream renewed, by type: names heartbeated, and
// names sent with a body.
type heartbeated struct{ beats, bodies map[string][]string }

// watchDelta ACKs every response for d and records it.
func watchDelta(c *streamtest.Client[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], d time.Duration) heartbeated {
	h := heartbeated{beats: map[string][]string{}, bodies: map[string][]string{}}
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-c.Responses():
			if !ok {
				return h
			}
			c.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce})
			for _, r := range m.Resources {
				if r.Resource == nil && r.Ttl != nil {
					h.beats[m.TypeUrl] = appendNew(h.beats[m.TypeUrl], r.Name)
				} else if r.Resource != nil {
					h.bodies[m.TypeUrl] = appendNew(h.bodies[m.TypeUrl], r.Name)
				}
			}
		case <-deadline:
			return h
		}
	}
}

func appendNew(list []string, name string) []string {
	if slices.Contains(list, name) {
		return list
	}
	return append(list, name)
}

// TestProducerDisconnectStopsHeartbeatsEndToEnd: through the whole bridge, a ResourceSink
// producer's ServiceEntry and the cluster derived from it are heartbeated while the producer
// is connected; when its stream ends (its resources stay served, sink.expiry being 0s) both
// stop being renewed, counted as expiring; when it comes back they are sent again with their
// bodies and renewed again.
func TestProducerDisconnectStopsHeartbeatsEndToEnd(t *testing.T) {
	b := start(t, func(c *Config) {
		c.XDS.TTL = TTLConfig{Default: bridgeTTL}
		c.XDS.PushInterval = 0
	})
	p := dialProducer(t, b.grpcAddr, "producer-1")
	p.push(t, seColl, servedServiceEntry("ns/a", "a.example.com"))

	ads := discovery.NewAggregatedDiscoveryServiceClient(dialConn(t, b.grpcAddr))
	c := streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return ads.DeltaAggregatedResources(ctx)
	})
	node := &core.Node{Id: "sidecar~10.0.0.2~b.ns~ns.svc.cluster.local", ClientFeatures: []string{xds.FeatureResourceTTL}}
	c.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: seType})
	c.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType})

	const cluster = "outbound|80||a.example.com"
	live := watchDelta(c, 2*bridgeTTL)
	if !slices.Contains(live.beats[seType], "ns/a") || !slices.Contains(live.beats[clusterType], cluster) {
		t.Fatalf("while the producer is connected, heartbeats named %v; want ns/a and %s", live.beats, cluster)
	}

	p.Close()
	watchDelta(c, bridgeTTL) // what was on its way
	gone := watchDelta(c, 2*bridgeTTL)
	if len(gone.beats) != 0 {
		t.Fatalf("after the producer left, heartbeats named %v; want none", gone.beats)
	}
	if b.Store().View().Get(seColl, "ns/a") == nil {
		t.Fatal("the producer's ServiceEntry is no longer served: the test needs it kept (sink.expiry 0s)")
	}
	if got := value(t, b, "mcpbridge_ttl_expiring_resources_total", "collection", seColl); got < 1 {
		t.Fatalf("mcpbridge_ttl_expiring_resources_total{collection=%s} = %v, want at least 1", seColl, got)
	}
	if got := value(t, b, "mcpbridge_ttl_heartbeats_total", "collection", clusterType); got < 1 {
		t.Fatalf("mcpbridge_ttl_heartbeats_total{collection=%s} = %v, want at least 1", clusterType, got)
	}

	p = dialProducer(t, b.grpcAddr, "producer-1")
	p.push(t, seColl, servedServiceEntry("ns/a", "a.example.com"))
	back := watchDelta(c, 3*bridgeTTL)
	if !slices.Contains(back.bodies[seType], "ns/a") || !slices.Contains(back.bodies[clusterType], cluster) {
		t.Fatalf("after the producer came back, bodies sent: %v; want ns/a and %s again", back.bodies, cluster)
	}
	if !slices.Contains(back.beats[seType], "ns/a") || !slices.Contains(back.beats[clusterType], cluster) {
		t.Fatalf("after the producer came back, heartbeats named %v; want ns/a and %s", back.beats, cluster)
	}
}
