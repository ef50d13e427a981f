package envoyv2

import (
	"slices"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mcpbridge/mcpbridge/translate"
)

// That the translation sets nothing else v2 lacks is TestV3BodiesReadAsV2, in translate/envoy,
// over its golden inputs.

// Each rewrite of Value keeps the meaning: the v2 client reads the v2 field it knows.
func TestValueRewritesV3OnlyFieldsToTheirV2Spelling(t *testing.T) {
	timeout := durationpb.New(3 * time.Second)
	rc := &routepb.RouteConfiguration{Name: "r", VirtualHosts: []*routepb.VirtualHost{{
		Name: "h", Domains: []string{"*"},
		RequestHeadersToAdd: []*corepb.HeaderValueOption{
			{Header: &corepb.HeaderValue{Key: "set", Value: "1"}, AppendAction: corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &corepb.HeaderValue{Key: "add", Value: "2"}, AppendAction: corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
		},
		Routes: []*routepb.Route{{
			Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routepb.HeaderMatcher{
				{Name: "e", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "x"}}}},
				{Name: "p", InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: "y"}}}},
				{Name: "s", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Suffix{Suffix: "z"}}}},
				{Name: "r", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: "a+"}}}}},
			}},
			Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"},
				Timeout: timeout, MaxStreamDuration: &routepb.RouteAction_MaxStreamDuration{MaxStreamDuration: timeout, GrpcTimeoutHeaderMax: timeout}}},
		}},
	}}}
	var got routepb.RouteConfiguration
	if err := proto.Unmarshal(Value(translate.EnvoyRouteType, marshal(t, rc)), &got); err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // the v2 fields, on purpose
	want := &routepb.RouteConfiguration{Name: "r", VirtualHosts: []*routepb.VirtualHost{{
		Name: "h", Domains: []string{"*"},
		RequestHeadersToAdd: []*corepb.HeaderValueOption{
			{Header: &corepb.HeaderValue{Key: "set", Value: "1"}, Append: wrapperspb.Bool(false)},
			{Header: &corepb.HeaderValue{Key: "add", Value: "2"}},
		},
		Routes: []*routepb.Route{{
			Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routepb.HeaderMatcher{
				{Name: "e", HeaderMatchSpecifier: &routepb.HeaderMatcher_ExactMatch{ExactMatch: "x"}},
				{Name: "p", InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_PrefixMatch{PrefixMatch: "y"}},
				{Name: "s", HeaderMatchSpecifier: &routepb.HeaderMatcher_SuffixMatch{SuffixMatch: "z"}},
				{Name: "r", HeaderMatchSpecifier: &routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherpb.RegexMatcher{Regex: "a+"}}},
			}},
			Action: &routepb.Route_Route{Route: &routepb.RouteAction{ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"},
				Timeout: timeout, MaxGrpcTimeout: timeout}},
		}},
	}}}
	if !proto.Equal(&got, want) {
		t.Fatalf("v2 route:\n%v\nwant:\n%v", prototext.Format(&got), prototext.Format(want))
	}

	cl := &clusterpb.Cluster{Name: "c", LbPolicy: clusterpb.Cluster_MAGLEV, LbConfig: &clusterpb.Cluster_MaglevLbConfig_{
		MaglevLbConfig: &clusterpb.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(131)}}}
	var gotCluster clusterpb.Cluster
	if err := proto.Unmarshal(Value(translate.EnvoyClusterType, marshal(t, cl)), &gotCluster); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&gotCluster, &clusterpb.Cluster{Name: "c", LbPolicy: clusterpb.Cluster_MAGLEV}) {
		t.Fatalf("v2 cluster: %v", prototext.Format(&gotCluster))
	}

	// The upstream HTTP options move to the cluster fields Envoy 1.16 reads; the retry
	// predicate's config takes the name Envoy 1.16 knows.
	opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corepb.HttpProtocolOptions{IdleTimeout: timeout, MaxRequestsPerConnection: wrapperspb.UInt32(7)},
		UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corepb.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(9)}}}},
	})
	withOpts := &clusterpb.Cluster{Name: "h2", TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}}
	var gotOpts clusterpb.Cluster
	if err := proto.Unmarshal(Value(translate.EnvoyClusterType, marshal(t, withOpts)), &gotOpts); err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // the v2 fields, on purpose
	wantOpts := &clusterpb.Cluster{Name: "h2", Http2ProtocolOptions: &corepb.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(9)},
		CommonHttpProtocolOptions: &corepb.HttpProtocolOptions{IdleTimeout: timeout}, MaxRequestsPerConnection: wrapperspb.UInt32(7)}
	if !proto.Equal(&gotOpts, wantOpts) {
		t.Fatalf("v2 protocol options: %v", prototext.Format(&gotOpts))
	}
	pred, _ := anypb.New(&previoushosts.PreviousHostsPredicate{})
	retry := &routepb.RouteConfiguration{Name: "r", VirtualHosts: []*routepb.VirtualHost{{RetryPolicy: &routepb.RetryPolicy{
		RetryHostPredicate: []*routepb.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routepb.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: pred}}}}}}}
	var gotRetry routepb.RouteConfiguration
	if err := proto.Unmarshal(Value(translate.EnvoyRouteType, marshal(t, retry)), &gotRetry); err != nil {
		t.Fatal(err)
	}
	if u := gotRetry.VirtualHosts[0].RetryPolicy.RetryHostPredicate[0].GetTypedConfig().GetTypeUrl(); u != "type.googleapis.com/envoy.config.retry.previous_hosts.v2.PreviousHostsPredicate" {
		t.Fatalf("retry host predicate type = %s", u)
	}

	// An EDS cluster's ADS config source names v2 resources, so that a v2 client asks for its
	// endpoints in v2; an SDS source (a gateway's agent) keeps v3.
	eds := &clusterpb.Cluster{Name: "e", EdsClusterConfig: &clusterpb.Cluster_EdsClusterConfig{EdsConfig: &corepb.ConfigSource{
		ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}}, ResourceApiVersion: corepb.ApiVersion_V3}}}
	var gotEDS clusterpb.Cluster
	if err := proto.Unmarshal(Value(translate.EnvoyClusterType, marshal(t, eds)), &gotEDS); err != nil {
		t.Fatal(err)
	}
	if v := gotEDS.GetEdsClusterConfig().GetEdsConfig().GetResourceApiVersion(); v != corepb.ApiVersion_V2 { //nolint:staticcheck // the v2 value
		t.Fatalf("EDS config source resource_api_version = %v, want V2", v)
	}
	sds := &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_ApiConfigSource{ApiConfigSource: &corepb.ApiConfigSource{}}, ResourceApiVersion: corepb.ApiVersion_V3}
	if toV2(sds.ProtoReflect()) || sds.ResourceApiVersion != corepb.ApiVersion_V3 {
		t.Fatal("an SDS config source was changed")
	}

	// What needs nothing is served as stored, not marshalled again.
	plain := marshal(t, &clusterpb.Cluster{Name: "plain"})
	if got := Value(translate.EnvoyClusterType, plain); &got[0] != &plain[0] {
		t.Fatal("a cluster without v3-only fields was marshalled again")
	}
	eps := marshal(t, &endpointpb.ClusterLoadAssignment{ClusterName: "c"})
	if got := Value(translate.EnvoyEndpointType, eps); &got[0] != &eps[0] {
		t.Fatal("a load assignment was read")
	}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzValue: whatever bytes a stored body holds, Value never panics, returns them as they
// are when it cannot read them, and otherwise a body that parses, with no v3-only field left.
func FuzzValue(f *testing.F) {
	rc := &routepb.RouteConfiguration{Name: "r", VirtualHosts: []*routepb.VirtualHost{{Routes: []*routepb.Route{{
		Match: &routepb.RouteMatch{Headers: []*routepb.HeaderMatcher{{Name: "h",
			HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: "p"}}}}}},
		RequestHeadersToAdd: []*corepb.HeaderValueOption{{Header: &corepb.HeaderValue{Key: "k"}, AppendAction: corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}},
	}}}}}
	rb, _ := proto.Marshal(rc)
	cb, _ := proto.Marshal(&clusterpb.Cluster{Name: "c", LbConfig: &clusterpb.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterpb.Cluster_MaglevLbConfig{}}})
	f.Add(true, rb)
	f.Add(false, cb)
	f.Fuzz(func(t *testing.T, route bool, value []byte) {
		typeURL, m := translate.EnvoyClusterType, proto.Message(&clusterpb.Cluster{})
		if route {
			typeURL, m = translate.EnvoyRouteType, &routepb.RouteConfiguration{}
		}
		out := Value(typeURL, value)
		if proto.Unmarshal(value, m) != nil {
			if !slices.Equal(out, value) {
				t.Fatal("a body Value cannot read was changed")
			}
			return
		}
		if err := proto.Unmarshal(out, m); err != nil {
			t.Fatalf("the v2 body does not parse: %v", err)
		}
		if toV2(m.ProtoReflect()) {
			t.Fatalf("the v2 body still holds v3-only fields: %v", prototext.Format(m))
		}
	})
}

// BenchmarkValueCluster: what a v2 CDS response costs more than v3's per cluster: an EDS
// cluster as the translation makes it, read, its config source's resource version set to V2,
// and marshalled again.
func BenchmarkValueCluster(b *testing.B) {
	c := marshalB(b, &clusterpb.Cluster{Name: "outbound|80||svc.ns.svc.cluster.local", ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_EDS},
		ConnectTimeout: durationpb.New(10 * time.Second), LbPolicy: clusterpb.Cluster_LEAST_REQUEST,
		EdsClusterConfig: &clusterpb.Cluster_EdsClusterConfig{ServiceName: "outbound|80||svc.ns.svc.cluster.local",
			EdsConfig: &corepb.ConfigSource{ConfigSourceSpecifier: &corepb.ConfigSource_Ads{Ads: &corepb.AggregatedConfigSource{}},
				ResourceApiVersion: corepb.ApiVersion_V3}}})
	b.SetBytes(int64(len(c)))
	for b.Loop() {
		Value(translate.EnvoyClusterType, c)
	}
}

func marshalB(b *testing.B, m proto.Message) []byte {
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// TestValueLeavesOutWhatV2CannotSayAndMatchesAnyPort: the route configuration settings,
// header and mirror fields Envoy 1.16 lacks are left out; with the port of the Host header no
// longer ignored, each domain without a port is also given with any port ("DOMAIN:*").
func TestValueLeavesOutWhatV2CannotSayAndMatchesAnyPort(t *testing.T) {
	rc := &routepb.RouteConfiguration{
		Name: "9080", IgnorePortInHostMatching: true, MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
		VirtualHosts: []*routepb.VirtualHost{{
			Name: "h", Domains: []string{"a.example", "a.example:9080", "240.0.0.1", "[2001:db8::1]", "*"},
			Routes: []*routepb.Route{{
				Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}, Headers: []*routepb.HeaderMatcher{
					{Name: "x", InvertMatch: true, TreatMissingHeaderAsEmpty: true,
						HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "bot"}}}},
				}},
				Action: &routepb.Route_Route{Route: &routepb.RouteAction{
					ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: "c"},
					RequestMirrorPolicies: []*routepb.RouteAction_RequestMirrorPolicy{{
						Cluster: "m", DisableShadowHostSuffixAppend: true, TraceSampled: wrapperspb.Bool(false)}},
				}},
			}},
		}},
	}
	b, err := proto.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	got := &routepb.RouteConfiguration{}
	if err := proto.Unmarshal(Value(translate.EnvoyRouteType, b), got); err != nil {
		t.Fatal(err)
	}
	if got.GetIgnorePortInHostMatching() || got.GetMaxDirectResponseBodySizeBytes() != nil {
		t.Errorf("route configuration settings kept: %v", got)
	}
	want := []string{"a.example", "a.example:*", "a.example:9080", "240.0.0.1", "240.0.0.1:*", "[2001:db8::1]", "[2001:db8::1]:*", "*"}
	if d := got.GetVirtualHosts()[0].GetDomains(); !slices.Equal(d, want) {
		t.Errorf("domains %q; want %q", d, want)
	}
	r := got.GetVirtualHosts()[0].GetRoutes()[0]
	h := r.GetMatch().GetHeaders()[0]
	if h.GetTreatMissingHeaderAsEmpty() || h.GetExactMatch() != "bot" || !h.GetInvertMatch() { //nolint:staticcheck // the v2 field
		t.Errorf("header matcher %v", h)
	}
	if mp := r.GetRoute().GetRequestMirrorPolicies()[0]; mp.GetDisableShadowHostSuffixAppend() || mp.GetCluster() != "m" {
		t.Errorf("mirror policy %v", mp)
	}
	if err := got.ValidateAll(); err != nil {
		t.Error(err)
	}
}

// TestValueMovesTheDefaultFilterChainLastAndDropsAcceptLimit: Envoy 1.16 has no
// default_filter_chain: istiod's PassthroughFilterChain becomes the last filter chain, its match
// empty; the per-event accept limit, unknown to it, is left out; the rest stays.
func TestValueMovesTheDefaultFilterChainLastAndDropsAcceptLimit(t *testing.T) {
	chain := func(name string, m *listenerpb.FilterChainMatch) *listenerpb.FilterChain {
		return &listenerpb.FilterChain{Name: name, FilterChainMatch: m, Filters: []*listenerpb.Filter{{Name: "envoy.filters.network.tcp_proxy"}}}
	}
	l := &listenerpb.Listener{
		Name:                                 "0.0.0.0_9080",
		FilterChains:                         []*listenerpb.FilterChain{chain("http", &listenerpb.FilterChainMatch{TransportProtocol: "raw_buffer"})},
		DefaultFilterChain:                   chain("PassthroughFilterChain", &listenerpb.FilterChainMatch{}),
		MaxConnectionsToAcceptPerSocketEvent: wrapperspb.UInt32(1),
		UseOriginalDst:                       wrapperspb.Bool(true),
	}
	b, err := proto.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	got := &listenerpb.Listener{}
	if err := proto.Unmarshal(Value(translate.EnvoyListenerType, b), got); err != nil {
		t.Fatal(err)
	}
	if got.GetDefaultFilterChain() != nil || got.GetMaxConnectionsToAcceptPerSocketEvent() != nil {
		t.Errorf("v3-only fields kept: %v", got)
	}
	fcs := got.GetFilterChains()
	if len(fcs) != 2 || fcs[0].GetName() != "http" || fcs[1].GetName() != "PassthroughFilterChain" || fcs[1].GetFilterChainMatch().GetTransportProtocol() != "" {
		t.Errorf("filter chains %v; want http, then PassthroughFilterChain", fcs)
	}
	if !got.GetUseOriginalDst().GetValue() || got.GetName() != l.GetName() {
		t.Errorf("listener %v lost what v2 has", got)
	}
	if err := got.ValidateAll(); err != nil {
		t.Error(err)
	}
}
