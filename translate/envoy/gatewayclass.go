package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"github.com/mcpbridge/mcpbridge/translate"
)

// serverKind is what the translation makes of a Gateway server.
type serverKind uint8

const (
	serverHTTP        serverKind = iota // plaintext HTTP, HTTP2 or GRPC (perhaps redirecting to HTTPS)
	serverHTTPS                         // HTTPS terminated here, with certificates by SDS
	serverPassthrough                   // TLS or HTTPS passed through, routed by SNI to a TCP proxy
	serverLeftOut                       // anything else: reported, not served
)

// classify says what a server is, or why it is left out.
func classify(s *networking.Server) (serverKind, string) {
	n, proto := s.GetPort().GetNumber(), strings.ToUpper(s.GetPort().GetProtocol())
	tls := s.GetTls()
	switch {
	case n == 0 || n > 65535:
		return serverLeftOut, fmt.Sprintf("port.number: %d is not a port number", n)
	case isHTTPProtocol(proto):
		return serverHTTP, ""
	case proto != "HTTPS" && proto != "TLS":
		return serverLeftOut, fmt.Sprintf("port.protocol: %s servers are not translated (HTTP, HTTP2, GRPC, HTTPS and TLS passthrough are)", s.GetPort().GetProtocol())
	case tls == nil:
		return serverLeftOut, fmt.Sprintf("tls: a %s server needs its TLS settings", proto)
	}
	switch mode := tls.GetMode(); {
	case mode == networking.ServerTLSSettings_PASSTHROUGH:
		return serverPassthrough, ""
	case proto == "TLS":
		return serverLeftOut, fmt.Sprintf("tls.mode: %s on a TLS server (terminated TCP) is not translated; PASSTHROUGH is", mode)
	case mode == networking.ServerTLSSettings_SIMPLE || mode == networking.ServerTLSSettings_MUTUAL ||
		mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL || mode == networking.ServerTLSSettings_ISTIO_MUTUAL:
		if err := checkServerTLS(tls); err != nil {
			return serverLeftOut, err.Error()
		}
		return serverHTTPS, ""
	default:
		return serverLeftOut, fmt.Sprintf("tls.mode: %s is not translated (SIMPLE, MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL and PASSTHROUGH are)", mode)
	}
}

// isHTTPProtocol is Istio's "IsHTTP" for a server's protocol.
func isHTTPProtocol(proto string) bool {
	switch proto {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

// mergedServer is one server of a class's merge, with what it is served as.
type mergedServer struct {
	gw    *gateway
	index int // in the Gateway's servers
	s     *networking.Server
	kind  serverKind
	route string // its route configuration: http.PORT or https...; "" for passthrough
}

// mergedPort is a port's servers after the merge: plaintext (HTTP, one route configuration)
// or TLS (filter chains told apart by SNI).
type mergedPort struct {
	number    uint32
	plaintext bool
	servers   []mergedServer
}

// mergeGateways merges the Gateways of a class into ports, as istiod merges the Gateways that
// select one gateway proxy (its MergeGateways), oldest Gateway first:
//   - servers on a port merge when all are plaintext HTTP of one protocol (one route
//     configuration, http.PORT), or all use TLS (filter chains by SNI: one per HTTPS server,
//     with a route configuration of its own, and passthrough routes);
//   - a server that would mix the two on a port, or repeat an SNI host that a TLS server of
//     the port already has (Envoy rejects two filter chains with one match), is left out;
//   - everything left out is a fault of its Gateway, naming the server, the port and the
//     class, so that a user sees why one gateway proxy does not serve what it says.
func mergeGateways(class string, c translate.GatewayClass, gws []*gateway, fs *faults) []mergedPort {
	var ports []mergedPort
	tlsHosts := map[uint32]map[string]string{} // port → SNI host → the server that has it
	for _, gw := range gws {
		for i, s := range gw.spec.GetServers() {
			kind, _ := classify(s)
			if kind == serverLeftOut {
				continue // reported by checkGateway
			}
			n := s.GetPort().GetNumber()
			where := fmt.Sprintf("servers[%d] (port %d, %s)", i, n, s.GetPort().GetProtocol())
			reject := func(format string, args ...any) {
				fs.add(kindGateway, gw.Key, "%s: %s; left out for the gateway workloads %s (class %s)",
					where, fmt.Sprintf(format, args...), describeClass(c), class)
			}
			if s.GetTls() != nil {
				if dup, other := duplicateHost(tlsHosts, n, s, gw.Key, i); dup != "" {
					reject("host %q is already served on this port by %s", dup, other)
					continue
				}
			}
			pi := slices.IndexFunc(ports, func(p mergedPort) bool { return p.number == n })
			ms := mergedServer{gw: gw, index: i, s: s, kind: kind}
			if pi < 0 {
				ports = append(ports, mergedPort{number: n, plaintext: kind == serverHTTP})
				pi = len(ports) - 1
			}
			p := &ports[pi]
			first := len(p.servers) == 0
			switch {
			case p.plaintext && (kind != serverHTTP || !first && !strings.EqualFold(p.servers[0].s.GetPort().GetProtocol(), s.GetPort().GetProtocol())):
				other := p.servers[0]
				reject("%s of Gateway %s already serves this port as plaintext %s", serverName(other), other.gw.Key, other.s.GetPort().GetProtocol())
				continue
			case !p.plaintext && kind == serverHTTP:
				other := p.servers[0]
				reject("%s of Gateway %s already serves this port with TLS", serverName(other), other.gw.Key)
				continue
			}
			switch kind {
			case serverHTTP:
				ms.route = GatewayHTTPRouteName(class, n)
			case serverHTTPS:
				ms.route = GatewayHTTPSRouteName(class, n, s.GetPort().GetName(), gw.Key)
				if slices.ContainsFunc(p.servers, func(o mergedServer) bool { return o.route == ms.route }) {
					reject("another HTTPS server of this Gateway on this port has the port name %q", s.GetPort().GetName())
					continue
				}
			}
			p.servers = append(p.servers, ms)
		}
	}
	slices.SortFunc(ports, func(a, b mergedPort) int { return int(a.number) - int(b.number) })
	return ports
}

// duplicateHost records a TLS server's hosts on its port and returns one that a server
// already has there, with that server, if any (then nothing is recorded).
func duplicateHost(seen map[uint32]map[string]string, port uint32, s *networking.Server, gw string, index int) (host, other string) {
	hosts := seen[port]
	if hosts == nil {
		hosts = map[string]string{}
		seen[port] = hosts
	}
	for _, h := range s.GetHosts() {
		if o, ok := hosts[h]; ok {
			return h, o
		}
	}
	for _, h := range s.GetHosts() {
		hosts[h] = fmt.Sprintf("servers[%d] of Gateway %s", index, gw)
	}
	return "", ""
}

func serverName(ms mergedServer) string { return fmt.Sprintf("servers[%d]", ms.index) }

// describeClass writes a class's labels as a selector would: {app=ingress,istio=ingressgateway}.
func describeClass(c translate.GatewayClass) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range slices.Sorted(maps.Keys(c.Labels)) {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(k + "=" + c.Labels[k])
	}
	b.WriteString("}")
	if c.Namespaces != nil {
		b.WriteString(" of namespaces " + strings.Join(c.Namespaces, ","))
	}
	return b.String()
}

// classGateways are the Gateways a class takes, oldest first (then by name): the order in
// which their servers claim ports.
func (t *Translator) classGateways(c translate.GatewayClass) []*gateway {
	var out []*gateway
	for _, gw := range t.gws {
		if classSelects(c, gw) {
			out = append(out, gw)
		}
	}
	slices.SortFunc(out, func(a, b *gateway) int {
		if c := byAge(a, b); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// buildGatewayClass builds a class's listeners and route configurations from the merge of
// its Gateways. It depends on every Gateway (any may start or stop selecting it): Translate
// rebuilds every class when a Gateway, or what is bound to one, changes.
func (t *Translator) buildGatewayClass(id string) *unitState {
	b := newBuild(t, kindGateway, "class "+id)
	c, ok := t.classes[id]
	if !ok {
		return b.done()
	}
	for _, p := range mergeGateways(id, c, t.classGateways(c), &b.fs) {
		if p.plaintext {
			t.buildPlaintextPort(b, id, p)
		} else {
			t.buildTLSPort(b, id, p)
		}
	}
	return b.done()
}

// buildPlaintextPort: one listener and one route configuration (http.PORT) for every HTTP
// server on the port, whichever Gateway it is of.
func (t *Translator) buildPlaintextPort(b *build, class string, p mergedPort) {
	vhosts := t.serverVirtualHosts(b, p.number, p.servers)
	b.put(RouteType, GatewayHTTPRouteName(class, p.number), envoyRouteConfiguration(GatewayHTTPRouteName(class, p.number), vhosts))
	name := GatewayListenerName(class, p.number)
	l, err := httpListener(name, name, GatewayHTTPRouteName(class, p.number), p.number, corepb.TrafficDirection_OUTBOUND, hcmGateway)
	if err != nil {
		b.invalid("Listener", name, err)
		return
	}
	b.put(ListenerType, name, finishGatewayListener(l))
}

// serverVirtualHosts are the virtual hosts of some HTTP servers: for each VirtualService bound
// to a server's Gateway, oldest first, each of its hosts that the server admits; the routes of
// VirtualServices with the same host are joined, oldest first.
func (t *Translator) serverVirtualHosts(b *build, port uint32, servers []mergedServer) []*routepb.VirtualHost {
	type bound struct {
		vs      *virtualService
		server  mergedServer
		domains []string
	}
	var all []bound
	for _, ms := range servers {
		for _, vs := range t.boundVirtualServices(ms.gw.Key) {
			if ds := admittedHosts(ms.gw, []*networking.Server{ms.s}, vs); len(ds) > 0 {
				all = append(all, bound{vs, ms, ds})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b bound) int { return byAge(a.vs, b.vs) })
	vhosts := map[string]*routepb.VirtualHost{}
	joined := map[string]bool{} // "VirtualService key|domain": each once, however many servers admit it
	for _, bd := range all {
		rc := newRouteContext(b, port, bd.server.gw.Key)
		for _, d := range bd.domains {
			if joined[bd.vs.Key+"|"+d] {
				continue
			}
			joined[bd.vs.Key+"|"+d] = true
			vh := vhosts[d]
			if vh == nil {
				// istiod's gateway virtual hosts answer to the host alone: the route
				// configuration ignores the port of the Host header.
				vh = &routepb.VirtualHost{Name: domainName(d, port), Domains: []string{d}, IncludeRequestAttemptCount: includeRequestAttemptCount}
				if redirectsToHTTPS([]*networking.Server{bd.server.s}, d, bd.server.gw.Namespace, bd.vs.Namespace) {
					vh.RequireTls = routepb.VirtualHost_ALL
				}
				vhosts[d] = vh
			}
			vh.Routes = append(vh.Routes, rc.virtualServiceRoutes(bd.vs)...)
		}
	}
	out := make([]*routepb.VirtualHost, 0, len(vhosts))
	for _, d := range sortedKeys(vhosts) {
		// As istiod orders the joined routes (SortVHostRoutes): catch-all routes last, so
		// that one VirtualService's catch-all does not hide another's narrower routes.
		vhosts[d].Routes = catchAllLast(vhosts[d].Routes)
		out = append(out, vhosts[d])
	}
	return out
}

// buildTLSPort: one listener whose filter chains are told apart by SNI: an HTTPS server
// terminates TLS with its certificates (by SDS, from the proxy's own agent) and routes by its
// own route configuration; a passthrough server sends each SNI host its VirtualServices' tls
// routes name to a TCP proxy, unopened.
func (t *Translator) buildTLSPort(b *build, class string, p mergedPort) {
	name := GatewayListenerName(class, p.number)
	var chains []*listenerpb.FilterChain
	sniSeen := map[string]bool{}
	for _, ms := range p.servers {
		switch ms.kind {
		case serverHTTPS:
			vhosts := t.serverVirtualHosts(b, p.number, []mergedServer{ms})
			b.put(RouteType, ms.route, envoyRouteConfiguration(ms.route, vhosts))
			chain, err := httpsFilterChain(ms)
			if err != nil {
				b.invalid("Listener", name, err)
				continue
			}
			chains = append(chains, chain)
		case serverPassthrough:
			chains = append(chains, t.passthroughChains(b, p.number, ms, sniSeen)...)
		}
	}
	if len(chains) == 0 {
		return
	}
	l, err := tlsListener(name, p.number, chains)
	if err != nil {
		b.invalid("Listener", name, err)
		return
	}
	b.put(ListenerType, name, finishGatewayListener(l))
}

// sniHosts are a server's hosts as SNI names: without their namespace part; none when one is
// "*" (the chain then matches any SNI, and no SNI).
func sniHosts(s *networking.Server) []string {
	var out []string
	for _, h := range s.GetHosts() {
		_, host := serverHost(h)
		if host == "*" {
			return nil
		}
		out = append(out, host)
	}
	return out
}

// passthroughChains are a passthrough server's filter chains: one per tls route match of the
// VirtualServices bound to its Gateway, oldest first, for the SNI hosts the server admits. An
// SNI host a chain of the port already matches is left out with a fault: Envoy rejects two
// chains with one match.
func (t *Translator) passthroughChains(b *build, port uint32, ms mergedServer, seen map[string]bool) []*listenerpb.FilterChain {
	var out []*listenerpb.FilterChain
	for _, vs := range t.boundVirtualServices(ms.gw.Key) {
		for _, pr := range passthroughRoutes(ms.gw, []*networking.Server{ms.s}, vs) {
			if pr.port != 0 && pr.port != port {
				continue
			}
			var hosts []string
			for _, h := range pr.sni {
				if seen[h] {
					b.fs.add(kindVirtualService, vs.Key, "%s: SNI host %q on port %d of Gateway %s is already routed by an older route; left out", pr.field, h, port, ms.gw.Key)
					continue
				}
				seen[h] = true
				hosts = append(hosts, h)
			}
			if len(hosts) == 0 {
				continue
			}
			rc := newRouteContext(b, port, ms.gw.Key)
			if chain := rc.tcpProxyChain(vs, pr, hosts); chain != nil {
				out = append(out, chain)
			}
		}
	}
	return out
}

// passthroughRoute is one match of a VirtualService's tls route, with the SNI hosts of it
// that a server admits.
type passthroughRoute struct {
	field string
	route *networking.TLSRoute
	sni   []string
	port  uint32 // the match's port; 0 for any
}

// passthroughRoutes are a VirtualService's tls route matches that passthrough servers admit:
// each SNI host of a match that the VirtualService's namespace may bind to a server host
// pattern it matches, as istiod admits them.
func passthroughRoutes(gw *gateway, servers []*networking.Server, vs *virtualService) []passthroughRoute {
	var out []passthroughRoute
	for i, tr := range vs.spec.GetTls() {
		for j, m := range tr.GetMatch() {
			if gws, _ := bindings(m.GetGateways(), vs.Namespace); len(m.GetGateways()) > 0 && !slices.Contains(gws, gw.Key) {
				continue
			}
			pr := passthroughRoute{field: fmt.Sprintf("tls[%d].match[%d]", i, j), route: tr, port: m.GetPort()}
			for _, sni := range m.GetSniHosts() {
				if admitsSNI(gw, servers, vs, sni) && !slices.Contains(pr.sni, sni) {
					pr.sni = append(pr.sni, sni)
				}
			}
			if len(pr.sni) > 0 {
				out = append(out, pr)
			}
		}
	}
	return out
}

func admitsSNI(gw *gateway, servers []*networking.Server, vs *virtualService, sni string) bool {
	for _, s := range servers {
		if k, _ := classify(s); k != serverPassthrough {
			continue
		}
		for _, sh := range s.GetHosts() {
			ns, pattern := serverHost(sh)
			if namespaceAdmits(ns, gw.Namespace, vs.Namespace) && hostname.Matches(pattern, sni) {
				return true
			}
		}
	}
	return false
}

// GatewayClassInfo is one gateway class as /debug/gateways shows it.
type GatewayClassInfo struct {
	ID         string            `json:"id"`
	Labels     map[string]string `json:"labels"`
	Namespaces []string          `json:"namespaces,omitempty"`
	// Proxies are the gateway proxies of the class connected now (0 during the grace period
	// after the last one went).
	Proxies int `json:"proxies"`
	// Gateways are the Gateways merged for the class, oldest first.
	Gateways []string `json:"gateways"`
	// Listeners are its listeners' names.
	Listeners []string `json:"listeners"`
}

// GatewayClassInfo describes the classes built, by ID.
func (t *Translator) GatewayClassInfo() []GatewayClassInfo {
	out := make([]GatewayClassInfo, 0, len(t.classes))
	for _, id := range slices.Sorted(maps.Keys(t.classes)) {
		c := t.classes[id]
		info := GatewayClassInfo{ID: id, Labels: c.Labels, Namespaces: c.Namespaces, Gateways: []string{}, Listeners: []string{}}
		for _, gw := range t.classGateways(c) {
			info.Gateways = append(info.Gateways, gw.Key)
		}
		info.Listeners = append(info.Listeners, t.units.get(unitKey{unitGatewayClass, id}).outputsOf(ListenerType)...)
		out = append(out, info)
	}
	return out
}
