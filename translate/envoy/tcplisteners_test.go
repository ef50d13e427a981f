package envoy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	mongopb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/mongo_proxy/v3"
	tcpproxypb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// These tests hold the sidecar outbound listeners of non-HTTP ports to what istiod builds for
// a sidecar with traffic capture (listener.go, tls.go, networkfilter.go), field by field.

// tcpServiceYAML is a ServiceEntry of namespace db created at minute created, with its ports
// (a YAML flow list), addresses, resolution and endpoints.
func tcpServiceYAML(name string, created int, host, ports, addresses, resolution, endpoints string) string {
	text := fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: db, creationTimestamp: "2026-01-01T00:%02d:00Z"}
spec:
  hosts: [%s]
  ports: %s
  resolution: %s
`, name, created, host, ports, resolution)
	if addresses != "" {
		text += "  addresses: [" + addresses + "]\n"
	}
	if endpoints != "" {
		text += "  endpoints: " + endpoints + "\n"
	}
	return text
}

// buildMesh translates YAML for the mesh and returns each output checked by Envoy's
// validation (inside its Anys too).
func buildMesh(t *testing.T, yaml string) classOutputs { return buildClasses(t, yaml) }

// tcpProxyOf returns a chain's TCP proxy, its last filter, and the names of its filters.
func tcpProxyOf(t *testing.T, fc *listenerpb.FilterChain) (*tcpproxypb.TcpProxy, []string) {
	t.Helper()
	var names []string
	for _, f := range fc.GetFilters() {
		names = append(names, f.GetName())
	}
	if len(names) == 0 || names[len(names)-1] != tcpProxyFilterName {
		t.Fatalf("chain filters %v, want a TCP proxy last", names)
	}
	p := &tcpproxypb.TcpProxy{}
	if err := fc.GetFilters()[len(names)-1].GetTypedConfig().UnmarshalTo(p); err != nil {
		t.Fatal(err)
	}
	return p, names
}

func listenerNames(o classOutputs) []string {
	var out []string
	for n := range o.listeners {
		if !strings.Contains(n, ":") && !isPlumbing(n) { // API listeners are HOST:PORT; sidecar_test.go has the plumbing
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// assertOutboundTCPListener checks the fields istiod sets on every outbound listener it builds
// from its entries (buildListenerFromEntry) and on each of its chains.
func assertOutboundTCPListener(t *testing.T, l *listenerpb.Listener, bind string, port uint32) {
	t.Helper()
	if l == nil {
		t.Fatalf("no listener %s", listenerName(bind, port))
	}
	sa := l.GetAddress().GetSocketAddress()
	if l.GetName() != listenerName(bind, port) || sa.GetAddress() != bind || sa.GetPortValue() != port {
		t.Errorf("listener %q on %s:%d, want %s on %s:%d", l.GetName(), sa.GetAddress(), sa.GetPortValue(), listenerName(bind, port), bind, port)
	}
	if l.GetTrafficDirection() != corepb.TrafficDirection_OUTBOUND || !l.GetContinueOnListenerFiltersTimeout() {
		t.Errorf("traffic direction %v, continue_on_listener_filters_timeout %v", l.GetTrafficDirection(), l.GetContinueOnListenerFiltersTimeout())
	}
	if d := l.GetListenerFiltersTimeout(); d == nil || d.AsDuration() != 0 {
		t.Errorf("listener_filters_timeout %v, want 0s", d)
	}
	if l.GetBindToPort() == nil || l.GetBindToPort().GetValue() {
		t.Errorf("binds to its port: %v, want false (virtualOutbound hands it its connections)", l.GetBindToPort())
	}
	for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
		if fc == nil || fc.GetName() == passthroughFilterChainName {
			continue // istiod's PassthroughFilterChain has no timeout (sidecar_test.go)
		}
		if d := fc.GetTransportSocketConnectTimeout(); d.AsDuration() != 15*time.Second {
			t.Errorf("chain transport_socket_connect_timeout %v, want 15s", d)
		}
	}
}

// A TCP port of a host with an address gets a listener of its own, VIP_PORT, not bound (the
// address is not the proxy's), with one chain that matches everything: a TCP proxy to the
// host's cluster, named by it.
func TestTCPPortOfAHostWithAnAddressGetsAListenerOfItsOwn(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("pg", 1, "pg.db.example.com", "[{number: 5432, name: tcp-pg, protocol: TCP}]", "10.9.0.1", "STATIC", "[{address: 10.0.0.1}]"))
	if n := listenerNames(got); !slices.Equal(n, []string{"10.9.0.1_5432"}) {
		t.Fatalf("listeners %v, want only 10.9.0.1_5432", n)
	}
	l := got.listeners["10.9.0.1_5432"]
	assertOutboundTCPListener(t, l, "10.9.0.1", 5432)
	if len(l.GetFilterChains()) != 1 || l.GetDefaultFilterChain() != nil || len(l.GetListenerFilters()) != 0 {
		t.Fatalf("chains %d, default %v, listener filters %v: want one chain alone", len(l.GetFilterChains()), l.GetDefaultFilterChain(), l.GetListenerFilters())
	}
	fc := l.GetFilterChains()[0]
	if fc.GetFilterChainMatch() != nil || fc.GetMetadata() != nil {
		t.Errorf("chain match %v, metadata %v: want none", fc.GetFilterChainMatch(), fc.GetMetadata())
	}
	p, names := tcpProxyOf(t, fc)
	cluster := ClusterName(5432, "", "pg.db.example.com")
	if len(names) != 1 || p.GetCluster() != cluster || p.GetStatPrefix() != cluster {
		t.Errorf("filters %v, TCP proxy to %q with stat_prefix %q, want %q for both", names, p.GetCluster(), p.GetStatPrefix(), cluster)
	}
	if p.GetIdleTimeout() != nil || p.GetMaxConnectAttempts() != nil || p.GetHashPolicy() != nil || p.GetTunnelingConfig() != nil {
		t.Errorf("TCP proxy %v sets what istiod leaves to Envoy's defaults (idle timeout 1h)", p)
	}
	if len(got.faults) != 0 {
		t.Errorf("faults: %v", got.faults)
	}
}

// A TLS port of hosts without an address is listened for on 0.0.0.0_PORT, each host's chain
// matched by its name as SNI, which the TLS inspector (512 bytes) reads; other names go to the
// PassthroughFilterChain.
func TestTLSPortsWithoutAnAddressShareTheWildcardListenerBySNI(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("a", 1, "a.example.com", "[{number: 443, name: tls, protocol: TLS}]", "", "DNS", "")+
		tcpServiceYAML("b", 2, "b.example.com", "[{number: 443, name: https, protocol: HTTPS}]", "", "DNS", ""))
	l := got.listeners["0.0.0.0_443"]
	assertOutboundTCPListener(t, l, wildcardBind, 443)
	var sni []string
	for _, fc := range l.GetFilterChains() {
		sni = append(sni, strings.Join(fc.GetFilterChainMatch().GetServerNames(), ","))
		p, _ := tcpProxyOf(t, fc)
		if want := ClusterName(443, "", fc.GetFilterChainMatch().GetServerNames()[0]); p.GetCluster() != want {
			t.Errorf("chain for %v proxies to %q, want %q", fc.GetFilterChainMatch().GetServerNames(), p.GetCluster(), want)
		}
	}
	if !slices.Equal(sni, []string{"a.example.com", "b.example.com"}) || l.GetDefaultFilterChain().GetName() != passthroughFilterChainName {
		t.Errorf("chains by SNI %v (default %v), want a.example.com then b.example.com, the older first, and the PassthroughFilterChain default", sni, l.GetDefaultFilterChain())
	}
	if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != tlsInspectorName {
		t.Fatalf("listener filters %v, want the TLS inspector", lf)
	}
	ti := &tlsinspectorpb.TlsInspector{}
	if err := l.GetListenerFilters()[0].GetTypedConfig().UnmarshalTo(ti); err != nil || ti.GetInitialReadBufferSize().GetValue() != 512 {
		t.Errorf("TLS inspector %v (%v), want initial_read_buffer_size 512", ti, err)
	}
}

// Two TCP hosts without an address on one port both match every connection: the older keeps
// the chain, the other is left out with a fault of its ServiceEntry.
func TestTCPPortsWithoutAnAddressConflictAndTheOlderWins(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("newer", 2, "newer.example.com", "[{number: 9000, name: tcp, protocol: TCP}]", "", "DNS", "")+
		tcpServiceYAML("older", 1, "older.example.com", "[{number: 9000, name: tcp, protocol: TCP}]", "", "DNS", ""))
	l := got.listeners["0.0.0.0_9000"]
	assertOutboundTCPListener(t, l, wildcardBind, 9000)
	if len(l.GetFilterChains()) != 1 {
		t.Fatalf("%d chains, want 1", len(l.GetFilterChains()))
	}
	if p, _ := tcpProxyOf(t, l.GetFilterChains()[0]); p.GetCluster() != ClusterName(9000, "", "older.example.com") {
		t.Errorf("the chain proxies to %q, want the older host's cluster", p.GetCluster())
	}
	msgs := faultMessages(got.faults, kindServiceEntry, "db/newer")
	if len(msgs) != 1 || !strings.Contains(msgs[0], "host newer.example.com on listener 0.0.0.0_9000 matches what host older.example.com already matches") {
		t.Errorf("faults of db/newer: %q", msgs)
	}
}

// A CIDR address binds the wildcard and matches the prefix; a /32 is an address of its own.
func TestCIDRAddressMatchesTheDestinationPrefix(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("net", 1, "net.example.com", "[{number: 6379, name: redis, protocol: REDIS}]", "10.20.0.0/16", "STATIC", "[{address: 10.20.0.5}]")+
		tcpServiceYAML("one", 1, "one.example.com", "[{number: 6379, name: redis, protocol: REDIS}]", "10.30.0.7/32", "STATIC", "[{address: 10.30.0.7}]"))
	if n := listenerNames(got); !slices.Equal(n, []string{"0.0.0.0_6379", "10.30.0.7_6379"}) {
		t.Fatalf("listeners %v", n)
	}
	l := got.listeners["0.0.0.0_6379"]
	assertOutboundTCPListener(t, l, wildcardBind, 6379)
	pr := l.GetFilterChains()[0].GetFilterChainMatch().GetPrefixRanges()
	if len(l.GetFilterChains()) != 1 || len(pr) != 1 || pr[0].GetAddressPrefix() != "10.20.0.0" || pr[0].GetPrefixLen().GetValue() != 16 {
		t.Errorf("chain matches %v, want 10.20.0.0/16", pr)
	}
	if p, names := tcpProxyOf(t, l.GetFilterChains()[0]); len(names) != 1 || p.GetCluster() != ClusterName(6379, "", "net.example.com") {
		t.Errorf("filters %v to %q: REDIS is a plain TCP proxy (istiod's redis filter is off by default)", names, p.GetCluster())
	}
	assertOutboundTCPListener(t, got.listeners["10.30.0.7_6379"], "10.30.0.7", 6379)
}

const splitRouteYAML = `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: split, namespace: db}
spec:
  hosts: [pg.db.example.com]
  tcp:
  - match: [{destinationSubnets: [10.9.0.0/24], port: 5432}, {sourceLabels: {app: batch}}]
    route: [{destination: {host: pg-replica.db.example.com}}]
  - match: [{port: 5432}]
    route:
    - {destination: {host: pg.db.example.com, subset: v1}, weight: 80}
    - {destination: {host: pg.db.example.com, subset: v2}, weight: 20}
    - {destination: {host: pg.db.example.com, subset: v3}, weight: 0}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pg, namespace: db}
spec:
  host: pg.db.example.com
  trafficPolicy:
    connectionPool: {tcp: {idleTimeout: 30m, maxConnectionDuration: 2h}}
    loadBalancer: {consistentHash: {useSourceIp: true}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
`

// A VirtualService's tcp routes: a match on destination subnets is a chain of those prefixes;
// the first route that matches any destination ends the list, its weights a weighted cluster
// (weight 0 left out) named NAME.NAMESPACE; sourceLabels cannot be matched and are left out
// with a fault; the DestinationRule of the first destination sets the proxy's idle timeout,
// connection duration and source-IP hash.
func TestTCPRoutesBecomeChainsWithWeightedClusters(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("pg", 1, "pg.db.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "10.9.0.1", "STATIC", "[{address: 10.0.0.1, labels: {version: v1}}]")+
		tcpServiceYAML("pg-replica", 1, "pg-replica.db.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "10.9.0.2", "STATIC", "[{address: 10.0.0.2}]")+splitRouteYAML)
	l := got.listeners["10.9.0.1_5432"]
	assertOutboundTCPListener(t, l, "10.9.0.1", 5432)
	if len(l.GetFilterChains()) != 1 || l.GetDefaultFilterChain() == nil {
		t.Fatalf("%d chains and default %v, want the subnet chain and the split as default", len(l.GetFilterChains()), l.GetDefaultFilterChain())
	}
	subnet := l.GetFilterChains()[0]
	if pr := subnet.GetFilterChainMatch().GetPrefixRanges(); len(pr) != 1 || pr[0].GetAddressPrefix() != "10.9.0.0" || pr[0].GetPrefixLen().GetValue() != 24 {
		t.Errorf("subnet chain matches %v", pr)
	}
	if subnet.GetMetadata() != nil {
		t.Error("istiod gives the subnets' chain no config metadata")
	}
	if p, _ := tcpProxyOf(t, subnet); p.GetCluster() != ClusterName(5432, "", "pg-replica.db.example.com") || p.GetIdleTimeout() != nil {
		t.Errorf("subnet chain proxies to %q (idle %v), want the replica's cluster and its rule's (none)", p.GetCluster(), p.GetIdleTimeout())
	}
	def := l.GetDefaultFilterChain()
	if def.GetFilterChainMatch() != nil {
		t.Errorf("default chain matches %v", def.GetFilterChainMatch())
	}
	if cfg := def.GetMetadata().GetFilterMetadata()["istio"].GetFields()["config"].GetStringValue(); cfg != "/apis/networking.istio.io/v1/namespaces/db/virtual-service/split" {
		t.Errorf("default chain's config metadata %q", cfg)
	}
	p, _ := tcpProxyOf(t, def)
	var split []string
	for _, c := range p.GetWeightedClusters().GetClusters() {
		split = append(split, fmt.Sprintf("%s=%d", c.GetName(), c.GetWeight()))
	}
	if want := []string{ClusterName(5432, "v1", "pg.db.example.com") + "=80", ClusterName(5432, "v2", "pg.db.example.com") + "=20"}; !slices.Equal(split, want) {
		t.Errorf("weighted clusters %v, want %v", split, want)
	}
	if p.GetStatPrefix() != "split.db" {
		t.Errorf("stat_prefix %q, want split.db", p.GetStatPrefix())
	}
	if p.GetIdleTimeout().AsDuration() != 30*time.Minute || p.GetMaxDownstreamConnectionDuration().AsDuration() != 2*time.Hour {
		t.Errorf("idle timeout %v, connection duration %v", p.GetIdleTimeout(), p.GetMaxDownstreamConnectionDuration())
	}
	if hp := p.GetHashPolicy(); len(hp) != 1 || hp[0].GetSourceIp() == nil {
		t.Errorf("hash policy %v, want source IP", hp)
	}
	if msgs := faultMessages(got.faults, kindVirtualService, "db/split"); len(msgs) != 1 || !strings.Contains(msgs[0], "tcp[0].match[1]: sourceLabels") {
		t.Errorf("faults of db/split: %q", msgs)
	}
}

// tls routes: each match's SNI hosts are a chain (names sorted), to its destination; the host
// itself gets no chain of its own then.
func TestTLSRoutesMatchTheirSNIHosts(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("api", 1, `"*.api.example.com"`, "[{number: 443, name: tls, protocol: TLS}]", "", "NONE", "")+
		tcpServiceYAML("eu", 1, "eu.api.example.com", "[{number: 443, name: tls, protocol: TLS}]", "", "DNS", "")+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: db}
spec:
  hosts: ["*.api.example.com"]
  tls:
  - match: [{sniHosts: [z.api.example.com, b.api.example.com]}]
    route: [{destination: {host: eu.api.example.com}}]
`)
	l := got.listeners["0.0.0.0_443"]
	assertOutboundTCPListener(t, l, wildcardBind, 443)
	var sni []string
	for _, fc := range l.GetFilterChains() {
		sni = append(sni, strings.Join(fc.GetFilterChainMatch().GetServerNames(), ","))
		if p, _ := tcpProxyOf(t, fc); p.GetCluster() != ClusterName(443, "", "eu.api.example.com") {
			t.Errorf("chain %v proxies to %q", fc.GetFilterChainMatch().GetServerNames(), p.GetCluster())
		}
	}
	// Both hosts take the VirtualService ("*.api.example.com" covers eu.api.example.com): the
	// older host's chain stays, the same match of the other is a conflict.
	if !slices.Equal(sni, []string{"b.api.example.com,z.api.example.com"}) {
		t.Errorf("chains by SNI %v", sni)
	}
	if msgs := faultMessages(got.faults, kindServiceEntry, "db/eu"); len(msgs) != 1 || !strings.Contains(msgs[0], "tls[0].match[0] of VirtualService db/api") {
		t.Errorf("faults of db/eu: %q", msgs)
	}
}

// MONGO puts Envoy's mongo_proxy before the TCP proxy (istiod's PILOT_ENABLE_MONGO_FILTER is
// on by default), and shares a listener with no other protocol.
func TestMongoPortGetsTheMongoProxyAndAPortOfItsOwn(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("mongo", 1, "mongo.example.com", "[{number: 27017, name: mongo, protocol: MONGO}]", "", "DNS", "")+
		tcpServiceYAML("other", 2, "other.example.com", "[{number: 27017, name: tls, protocol: TLS}]", "", "DNS", ""))
	l := got.listeners["0.0.0.0_27017"]
	assertOutboundTCPListener(t, l, wildcardBind, 27017)
	if len(l.GetFilterChains()) != 1 {
		t.Fatalf("%d chains, want the MONGO host's alone", len(l.GetFilterChains()))
	}
	p, names := tcpProxyOf(t, l.GetFilterChains()[0])
	if !slices.Equal(names, []string{mongoProxyFilterName, tcpProxyFilterName}) {
		t.Fatalf("filters %v", names)
	}
	m := &mongopb.MongoProxy{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(m); err != nil || m.GetStatPrefix() != p.GetStatPrefix() || p.GetStatPrefix() != ClusterName(27017, "", "mongo.example.com") {
		t.Errorf("mongo_proxy stat_prefix %q (%v), TCP proxy's %q", m.GetStatPrefix(), err, p.GetStatPrefix())
	}
	if msgs := faultMessages(got.faults, kindServiceEntry, "db/other"); len(msgs) != 1 || !strings.Contains(msgs[0], "already serves MONGO") {
		t.Errorf("faults of db/other: %q", msgs)
	}
}

// A port shared by HTTP and TCP hosts without addresses: one listener, the HTTP hosts' chain
// matched by the plaintext HTTP protocols the HTTP inspector detects, the TCP host's chain the
// default, as istiod merges them.
func TestHTTPAndTCPHostsShareAPortThroughTheHTTPInspector(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("web", 1, "web.example.com", "[{number: 8000, name: http, protocol: HTTP}]", "", "DNS", "")+
		tcpServiceYAML("raw", 2, "raw.example.com", "[{number: 8000, name: tcp, protocol: TCP}]", "", "DNS", ""))
	l := got.listeners["0.0.0.0_8000"]
	assertOutboundTCPListener(t, l, wildcardBind, 8000)
	if len(l.GetFilterChains()) != 1 || l.GetDefaultFilterChain() == nil {
		t.Fatalf("%d chains, default %v", len(l.GetFilterChains()), l.GetDefaultFilterChain())
	}
	httpChain := l.GetFilterChains()[0]
	m := httpChain.GetFilterChainMatch()
	if !slices.Equal(m.GetApplicationProtocols(), []string{"http/1.1", "h2c"}) || m.GetTransportProtocol() != "raw_buffer" {
		t.Errorf("HTTP chain matches %v", m)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if f := httpChain.GetFilters(); len(f) != 1 || f[0].GetTypedConfig().UnmarshalTo(hcm) != nil || hcm.GetRds().GetRouteConfigName() != "8000" {
		t.Errorf("HTTP chain %v, want the connection manager of route configuration 8000", f)
	}
	if p, _ := tcpProxyOf(t, l.GetDefaultFilterChain()); p.GetCluster() != ClusterName(8000, "", "raw.example.com") {
		t.Errorf("default chain proxies to %q", p.GetCluster())
	}
	if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != httpInspectorName {
		t.Errorf("listener filters %v, want the HTTP inspector", lf)
	}
	if got.routes["8000"] == nil {
		t.Error("the port's route configuration is gone")
	}
}

// A NONE host without an address is listened for on each endpoint address (istiod's headless
// services), and follows its endpoints as they change, as a fresh build would.
func TestNoneResolutionWithoutAnAddressListensOnEachEndpoint(t *testing.T) {
	yaml := tcpServiceYAML("cass", 1, "cass.db.svc.cluster.local", "[{number: 9042, name: tcp, protocol: TCP}, {number: 80, name: http, protocol: HTTP}]", "", "NONE", "[{address: 10.1.0.1}, {address: 10.1.0.2}, {address: db.example.com}]")
	got := buildMesh(t, yaml)
	want := []string{"0.0.0.0_80", "10.1.0.1_9042", "10.1.0.2_9042"}
	if n := listenerNames(got); !slices.Equal(n, want) {
		t.Fatalf("listeners %v, want %v", n, want)
	}
	assertOutboundTCPListener(t, got.listeners["10.1.0.2_9042"], "10.1.0.2", 9042)

	m := newMesh(decodeYAML(t, yaml))
	tr := NewTranslator(TranslatorOptions{})
	feedMesh(tr, m)
	tr.Translate()
	coll := collectionOf(kindServiceEntry)
	se := m[coll]["db/cass"]
	changed := edit(t, se, &networking.ServiceEntry{}, "2", func(s *networking.ServiceEntry) {
		s.Endpoints = []*networking.WorkloadEntry{{Address: "10.1.0.3"}}
	})
	m.put(coll, changed)
	tr.Update(coll, []Input{InputOf(changed)}, nil)
	d, _ := tr.Translate()
	if !slices.Equal(d.Removed[ListenerType], []string{"10.1.0.1_9042", "10.1.0.2_9042"}) {
		t.Errorf("removed %v", d.Removed[ListenerType])
	}
	assertSameAsFromScratch(t, "endpoints changed", tr, m)
}

func feedMesh(tr *Translator, m mesh) {
	for coll, rs := range m.inputs() {
		in := make([]Input, len(rs))
		for i, r := range rs {
			in[i] = InputOf(r)
		}
		tr.Update(coll, in, nil)
	}
}

// Listeners follow every change as a fresh build would: a host joining and leaving a shared
// port, a VirtualService's tcp route added, an address changed.
func TestTCPListenersFollowChangesAsAFreshBuild(t *testing.T) {
	m := newMesh(decodeYAML(t, tcpServiceYAML("pg", 1, "pg.db.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "10.9.0.1", "STATIC", "[{address: 10.0.0.1, labels: {version: v1}}]")+
		tcpServiceYAML("pg-replica", 1, "pg-replica.db.example.com", "[{number: 5432, name: tcp, protocol: TCP}]", "", "DNS", "")+
		tcpServiceYAML("web", 1, "web.example.com", "[{number: 5432, name: http, protocol: HTTP}]", "", "DNS", "")))
	tr := NewTranslator(TranslatorOptions{})
	feedMesh(tr, m)
	tr.Translate()
	assertSameAsFromScratch(t, "start", tr, m)
	se := collectionOf(kindServiceEntry)
	steps := []struct {
		what string
		rs   func() map[string][]*mcpapi.Resource
	}{
		{"a tcp route and its rule", func() map[string][]*mcpapi.Resource { return decodeYAML(t, splitRouteYAML) }},
		{"an address moves", func() map[string][]*mcpapi.Resource {
			return map[string][]*mcpapi.Resource{se: {edit(t, m[se]["db/pg"], &networking.ServiceEntry{}, "2", func(s *networking.ServiceEntry) { s.Addresses = []string{"10.9.0.9"} })}}
		}},
		{"the replica gets an address", func() map[string][]*mcpapi.Resource {
			return map[string][]*mcpapi.Resource{se: {edit(t, m[se]["db/pg-replica"], &networking.ServiceEntry{}, "2", func(s *networking.ServiceEntry) { s.Addresses = []string{"10.9.0.2"} })}}
		}},
	}
	for _, s := range steps {
		for coll, rs := range s.rs() {
			in := make([]Input, len(rs))
			for i, r := range rs {
				r = withVersion(r, "2")
				m.put(coll, r)
				in[i] = InputOf(r)
			}
			tr.Update(coll, in, nil)
		}
		tr.Translate()
		assertSameAsFromScratch(t, s.what, tr, m)
	}
	delete(m[se], "db/web")
	tr.Update(se, nil, []string{"db/web"})
	d, _ := tr.Translate()
	assertSameAsFromScratch(t, "the HTTP host leaves", tr, m)
	if !slices.Contains(d.Removed[ListenerType], "0.0.0.0_5432") {
		t.Errorf("removed %v: 0.0.0.0_5432 outlived its last host", d.Removed[ListenerType])
	}
}
