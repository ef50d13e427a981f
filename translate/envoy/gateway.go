package envoy

import (
	"slices"
	"strings"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// buildPort gathers the sidecar virtual hosts of every host with an HTTP port of this number
// into the port's route configuration ("9080") and outbound listener ("0.0.0.0_9080"). The
// virtual hosts are those the hosts' own builds made, validated and encoded: a port rebuild
// reads and concatenates, never translates, so that one host's change costs a copy of the
// others' bytes, not their translation, validation and encoding again. The route configuration
// ends with istiod's settings for a sidecar's outbound route configurations
// (sidecarRouteSettings).
func (t *Translator) buildPort(p uint32) *unitState {
	b := newBuild(t, "Mesh", "port "+portKey(p))
	// Every 0.0.0.0_PORT is istiod's, HTTP-only ones too: the HTTP chain matched by the
	// inspector's protocols, non-HTTP chains beside it, and the PassthroughFilterChain default,
	// behind virtualOutbound (tcplisteners.go, sidecar.go). Sniffed hosts with listeners of
	// their own do not make one: without a host reached through it (shares), there is no HTTP
	// chain and no route configuration, its hosts' sidecars do not connect here. The route
	// configuration gathers every host's virtual host, only while it is built (portroutes.go).
	var vhosts []vhostParts
	shares := 0
	if ps := t.ports[p]; ps != nil {
		shares = ps.shares
		switch {
		case !t.portRouteBuilt(p):
			ps.reset() // what the route configuration gathered is not kept while it is not built
		case shares > 0:
			vhosts = t.gathered(p).vhosts
		}
	}
	if tcp := t.gatheredTCP(OutboundListenerName(p)); len(tcp) > 0 || shares > 0 {
		t.buildSharedPort(b, p, shares > 0, vhosts, tcp)
	}
	if shares > 0 && t.vhdsBuilt(p) && sidecarRouteSettings.err == nil {
		b.putVHDSRoute(p) // its virtual hosts are the hosts' own outputs (vhds.go)
	}
	return b.done()
}

// sidecarRouteSettings are what istiod sets on an Envoy proxy's route configurations besides
// their name and virtual hosts (buildSidecarOutboundHTTPRouteConfig, and gateways' alike):
// clusters are not validated (a route to a cluster not yet received is not rejected), direct
// response bodies up to 1 MiB (Istio's own limit on them), and the port of the Host header
// ignored (virtual hosts have domains without ports). Encoded once, as the fields after the
// virtual hosts; shared, never modified.
var sidecarRouteSettings = func() (s struct {
	msg *routepb.RouteConfiguration
	enc []byte
	err error
}) {
	s.msg = &routepb.RouteConfiguration{
		ValidateClusters:               wrapperspb.Bool(false),
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1024 * 1024),
		IgnorePortInHostMatching:       true,
	}
	s.enc, s.err = deterministic.Marshal(s.msg)
	return s
}()

// envoyRouteConfiguration is a route configuration for Envoy proxies (a gateway's), with
// istiod's settings (sidecarRouteSettings).
func envoyRouteConfiguration(name string, vhosts []*routepb.VirtualHost) *routepb.RouteConfiguration {
	s := sidecarRouteSettings.msg
	return &routepb.RouteConfiguration{
		Name: name, VirtualHosts: vhosts,
		ValidateClusters: s.ValidateClusters, MaxDirectResponseBodySizeBytes: s.MaxDirectResponseBodySizeBytes,
		IgnorePortInHostMatching: s.IgnorePortInHostMatching,
	}
}

// Field numbers of envoy.config.route.v3.RouteConfiguration.
const (
	routeConfigNameField         = 1
	routeConfigVirtualHostsField = 2
)

// routeConfigurationSize is the size of appendRouteConfiguration's encoding.
func routeConfigurationSize(name string, vhosts []vhostParts, trailer []byte) int {
	size := protowire.SizeTag(routeConfigNameField) + protowire.SizeBytes(len(name))
	for _, vh := range vhosts {
		size += protowire.SizeTag(routeConfigVirtualHostsField) + protowire.SizeBytes(vh.size())
	}
	return size + len(trailer)
}

// appendRouteConfiguration encodes a RouteConfiguration of a name, encoded virtual hosts and
// the encoding of its fields after them (trailer: fields numbered above the virtual hosts')
// exactly as a deterministic proto.Marshal of the message would (fields in number order, each
// virtual host a length-delimited field 2, its two parts one after the other);
// TestPortRouteEncodingIsTheMarshalledMessage holds it to that. Validation needs nothing more:
// a route configuration's own rules apply to each virtual host alone, and each was validated
// when its host was built.
func appendRouteConfiguration(out []byte, name string, vhosts []vhostParts, trailer []byte) []byte {
	out = protowire.AppendTag(out, routeConfigNameField, protowire.BytesType)
	out = protowire.AppendString(out, name)
	for _, vh := range vhosts {
		out = protowire.AppendTag(out, routeConfigVirtualHostsField, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(vh.size()))
		out = vh.appendTo(out)
	}
	return append(out, trailer...)
}

// checkGateway reports the faults of a Gateway on its own: servers the translation leaves out
// (see classify), and VirtualServices bound to it that none of its servers admits. What it
// serves is built per gateway class (buildGatewayClass), where it merges with the others.
func (t *Translator) checkGateway(key string) *unitState {
	b := newBuild(t, kindGateway, key)
	gw := t.gws[key]
	if gw == nil {
		return b.done()
	}
	var http, passthrough []*networking.Server
	for i, s := range gw.spec.GetServers() {
		switch kind, why := classify(s); kind {
		case serverLeftOut:
			b.fs.add(kindGateway, key, "servers[%d]: %s; the server is left out", i, why)
		case serverPassthrough:
			passthrough = append(passthrough, s)
		case serverHTTPS:
			reportCredentialSecrets(&b.fs, key, i, s.GetTls())
			http = append(http, s)
		default:
			http = append(http, s)
		}
	}
	for _, vs := range t.boundVirtualServices(key) {
		if len(admittedHosts(gw, http, vs)) == 0 && len(passthroughRoutes(gw, passthrough, vs)) == 0 {
			b.fs.add(kindVirtualService, vs.Key, "no server of Gateway %s admits any of its hosts; it routes nothing there", key)
		}
	}
	return b.done()
}

func (t *Translator) boundVirtualServices(gateway string) []*virtualService {
	var out []*virtualService
	for _, key := range t.vsByGateway[gateway] {
		out = append(out, t.vss[key])
	}
	slices.SortFunc(out, byAge)
	return out
}

// admittedHosts are the virtual host names a VirtualService gets on a gateway's servers:
// each of its hosts that a server host admits, as the narrower of the two (a VirtualService
// for "*.example.com" on a server for "a.example.com" serves "a.example.com").
func admittedHosts(gw *gateway, servers []*networking.Server, vs *virtualService) []string {
	var out []string
	for _, h := range vs.hosts {
		if !validHost(h) {
			continue // reported by checkVirtualService
		}
		for _, s := range servers {
			for _, sh := range s.GetHosts() {
				ns, pattern := serverHost(sh)
				if !namespaceAdmits(ns, gw.Namespace, vs.Namespace) {
					continue
				}
				if hostname.Matches(pattern, h) || hostname.Matches(h, pattern) {
					if d := moreSpecific(h, pattern); !slices.Contains(out, d) {
						out = append(out, d)
					}
				}
			}
		}
	}
	return out
}

// serverHost splits a server host "namespace/host"; without a namespace, any namespace.
func serverHost(s string) (namespace, host string) {
	if ns, h, ok := strings.Cut(s, "/"); ok {
		return ns, h
	}
	return "*", s
}

// namespaceAdmits applies a server host's namespace: "*" any, "." the gateway's own, "~"
// none, else that namespace.
func namespaceAdmits(ns, gatewayNS, vsNS string) bool {
	switch ns {
	case "*":
		return true
	case ".":
		return vsNS == gatewayNS
	case "~":
		return false
	}
	return ns == vsNS
}

func redirectsToHTTPS(servers []*networking.Server, domain, gatewayNS, vsNS string) bool {
	for _, s := range servers {
		if !s.GetTls().GetHttpsRedirect() {
			continue
		}
		for _, sh := range s.GetHosts() {
			ns, pattern := serverHost(sh)
			if namespaceAdmits(ns, gatewayNS, vsNS) && hostname.Matches(pattern, domain) {
				return true
			}
		}
	}
	return false
}

// checkVirtualService reports what of a VirtualService no host or gateway build looks at:
// gateways it names that do not exist, and sections the translation leaves out.
func (t *Translator) checkVirtualService(key string) *unitState {
	b := newBuild(t, kindVirtualService, key)
	vs := t.vss[key]
	if vs == nil {
		return b.done()
	}
	// A VirtualService without hosts is a delegate: it routes what the roots that delegate to
	// it merge in (delegate.go), and is not translated on its own.
	for i, h := range vs.hosts {
		if !validHost(h) {
			b.fs.add(kindVirtualService, key, "hosts[%d]: %q is not a valid host name; it is left out", i, h)
		}
	}
	for _, g := range vs.gateways {
		b.dependOn(depGateway, g)
		if t.gws[g] == nil {
			b.fs.add(kindVirtualService, key, "gateways: %s is not a known Gateway; nothing is served for it", g)
		}
	}
	if len(vs.spec.GetTcp()) > 0 && len(vs.gateways) > 0 {
		b.fs.add(kindVirtualService, key, "tcp routes are translated for the mesh only; Gateway TCP servers are not translated")
	}
	if vs.export().limited() {
		if vs.mesh && len(vs.spec.GetTcp())+len(vs.spec.GetTls()) > 0 {
			b.fs.add(kindVirtualService, key, "exportTo: its tcp and tls routes are served to every namespace's sidecars (the bridge scopes HTTP routes by exportTo)")
		}
		if len(vs.gateways) > 0 {
			b.fs.add(kindVirtualService, key, "exportTo: gateway proxies are served its routes whatever their namespace (the bridge scopes sidecars' views by namespace, not gateways')")
		}
	}
	return b.done()
}
