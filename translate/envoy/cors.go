package envoy

import (
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// corsFilterName is Envoy's CORS HTTP filter, whose per-route configuration a route's
// corsPolicy is.
const corsFilterName = "envoy.filters.http.cors"

// corsPerRoute translates a corsPolicy as istiod does (TranslateCORSPolicy), for the route's
// typed_per_filter_config under the CORS filter's name: the filter is enabled for every
// request; allowOrigins (or the older allowOrigin, exact) are string matchers; methods,
// headers and exposed headers are joined with ","; maxAge is in seconds; preflights the
// policy does not match are forwarded upstream unless unmatchedPreflights is IGNORE. Envoy
// sidecars and gateways need the CORS filter in their connection manager for it (CORSFilter);
// proxyless gRPC clients have none and get their routes without it (grpcRoutes).
func corsPerRoute(in *networking.CorsPolicy) (*anypb.Any, error) {
	out := &corspb.CorsPolicy{
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.GetUnmatchedPreflights() != networking.CorsPolicy_IGNORE),
		FilterEnabled: &corepb.RuntimeFractionalPercent{DefaultValue: &typepb.FractionalPercent{
			Numerator: 100, Denominator: typepb.FractionalPercent_HUNDRED}},
		AllowCredentials: in.GetAllowCredentials(),
		AllowHeaders:     strings.Join(in.GetAllowHeaders(), ","),
		AllowMethods:     strings.Join(in.GetAllowMethods(), ","),
		ExposeHeaders:    strings.Join(in.GetExposeHeaders(), ","),
	}
	if in.GetAllowOrigins() != nil {
		for _, o := range in.GetAllowOrigins() {
			m, err := originMatcher(o)
			if err != nil {
				return nil, err
			}
			if m != nil {
				out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, m)
			}
		}
	} else {
		for _, o := range in.GetAllowOrigin() { //nolint:staticcheck // the older field is still read, as istiod reads it
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch,
				&matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: o}})
		}
	}
	if in.GetMaxAge() != nil {
		out.MaxAge = strconv.FormatInt(in.GetMaxAge().GetSeconds(), 10)
	}
	return pack(out)
}

// originMatcher is istiod's ConvertToEnvoyMatch for an origin: nil for a match without a
// type, which istiod leaves out.
func originMatcher(sm *networking.StringMatch) (*matcherpb.StringMatcher, error) {
	switch mt := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: mt.Exact}}, nil
	case *networking.StringMatch_Prefix:
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: mt.Prefix}}, nil
	case *networking.StringMatch_Regex:
		re, err := regexMatcher(mt.Regex)
		if err != nil {
			return nil, err
		}
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: re}}, nil
	}
	return nil, nil
}

// corsFilter is the CORS HTTP filter with its empty configuration, as istiod adds it to every
// Envoy connection manager (after the fault filter, before the router): encoded once, shared,
// never modified.
var corsFilter = func() (c struct {
	f   *hcmpb.HttpFilter
	err error
}) {
	var cfg *anypb.Any
	if cfg, c.err = pack(&corspb.Cors{}); c.err == nil {
		c.f = &hcmpb.HttpFilter{Name: corsFilterName, ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: cfg}}
	}
	return c
}()

// CORSFilter is the CORS HTTP filter of Envoy connection managers (sidecar and gateway
// listeners), which a route's corsPolicy needs: istiod puts it in every one, after the fault
// filter and before the router. Proxyless gRPC clients do not implement it (grpc-go rejects a
// connection manager with a filter it does not know), so their API listeners have none. The
// filter is shared and must not be modified.
func CORSFilter() (*hcmpb.HttpFilter, error) { return corsFilter.f, corsFilter.err }
