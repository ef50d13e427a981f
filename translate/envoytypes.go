package translate

import "strings"

// The Envoy resource types the translation derives (translate/envoy). Their type URLs are also
// the store collections that hold them, as source/xds serves them.
const (
	EnvoyClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EnvoyEndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	EnvoyListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	EnvoyRouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	// EnvoyVirtualHostType is VHDS's: the virtual hosts of a port's route configuration, one
	// resource each (ROUTE/VHOST), for the clients that take them on demand.
	EnvoyVirtualHostType = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
)

// EnvoyGRPCClusterCollection is the store collection of the clusters of proxyless gRPC
// clients (translate/envoy.GRPCClusterType): Clusters under the same names as those of
// EnvoyClusterType, as istiod's gRPC generator builds them. source/xds serves it under
// EnvoyClusterType to a client whose node metadata says GENERATOR=grpc.
const EnvoyGRPCClusterCollection = "mcpbridge.io/grpc/" + EnvoyClusterType

// Dependencies say how one derived type is ordered against the others on one aggregated
// stream: its responses go after the types in After have been sent everything up to the same
// store revision, and a deletion goes after the types in RemoveAfter have been sent everything
// up to the revision that made it. SameNames says that each resource of the type refers
// only to the resource of the same name of each type in After (a load assignment to its
// cluster): a response then need not wait for the whole of theirs, only for the names it
// carries.
type Dependencies struct {
	After, RemoveAfter []string
	SameNames          bool
}

// EnvoyOrder is the make-before-break order of xds-protocol.rst ("Eventual consistency
// considerations"), declared with the translation because it knows what refers to what:
// routes name clusters, listeners name route configurations, load assignments belong to
// clusters. So clusters go first, endpoints after their clusters, listeners after both, routes
// after listeners, and VHDS's virtual hosts after the route configurations they belong to;
// a cluster is removed only once listeners, routes and virtual hosts no longer name it. The
// translation controller (translate/envoy) writes all four types in one store write, so one
// revision covers a whole move.
func EnvoyOrder(typeURL string) Dependencies {
	switch typeURL {
	case EnvoyClusterType:
		return Dependencies{RemoveAfter: []string{EnvoyListenerType, EnvoyRouteType, EnvoyVirtualHostType}}
	case EnvoyEndpointType:
		return Dependencies{After: []string{EnvoyClusterType}, SameNames: true}
	case EnvoyListenerType:
		return Dependencies{After: []string{EnvoyClusterType, EnvoyEndpointType}}
	case EnvoyRouteType:
		return Dependencies{After: []string{EnvoyClusterType, EnvoyEndpointType, EnvoyListenerType}}
	case EnvoyVirtualHostType:
		return Dependencies{After: []string{EnvoyClusterType, EnvoyEndpointType, EnvoyListenerType, EnvoyRouteType}}
	}
	return Dependencies{}
}

// VHDSRouteSuffix ends the store's name of a route configuration in the form VHDS clients
// are served (translate/envoy vhds.go): ROUTE@vhds, served to them under the name ROUTE
// (source/xds vhds.go). No route configuration's name holds it ('@' is in no host name).
const VHDSRouteSuffix = "@vhds"

// VHDSRouteName is the store's name of a route configuration's VHDS form.
func VHDSRouteName(route string) string { return route + VHDSRouteSuffix }

// VHDSRouteOf is the route configuration whose VHDS form a store name is (PORT for
// PORT@vhds); ok is false for any other name. Only ports' route configurations have one.
func VHDSRouteOf(name string) (route string, ok bool) {
	route, ok = strings.CutSuffix(name, VHDSRouteSuffix)
	if !ok || route == "" || route[0] == '0' || len(route) > 5 {
		return "", false
	}
	for _, c := range route {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return route, true
}
