package kinds

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// Annotations by which istiod marks config it converted from the Gateway API; such config
// follows the Gateway API's rules for names (constants.InternalRouteSemantics,
// InternalGatewaySemantics).
const (
	annotationRouteSemantics   = "internal.istio.io/route-semantics"
	annotationGatewaySemantics = "internal.istio.io/gateway-semantics"
)

// validateVirtualService mirrors Istio's ValidateVirtualService (and validateHTTPRoute of its
// virtualservice.go). The analysis of unreachable rules only warns, and is left out.
func validateVirtualService(v *validator, vs *networking.VirtualService) {
	spec := &specRoot
	gatewaySemantics := v.annotations[annotationRouteSemantics] == "gateway"
	delegate := len(vs.Hosts) == 0
	if delegate {
		if len(vs.Gateways) != 0 {
			gp := spec.f("gateways")
			v.errorf(&gp, "delegate virtual service must have no gateways specified")
		}
		if len(vs.Tls) != 0 {
			tp := spec.f("tls")
			v.errorf(&tp, "delegate virtual service must have no tls route specified")
		}
		if len(vs.Tcp) != 0 {
			tp := spec.f("tcp")
			v.errorf(&tp, "delegate virtual service must have no tcp route specified")
		}
	}

	appliesToMesh, appliesToGateway := true, false
	if len(vs.Gateways) > 0 {
		gp := spec.f("gateways")
		v.gatewayNamesAt(&gp, vs.Gateways, gatewaySemantics)
		appliesToGateway = !slices.Contains(vs.Gateways, "mesh")
		appliesToMesh = !appliesToGateway
	}

	if !appliesToGateway {
		hp := spec.f("http")
		for i, route := range vs.GetHttp() {
			rp := hp.i(i)
			mp := rp.f("match")
			for j, m := range route.GetMatch() {
				jp := mp.i(j)
				for _, field := range [...]struct {
					name    string
					headers map[string]*networking.StringMatch
				}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}} {
					fp := jp.f(field.name)
					for key := range field.headers {
						if isJWTClaimRoute(key) {
							kp := fp.k(key)
							v.errorf(&kp, "JWT claim based routing (key: %s) is only supported for gateway, found no gateways: %v", key, vs.Gateways)
						}
					}
				}
			}
		}
	}

	hosts := spec.f("hosts")
	allHostsValid := true
	for i, h := range vs.Hosts {
		hp := hosts.i(i)
		var err error
		if appliesToGateway {
			err = validateWildcardDomainForVirtualServiceBoundToGateway(isSNIHost(vs), h)
		} else {
			err = validateWildcardDomain(h)
		}
		if err != nil {
			if !isValidIPAddress(h) {
				v.add(&hp, err)
				allHostsValid = false
			}
		} else if appliesToMesh && h == "*" {
			v.errorf(&hp, "wildcard host * is not allowed for virtual services bound to the mesh gateway")
			allHostsValid = false
		}
	}
	if allHostsValid {
		for i := range vs.Hosts {
			for j := i + 1; j < len(vs.Hosts); j++ {
				if hostMatches(vs.Hosts[i], vs.Hosts[j]) {
					hp := hosts.i(j)
					v.errorf(&hp, "duplicate hosts in virtual service: %s & %s", vs.Hosts[i], vs.Hosts[j])
				}
			}
		}
	}

	if len(vs.Http) == 0 && len(vs.Tcp) == 0 && len(vs.Tls) == 0 {
		v.errorf(spec, "http, tcp or tls must be provided in virtual service")
	}
	httpp := spec.f("http")
	for i, route := range vs.Http {
		rp := httpp.i(i)
		if route == nil {
			v.errorf(&rp, "http route may not be null")
			continue
		}
		v.httpRouteAt(&rp, route, delegate, gatewaySemantics)
	}
	tlsp := spec.f("tls")
	for i, route := range vs.Tls {
		rp := tlsp.i(i)
		v.tlsRouteAt(&rp, route, vs, gatewaySemantics)
	}
	tcpp := spec.f("tcp")
	for i, route := range vs.Tcp {
		rp := tcpp.i(i)
		v.tcpRouteAt(&rp, route, gatewaySemantics)
	}
	ep := spec.f("exportTo")
	v.exportToAt(&ep, vs.ExportTo, false, false)
}

// isJWTClaimRoute mirrors jwt.ToRoutingClaim(name).Match: "@request.auth.claims.a" or
// "@request.auth.claims[a]".
func isJWTClaimRoute(name string) bool {
	const prefix = "@request.auth.claims"
	if len(name) < len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
		return false
	}
	rest := name[len(prefix):]
	return strings.HasPrefix(rest, ".") && len(rest) > 1 ||
		strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]") && len(rest) > 2
}

// isSNIHost mirrors isSniHost: some TLS route matches on SNI hosts.
func isSNIHost(vs *networking.VirtualService) bool {
	for _, tls := range vs.Tls {
		for _, m := range tls.GetMatch() {
			if len(m.GetSniHosts()) > 0 {
				return true
			}
		}
	}
	return false
}

// hostMatches mirrors host.Name.Matches: equal names, or a wildcard that covers the other.
func hostMatches(n, o string) bool {
	nw, ow := strings.HasPrefix(n, "*"), strings.HasPrefix(o, "*")
	switch {
	case nw && ow:
		if len(n) < len(o) {
			return strings.HasSuffix(o[1:], n[1:])
		}
		return strings.HasSuffix(n[1:], o[1:])
	case nw:
		return strings.HasSuffix(o, n[1:])
	case ow:
		return strings.HasSuffix(n, o[1:])
	}
	return n == o
}

// hostSubsetOf mirrors host.Name.SubsetOf: n is covered by o.
func hostSubsetOf(n, o string) bool {
	nw, ow := strings.HasPrefix(n, "*"), strings.HasPrefix(o, "*")
	switch {
	case nw && ow:
		return len(n) >= len(o) && strings.HasSuffix(n[1:], o[1:])
	case nw:
		return false
	case ow:
		return strings.HasSuffix(n, o[1:])
	}
	return n == o
}

// gatewayNamesAt mirrors validateGatewayNames. Like Istio's, it stops at the first name
// without a namespace.
func (v *validator) gatewayNamesAt(p *path, names []string, gatewaySemantics bool) {
	for i, name := range names {
		ip := p.i(i)
		ns, gw, ok := strings.Cut(name, "/")
		if !ok {
			v.add(&ip, validateFQDN(name))
			return
		}
		if ns == "" || gw == "" {
			v.errorf(&ip, "config namespace and gateway name cannot be empty")
		}
		if !isDNS1123Label(ns) {
			v.errorf(&ip, "invalid value for namespace: %q", ns)
		}
		if !isDNS1123Label(gw) && !gatewaySemantics {
			v.errorf(&ip, "invalid value for gateway name: %q", gw)
		}
	}
}

// httpRouteAt mirrors validateHTTPRoute.
func (v *validator) httpRouteAt(p *path, r *networking.HTTPRoute, delegate, gatewaySemantics bool) {
	v.httpRouteConflictAt(p, r, delegate)
	v.httpRouteMatchesAt(p, r)
	hp := p.f("headers")
	v.headersAt(&hp, r.Headers)
	cp := p.f("corsPolicy")
	v.corsPolicyAt(&cp, r.CorsPolicy)
	fp := p.f("fault")
	v.faultInjectionAt(&fp, r.Fault)
	if r.MirrorPercent != nil { //nolint:staticcheck // deprecated, still validated by Istio
		if value := r.MirrorPercent.GetValue(); value > 100 { //nolint:staticcheck
			mp := p.f("mirrorPercent")
			v.errorf(&mp, "mirror_percent must have a max value of 100 (it has %d)", value)
		}
	}
	if r.MirrorPercentage != nil {
		mp := p.f("mirrorPercentage")
		if value := r.MirrorPercentage.GetValue(); value > 100 {
			v.errorf(&mp, "mirror_percentage must have a max value of 100 (it has %f)", value)
		} else if value < 0 {
			v.errorf(&mp, "mirror_percentage must have a min value of 0 (it has %f)", value)
		}
	}
	mp := p.f("mirror")
	v.destinationAt(&mp, r.Mirror)
	msp := p.f("mirrors")
	for i, m := range r.Mirrors {
		ip := msp.i(i)
		switch {
		case m == nil:
			v.errorf(&ip, "mirror cannot be null")
		case m.Destination == nil:
			dp := ip.f("destination")
			v.errorf(&dp, "destination is required for mirrors")
		default:
			dp := ip.f("destination")
			v.destinationAt(&dp, m.Destination)
			if m.Percentage != nil {
				pp := ip.f("percentage")
				if value := m.Percentage.GetValue(); value > 100 {
					v.errorf(&pp, "mirror percentage must have a max value of 100 (it has %f)", value)
				} else if value < 0 {
					v.errorf(&pp, "mirror percentage must have a min value of 0 (it has %f)", value)
				}
			}
		}
	}
	rp := p.f("redirect")
	v.add(&rp, validateHTTPRedirect(r.Redirect, r.Match))
	dp := p.f("directResponse")
	v.directResponseAt(&dp, r.DirectResponse)
	retp := p.f("retries")
	v.retriesAt(&retp, r.Retries)
	rwp := p.f("rewrite")
	v.add(&rwp, validateHTTPRewrite(r.Rewrite))
	v.add(&rwp, validateAuthorityRewrite(r.Rewrite, r.Headers))
	routep := p.f("route")
	v.httpRouteDestinationsAt(&routep, r.Route, gatewaySemantics)
	tp := p.f("timeout")
	v.durationAt(&tp, r.Timeout)
}

// httpRouteConflictAt mirrors validateHTTPRouteConflict.
func (v *validator) httpRouteConflictAt(p *path, r *networking.HTTPRoute, delegate bool) {
	if !delegate && r.Delegate != nil { // a root route: it delegates, and only that
		if r.Redirect != nil {
			rp := p.f("redirect")
			v.errorf(&rp, "root HTTP route %s must not specify redirect", r.Name)
		}
		if r.Route != nil {
			rp := p.f("route")
			v.errorf(&rp, "root HTTP route %s must not specify route", r.Name)
		}
		return
	}
	if delegate && r.Delegate != nil {
		dp := p.f("delegate")
		v.errorf(&dp, "delegate HTTP route cannot contain delegate")
	}
	switch {
	case r.Redirect != nil:
		rp := p.f("redirect")
		if len(r.Route) > 0 {
			v.errorf(&rp, "HTTP route cannot contain both route and redirect")
		}
		if r.Fault != nil {
			v.errorf(&rp, "HTTP route cannot contain both fault and redirect")
		}
		if r.Rewrite != nil {
			v.errorf(&rp, "HTTP route rule cannot contain both rewrite and redirect")
		}
		if r.DirectResponse != nil {
			v.errorf(&rp, "HTTP route rule cannot contain both direct_response and redirect")
		}
	case r.DirectResponse != nil:
		dp := p.f("directResponse")
		if len(r.Route) > 0 {
			v.errorf(&dp, "HTTP route cannot contain both route and direct_response")
		}
		if r.Fault != nil {
			v.errorf(&dp, "HTTP route cannot contain both fault and direct_response")
		}
		if r.Rewrite != nil {
			v.errorf(&dp, "HTTP route rule cannot contain both rewrite and direct_response")
		}
	case len(r.Route) == 0:
		rp := p.f("route")
		v.errorf(&rp, "HTTP route, redirect or direct_response is required")
	}
	if r.Mirror != nil && len(r.Mirrors) > 0 {
		mp := p.f("mirrors")
		v.errorf(&mp, "HTTP route cannot contain both mirror and mirrors")
	}
}

// httpRouteMatchesAt mirrors validateHTTPRouteMatchRequest.
func (v *validator) httpRouteMatchesAt(p *path, r *networking.HTTPRoute) {
	matches := p.f("match")
	for i, m := range r.Match {
		if m == nil {
			continue
		}
		mp := matches.i(i)
		hp := mp.f("headers")
		for name, header := range m.Headers {
			kp := hp.k(name)
			if header == nil {
				v.errorf(&kp, "header match %v cannot be null", name)
			}
			v.add(&kp, validateHTTPHeaderNameOrJwtClaimRoute(name))
			v.add(&kp, validateStringMatch(header, "headers"))
		}
		whp := mp.f("withoutHeaders")
		for name, header := range m.WithoutHeaders {
			kp := whp.k(name)
			v.add(&kp, validateHTTPHeaderNameOrJwtClaimRoute(name))
			// "*" is not a regular expression there: it is translated to a presence match.
			if header != nil && header.GetRegex() != "*" {
				v.add(&kp, validateStringMatch(header, "withoutHeaders"))
			}
		}
		// An empty prefix is allowed for the URI (Envoy's route match allows it), not for
		// the others (Envoy's string matcher does not).
		up := mp.f("uri")
		v.add(&up, validateStringMatchRegexp(m.GetUri(), "uri"))
		sp := mp.f("scheme")
		v.add(&sp, validateStringMatch(m.GetScheme(), "scheme"))
		methp := mp.f("method")
		v.add(&methp, validateStringMatch(m.GetMethod(), "method"))
		ap := mp.f("authority")
		v.add(&ap, validateStringMatch(m.GetAuthority(), "authority"))
		qp := mp.f("queryParams")
		for name, q := range m.GetQueryParams() {
			kp := qp.k(name)
			v.add(&kp, validateStringMatch(q, "queryParams"))
		}
		if m.Port != 0 {
			pp := mp.f("port")
			v.add(&pp, validatePort(int(m.Port)))
		}
		slp := mp.f("sourceLabels")
		v.labelsAt(&slp, m.SourceLabels)
		gp := mp.f("gateways")
		v.gatewayNamesAt(&gp, m.Gateways, false)
		if m.SourceNamespace != "" && !isDNS1123Label(m.SourceNamespace) {
			snp := mp.f("sourceNamespace")
			v.errorf(&snp, "sourceNamespace match %s is invalid", m.SourceNamespace)
		}
	}
}

// validateStringMatch mirrors validateStringMatch: no empty prefix, and a regular expression
// that compiles.
func validateStringMatch(sm *networking.StringMatch, where string) error {
	switch sm.GetMatchType().(type) {
	case *networking.StringMatch_Prefix:
		if sm.GetPrefix() == "" {
			return fmt.Errorf("%q: prefix string match should not be empty", where)
		}
	case *networking.StringMatch_Regex:
		return validateStringMatchRegexp(sm, where)
	}
	return nil
}

// validateStringMatchRegexp mirrors validateStringMatchRegexp.
func validateStringMatchRegexp(sm *networking.StringMatch, where string) error {
	if _, ok := sm.GetMatchType().(*networking.StringMatch_Regex); !ok {
		return nil
	}
	re := sm.GetRegex()
	if re == "" {
		return fmt.Errorf("%q: regex string match should not be empty", where)
	}
	return validateStringRegexp(re, where)
}

// validateStringRegexp mirrors validateStringRegexp: RE2, at most 1024 characters (Envoy
// bounds the size of a regular expression's program; its length stands for it).
func validateStringRegexp(re, where string) error {
	if len(re) > 1024 {
		return fmt.Errorf("%q: regex is too large, max length allowed is 1024", where)
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Errorf("%q: %w; Istio uses RE2 style regex-based match (https://github.com/google/re2/wiki/Syntax)", where, err)
	}
	return nil
}

// validHeaderName is RFC 7230's token, as validHeaderNameRegex.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validateHTTPHeaderNameOrJwtClaimRoute mirrors ValidateHTTPHeaderNameOrJwtClaimRoute.
func validateHTTPHeaderNameOrJwtClaimRoute(name string) error {
	if name == "" {
		return errors.New("header name cannot be empty")
	}
	if isJWTClaimRoute(name) {
		return nil
	}
	switch name {
	case ":method", ":scheme", ":authority", ":path", ":status":
		return nil
	}
	if !validHeaderName(name) {
		return fmt.Errorf("header name %s is not a valid header name", name)
	}
	return nil
}

// validateProbeHeaderName mirrors ValidateProbeHeaderName: [-A-Za-z0-9]+.
func validateProbeHeaderName(name string) error { return headerNameOf(name, "-") }

// validateStrictHTTPHeaderName mirrors ValidateStrictHTTPHeaderName: [-_A-Za-z0-9]+.
func validateStrictHTTPHeaderName(name string) error { return headerNameOf(name, "-_") }

// headerNameOf checks a header name of letters, digits and the characters of extra.
func headerNameOf(name, extra string) error {
	if name == "" {
		return errors.New("header name cannot be empty")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && !strings.ContainsRune(extra, rune(c)) {
			return fmt.Errorf("header name %s is not a valid header name", name)
		}
	}
	return nil
}

func isInternalHeader(name string) bool {
	return strings.HasPrefix(name, ":") || strings.EqualFold(name, "host")
}

func isAuthorityHeader(name string) bool {
	return strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")
}

// validateHTTPHeaderWithAuthorityOperationName mirrors
// ValidateHTTPHeaderWithAuthorityOperationName: a request header to add or set.
func validateHTTPHeaderWithAuthorityOperationName(name string) error {
	if name == "" {
		return errors.New("header name cannot be empty")
	}
	if isInternalHeader(name) && !isAuthorityHeader(name) {
		return fmt.Errorf(`invalid header %q: header cannot have ":" prefix`, name)
	}
	return nil
}

// validateHTTPHeaderOperationName mirrors ValidateHTTPHeaderOperationName: a request header to
// remove, or a response header.
func validateHTTPHeaderOperationName(name string) error {
	if name == "" {
		return errors.New("header name cannot be empty")
	}
	if strings.EqualFold(name, "host") {
		return fmt.Errorf(`invalid header %q: cannot set Host header`, name)
	}
	if isInternalHeader(name) {
		return fmt.Errorf(`invalid header %q: header cannot have ":" prefix`, name)
	}
	return nil
}

// validateHTTPHeaderValue mirrors ValidateHTTPHeaderValue: no control characters but tab, and
// Envoy's %VARIABLE% syntax well formed (validateHeaderValue, a port of Envoy's header_parser).
func validateHTTPHeaderValue(value string) error {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c <= 0x08 || c >= 0x0a && c <= 0x1f || c == 0x7f {
			return fmt.Errorf("header value configuration %s is invalid", value)
		}
	}
	if err := validateHeaderValueSyntax(value); err != nil {
		return fmt.Errorf("header value configuration: %w", err)
	}
	return nil
}

// validateHeaderValueSyntax mirrors validateHeaderValue of Istio's header_value_validator.go.
func validateHeaderValueSyntax(value string) error {
	const (
		literal = iota
		variableName
		expectArray
		expectString
		inString
		expectArrayDelimiterOrEnd
		expectArgsEnd
		expectVariableEnd
	)
	state := literal
	for pos := 0; pos < len(value); pos++ {
		ch := value[pos]
		hasNext := pos+1 < len(value)
		switch state {
		case literal:
			if ch != '%' {
				break
			}
			if !hasNext {
				return errors.New("invalid header configuration. Un-escaped %")
			}
			if value[pos+1] == '%' {
				pos++ // an escaped %
				break
			}
			state = variableName
		case variableName:
			if ch == '%' {
				state = literal
			} else if ch == '(' {
				state = expectArray
			}
		case expectArray:
			if ch == '[' {
				state = expectString
			} else if ch != ' ' {
				state = inString
			}
		case expectArrayDelimiterOrEnd:
			if ch == ',' {
				state = expectString
			} else if ch == ']' {
				state = expectArgsEnd
			} else if ch != ' ' {
				return errors.New("invalid header configuration. Expecting ',', ']', or whitespace")
			}
		case expectString:
			if ch == '"' {
				state = inString
			} else if ch != ' ' {
				return errors.New("invalid header configuration. Expecting '\"'")
			}
		case inString:
			if ch == '\\' {
				if !hasNext {
					return errors.New("invalid header configuration. Un-terminated backslash in JSON string")
				}
				pos++
			} else if ch == ')' {
				state = expectVariableEnd
			} else if ch == '"' {
				state = expectArrayDelimiterOrEnd
			}
		case expectArgsEnd:
			if ch == ')' {
				state = expectVariableEnd
			} else if ch != ' ' {
				return errors.New("invalid header configuration. Expecting ')' or whitespace after '{}', but found '{}'")
			}
		case expectVariableEnd:
			if ch == '%' {
				state = literal
			} else if ch != ' ' {
				return errors.New("invalid header configuration. Expecting '%' or whitespace after")
			}
		}
	}
	if state != literal {
		return fmt.Errorf("invalid header configuration. Un-terminated variable expression '%s'", value)
	}
	return nil
}

// headersAt checks the header operations of a route or a destination, as validateHTTPRoute
// and validateHTTPRouteDestinations do: a request header to add or set may be the authority,
// no other header written may be Host or a pseudo-header, and values are Envoy's syntax.
func (v *validator) headersAt(p *path, h *networking.Headers) {
	if h == nil {
		return
	}
	req, resp := p.f("request"), p.f("response")
	v.headerOperationsAt(&req, h.GetRequest(), true)
	v.headerOperationsAt(&resp, h.GetResponse(), false)
}

func (v *validator) headerOperationsAt(p *path, ops *networking.Headers_HeaderOperations, request bool) {
	if ops == nil {
		return
	}
	for _, op := range [...]struct {
		name string
		set  map[string]string
	}{{"add", ops.GetAdd()}, {"set", ops.GetSet()}} {
		fp := p.f(op.name)
		for name, value := range op.set {
			kp := fp.k(name)
			if request {
				v.add(&kp, validateHTTPHeaderWithAuthorityOperationName(name))
			} else {
				v.add(&kp, validateHTTPHeaderOperationName(name))
			}
			v.add(&kp, validateHTTPHeaderValue(value))
		}
	}
	rp := p.f("remove")
	for i, name := range ops.GetRemove() {
		ip := rp.i(i)
		v.add(&ip, validateHTTPHeaderOperationName(name))
	}
}

// validateAuthorityRewrite mirrors validateAuthorityRewrite: the authority is rewritten in one
// place only.
func validateAuthorityRewrite(rewrite *networking.HTTPRewrite, headers *networking.Headers) error {
	current := rewrite.GetAuthority()
	for _, set := range [...]map[string]string{headers.GetRequest().GetSet(), headers.GetRequest().GetAdd()} {
		for k, val := range set {
			if !isAuthorityHeader(k) {
				continue
			}
			if current != "" {
				return fmt.Errorf("authority header cannot be set multiple times: have %q, attempting to set %q", current, val)
			}
			current = val
		}
	}
	return nil
}

// supportedCORSMethods are the methods of Go's net/http, and "*", as Istio's.
var supportedCORSMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "*",
}

// corsPolicyAt mirrors validateCORSPolicy.
func (v *validator) corsPolicyAt(p *path, c *networking.CorsPolicy) {
	if c == nil {
		return
	}
	op := p.f("allowOrigins")
	for i, origin := range c.AllowOrigins {
		ip := op.i(i)
		var match string
		switch origin.GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			match = origin.GetExact()
		case *networking.StringMatch_Prefix:
			match = origin.GetPrefix()
		case *networking.StringMatch_Regex:
			match = origin.GetRegex()
		}
		if match == "" {
			v.errorf(&ip, "'%v' is not a valid match type for CORS allow origins", match)
			continue
		}
		v.add(&ip, validateStringMatchRegexp(origin, "corsPolicy.allowOrigins"))
	}
	mp := p.f("allowMethods")
	for i, m := range c.AllowMethods {
		if !slices.Contains(supportedCORSMethods, m) {
			ip := mp.i(i)
			v.errorf(&ip, "%q is not a supported HTTP method", m)
		}
	}
	for _, f := range [...]struct {
		name  string
		names []string
	}{{"allowHeaders", c.AllowHeaders}, {"exposeHeaders", c.ExposeHeaders}} {
		fp := p.f(f.name)
		for i, name := range f.names {
			ip := fp.i(i)
			switch {
			case name == "":
				v.errorf(&ip, "header name cannot be empty")
			case name != "*" && !validHeaderName(name):
				v.errorf(&ip, "header name %s is not a valid header name", name)
			}
		}
	}
	if c.MaxAge != nil {
		ap := p.f("maxAge")
		v.add(&ap, validateDuration(c.MaxAge))
		if c.MaxAge.Nanos > 0 {
			v.errorf(&ap, "max_age duration is accurate only to seconds precision")
		}
	}
}

// supportedGRPCStatus are the codes of grpc-go, by their canonical names (grpc.SupportedGRPCStatus).
var supportedGRPCStatus = []string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// faultInjectionAt mirrors validateHTTPFaultInjection.
func (v *validator) faultInjectionAt(p *path, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if f.Abort == nil && f.Delay == nil {
		v.errorf(p, "HTTP fault injection must have an abort and/or a delay")
	}
	if a := f.Abort; a != nil {
		ap := p.f("abort")
		pp := ap.f("percentage")
		v.add(&pp, validatePercentage(a.Percentage))
		switch a.ErrorType.(type) {
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if !slices.Contains(supportedGRPCStatus, a.GetGrpcStatus()) {
				gp := ap.f("grpcStatus")
				v.errorf(&gp, "gRPC status %q is not supported. See https://github.com/grpc/grpc/blob/master/doc/statuscodes.md "+
					"for a list of supported codes, for example 'NOT_FOUND'", a.GetGrpcStatus())
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			hp := ap.f("http2Error")
			v.errorf(&hp, "HTTP/2 abort fault injection not supported yet")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			hp := ap.f("httpStatus")
			v.add(&hp, validateHTTPStatus(a.GetHttpStatus()))
		}
	}
	if d := f.Delay; d != nil {
		dp := p.f("delay")
		pp := dp.f("percentage")
		v.add(&pp, validatePercentage(d.Percentage))
		switch t := d.HttpDelayType.(type) {
		case *networking.HTTPFaultInjection_Delay_FixedDelay:
			fp := dp.f("fixedDelay")
			v.add(&fp, validateDuration(t.FixedDelay))
		case *networking.HTTPFaultInjection_Delay_ExponentialDelay:
			ep := dp.f("exponentialDelay")
			v.add(&ep, validateDuration(t.ExponentialDelay))
			v.errorf(&ep, "exponentialDelay not supported yet")
		}
	}
}

// validatePercentage mirrors validatePercentage.
func validatePercentage(p *networking.Percent) error {
	if p != nil && (p.Value < 0 || p.Value > 100 || p.Value > 0 && p.Value < 0.0001) {
		return fmt.Errorf("percentage %v is neither 0.0, nor in range [0.0001, 100.0]", p.Value)
	}
	return nil
}

// validateHTTPStatus mirrors validateHTTPStatus.
func validateHTTPStatus(status int32) error {
	if status < 200 || status > 600 {
		return fmt.Errorf("HTTP status %d is not in range 200-599", status)
	}
	return nil
}

// validateHTTPRedirect mirrors validateHTTPRedirect.
func validateHTTPRedirect(r *networking.HTTPRedirect, matches []*networking.HTTPMatchRequest) error {
	if r == nil {
		return nil
	}
	if r.Uri != "" && r.PrefixRewrite != "" {
		return errors.New("redirect may only specify one of uri or prefix_rewrite")
	}
	if r.PrefixRewrite != "" {
		for _, m := range matches {
			if _, isPrefix := m.GetUri().GetMatchType().(*networking.StringMatch_Prefix); m.GetUri() != nil && !isPrefix {
				return errors.New("redirect prefix_rewrite requires all URI matches to use prefix match type")
			}
		}
	}
	if r.Uri == "" && r.PrefixRewrite == "" && r.Authority == "" && r.RedirectPort == nil && r.Scheme == "" {
		return errors.New("redirect must specify URI, authority, scheme, or port")
	}
	if r.RedirectCode != 0 && (r.RedirectCode < 300 || r.RedirectCode > 399) {
		return fmt.Errorf("%d is not a valid redirect code, must be 3xx", r.RedirectCode)
	}
	if r.Scheme != "" && r.Scheme != "http" && r.Scheme != "https" {
		return errors.New(`invalid redirect scheme, must be "http" or "https"`)
	}
	if r.GetPort() > 0 {
		return validatePort(int(r.GetPort()))
	}
	return nil
}

// directResponseAt mirrors validateHTTPDirectResponse.
func (v *validator) directResponseAt(p *path, d *networking.HTTPDirectResponse) {
	if d == nil {
		return
	}
	if b := d.Body; b != nil {
		size := len(b.GetString_()) + len(b.GetBytes())
		if size > 1<<20 {
			bp := p.f("body")
			v.errorf(&bp, "large direct_responses may impact control plane performance, must be less than 1MB")
		}
	}
	sp := p.f("status")
	v.add(&sp, validateHTTPStatus(int32(d.Status)))
}

// retryOnPolicies are the values of Envoy's x-envoy-retry-on and x-envoy-retry-grpc-on that
// Istio accepts in retryOn (supportedRetryOnPolicies).
var retryOnPolicies = []string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "envoy-ratelimited",
	"http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}

// retriesAt mirrors validateHTTPRetry.
func (v *validator) retriesAt(p *path, r *networking.HTTPRetry) {
	if r == nil {
		return
	}
	ap := p.f("attempts")
	if r.Attempts < 0 {
		v.errorf(&ap, "attempts cannot be negative")
	}
	if r.Attempts == 0 && (r.PerTryTimeout != nil || r.RetryOn != "" || r.RetryRemoteLocalities != nil) {
		v.errorf(&ap, "http retry policy configured when attempts are set to 0 (disabled)")
	}
	pp := p.f("perTryTimeout")
	v.durationAt(&pp, r.PerTryTimeout)
	if r.RetryOn != "" {
		rp := p.f("retryOn")
		for policy := range strings.SplitSeq(r.RetryOn, ",") {
			code, _ := strconv.Atoi(policy) // a status code is a policy too
			if http.StatusText(code) == "" && !slices.Contains(retryOnPolicies, policy) {
				v.errorf(&rp, "%q is not a valid retryOn policy", policy)
			}
		}
	}
	bp := p.f("backoff")
	v.durationAt(&bp, r.Backoff)
}

// validateHTTPRewrite mirrors validateHTTPRewrite.
func validateHTTPRewrite(r *networking.HTTPRewrite) error {
	if r == nil {
		return nil
	}
	if r.Uri != "" && r.UriRegexRewrite != nil {
		return errors.New("rewrite may only contain one of URI or UriRegexRewrite")
	}
	if r.Uri == "" && r.UriRegexRewrite == nil && r.Authority == "" {
		return errors.New("rewrite must specify at least one of URI, UriRegexRewrite, or authority. Only one of URI or UriRegexRewrite may be specified")
	}
	if rr := r.UriRegexRewrite; rr != nil {
		var err error
		if rr.Match == "" || rr.Rewrite == "" {
			err = errors.New("UriRegexRewrite requires both Rewrite and Match fields to be specified")
		} else {
			err = validateStringRegexp(rr.Match, "HTTPRewrite.UriRegexRewrite.Match")
		}
		if err != nil {
			return errors.Join(errors.New("UriRegexRewrite has errors"), err)
		}
	}
	return nil
}

// httpRouteDestinationsAt mirrors validateHTTPRouteDestinations.
func (v *validator) httpRouteDestinationsAt(p *path, ds []*networking.HTTPRouteDestination, gatewaySemantics bool) {
	var total int32
	for i, d := range ds {
		ip := p.i(i)
		if d == nil {
			v.errorf(&ip, "weight may not be nil")
			continue
		}
		hp := ip.f("headers")
		v.headersAt(&hp, d.Headers)
		v.weightedDestinationAt(&ip, d.Destination, d.Weight, gatewaySemantics)
		total += d.Weight
	}
	if len(ds) > 1 && total == 0 {
		v.errorf(p, "total destination weight = 0")
	}
}

// routeDestinationsAt mirrors validateRouteDestinations (TCP and TLS routes) at a route's
// "route" field, which must not be empty (required says so).
func (v *validator) routeDestinationsAt(route *path, required string, ds []*networking.RouteDestination, gatewaySemantics bool) {
	p := route.f("route")
	if len(ds) == 0 {
		v.errorf(&p, "%s", required)
	}
	var total int32
	for i, d := range ds {
		ip := p.i(i)
		if d == nil {
			v.errorf(&ip, "weight may not be nil")
			continue
		}
		v.weightedDestinationAt(&ip, d.Destination, d.Weight, gatewaySemantics)
		total += d.Weight
	}
	if len(ds) > 1 && total == 0 {
		v.errorf(&p, "total destination weight = 0")
	}
}

// weightedDestinationAt checks a route's destination and its weight, as
// validateRouteDestinations and validateHTTPRouteDestinations do.
func (v *validator) weightedDestinationAt(p *path, d *networking.Destination, weight int32, gatewaySemantics bool) {
	dp := p.f("destination")
	if d == nil {
		v.errorf(&dp, "destination is required")
	}
	if !gatewaySemantics {
		v.destinationAt(&dp, d)
	}
	if weight < 0 {
		wp := p.f("weight")
		v.errorf(&wp, "weight %d < 0", weight)
	}
}

// destinationAt mirrors validateDestination.
func (v *validator) destinationAt(p *path, d *networking.Destination) {
	if d == nil {
		return
	}
	hp := p.f("host")
	if d.Host == "*" {
		v.errorf(&hp, "invalid destination host %s", d.Host)
	} else {
		v.add(&hp, validateWildcardDomain(d.Host))
	}
	if d.Subset != "" {
		sp := p.f("subset")
		v.add(&sp, validateSubsetName(d.Subset))
	}
	if d.Port != nil {
		pp := p.f("port")
		np := pp.f("number")
		v.add(&np, validatePort(int(d.Port.GetNumber())))
	}
}

// validateSubsetName mirrors validateSubsetName.
func validateSubsetName(name string) error {
	if name == "" {
		return errors.New("subset name cannot be empty")
	}
	if !isDNS1123Label(name) {
		return fmt.Errorf("subset name is invalid: %s", name)
	}
	return nil
}

// tlsRouteAt mirrors validateTLSRoute.
func (v *validator) tlsRouteAt(p *path, r *networking.TLSRoute, vs *networking.VirtualService, gatewaySemantics bool) {
	if r == nil {
		return
	}
	mp := p.f("match")
	if len(r.Match) == 0 {
		v.errorf(&mp, "TLS route must have at least one match condition")
	}
	for i, m := range r.Match {
		ip := mp.i(i)
		if m == nil {
			v.errorf(&ip, "TLS match may not be null")
			continue
		}
		sp := ip.f("sniHosts")
		if len(m.SniHosts) == 0 {
			v.errorf(&sp, "TLS match must have at least one SNI host")
		}
		for j, sni := range m.SniHosts {
			jp := sp.i(j)
			v.sniHostAt(&jp, sni, vs)
		}
		v.l4MatchAt(&ip, m.DestinationSubnets, m.Port, m.SourceLabels, m.Gateways)
	}
	v.routeDestinationsAt(p, "TLS route is required", r.Route, gatewaySemantics)
}

// sniHostAt mirrors validateSniHost: a domain (an IP address only warns) that is a subset of
// one of the VirtualService's hosts.
func (v *validator) sniHostAt(p *path, sni string, vs *networking.VirtualService) {
	var err error
	if !slices.Contains(vs.Gateways, "mesh") {
		err = validateWildcardDomainForVirtualServiceBoundToGateway(true, sni)
	} else {
		err = validateWildcardDomain(sni)
	}
	if err != nil {
		if !isValidIPAddress(sni) {
			v.add(p, err)
		}
		return
	}
	for _, h := range vs.Hosts {
		if hostSubsetOf(sni, h) {
			return
		}
	}
	v.errorf(p, "SNI host %q is not a compatible subset of any of the virtual service hosts: [%s]", sni, strings.Join(vs.Hosts, ", "))
}

// tcpRouteAt mirrors validateTCPRoute.
func (v *validator) tcpRouteAt(p *path, r *networking.TCPRoute, gatewaySemantics bool) {
	if r == nil {
		return
	}
	mp := p.f("match")
	for i, m := range r.Match {
		ip := mp.i(i)
		if m == nil {
			v.errorf(&ip, "tcp match may not be nil")
			continue
		}
		v.l4MatchAt(&ip, m.DestinationSubnets, m.Port, m.SourceLabels, m.Gateways)
	}
	v.routeDestinationsAt(p, "TCP route is required", r.Route, gatewaySemantics)
}

// l4MatchAt checks what TLS and TCP matches share, as validateTLSMatch and validateTCPMatch do.
func (v *validator) l4MatchAt(p *path, subnets []string, port uint32, sourceLabels map[string]string, gateways []string) {
	dp := p.f("destinationSubnets")
	for j, subnet := range subnets {
		jp := dp.i(j)
		v.add(&jp, validateIPSubnet(subnet))
	}
	if port != 0 {
		pp := p.f("port")
		v.add(&pp, validatePort(int(port)))
	}
	lp := p.f("sourceLabels")
	v.labelsAt(&lp, sourceLabels)
	gp := p.f("gateways")
	v.gatewayNamesAt(&gp, gateways, false)
}
