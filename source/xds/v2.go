package xds

import (
	"maps"
	"runtime"
	"slices"
	"sync"
	"weak"

	"google.golang.org/grpc"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
	discoveryv2 "github.com/mcpbridge/mcpbridge/api/envoy/service/discovery/v2"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
	"github.com/mcpbridge/mcpbridge/translate/envoyv2"
)

// The xDS v2 transport (docs/xds-v2.md): envoy.service.discovery.v2.AggregatedDiscoveryService
// and the envoy.api.v2 per-type services, for Envoy before 1.17 and grpc-go before 1.36. Their
// messages are the v3 ones' field for field (api/envoy), so a v2 stream is the v3 stream with
// another decoder and another layout over the same engine.
//
// The type URL a client asks for decides what it gets, whatever the transport, as in Envoy,
// where transport_api_version and resource_api_version are separate settings: a v2 type on
// either service gets the v3 resources' bytes in Anys that carry the v2 type URL (the v2
// messages share every field number the translation sets, see TestV3BodiesReadAsV2); a v3
// type gets the v3 resources. MCP-over-xDS collections and MeshConfig keep their names.

// Protocol names of the v2 transport, as logs, metrics and the debug endpoint show them.
const (
	ProtocolSotWV2  = "xds-v2-sotw"
	ProtocolDeltaV2 = "xds-v2-delta"
)

// The v2 type URLs of the Envoy resources.
const (
	ClusterTypeV2  = "type.googleapis.com/envoy.api.v2.Cluster"
	EndpointTypeV2 = "type.googleapis.com/envoy.api.v2.ClusterLoadAssignment"
	ListenerTypeV2 = "type.googleapis.com/envoy.api.v2.Listener"
	RouteTypeV2    = "type.googleapis.com/envoy.api.v2.RouteConfiguration"
)

// v3Of is the v3 type URL, and so the collection, of each v2 one; v2Of the reverse.
var (
	v3Of = map[string]string{ClusterTypeV2: ClusterType, EndpointTypeV2: EndpointType, ListenerTypeV2: ListenerType, RouteTypeV2: RouteType}
	v2Of = map[string]string{ClusterType: ClusterTypeV2, EndpointType: EndpointTypeV2, ListenerType: ListenerTypeV2, RouteType: RouteTypeV2}
)

var (
	sotwLayoutV2 = wire.NewLayout(&apiv2.DiscoveryResponse{}, wire.Roles{
		Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce", BodyAsKey: v2Value,
	})
	deltaLayoutV2 = wire.NewLayout(&apiv2.DeltaDiscoveryResponse{}, wire.Roles{
		Version: "system_version_info", Resources: "resources", Key: "type_url",
		Removed: "removed_resources", Nonce: "nonce", DeltaResource: &apiv2.Resource{}, BodyAsKey: v2Value,
	})
)

// v2Value is the body of a stored v3 Envoy resource served under the v2 type URL key: the
// stored bytes, with the few fields v2 spells otherwise rewritten (envoyv2.Value). It runs
// when a response is encoded, once per response and version for every stream that shares it;
// the rewrite of an entry is kept while the entry lives (v2Bodies), so that a whole-type
// response after a change reads only the resources that changed. Endpoints need nothing;
// listeners lose only what Envoy 1.16 has no field for, their RDS config sources still naming
// V3 (docs/xds-v2.md, "Not done yet").
func v2Value(key string, e *store.Entry) []byte {
	_, stored := e.Body()
	v3 := v3Of[key]
	if v3 != ClusterType && v3 != RouteType && v3 != ListenerType {
		return stored
	}
	return v2Bodies.value(e, stored, func() []byte { return envoyv2.Value(v3, stored) })
}

// v2Bodies keeps the v2 body of each cluster and route configuration entry served on v2.
var v2Bodies = &entryCache{m: map[weak.Pointer[store.Entry]][]byte{}}

// entryCache maps a store entry to bytes derived from it, for as long as the entry lives: a
// store entry is one version of one resource and never changes, and the cache forgets it
// when it is collected (the store dropped that version and no response holds it), so it
// needs no bound of its own.
type entryCache struct {
	mu sync.Mutex
	m  map[weak.Pointer[store.Entry]][]byte // nil: the stored bytes as they are
}

func (c *entryCache) value(e *store.Entry, stored []byte, derive func() []byte) []byte {
	wp := weak.Make(e)
	c.mu.Lock()
	b, ok := c.m[wp]
	c.mu.Unlock()
	if ok {
		if b == nil {
			return stored
		}
		return b
	}
	out := derive()
	keep := out
	if len(out) == len(stored) && (len(out) == 0 || &out[0] == &stored[0]) {
		keep = nil // unchanged: keep nothing but the mark
	}
	c.mu.Lock()
	if _, ok := c.m[wp]; !ok {
		c.m[wp] = keep
		runtime.AddCleanup(e, c.forget, wp)
	}
	c.mu.Unlock()
	return out
}

func (c *entryCache) forget(wp weak.Pointer[store.Entry]) {
	c.mu.Lock()
	delete(c.m, wp)
	c.mu.Unlock()
}

func (c *entryCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// CollectionOf is kinds.CollectionOf, which also knows the v2 type URLs: the names authz
// rules may give a kind include them (a v2 type URL names the collection of its v3 type).
func CollectionOf(name string) string {
	if v3, ok := v3Of[name]; ok {
		return v3
	}
	return kinds.CollectionOf(name)
}

// V3TypeOf is the v3 type URL of a v2 Envoy resource type URL.
func V3TypeOf(v2 string) (string, bool) {
	v3, ok := v3Of[v2]
	return v3, ok
}

// resolveV2 serves a v2 Envoy type as its v3 counterpart, under the v2 type URL, in the same
// make-before-break order.
func resolveV2(v3 string) typeInfo {
	ti := resolve(v3)
	ti.form = wire.FormAnyBodyAsKey
	return ti
}

// envoyOrder is translate.EnvoyOrder of a v3 Envoy type, each type it names in both
// versions: one stream may mix them (Envoy 1.16 on v2 follows a v2 cluster's eds_config,
// whose resource_api_version is V3, with a v3 EDS subscription), and the order holds
// between whichever it subscribed to. Computed once: every request resolves its type.
func envoyOrder(v3 string) translate.Dependencies { return envoyOrders[v3] }

var envoyOrders = func() map[string]translate.Dependencies {
	out := map[string]translate.Dependencies{}
	for _, v3 := range append(slices.Collect(maps.Keys(v2Of)), VirtualHostType) { // VHDS has no v2 type
		d := translate.EnvoyOrder(v3)
		out[v3] = translate.Dependencies{After: bothVersions(d.After), RemoveAfter: bothVersions(d.RemoveAfter), SameNames: d.SameNames}
	}
	return out
}()

func bothVersions(types []string) []string {
	out := make([]string, 0, 2*len(types))
	for _, t := range types {
		out = append(out, t)
		if v2, ok := v2Of[t]; ok {
			out = append(out, v2)
		}
	}
	return out
}

func sotwRequestV2(m *apiv2.DiscoveryRequest, defaultType string) *source.Request {
	return sotwFields(m, m.GetNode(), defaultType)
}

func deltaRequestV2(m *apiv2.DeltaDiscoveryRequest, defaultType string) *source.Request {
	return deltaFields(m, m.GetNode(), defaultType)
}

type (
	sotwStreamServerV2  = grpc.BidiStreamingServer[apiv2.DiscoveryRequest, apiv2.DiscoveryResponse]
	deltaStreamServerV2 = grpc.BidiStreamingServer[apiv2.DeltaDiscoveryRequest, apiv2.DeltaDiscoveryResponse]
)

func (x *Server) sotwV2(st sotwStreamServerV2, defaultType string) error {
	return serve(x, st, sotwRequestV2, sotwLayoutV2, source.StateOfTheWorld, ProtocolSotWV2, defaultType)
}

func (x *Server) deltaV2(st deltaStreamServerV2, defaultType string) error {
	return serve(x, st, deltaRequestV2, deltaLayoutV2, source.Incremental, ProtocolDeltaV2, defaultType)
}

func registerV2(s grpc.ServiceRegistrar, x *Server) {
	discoveryv2.RegisterAggregatedDiscoveryServiceServer(s, &adsV2{x: x})
	apiv2.RegisterListenerDiscoveryServiceServer(s, &ldsV2{x: x})
	apiv2.RegisterRouteDiscoveryServiceServer(s, &rdsV2{x: x})
	apiv2.RegisterClusterDiscoveryServiceServer(s, &cdsV2{x: x})
	apiv2.RegisterEndpointDiscoveryServiceServer(s, &edsV2{x: x})
}

type adsV2 struct {
	discoveryv2.UnimplementedAggregatedDiscoveryServiceServer
	x *Server
}

func (a *adsV2) StreamAggregatedResources(st sotwStreamServerV2) error { return a.x.sotwV2(st, "") }
func (a *adsV2) DeltaAggregatedResources(st deltaStreamServerV2) error { return a.x.deltaV2(st, "") }

type ldsV2 struct {
	apiv2.UnimplementedListenerDiscoveryServiceServer
	x *Server
}

func (s *ldsV2) StreamListeners(st sotwStreamServerV2) error { return s.x.sotwV2(st, ListenerTypeV2) }
func (s *ldsV2) DeltaListeners(st deltaStreamServerV2) error { return s.x.deltaV2(st, ListenerTypeV2) }

type rdsV2 struct {
	apiv2.UnimplementedRouteDiscoveryServiceServer
	x *Server
}

func (s *rdsV2) StreamRoutes(st sotwStreamServerV2) error { return s.x.sotwV2(st, RouteTypeV2) }
func (s *rdsV2) DeltaRoutes(st deltaStreamServerV2) error { return s.x.deltaV2(st, RouteTypeV2) }

type cdsV2 struct {
	apiv2.UnimplementedClusterDiscoveryServiceServer
	x *Server
}

func (s *cdsV2) StreamClusters(st sotwStreamServerV2) error { return s.x.sotwV2(st, ClusterTypeV2) }
func (s *cdsV2) DeltaClusters(st deltaStreamServerV2) error { return s.x.deltaV2(st, ClusterTypeV2) }

type edsV2 struct {
	apiv2.UnimplementedEndpointDiscoveryServiceServer
	x *Server
}

func (s *edsV2) StreamEndpoints(st sotwStreamServerV2) error { return s.x.sotwV2(st, EndpointTypeV2) }
func (s *edsV2) DeltaEndpoints(st deltaStreamServerV2) error { return s.x.deltaV2(st, EndpointTypeV2) }
