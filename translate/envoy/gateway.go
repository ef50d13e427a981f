package envoy

import (
	"fmt"
	"slices"
	"strings"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	networking "istio.io/api/networking/v1alpha3"
)

// buildPort gathers the virtual hosts of every host with an HTTP port of this number into
// the port's route configuration ("9080") and outbound listener ("0.0.0.0_9080"). The
// virtual hosts are those the hosts' own builds made, validated and encoded: a port rebuild
// reads and concatenates, never translates, so that one host's change costs a copy of the
// others' bytes, not their translation, validation and encoding again.
func (t *Translator) buildPort(p uint32) *unitState {
	b := newBuild(t, "Mesh", "port "+portKey(p))
	vhosts, usesFault := t.gathered(p)
	if len(vhosts) == 0 {
		return b.u
	}
	b.putRouteConfiguration(OutboundRouteName(p), vhosts)
	if l, err := outboundListener(p, usesFault); err != nil {
		b.invalid("Listener", OutboundListenerName(p), err)
	} else {
		b.put(ListenerType, l.GetName(), l)
	}
	return b.u
}

// Field numbers of envoy.config.route.v3.RouteConfiguration.
const (
	routeConfigNameField         = 1
	routeConfigVirtualHostsField = 2
)

// routeConfigurationSize is the size of appendRouteConfiguration's encoding.
func routeConfigurationSize(name string, vhosts [][]byte) int {
	size := protowire.SizeTag(routeConfigNameField) + protowire.SizeBytes(len(name))
	for _, vh := range vhosts {
		size += protowire.SizeTag(routeConfigVirtualHostsField) + protowire.SizeBytes(len(vh))
	}
	return size
}

// appendRouteConfiguration encodes a RouteConfiguration of a name and encoded virtual hosts
// exactly as a deterministic proto.Marshal of the message would (fields in number order,
// each virtual host a length-delimited field 2); TestPortRouteEncodingIsTheMarshalledMessage
// holds it to that. Validation needs nothing more: a route configuration's own rules apply
// to each virtual host alone, and each was validated when its host was built.
func appendRouteConfiguration(out []byte, name string, vhosts [][]byte) []byte {
	out = protowire.AppendTag(out, routeConfigNameField, protowire.BytesType)
	out = protowire.AppendString(out, name)
	for _, vh := range vhosts {
		out = protowire.AppendTag(out, routeConfigVirtualHostsField, protowire.BytesType)
		out = protowire.AppendBytes(out, vh)
	}
	return out
}

// buildGateway builds a Gateway's listeners and route configurations, one per server port.
// Its virtual hosts come from the VirtualServices bound to it: each VirtualService host that
// a server on the port admits (by namespace and host pattern) becomes a virtual host, or joins
// the routes of one that an older VirtualService already made for the same host.
func (t *Translator) buildGateway(key string) *unitState {
	b := newBuild(t, kindGateway, key)
	gw := t.gws[key]
	if gw == nil {
		return b.u
	}
	vss := t.boundVirtualServices(key)
	admitted := keySet{}
	for _, ps := range serversByPort(gw, b.fs) {
		t.buildGatewayPort(b, gw, ps, vss, admitted)
	}
	for _, vs := range vss {
		if _, ok := admitted[vs.Key]; !ok {
			b.fs.add(kindVirtualService, vs.Key, "no server of Gateway %s admits any of its hosts; it routes nothing there", key)
		}
	}
	return b.u
}

// portServers are a gateway's HTTP servers on one port.
type portServers struct {
	port    uint32
	servers []*networking.Server
}

// serversByPort groups the HTTP servers by port, in order. Servers that are not plain HTTP
// are left out with a fault: terminating TLS needs certificates the bridge does not serve,
// and TCP and TLS passthrough need filter chains it does not build.
func serversByPort(gw *gateway, fs *faults) []portServers {
	var out []portServers
	for i, s := range gw.spec.GetServers() {
		field := fmt.Sprintf("servers[%d]", i)
		n := s.GetPort().GetNumber()
		switch proto := parseProtocol(s.GetPort().GetProtocol(), s.GetPort().GetName()); {
		case n == 0 || n > 65535:
			fs.add(kindGateway, gw.Key, "%s.port.number: %d is not a port number; the server is left out", field, n)
			continue
		case !proto.routed() || proto == protoAuto && s.GetPort().GetProtocol() != "":
			fs.add(kindGateway, gw.Key, "%s.port.protocol: %s is not translated (only HTTP, HTTP2 and GRPC servers are); the server is left out", field, s.GetPort().GetProtocol())
			continue
		}
		idx := slices.IndexFunc(out, func(ps portServers) bool { return ps.port == n })
		if idx < 0 {
			out = append(out, portServers{port: n})
			idx = len(out) - 1
		}
		out[idx].servers = append(out[idx].servers, s)
	}
	return out
}

func (t *Translator) boundVirtualServices(gateway string) []*virtualService {
	var out []*virtualService
	for _, key := range t.vsByGateway[gateway] {
		out = append(out, t.vss[key])
	}
	slices.SortFunc(out, byAge)

	return out
}

// buildGatewayPort builds the listener and route configuration of one port, and adds to
// admitted the VirtualServices that got a virtual host on it.
func (t *Translator) buildGatewayPort(b *build, gw *gateway, ps portServers, vss []*virtualService, admitted keySet) {
	rc := newRouteContext(b, ps.port, gw.Key)
	vhosts := map[string]*routepb.VirtualHost{}
	for _, vs := range vss {
		for _, domain := range admittedHosts(gw, ps.servers, vs) {
			admitted[vs.Key] = struct{}{}
			vh := vhosts[domain]
			if vh == nil {
				vh = &routepb.VirtualHost{Name: APIListenerName(domain, ps.port), Domains: domains(domain, ps.port)}
				if redirectsToHTTPS(ps.servers, domain, gw.Namespace, vs.Namespace) {
					vh.RequireTls = routepb.VirtualHost_ALL
				}
				vhosts[domain] = vh
			}
			vh.Routes = append(vh.Routes, rc.virtualServiceRoutes(vs)...)
		}
	}
	cfg := &routepb.RouteConfiguration{Name: GatewayRouteName(gw.Key, ps.port)}
	for _, d := range sortedKeys(vhosts) {
		cfg.VirtualHosts = append(cfg.VirtualHosts, vhosts[d])
	}
	b.put(RouteType, cfg.Name, cfg)
	if l, err := gatewayListener(gw.Key, ps.port, rc.usesFault); err != nil {
		b.invalid("Listener", GatewayListenerName(gw.Key, ps.port), err)
	} else {
		b.put(ListenerType, l.GetName(), l)
	}
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
				if hostMatches(pattern, h) || hostMatches(h, pattern) {
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
			if namespaceAdmits(ns, gatewayNS, vsNS) && hostMatches(pattern, domain) {
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
		return b.u
	}
	if len(vs.hosts) == 0 {
		b.fs.add(kindVirtualService, key, "hosts is empty; the VirtualService routes nothing")
	}
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
	if len(vs.spec.GetTcp()) > 0 || len(vs.spec.GetTls()) > 0 {
		b.fs.add(kindVirtualService, key, "tcp and tls routes are not translated; only http routes are")
	}
	return b.u
}
