package translate

import "strings"

// A namespace's view: istiod serves each proxy what its namespace sees (exportTo, its
// Sidecar, the short names of its own namespace's services). The translation keeps what a
// namespace's proxies see differently from the mesh-wide outputs in overlay collections of the
// namespace, one per derived collection, while a proxy of the namespace is connected; the xDS
// server reads each derived collection through that namespace's overlay for its proxies
// (store.Layered of the collection and its ScopeCollection: source/xds.ScopedCollection). A
// namespace with nothing particular in a collection has no overlay of it, and its proxies
// share the mesh-wide responses; one that sees a resource otherwise has that resource whole
// in its overlay (a port's route configuration, when one of its own hosts is on the port).

// ScopeCollection is the overlay of a namespace over one derived collection: what its proxies
// see differently, resources and hidden names (store.Hidden).
func ScopeCollection(namespace, collection string) string {
	return scopePrefix + namespace + "/" + collection
}

// GatewayCollection is the overlay of gateway proxies over one derived collection: the
// resources istiod builds otherwise for a gateway than for a sidecar (a cluster whose
// DestinationRule TLS names a credentialName: sidecars get it without TLS). Gateway proxies
// read the collection through it; every other client reads the collection itself.
func GatewayCollection(collection string) string { return "mcpbridge.io/gateway/" + collection }

// ScopeNamespace is the namespace of a ScopeCollection; ok is false for any other collection.
func ScopeNamespace(collection string) (namespace string, ok bool) {
	rest, ok := strings.CutPrefix(collection, scopePrefix)
	if !ok {
		return "", false
	}
	namespace, _, ok = strings.Cut(rest, "/")
	return namespace, ok
}

const scopePrefix = "mcpbridge.io/scope/"

// Scoped tells the derived collections that a namespace's proxies read through its
// overlays: the four Envoy types and the proxyless gRPC clients' clusters.
func Scoped(collection string) bool {
	switch collection {
	case EnvoyClusterType, EnvoyEndpointType, EnvoyListenerType, EnvoyRouteType, EnvoyVirtualHostType, EnvoyGRPCClusterCollection:
		return true
	}
	return false
}
