package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"google.golang.org/grpc"
)

// The per-type services: one type per stream, same engine. Requests on them may leave
// type_url empty; the service's own type fills it.

type (
	sotwStreamServer  = grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	deltaStreamServer = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
)

func registerPerType(s grpc.ServiceRegistrar, x *Server) {
	listenerv3.RegisterListenerDiscoveryServiceServer(s, &lds{x: x})
	routev3.RegisterRouteDiscoveryServiceServer(s, &rds{x: x})
	clusterv3.RegisterClusterDiscoveryServiceServer(s, &cds{x: x})
	endpointv3.RegisterEndpointDiscoveryServiceServer(s, &eds{x: x})
}

type lds struct {
	listenerv3.UnimplementedListenerDiscoveryServiceServer
	x *Server
}

func (s *lds) StreamListeners(st sotwStreamServer) error { return s.x.sotw(st, ListenerType) }
func (s *lds) DeltaListeners(st deltaStreamServer) error { return s.x.delta(st, ListenerType) }

type rds struct {
	routev3.UnimplementedRouteDiscoveryServiceServer
	x *Server
}

func (s *rds) StreamRoutes(st sotwStreamServer) error { return s.x.sotw(st, RouteType) }
func (s *rds) DeltaRoutes(st deltaStreamServer) error { return s.x.delta(st, RouteType) }

type cds struct {
	clusterv3.UnimplementedClusterDiscoveryServiceServer
	x *Server
}

func (s *cds) StreamClusters(st sotwStreamServer) error { return s.x.sotw(st, ClusterType) }
func (s *cds) DeltaClusters(st deltaStreamServer) error { return s.x.delta(st, ClusterType) }

type eds struct {
	endpointv3.UnimplementedEndpointDiscoveryServiceServer
	x *Server
}

func (s *eds) StreamEndpoints(st sotwStreamServer) error { return s.x.sotw(st, EndpointType) }
func (s *eds) DeltaEndpoints(st deltaStreamServer) error { return s.x.delta(st, EndpointType) }
