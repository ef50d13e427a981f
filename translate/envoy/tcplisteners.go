package envoy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	mongopb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/mongo_proxy/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	hashpolicypb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"github.com/mcpbridge/mcpbridge/translate"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Sidecar outbound listeners of non-HTTP ports (TCP, TLS, HTTPS, MONGO, MYSQL, REDIS), built
// as istiod builds them (listener.go buildSidecarOutboundListener, tls.go
// buildSidecarOutbound{TLS,TCP}FilterChainOpts, networkfilter.go buildOutboundNetworkFilters):
//
//   - a port of a host with an address (ServiceEntry addresses: its VIP) gets a listener of
//     its own, VIP_PORT on VIP:PORT; a CIDR address binds 0.0.0.0_PORT, its filter chains
//     matched by destination prefix; a host without an address binds 0.0.0.0_PORT too, its
//     TLS chains matched by SNI (the host name) and its TCP chain matching everything; a
//     NONE-resolution host without an address gets one listener per endpoint address, as
//     istiod gives headless services, ENDPOINT_PORT;
//   - TLS and HTTPS ports take the VirtualServices' tls routes (each match's sniHosts and
//     destinationSubnets), else the host itself; TCP, MONGO, MYSQL and REDIS ports take their
//     tcp routes (a match without destinationSubnets ends the list), else the host itself;
//   - each chain ends in a TCP proxy to the route's destination, or to its weighted
//     destinations (stat_prefix NAME.NAMESPACE of the VirtualService), with the
//     DestinationRule's idle timeout, maximum connection duration, source-IP hash and
//     tunnel; a MONGO port puts a mongo_proxy filter first (istiod's PILOT_ENABLE_MONGO_FILTER
//     is on by default; its MySQL and Redis filters are off by default, and so not built);
//   - the hosts whose chains share a listener are taken in istiod's order of services (oldest
//     ServiceEntry first, then by host), and a chain whose match a chain already on the
//     listener has is left out, as istiod's mergeTCPFilterChains leaves it, with a fault.
//
// A listener's chains are built with the host (each host unit keeps its contributions), and
// gathered by the unit that owns the listener: the port unit for 0.0.0.0_PORT, where they join
// the HTTP connection manager of the port's HTTP hosts, and a unitTCPListener for any other
// address. A host's change rebuilds only the listeners it contributes to.

// Names Envoy knows these filters by.
const (
	mongoProxyFilterName = "envoy.filters.network.mongo_proxy"
	httpInspectorName    = "envoy.filters.listener.http_inspector"
	// rawBufferTransport is the transport protocol of a connection the TLS inspector found
	// not to be TLS.
	rawBufferTransport = "raw_buffer"
	wildcardBind       = "0.0.0.0"
)

// plaintextHTTPALPNs are the application protocols the HTTP inspector detects that istiod's
// HTTP chain of a shared port matches (without PILOT_HTTP10, its default).
var plaintextHTTPALPNs = []string{"http/1.1", "h2c"}

// chainConnectTimeout is istiod's transport_socket_connect_timeout of every outbound filter
// chain (PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT, 15s by default).
const chainConnectTimeout = 15 * time.Second

// tcpListenerFilters are the listener filters of outbound TCP listeners, the same for every
// one: encoded once, only read. The TLS inspector reads at most 512 bytes, as istiod sets it.
var tcpListenerFilters = func() (c struct {
	tlsInspector, httpInspector *anypb.Any
	err                         error
}) {
	if c.tlsInspector, c.err = pack(&tlsinspectorpb.TlsInspector{InitialReadBufferSize: wrapperspb.UInt32(512)}); c.err == nil {
		c.httpInspector, c.err = pack(&httpinspectorpb.HttpInspector{})
	}
	return c
}()

// l4Protocol is what a non-HTTP port's listener carries.
type l4Protocol uint8

const (
	l4None    l4Protocol = iota // UDP, HBONE, or HTTP: no TCP listener
	l4TCP                       // TCP (and REDIS, whose filter istiod leaves off by default)
	l4TLS                       // TLS and HTTPS: chains matched by SNI
	l4Mongo                     // MONGO: mongo_proxy, then the TCP proxy
	l4MySQL                     // MYSQL: the TCP proxy (the mysql filter is off by default)
	l4Sniffed                   // unset: the TCP proxy beside an HTTP chain (protocol sniffing)
)

// l4Of reads a port's protocol as parseProtocol does: the protocol field alone.
func l4Of(declared string) l4Protocol {
	if parseProtocol(declared) == protoAuto {
		return l4Sniffed
	}
	switch strings.ToUpper(declared) {
	case "TCP", "REDIS":
		return l4TCP
	case "TLS", "HTTPS":
		return l4TLS
	case "MONGO":
		return l4Mongo
	case "MYSQL":
		return l4MySQL
	}
	return l4None
}

// wellKnown are the protocols that share a port with no other (istiod's
// isConflictWithWellKnownPort): their clients speak first, and an inspector would stall them.
func (p l4Protocol) wellKnown() bool { return p == l4Mongo || p == l4MySQL }

// tcpContribution is what one host brings to one outbound listener: its chains there.
type tcpContribution struct {
	listener string // the listener's name, BIND_PORT
	bind     string
	port     uint32
	proto    l4Protocol
	seKey    string    // the ServiceEntry, for faults
	host     string    // the host whose port it is
	created  time.Time // its creation time: istiod takes older services first
	chains   []tcpChain
	// sniffedRoute, for a port of no declared protocol on a listener bound to an address of
	// the host's own, names the route configuration of its HTTP chain: "HOST:PORT".
	sniffedRoute string
}

// tcpChain is one filter chain, built and validated, with its runtime match as a key that
// tells two chains Envoy could not tell apart (istiod's conflictsWith).
type tcpChain struct {
	key      string
	matchAll bool
	chain    *listenerpb.FilterChain
	what     string // for faults: "the tcp route of VirtualService ns/name", "host h"
}

// tcpBindState is a listener's set of contributing hosts.
type tcpBindState struct {
	bind  string
	port  uint32
	hosts keySet
}

// listenerName is istiod's name of a TCP listener: BIND_PORT.
func listenerName(bind string, port uint32) string {
	return bind + "_" + strconv.FormatUint(uint64(port), 10)
}

// tcpTarget is one address a host's port is listened for on, and the destination prefixes its
// chains match there (a CIDR address).
type tcpTarget struct {
	bind  string
	cidrs []string
	// address is the host's own address as istiod sees it: "0.0.0.0" without one, "" for a
	// CIDR; it decides whether chains without routes match the host name by SNI.
	address string
}

// tcpTargets are the addresses a host's non-HTTP port is listened for on, as istiod binds a
// sidecar's outbound listeners with traffic capture (no Sidecar bind, no capture mode NONE).
func (b *hostBuild) tcpTargets(p port) []tcpTarget {
	addr, ok := b.hostAddress()
	switch {
	case !ok:
		return nil
	case strings.Contains(addr, "/"):
		return []tcpTarget{{bind: wildcardBind, cidrs: []string{addr}}}
	case addr != wildcardBind:
		return []tcpTarget{{bind: addr, address: addr}}
	case b.se.resolution != networking.ServiceEntry_NONE:
		return []tcpTarget{{bind: wildcardBind, address: wildcardBind}}
	}
	// NONE without an address: a listener per endpoint address (istiod's headless services);
	// with none, the wildcard, unless a workload selector may select some later.
	var out []tcpTarget
	ws := b.t.workloads(b.se)
	seen := map[string]bool{}
	for _, ep := range portEndpoints(ws, p, false, &faults{}) {
		a, err := netip.ParseAddr(ep.address)
		if err != nil || seen[a.String()] {
			continue // a name (istiod skips it), or an address already listened on
		}
		seen[a.String()] = true
		out = append(out, tcpTarget{bind: a.String(), address: wildcardBind})
	}
	if len(out) == 0 && len(b.se.selector()) == 0 {
		return []tcpTarget{{bind: wildcardBind, address: wildcardBind}}
	}
	return out
}

// hostAddress is the host's address for its listeners: its ServiceEntry's first valid
// address (an IP, or a CIDR, whose /32 or /128 is an IP), else 0.0.0.0. istiod makes a service
// of each address, and a sidecar keeps one service per host name: the others are reported.
// false: every address is invalid (istiod then has no service of the host at all).
func (b *hostBuild) hostAddress() (string, bool) {
	if len(b.se.addresses()) == 0 {
		return wildcardBind, true
	}
	var chosen string
	for i, a := range b.se.addresses() {
		var addr string
		if ip, err := netip.ParseAddr(a); err == nil {
			addr = ip.String()
		} else if pfx, err := netip.ParsePrefix(a); err == nil {
			addr = pfx.String()
			if pfx.Bits() == pfx.Addr().BitLen() {
				addr = pfx.Addr().String()
			}
		} else {
			b.fs.add(kindServiceEntry, b.se.Key, "addresses[%d]: %q is neither an IP address nor a CIDR; it is ignored", i, a)
			continue
		}
		if chosen == "" {
			chosen = addr
			continue
		}
		b.fs.add(kindServiceEntry, b.se.Key, "addresses[%d]: host %s is listened for on its first address %s only, as istiod's sidecars keep one service per host name; %s gets no listener", i, b.host, chosen, a)
	}
	return chosen, chosen != ""
}

// buildTCPPort adds a non-HTTP port's filter chains to the listeners of its addresses.
func (b *hostBuild) buildTCPPort(p port, raw string, vss []*virtualService) {
	proto := l4Of(raw)
	if proto == l4None || proto == l4Sniffed {
		return
	}
	for _, tg := range b.tcpTargets(p) {
		var chains []tcpChain
		if proto == l4TLS {
			chains = b.tlsChains(p, proto, tg, vss)
		} else {
			chains = b.tcpChains(p, proto, tg, vss)
		}
		if len(chains) == 0 {
			continue
		}
		r := b.u.rareState()
		r.tcp = append(r.tcp, tcpContribution{
			listener: listenerName(tg.bind, p.number), bind: tg.bind, port: p.number, proto: proto,
			seKey: b.se.Key, created: b.se.Created, chains: chains, host: b.host,
		})
	}
}

// buildSniffedPort adds the TCP path of a port of no declared protocol, which istiod sniffs
// (buildSidecarOutboundListener, ListenerProtocolAuto): at each address the port is listened
// for on, as a TCP port's, the tcp routes' chains (else the host's own), beside an HTTP chain
// matched by the plaintext protocols the HTTP inspector detects. On 0.0.0.0_PORT that HTTP
// chain is the port's shared one (route configuration PORT, where buildRoutes put the host's
// virtual host). On an address of the host's own (its VIP; a headless host's endpoints) the
// listener is the host's, VIP_PORT, and so is the route configuration its HTTP chain names,
// "HOST:PORT", istiod's for a sniffed service: the host's sidecar virtual host alone, with the
// domain "*" (getVirtualHostsForSniffedServicePort), and the port's settings.
func (b *hostBuild) buildSniffedPort(p port, vss []*virtualService) {
	n := len(b.u.vhosts)
	if n == 0 || b.u.vhosts[n-1].port != p.number {
		return // its virtual host was invalid: reported, and no listener either
	}
	pv := &b.u.vhosts[n-1]
	route := domainName(b.host, p.number)
	targets := b.tcpTargets(p)
	pv.ownListener = !slices.ContainsFunc(targets, func(tg tcpTarget) bool { return tg.bind == wildcardBind })
	for _, tg := range targets {
		c := tcpContribution{
			listener: listenerName(tg.bind, p.number), bind: tg.bind, port: p.number, proto: l4Sniffed,
			seKey: b.se.Key, created: b.se.Created, host: b.host,
			chains: b.tcpChains(p, l4Sniffed, tg, vss),
		}
		if tg.bind != wildcardBind {
			c.sniffedRoute = route
		}
		r := b.u.rareState()
		r.tcp = append(r.tcp, c)
	}
	if !pv.ownListener || len(targets) == 0 {
		return
	}
	if sidecarRouteSettings.err != nil {
		b.invalid("RouteConfiguration", route, sidecarRouteSettings.err)
		return
	}
	head, err := deterministic.Marshal(&routepb.VirtualHost{Name: route, Domains: []string{"*"}})
	if err != nil {
		b.invalid("VirtualHost", route, err)
		return
	}
	vh, _, _ := b.u.vhost(b.host, p.number)
	b.putRouteConfiguration(route, []vhostParts{{head: head, tail: vh.tail, dflt: vh.dflt}}, sidecarRouteSettings.enc)
	for _, v := range pv.variants() {
		b.putRouteConfigurationIn(translate.ScopeCollection(v.namespace, RouteType), route,
			[]vhostParts{{head: head, tail: v.sidecar}}, sidecarRouteSettings.enc)
	}
}

// meshL4VirtualServices are the VirtualServices for the mesh whose hosts cover the host, with
// tcp or tls routes, oldest first: istiod takes the routes of every one of them
// (getConfigsForHost), not only the one that routes its HTTP.
func (t *Translator) meshL4VirtualServices(host string) []*virtualService {
	var out []*virtualService
	add := func(vs *virtualService) {
		if vs.mesh && (len(vs.spec.GetTcp()) > 0 || len(vs.spec.GetTls()) > 0) && !slices.Contains(out, vs) {
			out = append(out, vs)
		}
	}
	for _, key := range t.vsByHost[host] {
		add(t.vss[key])
	}
	for key := range t.vsWildcard {
		vs := t.vss[key]
		if slices.ContainsFunc(vs.hosts, func(h string) bool { return hostname.Matches(h, host) }) {
			add(vs)
		}
	}
	slices.SortFunc(out, byAge)
	return out
}

// staticMatch evaluates what istiod evaluates of an L4 match when it builds a proxy's config:
// its gateways (the mesh's), its port, and its source labels and namespace, which a
// configuration shared by every client cannot know: a match that names them is left out,
// never widened, with a fault.
func (b *hostBuild) staticMatch(vs *virtualService, field string, gateways []string, p uint32, matchPort uint32, sourceLabels map[string]string, sourceNamespace string) bool {
	if len(gateways) > 0 && !slices.Contains(gateways, meshGateway) {
		return false
	}
	if matchPort != 0 && matchPort != p {
		return false
	}
	if len(sourceLabels) > 0 || sourceNamespace != "" {
		b.fs.add(kindVirtualService, vs.Key, "%s: sourceLabels and sourceNamespace cannot be matched in a configuration every client shares; the match is left out", field)
		return false
	}
	return true
}

// tlsChains are a TLS or HTTPS port's chains at one address: one per tls route match that
// applies (runtime matches already made by an earlier one are skipped), else one for the
// host itself, matched by the host name when the listener is shared (no address of its own).
func (b *hostBuild) tlsChains(p port, proto l4Protocol, tg tcpTarget, vss []*virtualService) []tcpChain {
	var out []tcpChain
	handled := map[string]bool{}
	for _, vs := range vss {
		for i, tr := range vs.spec.GetTls() {
			if len(tr.GetRoute()) == 0 {
				continue
			}
			for j, m := range tr.GetMatch() {
				field := fmt.Sprintf("tls[%d].match[%d]", i, j)
				if !b.staticMatch(vs, field, m.GetGateways(), p.number, m.GetPort(), m.GetSourceLabels(), m.GetSourceNamespace()) {
					continue
				}
				cidrs := tg.cidrs
				if len(m.GetDestinationSubnets()) > 0 {
					cidrs = m.GetDestinationSubnets()
				}
				hash := strings.Join(m.GetSniHosts(), ",") + "|" + strings.Join(m.GetDestinationSubnets(), ",")
				if handled[hash] {
					continue
				}
				handled[hash] = true
				filters, ok := b.routeFilters(vs, fmt.Sprintf("tls[%d]", i), tr.GetRoute(), p, proto)
				if !ok {
					continue
				}
				if c, ok := b.chain(m.GetSniHosts(), cidrs, vs, true, filters, fmt.Sprintf("%s of VirtualService %s", field, vs.Key)); ok {
					out = append(out, c)
				}
			}
		}
	}
	if len(handled) > 0 {
		return out
	}
	var sni []string
	if len(tg.cidrs) > 0 || tg.address == "" || tg.address == wildcardBind && tg.bind == wildcardBind {
		sni = []string{b.host}
	}
	if c, ok := b.chain(sni, tg.cidrs, nil, false, b.ownFilters(p, proto), "host "+b.host); ok {
		out = append(out, c)
	}
	return out
}

// tcpChains are a TCP port's chains at one address: the tcp routes that apply, in order, up
// to the first that matches any destination (a route without match, or a match without
// destinationSubnets); the subnets of a route's other matches make one chain. Without a route
// that matches any destination, the host itself takes the rest.
func (b *hostBuild) tcpChains(p port, proto l4Protocol, tg tcpTarget, vss []*virtualService) []tcpChain {
	var out []tcpChain
	add := func(sni, cidrs []string, vs *virtualService, field string, routes []*networking.RouteDestination, meta bool) {
		filters, ok := b.routeFilters(vs, field, routes, p, proto)
		if !ok {
			return
		}
		if c, ok := b.chain(sni, cidrs, vs, meta, filters, fmt.Sprintf("%s of VirtualService %s", field, vs.Key)); ok {
			out = append(out, c)
		}
	}
	defaultAdded := false
routes:
	for _, vs := range vss {
		for i, tr := range vs.spec.GetTcp() {
			field := fmt.Sprintf("tcp[%d]", i)
			if len(tr.GetRoute()) == 0 {
				continue
			}
			if len(tr.GetMatch()) == 0 {
				add(nil, tg.cidrs, vs, field, tr.GetRoute(), true)
				defaultAdded = true
				break routes
			}
			var subnets []string
			for j, m := range tr.GetMatch() {
				if !b.staticMatch(vs, fmt.Sprintf("%s.match[%d]", field, j), m.GetGateways(), p.number, m.GetPort(), m.GetSourceLabels(), m.GetSourceNamespace()) {
					continue
				}
				if len(m.GetDestinationSubnets()) == 0 {
					add(nil, tg.cidrs, vs, field, tr.GetRoute(), true)
					defaultAdded = true
					break routes
				}
				subnets = append(subnets, m.GetDestinationSubnets()...)
			}
			if len(subnets) > 0 {
				add(nil, subnets, vs, field, tr.GetRoute(), false)
				if slices.Equal(slices.Sorted(slices.Values(subnets)), slices.Sorted(slices.Values(tg.cidrs))) {
					defaultAdded = true
				}
			}
		}
	}
	if !defaultAdded {
		if c, ok := b.chain(nil, tg.cidrs, nil, false, b.ownFilters(p, proto), "host "+b.host); ok {
			out = append(out, c)
		}
	}
	return out
}

// ownFilters are the filters of a chain to the host's own cluster of the port.
func (b *hostBuild) ownFilters(p port, proto l4Protocol) []*listenerpb.Filter {
	cluster := ClusterName(p.number, "", b.host)
	var rule *networking.DestinationRule
	if b.dr != nil {
		rule = b.dr.spec
	}
	proxy := tcpProxy(cluster, rule, "")
	proxy.ClusterSpecifier = &tcpproxypb.TcpProxy_Cluster{Cluster: cluster}
	filters, err := networkFilters(proxy, proto)
	if err != nil {
		b.invalid("Listener", "TCP proxy of "+cluster, err)
		return nil
	}
	return filters
}

// routeFilters are the filters of a chain to a route's destinations: one cluster (stat_prefix
// the cluster), or weighted clusters (stat_prefix NAME.NAMESPACE of the VirtualService) for
// several, of which those of weight 0 get nothing. A destination that cannot be resolved is
// left out with a fault; the others keep their weights. The DestinationRule of the first
// destination's host sets the proxy's timeouts and hash, as istiod takes it.
func (b *hostBuild) routeFilters(vs *virtualService, field string, routes []*networking.RouteDestination, p port, proto l4Protocol) ([]*listenerpb.Filter, bool) {
	rc := newRouteContext(b.build, p.number, "")
	first := hostname.Complete(routes[0].GetDestination().GetHost(), vs.Namespace, b.t.suffix)
	var rule *networking.DestinationRule
	if dr, _ := b.t.destinationRuleFor(first); dr != nil {
		rule = dr.spec
	}
	var proxy *tcpproxypb.TcpProxy
	if len(routes) == 1 {
		d, ok := rc.destination(vs, field+".route[0].destination", routes[0].GetDestination())
		if !ok {
			b.fs.add(kindVirtualService, vs.Key, "%s: no destination is left; the route is left out", field)
			return nil, false
		}
		proxy = tcpProxy(d.cluster, rule, routes[0].GetDestination().GetSubset())
		proxy.ClusterSpecifier = &tcpproxypb.TcpProxy_Cluster{Cluster: d.cluster}
	} else {
		wc := &tcpproxypb.TcpProxy_WeightedCluster{}
		for i, rd := range routes {
			if rd.GetWeight() <= 0 {
				continue
			}
			d, ok := rc.destination(vs, fmt.Sprintf("%s.route[%d].destination", field, i), rd.GetDestination())
			if !ok {
				continue
			}
			wc.Clusters = append(wc.Clusters, &tcpproxypb.TcpProxy_WeightedCluster_ClusterWeight{Name: d.cluster, Weight: uint32(rd.GetWeight())})
		}
		if len(wc.Clusters) == 0 {
			b.fs.add(kindVirtualService, vs.Key, "%s: no destination of a weight above 0 is left; the route is left out", field)
			return nil, false
		}
		_, name := splitKey(vs.Key)
		proxy = tcpProxy(name+"."+vs.Namespace, rule, "")
		proxy.ClusterSpecifier = &tcpproxypb.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	filters, err := networkFilters(proxy, proto)
	if err != nil {
		b.fs.add(kindVirtualService, vs.Key, "%s: the TCP proxy is invalid (%v); the route is left out", field, err)
		return nil, false
	}
	return filters, true
}

// tcpProxy is a TCP proxy as istiod sets it from the DestinationRule's top-level connection
// pool (idle timeout, else Envoy's default of 1h; maximum connection duration), a source-IP
// consistent hash (the subset's load balancer overrides the rule's), and its tunnel (the
// subset's for one). Its cluster is the caller's to set.
func tcpProxy(statPrefix string, rule *networking.DestinationRule, subset string) *tcpproxypb.TcpProxy {
	pool := rule.GetTrafficPolicy().GetConnectionPool().GetTcp()
	proxy := &tcpproxypb.TcpProxy{
		StatPrefix:                      statPrefix,
		IdleTimeout:                     pool.GetIdleTimeout(),
		MaxDownstreamConnectionDuration: pool.GetMaxConnectionDuration(),
	}
	useSourceIP := rule.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash().GetUseSourceIp()
	tunnel := rule.GetTrafficPolicy().GetTunnel()
	if subset != "" {
		tunnel = nil
	}
	for _, ss := range rule.GetSubsets() {
		if ss.GetName() != subset {
			continue
		}
		if lb := ss.GetTrafficPolicy().GetLoadBalancer(); lb != nil {
			useSourceIP = lb.GetConsistentHash().GetUseSourceIp()
		}
		if subset != "" {
			tunnel = ss.GetTrafficPolicy().GetTunnel()
		}
		break
	}
	if rule != nil && useSourceIP {
		proxy.HashPolicy = []*hashpolicypb.HashPolicy{{PolicySpecifier: &hashpolicypb.HashPolicy_SourceIp_{SourceIp: &hashpolicypb.HashPolicy_SourceIp{}}}}
	}
	if tunnel != nil {
		proxy.TunnelingConfig = &tcpproxypb.TcpProxy_TunnelingConfig{
			Hostname: netJoin(tunnel.GetTargetHost(), tunnel.GetTargetPort()),
			UsePost:  tunnel.GetProtocol() == "POST",
		}
	}
	return proxy
}

func netJoin(host string, port uint32) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// networkFilters are a chain's filters: MONGO's mongo_proxy first, then the TCP proxy.
func networkFilters(proxy *tcpproxypb.TcpProxy, proto l4Protocol) ([]*listenerpb.Filter, error) {
	typed, err := pack(proxy)
	if err != nil {
		return nil, err
	}
	tcp := &listenerpb.Filter{Name: tcpProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: typed}}
	if proto != l4Mongo {
		return []*listenerpb.Filter{tcp}, nil
	}
	mongo, err := pack(&mongopb.MongoProxy{StatPrefix: proxy.GetStatPrefix()})
	if err != nil {
		return nil, err
	}
	return []*listenerpb.Filter{{Name: mongoProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: mongo}}, tcp}, nil
}

// chain makes a filter chain of its runtime match (SNI names, destination prefixes), as
// istiod's toFilterChainMatch writes it: names and prefixes sorted, no names when one is "*",
// no prefix of 0.0.0.0. A chain from a VirtualService carries its config path in the "istio"
// metadata, as istiod's do.
func (b *hostBuild) chain(sni, cidrs []string, vs *virtualService, withMetadata bool, filters []*listenerpb.Filter, what string) (tcpChain, bool) {
	if filters == nil {
		return tcpChain{}, false
	}
	fc := &listenerpb.FilterChain{Filters: filters, TransportSocketConnectTimeout: durationpb.New(chainConnectTimeout)}
	if withMetadata {
		fc.Metadata = configMetadata("virtual-service", vs.Key)
	}
	match := &listenerpb.FilterChainMatch{}
	if len(sni) > 0 && !slices.Contains(sni, "*") {
		match.ServerNames = slices.Sorted(slices.Values(sni))
	}
	for _, c := range slices.Sorted(slices.Values(cidrs)) {
		pfx, err := addrPrefix(c)
		if err != nil {
			if vs != nil {
				b.fs.add(kindVirtualService, vs.Key, "%s: destination subnet %q is not an IP address or CIDR; the chain is left out", what, c)
			} else {
				b.fs.add(b.ownerKind, b.ownerKey, "%s: address %q is not an IP address or CIDR; the chain is left out", what, c)
			}
			return tcpChain{}, false
		}
		if pfx.Addr().IsUnspecified() && pfx.Addr().Is4() {
			continue
		}
		match.PrefixRanges = append(match.PrefixRanges, &corepb.CidrRange{AddressPrefix: pfx.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pfx.Bits()))})
	}
	matchAll := (len(sni) == 0 || slices.Contains(sni, "*")) && len(cidrs) == 0
	if !matchAll {
		fc.FilterChainMatch = match
	}
	if err := fc.ValidateAll(); err != nil {
		b.invalid("Listener", what, err)
		return tcpChain{}, false
	}
	return tcpChain{key: chainKey(sni, cidrs, "", nil), matchAll: matchAll, chain: fc, what: what}, true
}

// configMetadata is istiod's "istio" metadata naming the config a chain comes from.
func configMetadata(kebabKind, key string) *corepb.Metadata {
	ns, name := splitKey(key)
	path := "/apis/networking.istio.io/v1/namespaces/" + ns + "/" + kebabKind + "/" + name
	return &corepb.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue(path)}},
	}}
}

func addrPrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// chainKey is a chain's runtime match as istiod's conflictsWith compares them: transport and
// application protocols, the SNI names but "*", and the destination prefixes masked, but
// 0.0.0.0, each as a set.
func chainKey(sni, cidrs []string, transport string, alpn []string) string {
	var names, prefixes []string
	for _, s := range sni {
		if s != "*" {
			names = append(names, s)
		}
	}
	for _, c := range cidrs {
		pfx, err := addrPrefix(c)
		if err != nil || pfx.Addr().String() == wildcardBind {
			continue
		}
		prefixes = append(prefixes, pfx.Masked().String())
	}
	slices.Sort(names)
	slices.Sort(prefixes)
	return transport + "|" + strings.Join(alpn, ",") + "|" + strings.Join(slices.Compact(names), ",") + "|" + strings.Join(slices.Compact(prefixes), ",")
}

// updateTCPBinds keeps the listeners' sets of contributing hosts and marks the listeners a
// host's rebuild may change: every one it had or has.
func (t *Translator) updateTCPBinds(host string, old, u *unitState) {
	if old != nil {
		for _, c := range old.tcp() {
			if bs := t.tcpBinds[c.listener]; bs != nil {
				delete(bs.hosts, host)
				if len(bs.hosts) == 0 {
					delete(t.tcpBinds, c.listener)
				}
			}
			t.markTCPListener(c.bind, c.port, c.listener)
		}
	}
	for _, c := range u.tcp() {
		bs := t.tcpBinds[c.listener]
		if bs == nil {
			bs = &tcpBindState{bind: c.bind, port: c.port, hosts: keySet{}}
			t.tcpBinds[c.listener] = bs
		}
		bs.hosts[host] = struct{}{}
		t.markTCPListener(c.bind, c.port, c.listener)
	}
}

func (t *Translator) markTCPListener(bind string, port uint32, name string) {
	if bind == wildcardBind {
		t.markPort(port)
		return
	}
	t.mark(unitKey{unitTCPListener, name})
}

// gatheredTCP are the contributions to a listener, in istiod's order of services: oldest
// ServiceEntry first, then by host.
func (t *Translator) gatheredTCP(name string) []*tcpContribution {
	bs := t.tcpBinds[name]
	if bs == nil {
		return nil
	}
	type keyed struct {
		host string
		c    *tcpContribution
	}
	var all []keyed
	for h := range bs.hosts {
		u := t.units.get(unitKey{unitHost, h})
		if u == nil {
			continue
		}
		tcp := u.tcp()
		for i := range tcp {
			if tcp[i].listener == name {
				all = append(all, keyed{h, &tcp[i]})
			}
		}
	}
	slices.SortFunc(all, func(a, b keyed) int {
		return cmp.Or(a.c.created.Compare(b.c.created), cmp.Compare(a.host, b.host))
	})
	out := make([]*tcpContribution, len(all))
	for i, k := range all {
		out[i] = k.c
	}
	return out
}

// buildTCPListener builds an outbound listener of an address of its own (VIP_PORT).
func (t *Translator) buildTCPListener(name string) *unitState {
	b := newBuild(t, "Mesh", "listener "+name)
	bs := t.tcpBinds[name]
	if bs == nil {
		return b.done()
	}
	tcp := t.gatheredTCP(name)
	t.putTCPListener(b, name, bs.bind, bs.port, nil, tcp)
	t.scopedTCPListeners(b, name, bs, tcp)
	return b.done()
}

// buildSharedPort builds 0.0.0.0_PORT when non-HTTP ports share it: the HTTP hosts' chain (if
// any, http; with their route configuration PORT of vhosts, while it is built: portroutes.go)
// matched by the plaintext HTTP protocols the HTTP inspector detects, as istiod matches it on
// a port it shares, and the TCP chains.
func (t *Translator) buildSharedPort(b *build, p uint32, http bool, vhosts []vhostParts, tcp []*tcpContribution) {
	var httpChain *listenerpb.FilterChain
	if http {
		if sidecarRouteSettings.err != nil {
			b.invalid("RouteConfiguration", OutboundRouteName(p), sidecarRouteSettings.err)
			return
		}
		if t.portRouteBuilt(p) {
			b.putRouteConfiguration(OutboundRouteName(p), vhosts, sidecarRouteSettings.enc)
		}
		l, err := outboundListener(p)
		if err == nil && len(l.GetFilterChains()) != 1 {
			err = fmt.Errorf("the HTTP listener has %d filter chains, not 1", len(l.GetFilterChains()))
		}
		if err != nil {
			b.invalid("Listener", OutboundListenerName(p), err)
			return
		}
		httpChain = sniffing(l.GetFilterChains()[0])
	}
	t.putTCPListener(b, OutboundListenerName(p), wildcardBind, p, httpChain, tcp)
}

// sniffingHTTPChain is the HTTP chain of a sniffed port's listener of its own (VIP_PORT): a
// sidecar's connection manager with the host's route configuration "HOST:PORT".
func sniffingHTTPChain(statPrefix, route string, port uint32) (*listenerpb.FilterChain, error) {
	l, err := httpListener("", statPrefix, route, port, corepb.TrafficDirection_OUTBOUND, hcmSidecar)
	if err != nil {
		return nil, err
	}
	return sniffing(l.GetFilterChains()[0]), nil
}

// sniffing matches an HTTP chain by the plaintext HTTP protocols the HTTP inspector detects,
// as istiod matches it beside TCP chains, with istiod's connect timeout.
func sniffing(fc *listenerpb.FilterChain) *listenerpb.FilterChain {
	fc.FilterChainMatch = &listenerpb.FilterChainMatch{ApplicationProtocols: plaintextHTTPALPNs, TransportProtocol: rawBufferTransport}
	fc.TransportSocketConnectTimeout = durationpb.New(chainConnectTimeout)
	return fc
}

// putTCPListener merges the chains of a listener's contributions, in order, as istiod's
// mergeTCPFilterChains does: a chain whose match an earlier one has is left out, and so is a
// host whose protocol may not share the port (MONGO or MYSQL beside another), with faults.
// The chain that matches everything is the default chain when there are others.
func (t *Translator) putTCPListener(b *build, name, bind string, port uint32, httpChain *listenerpb.FilterChain, tcp []*tcpContribution) {
	if tcpListenerFilters.err != nil {
		b.invalid("Listener", name, tcpListenerFilters.err)
		return
	}
	l := &listenerpb.Listener{
		Name:                             name,
		Address:                          socketAddress(bind, port),
		TrafficDirection:                 corepb.TrafficDirection_OUTBOUND,
		ContinueOnListenerFiltersTimeout: true,
		ListenerFiltersTimeout:           durationpb.New(0),
	}
	// No outbound listener binds: each takes the connections virtualOutbound (use_original_dst,
	// with traffic capture) hands it by original destination, as istiod's (sidecar.go).
	l.BindToPort = wrapperspb.Bool(false)
	seen := map[string]string{}
	// current is the listener's protocol: its HTTP hosts' (l4None), else its first host's.
	var current l4Protocol
	needTLS, needHTTP := false, false
	if httpChain != nil {
		l.FilterChains = append(l.FilterChains, httpChain)
		seen[chainKey(nil, nil, rawBufferTransport, plaintextHTTPALPNs)] = "the HTTP hosts of the port"
		needHTTP = true
	} else if len(tcp) > 0 {
		current = tcp[0].proto
	}
	sniffedBy := ""
	for _, c := range tcp {
		if c.proto != current && (c.proto.wellKnown() || current.wellKnown()) {
			b.fs.add(kindServiceEntry, c.seKey, "port %d: listener %s already serves %s, and a MONGO or MYSQL port shares a listener with no other protocol (its clients speak first); this %s port gets no chain there",
				port, name, protoName(current), protoName(c.proto))
			continue
		}
		if c.sniffedRoute != "" && sniffedBy != "" {
			// istiod keeps the first sniffed service of a listener (a second one exits early).
			b.fs.add(kindServiceEntry, c.seKey, "port %d: listener %s already sniffs HTTP for %s; host %s gets no chain there", port, name, sniffedBy, c.host)
			continue
		}
		for _, ch := range c.chains {
			if other, dup := seen[ch.key]; dup {
				b.fs.add(kindServiceEntry, c.seKey, "port %d: the filter chain of %s on listener %s matches what %s already matches; it is left out", port, ch.what, name, other)
				continue
			}
			seen[ch.key] = ch.what
			if ch.matchAll {
				l.DefaultFilterChain = ch.chain
			} else {
				l.FilterChains = append(l.FilterChains, ch.chain)
			}
			if len(ch.chain.GetFilterChainMatch().GetServerNames()) > 0 {
				needTLS = true
			}
		}
		if c.sniffedRoute != "" {
			// After its TCP chains, as istiod appends the HTTP options to the TCP ones.
			hc, err := sniffingHTTPChain("outbound_"+name, c.sniffedRoute, port)
			if err != nil {
				b.invalid("Listener", name, err)
				return
			}
			sniffedBy = "host " + c.host
			l.FilterChains = append(l.FilterChains, hc)
			needHTTP = true
		}
	}
	if len(l.FilterChains) == 0 && l.DefaultFilterChain == nil {
		return
	}
	if l.DefaultFilterChain != nil && len(l.FilterChains) == 0 {
		// One chain that matches everything: a chain of the listener, no default.
		l.FilterChains, l.DefaultFilterChain = []*listenerpb.FilterChain{l.DefaultFilterChain}, nil
	} else if l.DefaultFilterChain == nil {
		// Nothing matches everything: istiod's PassthroughFilterChain takes the rest, to the
		// egress cluster of the outbound traffic policy.
		pt, err := t.passthroughChain()
		if err != nil {
			b.invalid("Listener", name, err)
			return
		}
		l.DefaultFilterChain = pt
	}
	if needTLS {
		l.ListenerFilters = append(l.ListenerFilters, &listenerpb.ListenerFilter{
			Name: tlsInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: tcpListenerFilters.tlsInspector},
		})
	}
	if needHTTP {
		l.ListenerFilters = append(l.ListenerFilters, &listenerpb.ListenerFilter{
			Name: httpInspectorName, ConfigType: &listenerpb.ListenerFilter_TypedConfig{TypedConfig: tcpListenerFilters.httpInspector},
		})
	}
	b.put(ListenerType, name, l)
}

func protoName(p l4Protocol) string {
	switch p {
	case l4None:
		return "HTTP"
	case l4TLS:
		return "TLS"
	case l4Mongo:
		return "MONGO"
	case l4MySQL:
		return "MYSQL"
	case l4Sniffed:
		return "sniffed (no protocol)"
	}
	return "TCP"
}

// rawProtocol is a port's protocol as written (the first port of the number: servicePorts
// keeps that one).
func rawProtocol(se *serviceEntry, number uint32) string {
	for _, p := range se.ports {
		if p.number == number {
			return p.protocol
		}
	}
	return ""
}

// listensOnEndpoints reports whether a ServiceEntry's listeners depend on its endpoints: a
// NONE-resolution host without an address is listened for on each endpoint address of its
// TCP and TLS ports.
func listensOnEndpoints(se *serviceEntry) bool {
	if se.resolution != networking.ServiceEntry_NONE || len(se.addresses()) > 0 {
		return false
	}
	return slices.ContainsFunc(se.ports, func(p servicePort) bool { return l4Of(p.protocol) != l4None })
}
