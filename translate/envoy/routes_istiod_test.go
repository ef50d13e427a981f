package envoy

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests of this file hold the route configurations to what istiod builds for the same
// YAML (pilot/pkg/networking/core/httproute.go, route/route.go, route/retry), field by field;
// buildClasses checks every output with the Envoy types' validation.

// reviewsYAML is a ServiceEntry for reviews.bookinfo.svc.cluster.local:9080 (HTTP), with an
// address, and what follows it.
func reviewsYAML(rest string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  addresses: [240.0.0.9]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
` + rest
}

func reviewsVS(http string) string {
	return `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
` + http
}

const reviewsCluster = "outbound|9080||reviews.bookinfo.svc.cluster.local"

// sidecarRoutes and grpcRoutesOf are the routes of reviews' virtual host in the sidecar's
// route configuration (9080) and in the proxyless client's (the host's own).
func sidecarRoutes(t *testing.T, got classOutputs) []*routepb.Route {
	t.Helper()
	return onlyVhost(t, got.routes["9080"]).GetRoutes()
}

func grpcRoutesOf(t *testing.T, got classOutputs) []*routepb.Route {
	t.Helper()
	return onlyVhost(t, got.routes[reviewsCluster]).GetRoutes()
}

func onlyVhost(t *testing.T, rc *routepb.RouteConfiguration) *routepb.VirtualHost {
	t.Helper()
	if len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("route configuration %q has %d virtual hosts, want 1", rc.GetName(), len(rc.GetVirtualHosts()))
	}
	return rc.GetVirtualHosts()[0]
}

func assertProto(t *testing.T, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\ngot  %v\nwant %v", what, got, want)
	}
}

// TestDefaultRetryPolicyRetriesNoStatusCode: istiod's default retries connection failures,
// refused streams, UNAVAILABLE and CANCELLED with no retriable status code (a 503 that an
// upstream answered is not replayed), twice, each on another host (up to 5 tries to find
// one): on a host's default route, and on a VirtualService route without retries.
func TestDefaultRetryPolicyRetriesNoStatusCode(t *testing.T) {
	want := &routepb.RetryPolicy{
		RetryOn:                       "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
		NumRetries:                    wrapperspb.UInt32(2),
		HostSelectionRetryMaxAttempts: 5,
		RetryHostPredicate:            defaultRetries.predicate,
	}
	for _, yaml := range []string{reviewsYAML(""), reviewsYAML(reviewsVS("  - route: [{destination: {host: reviews}}]\n"))} {
		got := buildClasses(t, yaml)
		for _, r := range append(sidecarRoutes(t, got), grpcRoutesOf(t, got)...) {
			assertProto(t, "retry policy of "+r.GetName(), r.GetRoute().GetRetryPolicy(), want)
		}
	}
}

// TestRetryPolicyWithoutPreviousHostsForConsistentHash: a VirtualService route whose only
// destination is hashed consistently retries on the same host (no previous-hosts predicate),
// with or without retries of its own; retryOn of status codes alone gets retriable-status-codes;
// retryRemoteLocalities adds the previous_priorities priority.
func TestRetryPolicyWithoutPreviousHostsForConsistentHash(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - match: [{uri: {prefix: /a}}]
    route: [{destination: {host: reviews}}]
  - match: [{uri: {prefix: /b}}]
    route: [{destination: {host: reviews}}]
    retries: {attempts: 3, retryOn: "503,429", retryRemoteLocalities: true}
`)+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`))
	routes := sidecarRoutes(t, got)
	assertProto(t, "default retries, hashed", routes[0].GetRoute().GetRetryPolicy(), &routepb.RetryPolicy{
		RetryOn: defaultRetryOn, NumRetries: wrapperspb.UInt32(2), HostSelectionRetryMaxAttempts: 5,
	})
	assertProto(t, "retries given, hashed", routes[1].GetRoute().GetRetryPolicy(), &routepb.RetryPolicy{
		RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{503, 429}, NumRetries: wrapperspb.UInt32(3),
		HostSelectionRetryMaxAttempts: 5, RetryPriority: defaultRetries.priority,
	})
	for _, r := range routes {
		if len(r.GetRoute().GetHashPolicy()) != 1 || r.GetRoute().GetHashPolicy()[0].GetHeader().GetHeaderName() != "x-user" {
			t.Errorf("route %s: hash policy %v, want the header x-user", r.GetName(), r.GetRoute().GetHashPolicy())
		}
	}
}

// TestWithoutHeadersMatchesARequestLackingTheHeader: a withoutHeaders condition treats a
// missing header as empty, so that a request without it matches (a presence condition,
// which Envoy does not combine with it, stays without); headers and withoutHeaders are
// ordered by name, then :method, :authority, :scheme; case_sensitive is set.
func TestWithoutHeadersMatchesARequestLackingTheHeader(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - match:
    - withoutHeaders: {x-b: {exact: bot}, x-present: {}}
      headers: {x-a: {regex: "*"}}
      method: {exact: GET}
      scheme: {exact: http}
      authority: {prefix: rev}
    route: [{destination: {host: reviews}}]
`)))
	exact := func(v string) *routepb.HeaderMatcher_StringMatch {
		return &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: v}}}
	}
	want := &routepb.RouteMatch{
		PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"},
		CaseSensitive: wrapperspb.Bool(true),
		Headers: []*routepb.HeaderMatcher{
			{Name: "x-a", HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}},
			{Name: "x-b", InvertMatch: true, TreatMissingHeaderAsEmpty: true, HeaderMatchSpecifier: exact("bot")},
			{Name: "x-present", InvertMatch: true, HeaderMatchSpecifier: &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}},
			{Name: ":method", HeaderMatchSpecifier: exact("GET")},
			{Name: ":authority", HeaderMatchSpecifier: &routepb.HeaderMatcher_StringMatch{StringMatch: &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: "rev"}}}},
			{Name: ":scheme", HeaderMatchSpecifier: exact("http")},
		},
	}
	assertProto(t, "match", sidecarRoutes(t, got)[0].GetMatch(), want)
}

// TestMirrorKeepsTheHostAndDefaultsToAll: a mirror policy mirrors every request unless a
// percentage says otherwise (0: no mirroring), keeps the Host header (no "-shadow"), and does
// not force the trace to be sampled.
func TestMirrorKeepsTheHostAndDefaultsToAll(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - route: [{destination: {host: reviews}}]
    mirrors:
    - destination: {host: reviews}
    - destination: {host: reviews}
      percentage: {value: 0.57}
    - destination: {host: reviews}
      percentage: {value: 0}
`)))
	policy := func(n uint32, d typepb.FractionalPercent_DenominatorType) *routepb.RouteAction_RequestMirrorPolicy {
		return &routepb.RouteAction_RequestMirrorPolicy{
			Cluster:                       reviewsCluster,
			RuntimeFraction:               &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: n, Denominator: d}},
			TraceSampled:                  wrapperspb.Bool(false),
			DisableShadowHostSuffixAppend: true,
		}
	}
	mp := sidecarRoutes(t, got)[0].GetRoute().GetRequestMirrorPolicies()
	if len(mp) != 2 {
		t.Fatalf("%d mirror policies, want 2 (a percentage of 0 mirrors nothing): %v", len(mp), mp)
	}
	assertProto(t, "mirror without percentage", mp[0], policy(100, typepb.FractionalPercent_HUNDRED))
	assertProto(t, "mirror of 0.57% (truncated, as istiod truncates 5699.999…)", mp[1], policy(5699, typepb.FractionalPercent_MILLION))
}

// TestTimeoutIsMaxGrpcTimeoutForEnvoyAndMaxStreamDurationForGRPC: a route's timeout (0 without
// one) caps gRPC's grpc-timeout header for Envoy (max_grpc_timeout), and is a proxyless
// client's max_stream_duration, as istiod sets each; the default route is the same for both.
func TestTimeoutIsMaxGrpcTimeoutForEnvoyAndMaxStreamDurationForGRPC(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - match: [{uri: {prefix: /slow}}]
    route: [{destination: {host: reviews}}]
    timeout: 5s
  - route: [{destination: {host: reviews}}]
`)))
	for i, want := range []int64{5, 0} {
		envoy, grpc := sidecarRoutes(t, got)[i].GetRoute(), grpcRoutesOf(t, got)[i].GetRoute()
		if envoy.GetTimeout().GetSeconds() != want || envoy.GetMaxGrpcTimeout().GetSeconds() != want || envoy.GetMaxGrpcTimeout() == nil || envoy.GetMaxStreamDuration() != nil { //nolint:staticcheck // istiod's field
			t.Errorf("route %d for Envoy: timeout %v, max_grpc_timeout %v, max_stream_duration %v; want %ds, %ds, none", //nolint:staticcheck // as above
				i, envoy.GetTimeout(), envoy.GetMaxGrpcTimeout(), envoy.GetMaxStreamDuration(), want, want)
		}
		if grpc.GetTimeout().GetSeconds() != want || grpc.GetMaxGrpcTimeout() != nil || grpc.GetMaxStreamDuration().GetMaxStreamDuration() == nil || //nolint:staticcheck // as above
			grpc.GetMaxStreamDuration().GetMaxStreamDuration().GetSeconds() != want || grpc.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax() != nil {
			t.Errorf("route %d for gRPC: timeout %v, max_grpc_timeout %v, max_stream_duration %v; want %ds, none, %ds", //nolint:staticcheck // as above
				i, grpc.GetTimeout(), grpc.GetMaxGrpcTimeout(), grpc.GetMaxStreamDuration(), want, want)
		}
	}
	def := buildClasses(t, reviewsYAML(""))
	if !proto.Equal(sidecarRoutes(t, def)[0], grpcRoutesOf(t, def)[0]) {
		t.Errorf("default routes differ: sidecar %v, gRPC %v", sidecarRoutes(t, def)[0], grpcRoutesOf(t, def)[0])
	}
}

// TestCORSPolicyIsThePerRouteConfigOfTheCORSFilter: a corsPolicy is the route's per-filter
// configuration of envoy.filters.http.cors, which Envoy connection managers have (after the
// fault filter, before the router); proxyless gRPC clients get neither (their chain is fault
// and router).
func TestCORSPolicyIsThePerRouteConfigOfTheCORSFilter(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - route: [{destination: {host: reviews}}]
    corsPolicy:
      allowOrigins: [{exact: "https://a.example"}, {regex: "https://.*\\.b\\.example"}]
      allowMethods: [GET, POST]
      allowHeaders: [x-a, x-b]
      exposeHeaders: [x-c]
      maxAge: 24h
      allowCredentials: true
`)))
	r := sidecarRoutes(t, got)[0]
	cfg := &corspb.CorsPolicy{}
	if err := r.GetTypedPerFilterConfig()[corsFilterName].UnmarshalTo(cfg); err != nil {
		t.Fatalf("the route's CORS configuration: %v", err)
	}
	want := &corspb.CorsPolicy{
		AllowOriginStringMatch: []*matcherpb.StringMatcher{
			{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: "https://a.example"}},
			{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: &matcherpb.RegexMatcher{Regex: `https://.*\.b\.example`}}},
		},
		AllowMethods: "GET,POST", AllowHeaders: "x-a,x-b", ExposeHeaders: "x-c", MaxAge: "86400",
		AllowCredentials:             wrapperspb.Bool(true),
		FilterEnabled:                &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{Numerator: 100, Denominator: typepb.FractionalPercent_HUNDRED}},
		ForwardNotMatchingPreflights: wrapperspb.Bool(true),
	}
	assertProto(t, "CORS policy", cfg, want)
	if err := cfg.ValidateAll(); err != nil {
		t.Error(err)
	}
	if _, ok := grpcRoutesOf(t, got)[0].GetTypedPerFilterConfig()[corsFilterName]; ok {
		t.Error("the proxyless client's route has the CORS configuration")
	}
	filters := func(listener string) []string {
		hcm := &hcmpb.HttpConnectionManager{}
		l := got.listeners[listener]
		a := l.GetApiListener().GetApiListener()
		if a == nil {
			a = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
		}
		if err := a.UnmarshalTo(hcm); err != nil {
			t.Fatalf("%s: %v", listener, err)
		}
		var out []string
		for _, f := range hcm.GetHttpFilters() {
			out = append(out, f.GetName())
		}
		return out
	}
	if f := filters("0.0.0.0_9080"); !slices.Equal(f, []string{faultFilterName, corsFilterName, routerFilterName}) {
		t.Errorf("sidecar listener filters %v", f)
	}
	if f := filters("reviews.bookinfo.svc.cluster.local:9080"); !slices.Equal(f, []string{faultFilterName, routerFilterName}) {
		t.Errorf("API listener filters %v", f)
	}
}

// TestVirtualHostDomainsAreIstiodsForSidecarsAndGRPC: a sidecar's virtual host answers to the
// host, its absolute form, the names any namespace may use and the address, without ports (the
// route configuration ignores the port, with istiod's other settings); a proxyless client's to
// each with and without the port.
func TestVirtualHostDomainsAreIstiodsForSidecarsAndGRPC(t *testing.T) {
	got := buildClasses(t, reviewsYAML(""))
	sidecar := onlyVhost(t, got.routes["9080"])
	wantSidecar := []string{"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local.", "reviews.bookinfo", "reviews.bookinfo.svc", "240.0.0.9"}
	if sidecar.GetName() != "reviews.bookinfo.svc.cluster.local:9080" || !slices.Equal(sidecar.GetDomains(), wantSidecar) {
		t.Errorf("sidecar virtual host %q, domains %q; want %q", sidecar.GetName(), sidecar.GetDomains(), wantSidecar)
	}
	var wantGRPC []string
	for _, d := range wantSidecar {
		wantGRPC = append(wantGRPC, d, d+":9080")
	}
	if d := onlyVhost(t, got.routes[reviewsCluster]).GetDomains(); !slices.Equal(d, wantGRPC) {
		t.Errorf("gRPC domains %q; want %q", d, wantGRPC)
	}
	rc := got.routes["9080"]
	if !rc.GetIgnorePortInHostMatching() || rc.GetValidateClusters() == nil || rc.GetValidateClusters().GetValue() ||
		rc.GetMaxDirectResponseBodySizeBytes().GetValue() != 1<<20 {
		t.Errorf("sidecar route configuration settings: %v", rc)
	}
	if g := got.routes[reviewsCluster]; g.GetIgnorePortInHostMatching() || g.GetValidateClusters() != nil {
		t.Errorf("gRPC route configuration settings: %v", g)
	}
}

// TestVirtualHostDomainsAreSizedExactly: the list of a virtual host's domains is allocated at
// its length (two per host at a million hosts), for names and addresses, with and without
// the port, short names and an address, and names another host takes.
func TestVirtualHostDomainsAreSizedExactly(t *testing.T) {
	taken := func(d string) bool { return d == "reviews.bookinfo" }
	for _, host := range []string{"reviews.bookinfo.svc.cluster.local", "api.example.com", "10.0.0.1", "2001:db8::1", "*.example.com"} {
		for _, vip := range []string{"", "0.0.0.0", "240.0.0.9"} {
			for _, withPort := range []bool{false, true} {
				for _, tk := range []func(string) bool{nil, taken} {
					d := virtualHostDomains(host, 9080, vip, sharedProxyDomain("cluster.local"), withPort, tk)
					if len(d) == 0 || cap(d) != len(d) {
						t.Errorf("%s vip %q port %v: %d domains in room for %d", host, vip, withPort, len(d), cap(d))
					}
				}
			}
		}
	}
}

// TestSidecarVirtualHostSharesTheGRPCRoutesBytes: the sidecar's virtual host of a host without
// a VirtualService, assembled from its own name and domains and the gRPC one's routes, is the
// deterministic encoding of the virtual host.
func TestSidecarVirtualHostSharesTheGRPCRoutesBytes(t *testing.T) {
	outs, _ := Build(decodeYAML(t, reviewsYAML("")), TranslatorOptions{})
	for _, r := range outs {
		if r.TypeURL == RouteType && r.Name == "9080" {
			m, err := r.Body().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			again, _ := deterministic.Marshal(m)
			if !bytes.Equal(again, r.Body().GetValue()) {
				t.Fatal("the assembled sidecar route configuration differs from proto.Marshal's")
			}
			return
		}
	}
	t.Fatal("no route configuration 9080")
}

// TestAltHostsDependOnTheProxyNamespace: a proxy of the host's namespace may also call it by
// its bare name (istiod's order: NAME, NAME.NS.svc, NAME.NS); another namespace's, and the
// shared configuration, by NAME.NS and NAME.NS.svc; a host outside the cluster domain has no
// shorter names.
func TestAltHostsDependOnTheProxyNamespace(t *testing.T) {
	for _, c := range []struct {
		host, proxy string
		want        []string
	}{
		{"reviews.bookinfo.svc.cluster.local", proxyDNSDomain("bookinfo", "cluster.local"), []string{"reviews", "reviews.bookinfo.svc", "reviews.bookinfo"}},
		{"reviews.bookinfo.svc.cluster.local", proxyDNSDomain("other", "cluster.local"), []string{"reviews.bookinfo", "reviews.bookinfo.svc"}},
		{"reviews.bookinfo.svc.cluster.local", sharedProxyDomain("cluster.local"), []string{"reviews.bookinfo", "reviews.bookinfo.svc"}},
		{"api.example.com", sharedProxyDomain("cluster.local"), nil},
		{"reviews.bookinfo.svc.other.local", sharedProxyDomain("cluster.local"), nil},
	} {
		if got := altHosts(c.host, c.proxy); !slices.Equal(got, c.want) {
			t.Errorf("altHosts(%s, %s) = %q; want %q", c.host, c.proxy, got, c.want)
		}
	}
}

// TestSharedAddressGoesToTheFirstHost: two hosts of one address on a port cannot both answer to
// it (Envoy rejects a route configuration with a domain twice): the first by name keeps it, the
// other is reported; a CIDR address of one IP is that IP.
func TestSharedAddressGoesToTheFirstHost(t *testing.T) {
	got := buildClasses(t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: shop}
spec:
  hosts: [b.example.com, a.example.com]
  addresses: [not-an-ip, 240.0.0.7/32]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
`)
	vhs := got.routes["80"].GetVirtualHosts()
	if len(vhs) != 2 || !slices.Contains(vhs[0].GetDomains(), "240.0.0.7") || slices.Contains(vhs[1].GetDomains(), "240.0.0.7") {
		t.Errorf("virtual hosts %v; want the address on a.example.com's only", vhs)
	}
	if m := faultMessages(got.faults, kindServiceEntry, "shop/ext"); len(m) != 1 || !strings.Contains(m[0], "b.example.com: address 240.0.0.7") {
		t.Errorf("faults %q", m)
	}
}

// TestRouteDecoratorIsIstiodsOperation: "HOST:PORT" of the only cluster and the path matched, or
// "VIRTUALSERVICE:PORT" and the path; the default route's is "HOST:PORT/*".
func TestRouteDecoratorIsIstiodsOperation(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - match: [{uri: {prefix: /a}}, {uri: {exact: /b}}]
    route: [{destination: {host: reviews}}]
  - match: [{uri: {regex: "/c.*"}}]
    directResponse: {status: 204}
`)))
	var ops []string
	for _, r := range sidecarRoutes(t, got) {
		ops = append(ops, r.GetDecorator().GetOperation())
	}
	if want := []string{"reviews.bookinfo.svc.cluster.local:9080/a*", "reviews.bookinfo.svc.cluster.local:9080/b", "reviews:9080/c.*"}; !slices.Equal(ops, want) {
		t.Errorf("operations %q; want %q", ops, want)
	}
	if op := sidecarRoutes(t, buildClasses(t, reviewsYAML("")))[0].GetDecorator().GetOperation(); op != "reviews.bookinfo.svc.cluster.local:9080/*" {
		t.Errorf("default route operation %q", op)
	}
}

// TestNothingIsTranslatedAfterACatchAllRoute: a route without match, or a match of every path
// with no other condition, ends the VirtualService's routes, as istiod ends them.
func TestNothingIsTranslatedAfterACatchAllRoute(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - name: first
    match: [{uri: {prefix: /}}, {uri: {prefix: /never}}]
    route: [{destination: {host: reviews}}]
  - name: unreachable
    route: [{destination: {host: reviews}}]
`)))
	if rs := sidecarRoutes(t, got); len(rs) != 1 || rs[0].GetName() != "first" {
		t.Errorf("routes %v; want the catch-all alone", rs)
	}
}

// TestRequestAuthorityHeaderRewritesTheHost: setting Host (or :authority) on requests is a
// Host rewrite, not a header change; a rewrite's authority wins over it.
func TestRequestAuthorityHeaderRewritesTheHost(t *testing.T) {
	got := buildClasses(t, reviewsYAML(reviewsVS(`  - match: [{uri: {prefix: /a}}]
    headers: {request: {set: {host: set.example}, add: {":authority": add.example, x-a: "1"}}}
    route: [{destination: {host: reviews}}]
  - match: [{uri: {prefix: /b}}]
    headers: {request: {set: {host: set.example}}}
    rewrite: {authority: rewrite.example}
    route: [{destination: {host: reviews}}]
`)))
	rs := sidecarRoutes(t, got)
	if h := rs[0].GetRoute().GetHostRewriteLiteral(); h != "set.example" {
		t.Errorf("route a rewrites the host to %q; want set.example", h)
	}
	if hs := rs[0].GetRequestHeadersToAdd(); len(hs) != 1 || hs[0].GetHeader().GetKey() != "x-a" {
		t.Errorf("route a adds headers %v; want x-a alone", hs)
	}
	if h := rs[1].GetRoute().GetHostRewriteLiteral(); h != "rewrite.example" {
		t.Errorf("route b rewrites the host to %q; want rewrite.example", h)
	}
	if m := faultMessages(got.faults, kindVirtualService, "bookinfo/reviews"); len(m) != 0 {
		t.Errorf("faults %q", m)
	}
}
