package envoy

import (
	"fmt"
	"slices"
	"strconv"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

// validatable is an Envoy message with its generated validation.
type validatable interface {
	proto.Message
	ValidateAll() error
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// pack validates an Envoy message and encodes it deterministically, so that the same message
// always has the same bytes and an unchanged output writes nothing.
func pack(m validatable) (*anypb.Any, error) {
	if err := m.ValidateAll(); err != nil {
		return nil, err
	}
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, deterministic); err != nil {
		return nil, err
	}
	if u, ok := typeURLs[a.TypeUrl]; ok {
		a.TypeUrl = u // one copy of each type URL, not one per output (30 MB at 100,000 hosts)
	}
	return a, nil
}

// typeURLs interns the type URLs of the outputs. Only read after init.
var typeURLs = map[string]string{
	ClusterType: ClusterType, EndpointType: EndpointType, ListenerType: ListenerType, RouteType: RouteType,
	"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
}

// build is the state of one unit's build.
type build struct {
	t  *Translator
	u  *unitState
	fs *faults
	// owner names the resource whose outputs these are, for a fault about an invalid output.
	ownerKind, ownerKey string
	// self is what the unit is, as others depend on it (a host's ServiceEntry and
	// DestinationRule): a change to it rebuilds the unit anyway, so reading it is not recorded.
	self depKey
}

func newBuild(t *Translator, kind, key string) *build {
	u := &unitState{}
	return &build{t: t, u: u, fs: (*faults)(&u.faults), ownerKind: kind, ownerKey: key}
}

// put adds an output. One that fails Envoy's validation is left out with a fault: a client
// would reject it, and with it every other resource of its response.
func (b *build) put(typeURL, name string, m validatable) {
	if err := m.ValidateAll(); err != nil {
		b.invalid(typeName(typeURL), name, err)
		return
	}
	enc, err := store.EncodeMessage(name, typeURL, m)
	if err != nil {
		b.invalid(typeName(typeURL), name, err)
		return
	}
	b.u.set(output{typeURL, enc})
}

// putRouteConfiguration adds a route configuration of a name and encoded virtual hosts (see
// appendRouteConfiguration), and returns its index among the unit's outputs; -1 if it could
// not be encoded.
func (b *build) putRouteConfiguration(name string, vhosts [][]byte) int {
	enc, err := store.EncodeBody(name, RouteType, routeConfigurationSize(name, vhosts), func(out []byte) ([]byte, error) {
		return appendRouteConfiguration(out, name, vhosts), nil
	})
	if err != nil {
		b.invalid("RouteConfiguration", name, err)
		return -1
	}
	return b.u.set(output{RouteType, enc})
}

func (b *build) invalid(what, name string, err error) {
	b.fs.add(b.ownerKind, b.ownerKey, "the Envoy %s %q derived from it is invalid and is not served: %v", what, name, err)
}

func typeName(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "Cluster"
	case EndpointType:
		return "ClusterLoadAssignment"
	case ListenerType:
		return "Listener"
	case GRPCClusterType:
		return "Cluster"
	}
	return "RouteConfiguration"
}

func (b *build) dependOn(kind depKind, name string) {
	d := depKey{kind, name}
	if d != b.self && !slices.Contains(b.u.deps, d) {
		b.u.deps = append(b.u.deps, d)
	}
}

// hostBuild builds one host's outputs.
type hostBuild struct {
	*build
	host string
	se   *serviceEntry
	dr   *destinationRule
}

// buildHost builds everything of one host: per port, its clusters and load assignments, and
// for an HTTP port its route configuration, API listener and the virtual host its port's
// route configuration gathers.
func (t *Translator) buildHost(host string) *unitState {
	se, shadowed := t.serviceEntryFor(host)
	b := &hostBuild{host: host, se: se}
	if se == nil {
		b.build = newBuild(t, "", "")
		b.orphans()
		return b.u
	}
	b.build = newBuild(t, kindServiceEntry, se.Key)
	b.self = depKey{depHost, host}
	for _, o := range shadowed {
		b.fs.add(kindServiceEntry, o.Key, "host %s is also defined by ServiceEntry %s, which is older (or first by name); this definition of it is ignored", host, se.Key)
	}
	if !validHost(host) {
		b.fs.add(kindServiceEntry, se.Key, "hosts: %q is not a valid host name; it is left out", host)
		return b.u
	}
	var drShadowed []*destinationRule
	b.dr, drShadowed = t.destinationRuleFor(host)
	for _, o := range drShadowed {
		b.fs.add(kindDestinationRule, o.Key, "host %s already has DestinationRule %s, which is older (or first by name); this rule is ignored", host, b.dr.Key)
	}
	if b.dr != nil {
		b.dr.checkSubsets(b.fs)
	}
	b.buildPorts()
	return b.u
}

func (b *hostBuild) buildPorts() {
	ports := servicePorts(b.se, b.fs)
	b.u.outputs = make([]output, 0, 3*len(ports)) // a cluster, a route, a listener
	res := b.se.resolution
	switch {
	case res == networking.ServiceEntry_DYNAMIC_DNS:
		b.fs.add(kindServiceEntry, b.se.Key, "resolution DYNAMIC_DNS is not translated; host %s has no clusters", b.host)
		return
	case isWildcard(b.host) && (res == networking.ServiceEntry_DNS || res == networking.ServiceEntry_DNS_ROUND_ROBIN):
		b.fs.add(kindServiceEntry, b.se.Key, "host %s: a wildcard host cannot be resolved by DNS; it has no clusters", b.host)
		return
	}
	// DNS clusters hold their endpoints; an EDS cluster's are its load assignment, built
	// apart (buildEndpoints), so that a change of endpoints rebuilds only those.
	var ws []workload
	if !eds(res) {
		ws = b.t.workloads(b.se)
	}
	vs, vsShadowed := b.t.meshVirtualServiceFor(b.host)
	for _, o := range vsShadowed {
		b.fs.add(kindVirtualService, o.Key, "host %s is also routed by VirtualService %s, which is older (or first by name); this VirtualService's routes for it are ignored", b.host, vs.Key)
	}
	for _, p := range ports {
		var eps []endpoint
		if !eds(res) {
			eps = portEndpoints(ws, p, false, b.fs)
		}
		b.buildClusters(p, eps)
		if p.protocol.routed() {
			b.buildRoutes(p, vs)
		}
	}
}

// buildRoutes adds an HTTP port's virtual host (routed by the host's VirtualService, or to
// the host's own cluster without one), its route configuration and its API listener.
func (b *hostBuild) buildRoutes(p port, vs *virtualService) {
	rc := newRouteContext(b.build, p.number, "")
	var routes []*routepb.Route
	if vs != nil {
		routes = rc.virtualServiceRoutes(vs)
	} else {
		routes = []*routepb.Route{rc.defaultRoute(b.host, p.number)}
	}
	vh := &routepb.VirtualHost{
		Name:    APIListenerName(b.host, p.number),
		Domains: domains(b.host, p.number),
		Routes:  routes,
	}
	if err := vh.ValidateAll(); err != nil {
		b.invalid("VirtualHost", vh.Name, err)
		return
	}
	encoded, err := deterministic.Marshal(vh)
	if err != nil {
		b.invalid("VirtualHost", vh.Name, err)
		return
	}
	// The host's own route configuration holds just this virtual host, validated and encoded
	// above: assembled from those bytes, not validated and encoded again. Its encoding ends
	// with the virtual host, which is where the port's route configuration reads it.
	route := b.putRouteConfiguration(HostRouteName(b.host, p.number), [][]byte{encoded})
	if route < 0 {
		return
	}
	b.u.vhosts = append(b.u.vhosts, portVhost{port: p.number, route: route, size: len(encoded), usesFault: rc.usesFault})
	if l, err := apiListener(b.host, p.number, rc.usesFault); err != nil {
		b.invalid("Listener", APIListenerName(b.host, p.number), err)
	} else {
		b.put(ListenerType, l.GetName(), l)
	}
}

// domains are what a virtual host answers to: the host, and the host with the port (how
// grpc-go and HTTP/1.1 clients name a non-default port).
func domains(host string, port uint32) []string {
	return []string{host, host + ":" + strconv.FormatUint(uint64(port), 10)}
}

// orphans reports the rules that name a host no ServiceEntry defines: they have no effect.
func (b *hostBuild) orphans() {
	for _, key := range b.t.drByHost[b.host] {
		if !isWildcard(b.host) {
			b.fs.add(kindDestinationRule, key, "host %s is not defined by any ServiceEntry; the rule has no effect", b.host)
		}
	}
	for _, key := range b.t.vsByHost[b.host] {
		if b.t.vss[key].mesh && !isWildcard(b.host) {
			b.fs.add(kindVirtualService, key, "host %s is not defined by any ServiceEntry; the mesh has no routes for it", b.host)
		}
	}
}

func portKey(p uint32) string { return strconv.FormatUint(uint64(p), 10) }

func parsePort(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		panic(fmt.Sprintf("envoy: port unit %q", s)) // port unit names are made by portKey
	}
	return uint32(n)
}
