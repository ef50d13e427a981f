package xds

import (
	"context"
	"testing"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

// Each per-type service serves its own type, state of the world and delta, over a real socket,
// even when requests leave type_url empty.
func TestPerTypeServicesServeTheirType(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("c"))
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "e"))
	s.putEnvoy(t, ListenerType, map[string]proto.Message{"l": &listener.Listener{Name: "l"}})
	s.putEnvoy(t, RouteType, routes("r"))
	conn := dialTest(t, s.addr)

	type streams struct {
		sotw  func(context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error)
		delta func(context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error)
	}
	cds, eds := clusterservice.NewClusterDiscoveryServiceClient(conn), endpointservice.NewEndpointDiscoveryServiceClient(conn)
	lds, rds := listenerservice.NewListenerDiscoveryServiceClient(conn), routeservice.NewRouteDiscoveryServiceClient(conn)
	cases := []struct {
		typeURL, name string
		names         []string
		s             streams
	}{
		{ClusterType, "c", nil, streams{func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
			return cds.StreamClusters(ctx)
		}, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
			return cds.DeltaClusters(ctx)
		}}},
		{EndpointType, "e", []string{"e"}, streams{func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
			return eds.StreamEndpoints(ctx)
		}, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
			return eds.DeltaEndpoints(ctx)
		}}},
		{ListenerType, "l", nil, streams{func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
			return lds.StreamListeners(ctx)
		}, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
			return lds.DeltaListeners(ctx)
		}}},
		{RouteType, "r", []string{"r"}, streams{func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
			return rds.StreamRoutes(ctx)
		}, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
			return rds.DeltaRoutes(ctx)
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.typeURL, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := tc.s.sotw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.Send(&discovery.DiscoveryRequest{ResourceNames: tc.names}) // no type_url: the service's own
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.TypeUrl != tc.typeURL || len(m.Resources) != 1 || m.Resources[0].TypeUrl != tc.typeURL {
				t.Fatalf("state of the world: %s with %v", m.TypeUrl, m.Resources)
			}
			dt, err := tc.s.delta(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dt.Send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: tc.names})
			dm, err := dt.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if dm.TypeUrl != tc.typeURL || len(dm.Resources) != 1 || dm.Resources[0].Name != tc.name {
				t.Fatalf("delta: %s with %v", dm.TypeUrl, dm.Resources)
			}
		})
	}
}
