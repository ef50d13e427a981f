package source_test

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// The in-process transport answers a request synchronously with what the real xDS handler
// and engine send, and a store write reaches the stream when the test delivers it.
func TestInProcessTransportServesTheRealHandlers(t *testing.T) {
	st := store.New(store.Options{})
	eng := source.New(source.Options{Store: st})
	defer eng.Stop()
	p := newInProcess(eng, func(r grpc.ServiceRegistrar) { (&xds.Server{Engine: eng}).Register(r) })
	put := func(name string) {
		body, _ := anypb.New(&cluster.Cluster{Name: name})
		if _, err := st.Apply("test", store.Update{Collection: xds.ClusterType, Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: name}, Body: body}}}); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	s, err := p.open("/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", "envoy.service.discovery.v3.DeltaDiscoveryResponse", nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	got, err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType}, now)
	if err != nil || len(got) != 1 {
		t.Fatalf("first response: %v, %d responses", err, len(got))
	}
	first := got[0].(*discovery.DeltaDiscoveryResponse)
	if len(first.Resources) != 1 || first.Resources[0].Name != "a" {
		t.Fatalf("first response: %v", first)
	}
	if got, err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType, ResponseNonce: first.Nonce}, now); err != nil || len(got) != 0 {
		t.Fatalf("the ACK was answered: %v %v", got, err)
	}
	put("b")
	got, err = s.Changed(now)
	if err != nil || len(got) != 1 || got[0].(*discovery.DeltaDiscoveryResponse).Resources[0].Name != "b" {
		t.Fatalf("after a write: %v %v", got, err)
	}
	s.Close()
}
