package envoy

import (
	"slices"
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/translate"
)

// These tests hold ports of no declared protocol (protocol sniffing) and original-destination
// clusters to what istiod builds for a sidecar (listener.go buildSidecarOutboundListener,
// httproute.go getVirtualHostsForSniffedServicePort, cluster.go convertResolution), field by
// field; e2e/istiod/testdata/parity/38-sniffed-ports.yaml checks them against a real istiod.

// sniffedHTTPChain checks a chain is the HTTP chain of a sniffed listener, matched by the
// plaintext HTTP protocols over raw_buffer, and returns its route configuration's name.
func sniffedHTTPChain(t *testing.T, fc *listenerpb.FilterChain) string {
	t.Helper()
	m := fc.GetFilterChainMatch()
	if !slices.Equal(m.GetApplicationProtocols(), []string{"http/1.1", "h2c"}) || m.GetTransportProtocol() != "raw_buffer" {
		t.Errorf("HTTP chain matches %v, want http/1.1 and h2c over raw_buffer", m)
	}
	if d := fc.GetTransportSocketConnectTimeout(); d.AsDuration().Seconds() != 15 {
		t.Errorf("HTTP chain connect timeout %v, want 15s", d)
	}
	hcm := &hcmpb.HttpConnectionManager{}
	if f := fc.GetFilters(); len(f) != 1 || f[0].GetName() != hcmFilterName || f[0].GetTypedConfig().UnmarshalTo(hcm) != nil {
		t.Fatalf("HTTP chain filters %v, want one connection manager", f)
	}
	if hcm.GetUpgradeConfigs() == nil || hcm.GetStreamIdleTimeout().AsDuration() != 0 {
		t.Errorf("connection manager %v lacks a sidecar's settings", hcm)
	}
	return hcm.GetRds().GetRouteConfigName()
}

// A port of no protocol on a host with an address is istiod's sniffed service listener:
// VIP_PORT with the HTTP inspector, an HTTP chain whose route configuration is HOST:PORT, and
// the TCP proxy to the host's cluster as the default chain. HOST:PORT holds the host's virtual
// host alone, answering to every domain. No 0.0.0.0_PORT is built for it.
func TestSniffedPortWithAnAddressGetsItsOwnListenerAndRoutes(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("api", 1, "api.db.example.com", "[{number: 7000, name: api}]", "240.240.1.1", "STATIC", "[{address: 10.0.0.1}]")+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: db}
spec:
  hosts: [api.db.example.com]
  http:
  - timeout: 5s
    route: [{destination: {host: api.db.example.com}}]
`)
	if n := listenerNames(got); !slices.Equal(n, []string{"240.240.1.1_7000"}) {
		t.Fatalf("listeners %v, want only 240.240.1.1_7000", n)
	}
	l := got.listeners["240.240.1.1_7000"]
	assertOutboundTCPListener(t, l, "240.240.1.1", 7000)
	if len(l.GetFilterChains()) != 1 || l.GetDefaultFilterChain() == nil {
		t.Fatalf("%d chains, default %v: want the HTTP chain and a default", len(l.GetFilterChains()), l.GetDefaultFilterChain())
	}
	if rds := sniffedHTTPChain(t, l.GetFilterChains()[0]); rds != "api.db.example.com:7000" {
		t.Errorf("HTTP chain's route configuration %q, want api.db.example.com:7000", rds)
	}
	def := l.GetDefaultFilterChain()
	if def.GetName() != "" || def.GetFilterChainMatch() != nil {
		t.Errorf("default chain %q matches %v: want the host's own, unnamed, matching all", def.GetName(), def.GetFilterChainMatch())
	}
	if p, _ := tcpProxyOf(t, def); p.GetCluster() != ClusterName(7000, "", "api.db.example.com") {
		t.Errorf("default chain proxies to %q, want the host's cluster", p.GetCluster())
	}
	if lf := l.GetListenerFilters(); len(lf) != 1 || lf[0].GetName() != httpInspectorName {
		t.Errorf("listener filters %v, want the HTTP inspector alone", lf)
	}
	rc := got.routes["api.db.example.com:7000"]
	if rc == nil {
		t.Fatal("no route configuration api.db.example.com:7000")
	}
	if rc.GetValidateClusters().GetValue() || !rc.GetIgnorePortInHostMatching() || rc.GetMaxDirectResponseBodySizeBytes().GetValue() != 1<<20 {
		t.Errorf("route configuration settings %v, want the sidecar's", rc)
	}
	if len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("virtual hosts %v, want the host's alone", rc.GetVirtualHosts())
	}
	vh := rc.GetVirtualHosts()[0]
	if vh.GetName() != "api.db.example.com:7000" || !slices.Equal(vh.GetDomains(), []string{"*"}) {
		t.Errorf("virtual host %q with domains %v, want api.db.example.com:7000 with *", vh.GetName(), vh.GetDomains())
	}
	if len(vh.GetRoutes()) != 1 || vh.GetRoutes()[0].GetRoute().GetTimeout().AsDuration().Seconds() != 5 {
		t.Errorf("routes %v, want the VirtualService's, with its 5s timeout", vh.GetRoutes())
	}
	if got.routes["7000"] != nil {
		t.Error("route configuration 7000 built without a 0.0.0.0_7000 listener to name it")
	}
}

// Without an address the host shares 0.0.0.0_PORT: its virtual host in the port's route
// configuration beside the HTTP hosts', and its TCP proxy as the listener's default chain,
// where the PassthroughFilterChain would otherwise be; a second sniffed host's TCP chain
// matches what the first's does, and is left out with a fault, as istiod keeps the first.
func TestSniffedPortWithoutAnAddressSharesThePortWithItsTCPPathAsDefault(t *testing.T) {
	got := buildMesh(t, tcpServiceYAML("a", 1, "a.example.com", "[{number: 8080, name: api}]", "", "DNS", "")+
		tcpServiceYAML("b", 2, "b.example.com", "[{number: 8080, name: api}]", "", "DNS", "")+
		tcpServiceYAML("web", 3, "web.example.com", "[{number: 8080, name: http, protocol: HTTP}]", "", "DNS", ""))
	if n := listenerNames(got); !slices.Equal(n, []string{"0.0.0.0_8080"}) {
		t.Fatalf("listeners %v, want only 0.0.0.0_8080", n)
	}
	l := got.listeners["0.0.0.0_8080"]
	assertOutboundTCPListener(t, l, wildcardBind, 8080)
	if len(l.GetFilterChains()) != 1 {
		t.Fatalf("%d chains, want the HTTP one", len(l.GetFilterChains()))
	}
	if rds := sniffedHTTPChain(t, l.GetFilterChains()[0]); rds != "8080" {
		t.Errorf("HTTP chain's route configuration %q, want 8080", rds)
	}
	if p, _ := tcpProxyOf(t, l.GetDefaultFilterChain()); p.GetCluster() != ClusterName(8080, "", "a.example.com") {
		t.Errorf("default chain proxies to %q, want the older sniffed host's cluster", p.GetCluster())
	}
	var domains []string
	for _, vh := range got.routes["8080"].GetVirtualHosts() {
		domains = append(domains, vh.GetDomains()[0])
	}
	if !slices.Equal(domains, []string{"a.example.com", "b.example.com", "web.example.com"}) {
		t.Errorf("route configuration 8080 answers %v, want every host of the port", domains)
	}
	if len(got.faults) != 1 || got.faults[0].Name != "db/b" {
		t.Errorf("faults %v, want one of db/b: its TCP chain is left out", got.faults)
	}
}

// clustersOf translates YAML and returns the clusters sidecars get and those gateways get
// through their overlay (only where they differ).
func clustersOf(t *testing.T, yaml string) (sidecar, gateway map[string]*clusterpb.Cluster) {
	t.Helper()
	outs, _ := Build(decodeYAML(t, yaml), TranslatorOptions{})
	sidecar, gateway = map[string]*clusterpb.Cluster{}, map[string]*clusterpb.Cluster{}
	for _, r := range outs {
		if err := validateDeep(r.Body()); err != nil {
			t.Errorf("%s %q fails validation: %v", typeName(r.TypeURL), r.Name, err)
		}
		c := &clusterpb.Cluster{}
		switch r.TypeURL {
		case ClusterType:
			mustUnmarshal(t, r, c)
			sidecar[r.Name] = c
		case translate.GatewayCollection(ClusterType):
			mustUnmarshal(t, r, c)
			gateway[r.Name] = c
		}
	}
	return sidecar, gateway
}

// A NONE host's sidecars get an original-destination cluster (no endpoints, no balancing:
// Envoy connects where the client dialled); its gateways, which cannot use one, the EDS cluster.
func TestNoneResolutionIsAnOriginalDestinationClusterForSidecars(t *testing.T) {
	name := ClusterName(9042, "", "cass.db.example.com")
	sidecar, gateway := clustersOf(t, tcpServiceYAML("cass", 1, "cass.db.example.com", "[{number: 9042, name: tcp, protocol: TCP}]", "", "NONE", ""))
	c := sidecar[name]
	if c.GetType() != clusterpb.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterpb.Cluster_CLUSTER_PROVIDED {
		t.Errorf("sidecar cluster type %v, lb policy %v, want ORIGINAL_DST and CLUSTER_PROVIDED", c.GetType(), c.GetLbPolicy())
	}
	if c.GetEdsClusterConfig() != nil || c.GetLoadAssignment() != nil || c.GetLbConfig() != nil {
		t.Errorf("sidecar cluster has endpoints or balancing: %v", c)
	}
	if c.GetConnectTimeout().AsDuration().Seconds() != 10 || c.GetCircuitBreakers() == nil {
		t.Errorf("sidecar cluster lost istiod's defaults: %v", c)
	}
	g := gateway[name]
	if g.GetType() != clusterpb.Cluster_EDS || g.GetEdsClusterConfig().GetServiceName() != name || g.GetLbPolicy() != clusterpb.Cluster_LEAST_REQUEST {
		t.Errorf("gateway cluster %v, want EDS of %s, LEAST_REQUEST", g, name)
	}
}

// A rule's loadBalancer PASSTHROUGH makes the cluster original-destination for every Envoy
// (a DNS host's DNS settings stay, as istiod leaves them); there is no fault left to report.
func TestPassthroughLoadBalancerIsAnOriginalDestinationCluster(t *testing.T) {
	name := ClusterName(443, "", "api.example.com")
	sidecar, gateway := clustersOf(t, tcpServiceYAML("api", 1, "api.example.com", "[{number: 443, name: tls, protocol: TLS}]", "", "DNS", "")+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: db}
spec:
  host: api.example.com
  trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}
`)
	c := sidecar[name]
	if c.GetType() != clusterpb.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterpb.Cluster_CLUSTER_PROVIDED || c.GetLoadAssignment() != nil {
		t.Errorf("cluster type %v, lb policy %v, load assignment %v: want ORIGINAL_DST, CLUSTER_PROVIDED, none", c.GetType(), c.GetLbPolicy(), c.GetLoadAssignment())
	}
	if c.GetDnsLookupFamily() != clusterpb.Cluster_V4_ONLY || !c.GetRespectDnsTtl() {
		t.Errorf("DNS settings %v, %v: want istiod's, kept", c.GetDnsLookupFamily(), c.GetRespectDnsTtl())
	}
	if len(gateway) != 0 {
		t.Errorf("gateways get clusters of their own %v: want the same", gateway)
	}
}

// A sniffed host moving between 0.0.0.0_PORT and a listener of its own, and its routes
// changing, leaves the outputs as a fresh build makes them.
func TestSniffedPortsFollowChangesAsAFreshBuild(t *testing.T) {
	m := newMesh(decodeYAML(t, tcpServiceYAML("api", 1, "api.db.example.com", "[{number: 7000, name: api}]", "", "DNS", "")+
		tcpServiceYAML("web", 2, "web.example.com", "[{number: 7000, name: http, protocol: HTTP}]", "", "DNS", "")))
	tr := NewTranslator(TranslatorOptions{})
	feedMesh(tr, m)
	tr.Translate()
	assertSameAsFromScratch(t, "start", tr, m)
	se := collectionOf(kindServiceEntry)
	step := func(what string, coll string, r *mcpapi.Resource) {
		t.Helper()
		r = withVersion(r, "2")
		m.put(coll, r)
		tr.Update(coll, []Input{InputOf(r)}, nil)
		tr.Translate()
		assertSameAsFromScratch(t, what, tr, m)
	}
	step("the sniffed host gets an address", se, edit(t, m[se]["db/api"], &networking.ServiceEntry{}, "2", func(s *networking.ServiceEntry) {
		s.Addresses = []string{"240.240.1.1"}
		s.Resolution = networking.ServiceEntry_STATIC
		s.Endpoints = []*networking.WorkloadEntry{{Address: "10.0.0.1"}}
	}))
	vs := decodeYAML(t, `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: db}
spec:
  hosts: [api.db.example.com]
  http: [{timeout: 5s, route: [{destination: {host: api.db.example.com}}]}]
`)
	for coll, rs := range vs {
		step("a VirtualService routes it", coll, rs[0])
	}
	step("the sniffed host loses its address", se, edit(t, m[se]["db/api"], &networking.ServiceEntry{}, "3", func(s *networking.ServiceEntry) {
		s.Addresses = nil
	}))
	delete(m[se], "db/web")
	tr.Update(se, nil, []string{"db/web"})
	tr.Translate()
	assertSameAsFromScratch(t, "the HTTP host leaves", tr, m)
}
