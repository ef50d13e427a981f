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
	"github.com/mcpbridge/mcpbridge/translate"
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
	t *Translator
	u *unitState
	// fs are the faults the build reported, until done hands them to the unit. Kept here and
	// not in the unit, where most would never be used; not a pointer to them either, which
	// would move every build to the heap (the pointer into itself escapes).
	fs faults
	// owner names the resource whose outputs these are, for a fault about an invalid output.
	ownerKind, ownerKey string
	// self is what the unit is, as others depend on it (a host's ServiceEntry and
	// DestinationRule): a change to it rebuilds the unit anyway, so reading it is not recorded.
	self depKey
	// scope, when set, is the namespace whose overlay the outputs go to (scope.go).
	scope string
}

func newBuild(t *Translator, kind, key string) *build {
	return &build{t: t, u: &unitState{}, ownerKind: kind, ownerKey: key}
}

// done is the unit the build made, with the faults it reported. Every build's unit is taken
// so.
func (b *build) done() *unitState {
	if len(b.fs) > 0 {
		b.u.rareState().faults = b.fs
	}
	return b.u
}

// put adds an output. One that fails Envoy's validation is left out with a fault: a client
// would reject it, and with it every other resource of its response.
func (b *build) put(typeURL, name string, m validatable) {
	b.putIn(b.collection(typeURL), typeURL, name, m)
}

// putIn is put into a collection other than the type's own (an overlay of it).
func (b *build) putIn(collection, typeURL, name string, m validatable) {
	if err := m.ValidateAll(); err != nil {
		b.invalid(typeName(typeURL), name, err)
		return
	}
	enc, err := store.EncodeMessage(name, typeURL, m)
	if err != nil {
		b.invalid(typeName(typeURL), name, err)
		return
	}
	b.u.set(output{collection, enc})
}

// collection is where the build puts outputs of a type: the type's own collection, or the
// overlay of the scope it builds for (scope.go).
func (b *build) collection(typeURL string) string {
	if b.scope == "" {
		return typeURL
	}
	return translate.ScopeCollection(b.scope, typeURL)
}

// putRouteConfiguration adds a route configuration of a name, encoded virtual hosts and
// encoded fields after them (see appendRouteConfiguration), and returns its index among the unit's outputs; -1 if it could
// not be encoded.
func (b *build) putRouteConfiguration(name string, vhosts []vhostParts, trailer []byte) int {
	return b.putRouteConfigurationIn(b.collection(RouteType), name, vhosts, trailer)
}

// putRouteConfigurationIn is putRouteConfiguration into a collection other than the route
// configurations' own (a namespace's overlay of it).
func (b *build) putRouteConfigurationIn(collection, name string, vhosts []vhostParts, trailer []byte) int {
	enc, err := store.EncodeBody(name, RouteType, routeConfigurationSize(name, vhosts, trailer), func(out []byte) ([]byte, error) {
		return appendRouteConfiguration(out, name, vhosts, trailer), nil
	})
	if err != nil {
		b.invalid("RouteConfiguration", name, err)
		return -1
	}
	return b.u.set(output{collection, enc})
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
	case VirtualHostType:
		return "VirtualHost"
	}
	return "RouteConfiguration"
}

func (b *build) dependOn(kind depKind, name string) {
	d := depKey{kind, name}
	if d != b.self && !slices.Contains(b.u.deps(), d) {
		r := b.u.rareState()
		r.deps = append(r.deps, d)
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
		return b.done()
	}
	b.build = newBuild(t, kindServiceEntry, se.Key)
	b.self = depKey{depHost, host}
	for _, o := range shadowed {
		b.fs.add(kindServiceEntry, o.Key, "host %s is also defined by ServiceEntry %s, which is older (or first by name); this definition of it is ignored", host, se.Key)
	}
	if !validHost(host) {
		b.fs.add(kindServiceEntry, se.Key, "hosts: %q is not a valid host name; it is left out", host)
		return b.done()
	}
	var drShadowed []*destinationRule
	b.dr, drShadowed = t.destinationRuleFor(host)
	for _, o := range drShadowed {
		b.fs.add(kindDestinationRule, o.Key, "host %s already has DestinationRule %s, which is older (or first by name); this rule is ignored", host, b.dr.Key)
	}
	if b.dr != nil {
		b.dr.checkSubsets(&b.fs)
	}
	b.buildPorts()
	b.hideFromScopes(host, se)
	return b.done()
}

func (b *hostBuild) buildPorts() {
	var room [2]port // most ServiceEntries have one or two ports
	ports := appendServicePorts(room[:0], b.se, &b.fs)
	// A cluster a port: most hosts have nothing more (a route configuration and a listener
	// a port only for the proxyless, a cluster a subset only with a DestinationRule's), and
	// room for three was 80 bytes a host left empty, 80 MB at a million hosts.
	b.u.reserveOutputs(len(ports))
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
	var l4 []*virtualService // the VirtualServices' tcp and tls routes, read for the first non-HTTP port
	for _, p := range ports {
		var eps []endpoint
		if !eds(res) {
			eps = portEndpoints(ws, p, false, &b.fs)
		}
		b.buildClusters(p, eps)
		if p.protocol.routed() {
			b.buildRoutes(p, vs)
		}
		if p.protocol == protoAuto || !p.protocol.routed() {
			if l4 == nil {
				l4 = b.t.meshL4VirtualServices(b.host)
			}
			if p.protocol == protoAuto {
				b.buildSniffedPort(p, l4) // tcplisteners.go
			} else {
				b.buildTCPPort(p, rawProtocol(b.se, p.number), l4)
			}
		}
	}
}

// buildRoutes adds an HTTP port's virtual host (routed by the host's VirtualService, or to
// the host's own cluster without one), and, while the proxyless outputs are built
// for the host (Translator.SetProxylessHost), the host's route configuration and API listener.
//
// Proxyless gRPC clients and Envoy sidecars get the virtual host as istiod builds it for each:
// the host's own route configuration (the API listener's) has the gRPC client's, with domains
// with ports and max_stream_duration in its routes (grpcRoutes); the port's route
// configuration gathers the sidecar's, with domains without ports. Each is kept as a head
// (name and domains, which differ by the client's namespace) and a rest (routes and after).
// When the routes are the host's default route, the sidecar's rest is the gRPC one's bytes
// (the host's route configuration, when built, is a copy of its own), and a second rest is
// kept only for hosts that a VirtualService routes. A scope that does not see the
// VirtualService (its exportTo) gets rests of its own (scope.go).
func (b *hostBuild) buildRoutes(p port, vs *virtualService) {
	vip := b.vipFor(p.number)
	known := func(alt string) bool { return b.otherHostOnPort(alt, p.number) }
	name := domainName(b.host, p.number)
	sidecarDomains := virtualHostDomains(b.host, p.number, vip, b.proxyDomain(), false, known)
	// The gRPC client's domains (the sidecar's, each also with the port) are made when a
	// build reads them: a sidecar's default route, most hosts', is checked without them
	// (routeRests), and a list of strings a host was a tenth of what its build allocated.
	var grpcList []string
	grpcDomains := func() []string {
		if grpcList == nil {
			grpcList = virtualHostDomains(b.host, p.number, vip, b.proxyDomain(), true, known)
		}
		return grpcList
	}
	grpc := b.t.proxylessFor(b.host) // the proxyless outputs are built (grpccluster.go)
	grpcRest, own, dflt, ok := b.routeRests(p, vs, name, grpcDomains, sidecarDomains, grpc)
	if !ok {
		return
	}
	sidecar, err := virtualHostHead(name, sidecarDomains)
	if err != nil {
		b.invalid("VirtualHost", name, err)
		return
	}
	if own == nil && !dflt {
		own = grpcRest // the sidecar's routes are the gRPC client's
	}
	pv := portVhost{port: p.number, sidecar: sidecar, own: own, defaultRoute: dflt}
	var grpcHead, localGRPCHead []byte
	if grpc {
		if grpcHead, err = virtualHostHead(name, grpcDomains()); err != nil {
			b.invalid("VirtualHost", name, err)
			return
		}
		// The host's own route configuration holds just the gRPC virtual host, validated (by
		// routeRests) and encoded already: assembled from those bytes, not encoded again. One
		// that cannot be encoded is a fault of its own; the sidecar's virtual host stays.
		b.putRouteConfiguration(HostRouteName(b.host, p.number), []vhostParts{{head: grpcHead, tail: grpcRest}}, nil)
	}
	scope, local := b.localScope()
	if local {
		// The proxies of the host's own namespace also call it by its bare name (domains.go).
		ld := proxyDNSDomain(scope, b.t.suffix)
		var local []byte
		local, err = virtualHostHead(name, virtualHostDomains(b.host, p.number, vip, ld, false, known))
		if local != nil {
			pv.scopedPart().local = local
		}
		if err == nil && grpc {
			localGRPCHead, err = virtualHostHead(name, virtualHostDomains(b.host, p.number, vip, ld, true, known))
		}
		if err != nil {
			b.invalid("VirtualHost", name, err)
			return
		}
		if grpc {
			b.putRouteConfigurationIn(translate.ScopeCollection(scope, RouteType), HostRouteName(b.host, p.number),
				[]vhostParts{{head: localGRPCHead, tail: grpcRest}}, nil)
		}
	}
	for _, sv := range b.scopedVirtualServices(vs) {
		gRest, sRest, _, ok := b.routeRests(p, sv.vs, name, grpcDomains, sidecarDomains, true)
		if !ok {
			continue
		}
		if sRest == nil {
			sRest = gRest
		}
		sp := pv.scopedPart()
		sp.variants = append(sp.variants, scopedRest{namespace: sv.namespace, sidecar: sRest})
		if !grpc {
			continue
		}
		head := grpcHead
		if local && sv.namespace == scope {
			head = localGRPCHead
		}
		b.putRouteConfigurationIn(translate.ScopeCollection(sv.namespace, RouteType), HostRouteName(b.host, p.number),
			[]vhostParts{{head: head, tail: gRest}}, nil)
	}
	b.u.vhosts = append(b.u.vhosts, pv)
	if b.t.vhdsBuilt(p.number) {
		b.putHostVirtualHosts(b.host, &pv)
	}
	if grpc {
		b.putAPIListener(p.number)
	}
}

// putAPIListener adds the host's API listener of a port (apilistener_wire.go).
func (b *hostBuild) putAPIListener(port uint32) {
	l := newAPIListenerWire(b.host, b.se.vip(), port)
	enc, err := store.EncodeBody(l.name, ListenerType, l.size(), l.append)
	if err != nil {
		b.invalid("Listener", l.name, err)
		return
	}
	b.u.set(output{b.collection(ListenerType), enc})
}

// routeRests are the rests of a host's virtual hosts on a port when vs routes it (nil: its
// default route): the gRPC client's, and the sidecar's, nil when its routes are the same.
// Each virtual host is validated whole with the given domains; the rest is its encoding
// without name and domains (protobuf-go writes fields in their declaration order, and name
// (1) and domains (2) come first, so head and rest together are the message's encoding).
// dflt tells the host's default route without a hash policy (defaultTail): its rest is
// checked, and encoded only when encode (it is the same for both clients).
func (b *hostBuild) routeRests(p port, vs *virtualService, name string, grpcDomains func() []string, sidecarDomains []string, encode bool) (grpcRest, sidecarRest []byte, dflt, ok bool) {
	hash := defaultRouteHash(b.dr, p.number)
	if vs == nil && hash == nil {
		// The common case, from parts (defaultroute_wire.go). The sidecar's domains are the
		// gRPC client's without ports: checked with them. Unless encoded, what the check
		// reads is made only when the sidecar's domains and the host do not already tell that
		// it passes (defaultRouteSurelyValid): the error, if any, is the full check's.
		if !encode && defaultRouteSurelyValid(name, sidecarDomains, b.host) {
			return nil, nil, true, true
		}
		cluster, op := ClusterName(p.number, "", b.host), defaultRouteOperation(b.host, p.number)
		var err error
		if encode {
			grpcRest, err = defaultRouteRest(name, grpcDomains(), cluster, op)
		} else {
			err = checkDefaultRoute(name, grpcDomains(), cluster, op)
		}
		if err != nil {
			b.invalid("VirtualHost", name, err)
			return nil, nil, false, false
		}
		return grpcRest, nil, true, true
	}
	var routes, grpc []*routepb.Route
	if vs != nil {
		routes = newRouteContext(b.build, p.number, "").virtualServiceRoutes(vs)
		grpc = grpcRoutes(routes)
	} else {
		routes = []*routepb.Route{defaultRoute(b.host, p.number, hash)}
		grpc = routes
	}
	rest := func(domains []string, routes []*routepb.Route) ([]byte, bool) {
		vh := &routepb.VirtualHost{Name: name, Domains: domains, Routes: routes, IncludeRequestAttemptCount: includeRequestAttemptCount}
		if err := vh.ValidateAll(); err != nil {
			b.invalid("VirtualHost", name, err)
			return nil, false
		}
		vh.Name, vh.Domains = "", nil
		out, err := deterministic.Marshal(vh)
		if err != nil {
			b.invalid("VirtualHost", name, err)
			return nil, false
		}
		return out, true
	}
	if grpcRest, ok = rest(grpcDomains(), grpc); !ok {
		return nil, nil, false, false
	}
	if vs == nil {
		return grpcRest, nil, false, true
	}
	if sidecarRest, ok = rest(sidecarDomains, routes); !ok {
		return nil, nil, false, false
	}
	return grpcRest, sidecarRest, false, true
}

// proxyDomain is the DNS domain the shared route configurations are built for: a proxy in no
// namespace (see domains.go).
func (b *hostBuild) proxyDomain() string { return sharedProxyDomain(b.t.suffix) }

// vipFor is the host's address as a domain of its virtual host on a port: the ServiceEntry's
// (serviceVIP), unless another host that answers to it on this port comes first by name.
// istiod keeps a domain for the first virtual host of a route configuration that has it;
// Envoy rejects a route configuration in which two virtual hosts share one, so the others must
// go. Which host comes first is istiod's order of services, not one a user can rely on; the
// bridge's is the host names' order, and the others are reported.
func (b *hostBuild) vipFor(port uint32) string {
	vip := b.se.vip()
	if vip == "" {
		return ""
	}
	for _, k := range b.t.seByVIP[vip] {
		other := b.t.ses[k]
		for _, h := range other.hosts {
			if h == b.host {
				continue
			}
			b.dependOn(depHost, h)
			if h > b.host || !b.hostRoutesPort(h, other, port) {
				continue
			}
			b.fs.add(kindServiceEntry, b.se.Key, "host %s: address %s is also that of host %s on port %d, which answers to it there; %s does not",
				b.host, vip, h, port, b.host)
			return ""
		}
	}
	return vip
}

// hostRoutesPort reports whether a host, as the ServiceEntry se defines it (se is the one
// that does, of those that list it), has an HTTP port of a number.
func (b *hostBuild) hostRoutesPort(h string, se *serviceEntry, port uint32) bool {
	if !validHost(h) || isWildcard(h) {
		return false
	}
	if def, _ := b.t.serviceEntryFor(h); def != se {
		return false
	}
	var ignored faults // its own faults are its host's to report
	for _, p := range servicePorts(se, &ignored) {
		if p.number == port && p.protocol.routed() {
			return true
		}
	}
	return false
}

// otherHostOnPort reports whether a name is another host's, with an HTTP port of this number:
// istiod does not give a host a shorter name that is another host's own (its dedupeDomains).
func (b *hostBuild) otherHostOnPort(name string, port uint32) bool {
	b.dependOn(depHost, name)
	se, _ := b.t.serviceEntryFor(name)
	return se != nil && b.hostRoutesPort(name, se, port)
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
