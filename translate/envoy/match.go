package envoy

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// headerNamePattern is an HTTP header name (RFC 9110 token), lower or upper case.
var headerNamePattern = regexp.MustCompile("^[0-9a-zA-Z!#$%&'*+\\-.^_|~`]+$")

// mutableHeader reports whether Envoy lets a route set or remove a header: pseudo-headers and
// Host are refused by Envoy's configuration checks.
func mutableHeader(name string) bool {
	return headerNamePattern.MatchString(name) && !strings.EqualFold(name, "host")
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// regexMatcher checks a regular expression with Go's RE2 engine (Envoy's is RE2 too, and so
// is grpc-go's, which is Go's) and wraps it for Envoy.
func regexMatcher(expr string) (*matcherpb.RegexMatcher, error) {
	if expr == "" {
		return nil, fmt.Errorf("the regular expression is empty")
	}
	if _, err := regexp.Compile(expr); err != nil {
		return nil, fmt.Errorf("regular expression %q does not compile: %v", expr, err)
	}
	return &matcherpb.RegexMatcher{Regex: expr}, nil
}

// routeMatch translates one match block. A block that cannot be matched as written (a
// regular expression that does not compile, source labels the bridge cannot know) is left out
// with a fault, never widened: a route must not catch requests it was not written for.
func (rc *routeContext) routeMatch(vs *virtualService, field string, m *networking.HTTPMatchRequest) (*routepb.RouteMatch, bool) {
	rm := &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm, true
	}
	if len(m.GetSourceLabels()) > 0 || m.GetSourceNamespace() != "" {
		rc.fs.add(kindVirtualService, vs.Key, "%s: sourceLabels and sourceNamespace need the client's identity, which a shared configuration does not have; the match is left out", field)
		return nil, false
	}
	if err := setPath(rm, m.GetUri()); err != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s.uri: %v; the match is left out", field, err)
		return nil, false
	}
	rm.CaseSensitive = wrapperspb.Bool(!m.GetIgnoreUriCase())
	// As istiod orders them (TranslateRouteMatch): headers and withoutHeaders by name, then
	// :method, :authority and :scheme.
	for _, group := range []struct {
		field  string
		m      map[string]*networking.StringMatch
		invert bool
	}{{"headers", m.GetHeaders(), false}, {"withoutHeaders", m.GetWithoutHeaders(), true}} {
		for _, name := range sortedKeys(group.m) {
			hm, err := headerMatcher(strings.ToLower(name), group.m[name], group.invert)
			if err != nil {
				rc.fs.add(kindVirtualService, vs.Key, "%s.%s[%s]: %v; the match is left out", field, group.field, name, err)
				return nil, false
			}
			rm.Headers = append(rm.Headers, hm)
		}
	}
	slices.SortStableFunc(rm.Headers, func(a, b *routepb.HeaderMatcher) int { return strings.Compare(a.GetName(), b.GetName()) })
	pseudo := []struct {
		name string
		sm   *networking.StringMatch
	}{{":method", m.GetMethod()}, {":authority", m.GetAuthority()}, {":scheme", m.GetScheme()}}
	for _, p := range pseudo {
		if p.sm == nil {
			continue
		}
		hm, err := headerMatcher(p.name, p.sm, false)
		if err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.%s: %v; the match is left out", field, strings.TrimPrefix(p.name, ":"), err)
			return nil, false
		}
		rm.Headers = append(rm.Headers, hm)
	}
	for _, name := range sortedKeys(m.GetQueryParams()) {
		qm, err := queryMatcher(name, m.GetQueryParams()[name])
		if err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.queryParams[%s]: %v; the match is left out", field, name, err)
			return nil, false
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	if err := rm.ValidateAll(); err != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s: the Envoy match is invalid and is left out: %v", field, err)
		return nil, false
	}
	return rm, true
}

// setPath translates the uri match: exact is a path, prefix a prefix, regex a safe regex
// over the whole path. No uri matches every path.
func setPath(rm *routepb.RouteMatch, uri *networking.StringMatch) error {
	switch mt := uri.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routepb.RouteMatch_Path{Path: mt.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routepb.RouteMatch_Prefix{Prefix: mt.Prefix}
	case *networking.StringMatch_Regex:
		re, err := regexMatcher(mt.Regex)
		if err != nil {
			return err
		}
		rm.PathSpecifier = &routepb.RouteMatch_SafeRegex{SafeRegex: re}
	}
	return nil
}

// stringMatcher translates Istio's StringMatch. It returns nil for a match that only asks for
// presence, as istiod takes it (canBeConvertedToPresentMatch): an empty StringMatch, or the
// regex "*" (a glob, not RE2). An empty prefix is taken as presence too: istiod passes it on
// as a prefix "", which Envoy rejects (a prefix has at least one character), and every value
// has the empty prefix.
func stringMatcher(sm *networking.StringMatch) (*matcherpb.StringMatcher, error) {
	switch mt := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Exact{Exact: mt.Exact}}, nil
	case *networking.StringMatch_Prefix:
		if mt.Prefix == "" {
			return nil, nil
		}
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_Prefix{Prefix: mt.Prefix}}, nil
	case *networking.StringMatch_Regex:
		if mt.Regex == "*" {
			return nil, nil
		}
		re, err := regexMatcher(mt.Regex)
		if err != nil {
			return nil, err
		}
		return &matcherpb.StringMatcher{MatchPattern: &matcherpb.StringMatcher_SafeRegex{SafeRegex: re}}, nil
	}
	return nil, nil
}

// headerMatcher translates a header match. An inverted one (withoutHeaders) treats a missing
// header as empty, as istiod sets it, so that a request without the header matches it (a
// value that "" does not match); not for a presence match, which Envoy does not combine with it.
func headerMatcher(name string, sm *networking.StringMatch, invert bool) (*routepb.HeaderMatcher, error) {
	if !headerNamePattern.MatchString(strings.TrimPrefix(name, ":")) {
		return nil, fmt.Errorf("%q is not a header name", name)
	}
	m, err := stringMatcher(sm)
	if err != nil {
		return nil, err
	}
	hm := &routepb.HeaderMatcher{Name: name, InvertMatch: invert}
	if m == nil {
		hm.HeaderMatchSpecifier = &routepb.HeaderMatcher_PresentMatch{PresentMatch: true}
	} else {
		hm.HeaderMatchSpecifier = &routepb.HeaderMatcher_StringMatch{StringMatch: m}
		hm.TreatMissingHeaderAsEmpty = invert
	}
	return hm, nil
}

func queryMatcher(name string, sm *networking.StringMatch) (*routepb.QueryParameterMatcher, error) {
	if name == "" {
		return nil, fmt.Errorf("the parameter name is empty")
	}
	m, err := stringMatcher(sm)
	if err != nil {
		return nil, err
	}
	qm := &routepb.QueryParameterMatcher{Name: name}
	if m == nil {
		qm.QueryParameterMatchSpecifier = &routepb.QueryParameterMatcher_PresentMatch{PresentMatch: true}
	} else {
		qm.QueryParameterMatchSpecifier = &routepb.QueryParameterMatcher_StringMatch{StringMatch: m}
	}
	return qm, nil
}
