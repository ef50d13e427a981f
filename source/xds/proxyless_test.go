package xds

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/translate"
)

// A node whose metadata says GENERATOR=grpc (Istio's gRPC bootstrap) is served its clusters,
// v3 and v2, from the gRPC clusters' collection; every other type, and every other node, as
// before.
func TestProxylessNodeIsServedTheGRPCClusters(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	grpcNode := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Metadata: md})
	envoyNode := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~b.ns~ns.svc.cluster.local"})
	if grpcNode.Generator != "grpc" || !Proxyless(*grpcNode) || Proxyless(*envoyNode) {
		t.Fatalf("generator %q, proxyless %v and %v; want grpc, true and false", grpcNode.Generator, Proxyless(*grpcNode), Proxyless(*envoyNode))
	}
	a := &adapter[discovery.DiscoveryRequest, discovery.DiscoveryResponse]{mode: source.StateOfTheWorld}
	for _, c := range []struct {
		key  string
		node *source.Node
		want string
	}{
		{ClusterType, grpcNode, translate.EnvoyGRPCClusterCollection},
		{ClusterTypeV2, grpcNode, translate.EnvoyGRPCClusterCollection},
		{ClusterType, envoyNode, ClusterType},
		{ClusterType, nil, ClusterType},
		{ListenerType, grpcNode, ListenerType},
		{EndpointType, grpcNode, EndpointType},
	} {
		if got := a.Type(&source.Request{Key: c.key}, c.node).Collection; got != c.want {
			t.Errorf("%s for node %v: collection %q, want %q", c.key, c.node, got, c.want)
		}
	}
}
