package envoy

// A port's outbound route configuration (PORT, OutboundRouteName) holds a virtual host for
// every HTTP host of the mesh on that port: at 1,000,000 services one resource of over
// 400 MB, assembled again from every host's virtual host whenever one of them changes.
// Envoy sidecars read it (their 0.0.0.0_PORT listeners name it, and Envoy asks for it by
// name); istiod, proxyless gRPC clients and the clients that read clusters and endpoints
// alone never do. The controller builds a port's route configuration, mesh-wide and as each
// held scope sees it, only while a connected client asks for it (SetPortRoute,
// Controller.AcquirePortRoute), as istiod builds a proxy's routes only for proxies that ask
// for them. The hosts' virtual hosts are built either way: assembling the route
// configuration of a port a client asks for is one pass over them, not a rebuild of every
// host. The listeners are built either way too: they are small, and they tell a sidecar which
// route configurations to ask for.

// SetPortRoute starts (or stops) building a port's outbound route configuration from the
// next Translate.
func (t *Translator) SetPortRoute(port uint32, on bool) {
	if setMember(t.portRoutesFor, port, on) && !t.portRoutes {
		t.markPort(port)
	}
}

// SetPortRoutes starts (or stops) building every port's outbound route configuration from
// the next Translate. The controller sets it while a client it cannot tell the ports of
// holds them (Controller.AcquirePortRoutes).
func (t *Translator) SetPortRoutes(on bool) {
	if t.portRoutes == on {
		return
	}
	t.portRoutes = on
	for p := range t.ports {
		if _, held := t.portRoutesFor[p]; !held {
			t.markPort(p)
		}
	}
}

// setMember adds k to set (on) or removes it from it, and reports whether the set changed.
func setMember[K comparable](set map[K]struct{}, k K, on bool) bool {
	if _, had := set[k]; had == on {
		return false
	}
	if on {
		set[k] = struct{}{}
	} else {
		delete(set, k)
	}
	return true
}

// portRouteBuilt tells whether a port's outbound route configuration is built.
func (t *Translator) portRouteBuilt(port uint32) bool {
	if t.portRoutes {
		return true
	}
	_, ok := t.portRoutesFor[port]
	return ok
}
