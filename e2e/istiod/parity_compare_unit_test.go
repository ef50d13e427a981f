//go:build e2e_istiod

package istiod

import (
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rawbuf "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The comparison's own tests: they need no istiod (go test -tags e2e_istiod -run
// TestParityCompare ./e2e/istiod/).

func testCluster(name string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{ServiceName: name},
		ConnectTimeout:       durationpb.New(10e9),
		LbPolicy:             cluster.Cluster_LEAST_REQUEST,
	}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func compareOne(istiod, bridge *xdsDump) *scenarioResult {
	res := &scenarioResult{}
	compareNode(res, parityNode{Name: "n"}, istiod, bridge, nil)
	return res
}

func emptyDump() *xdsDump {
	return &xdsDump{Clusters: map[string]*cluster.Cluster{}, Endpoints: map[string]*endpoint.ClusterLoadAssignment{},
		Listeners: map[string]*listener.Listener{}, Routes: map[string]*route.RouteConfiguration{}}
}

// TestParityCompareNormalizesIstiodInfrastructure: istiod's telemetry, auto mTLS and
// Kubernetes clusters do not count; the same cluster otherwise matches.
func TestParityCompareNormalizesIstiodInfrastructure(t *testing.T) {
	const name = "outbound|80||a.example.com"
	i, b := emptyDump(), emptyDump()
	b.Clusters[name] = testCluster(name)
	c := testCluster(name)
	c.AltStatName = name + ";"
	md, _ := structpb.NewStruct(map[string]any{"services": []any{map[string]any{"host": "a.example.com"}}})
	c.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": md}}
	c.TransportSocketMatches = []*cluster.Cluster_TransportSocketMatch{
		{Name: "tlsMode-istio", Match: &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}},
			TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{Sni: "outbound_.80_._.a.example.com"})}}},
		{Name: "tlsMode-disabled", Match: &structpb.Struct{},
			TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.raw_buffer", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &rawbuf.RawBuffer{})}}},
	}
	i.Clusters[name] = c
	i.Clusters["outbound|443||kubernetes.default.svc.cluster.local"] = testCluster("outbound|443||kubernetes.default.svc.cluster.local")
	res := compareOne(i, b)
	m, tot := res.totals()
	// The cluster and its load balancing (lb policy LEAST_REQUEST on both sides).
	if m != tot || tot != 2 {
		t.Fatalf("matched %d of %d, want 2 of 2: %+v", m, tot, res.Mismatches)
	}
}

// TestParityCompareCountsRealDifferences: a policy, a TLS context and a missing cluster are
// mismatches of their families, and the families of a missing cluster are not compared.
func TestParityCompareCountsRealDifferences(t *testing.T) {
	const a, bb = "outbound|80||a.example.com", "outbound|80||b.example.com"
	i, b := emptyDump(), emptyDump()
	i.Clusters[a] = testCluster(a)
	i.Clusters[a].TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls",
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{Sni: "a.example.com"})}}
	b.Clusters[a] = testCluster(a)
	b.Clusters[a].LbPolicy = cluster.Cluster_ROUND_ROBIN
	i.Clusters[bb] = testCluster(bb)
	res := compareOne(i, b)
	got := map[string]string{}
	for _, mm := range res.Mismatches {
		got[mm.Family+" "+mm.Key] = strings.Join(mm.Paths, ";")
	}
	want := map[string]string{
		famClusters + " " + a:    "lbPolicy (istiod only)",
		famLB + " " + a:          "lbPolicy (istiod only)",
		famTLS + " cluster " + a: "transportSocket (istiod only)",
		famClusters + " " + bb:   "(istiod only)",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("mismatch %s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("mismatches %v, want %v", got, want)
	}
	if c := res.Counts[famLB]; c == nil || c.Total != 1 {
		t.Errorf("load balancing compared %+v, want 1 (b.example.com's is not: the bridge has no such cluster)", c)
	}
}

// TestParityCompareGatewayClassPrefix: the bridge's gateway.CLASS/ names meet istiod's.
func TestParityCompareGatewayClassPrefix(t *testing.T) {
	rc := func(name string) *route.RouteConfiguration {
		return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{Name: "a:80", Domains: []string{"a.example.com"},
			Routes: []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "outbound|80||a"}}}}}}}}
	}
	i, b := emptyDump(), emptyDump()
	i.Routes["http.80"] = rc("http.80")
	b.Routes["gateway.8000000000000001/http.80"] = rc("gateway.8000000000000001/http.80")
	res := compareOne(i, b)
	if m, tot := res.totals(); m != tot || tot != 4 {
		t.Fatalf("matched %d of %d, want 4 of 4: %+v", m, tot, res.Mismatches)
	}
}

func TestParityLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\n", "a\nx\nc\n")
	if got != "  a\n+ x\n- b\n  c\n" {
		t.Fatalf("lineDiff: %q", got)
	}
}

// TestParityCompareMultiAddressHost: normalization 6 makes a dual-stack host's address domain
// and its endpoints repeated once per address compare equal, and nothing else; without the
// scenario's multi-address hosts they are mismatches.
func TestParityCompareMultiAddressHost(t *testing.T) {
	const name = "outbound|8080||dual.example.com"
	ep := func(addr string) *endpoint.LbEndpoint {
		return &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: &core.Address{
				Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: addr,
					PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}}}},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
	}
	dump := func(domain string, eps ...*endpoint.LbEndpoint) *xdsDump {
		d := emptyDump()
		c := testCluster(name)
		c.LoadAssignment = &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{
			Locality: &core.Locality{}, LbEndpoints: eps, LoadBalancingWeight: wrapperspb.UInt32(uint32(len(eps))),
		}}}
		d.Clusters[name] = c
		d.Routes["8080"] = &route.RouteConfiguration{Name: "8080", VirtualHosts: []*route.VirtualHost{
			{Name: "dual.example.com:8080", Domains: []string{"dual.example.com", domain}},
		}}
		return d
	}
	i := dump("[2001:db8::10]", ep("v4.dual.example.com"), ep("v4.dual.example.com"), ep("v6.dual.example.com"), ep("v6.dual.example.com"))
	b := dump("240.240.0.10", ep("v4.dual.example.com"), ep("v6.dual.example.com"))
	ma := multiAddress{"240.240.0.10": "dual.example.com", "2001:db8::10": "dual.example.com"}

	res := &scenarioResult{}
	compareNode(res, parityNode{Name: "n"}, i, b, ma)
	if m, tot := res.totals(); m != tot {
		t.Fatalf("with the host's addresses: matched %d of %d: %+v", m, tot, res.Mismatches)
	}
	res = compareOne(i, b)
	fams := map[string]bool{}
	for _, mm := range res.Mismatches {
		fams[mm.Family] = true
	}
	if !fams[famEndpoints] || !fams[famVhosts] || len(res.Mismatches) != 2 {
		t.Fatalf("without them: mismatches %+v, want one of endpoints and one of virtual hosts", res.Mismatches)
	}
	// A different endpoint is still a difference.
	b = dump("240.240.0.10", ep("v4.dual.example.com"), ep("v7.dual.example.com"))
	res = &scenarioResult{}
	compareNode(res, parityNode{Name: "n"}, i, b, ma)
	if len(res.Mismatches) != 1 || res.Mismatches[0].Family != famEndpoints {
		t.Fatalf("another endpoint: mismatches %+v, want one of endpoints", res.Mismatches)
	}
}
