package translate

// A namespace's view: istiod serves each proxy what its namespace sees (exportTo, its
// Sidecar, the short names of its own namespace's services). The translation keeps what a
// namespace's proxies see differently from the mesh-wide outputs in overlay collections of the
// namespace, one per derived collection, while a proxy of the namespace is connected; the xDS
// server reads each derived collection through that namespace's overlay for its proxies
// (store.Layered of the collection and its ScopeCollection: source/xds.ScopedCollection). A
// namespace with nothing particular costs nothing but the empty overlays.

// ScopeCollection is the overlay of a namespace over one derived collection: what its proxies
// see differently, resources and hidden names (store.Hidden).
func ScopeCollection(namespace, collection string) string {
	return "mcpbridge.io/scope/" + namespace + "/" + collection
}

// ScopedCollections are the derived collections that a namespace's proxies read through its
// overlays: the four Envoy types and the proxyless gRPC clients' clusters.
func ScopedCollections() []string {
	return []string{EnvoyClusterType, EnvoyEndpointType, EnvoyListenerType, EnvoyRouteType, EnvoyGRPCClusterCollection}
}
