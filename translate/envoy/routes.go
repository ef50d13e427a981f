package envoy

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// routeContext builds the routes of one virtual host: for the mesh (gateway "") or for a
// gateway, on one port. Destinations without a port take the port's number when their host
// has it, as Istio does.
type routeContext struct {
	*build
	port      uint32
	gateway   string
	usesFault bool
}

func newRouteContext(b *build, port uint32, gateway string) *routeContext {
	return &routeContext{build: b, port: port, gateway: gateway}
}

// virtualServiceRoutes translates a VirtualService's http routes, in order. A route with a
// fault is left out (with the fault reported); the others are kept, so that one bad route
// never takes a host's other routes away. Requests that match no route get no route: Envoy
// answers 404 and grpc-go fails the call with UNAVAILABLE, as with Istio.
func (rc *routeContext) virtualServiceRoutes(vs *virtualService) []*routepb.Route {
	var out []*routepb.Route
	for i, hr := range vs.spec.GetHttp() {
		out = append(out, rc.httpRoute(vs, fmt.Sprintf("http[%d]", i), hr)...)
	}
	return out
}

// httpRoute translates one http route: one Envoy route per match (the matches of an Istio
// route are alternatives), all with the same action.
func (rc *routeContext) httpRoute(vs *virtualService, field string, hr *networking.HTTPRoute) []*routepb.Route {
	if hr.GetDelegate() != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s.delegate is not translated; the route is left out", field)
		return nil
	}
	if hr.GetCorsPolicy() != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s.corsPolicy is not translated; the route is served without it", field)
	}
	matches := hr.GetMatch()
	if len(matches) == 0 {
		matches = []*networking.HTTPMatchRequest{nil}
	}
	// Only the blocks meant for this port and gateway count: a route that has none here is
	// not translated here at all (its destinations may not even have this port).
	applicable := make([]bool, len(matches))
	for j, m := range matches {
		applicable[j] = rc.applies(vs, m)
	}
	if !slices.Contains(applicable, true) {
		return nil
	}
	tmpl, ok := rc.routeTemplate(vs, field, hr)
	if !ok {
		return nil
	}
	var out []*routepb.Route
	for j, m := range matches {
		if !applicable[j] {
			continue
		}
		mfield := fmt.Sprintf("%s.match[%d]", field, j)
		rm, ok := rc.routeMatch(vs, mfield, m)
		if !ok {
			continue
		}
		r := &routepb.Route{
			Name: routeName(hr.GetName(), m.GetName()), Match: rm, Action: tmpl.Action,
			TypedPerFilterConfig: tmpl.TypedPerFilterConfig,
			RequestHeadersToAdd:  tmpl.RequestHeadersToAdd, RequestHeadersToRemove: tmpl.RequestHeadersToRemove,
			ResponseHeadersToAdd: tmpl.ResponseHeadersToAdd, ResponseHeadersToRemove: tmpl.ResponseHeadersToRemove,
		}
		if err := r.ValidateAll(); err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s: the Envoy route is invalid and is left out: %v", mfield, err)
			continue
		}
		out = append(out, r)
	}
	return out
}

func routeName(route, match string) string {
	switch {
	case route == "":
		return match
	case match == "":
		return route
	}
	return route + "." + match
}

// applies tells whether a match block is meant for this virtual host: its port (if it names
// one) and its gateways (if it lists any, else the VirtualService's own bindings hold).
func (rc *routeContext) applies(vs *virtualService, m *networking.HTTPMatchRequest) bool {
	if m.GetPort() != 0 && m.GetPort() != rc.port {
		return false
	}
	if len(m.GetGateways()) == 0 {
		return true
	}
	gateways, mesh := bindings(m.GetGateways(), vs.Namespace)
	if rc.gateway == "" {
		return mesh
	}
	return slices.Contains(gateways, rc.gateway)
}

// routeTemplate is everything of a route but its match: the action (to destinations, a
// redirect, or a direct response), fault injection and header changes.
func (rc *routeContext) routeTemplate(vs *virtualService, field string, hr *networking.HTTPRoute) (*routepb.Route, bool) {
	r := &routepb.Route{}
	var single *resolved // the only destination, if so
	switch {
	case hr.GetRedirect() != nil:
		ra, ok := rc.redirect(vs, field+".redirect", hr.GetRedirect())
		if !ok {
			return nil, false
		}
		r.Action = &routepb.Route_Redirect{Redirect: ra}
	case hr.GetDirectResponse() != nil:
		dr := hr.GetDirectResponse()
		if dr.GetStatus() < 100 || dr.GetStatus() > 599 {
			rc.fs.add(kindVirtualService, vs.Key, "%s.directResponse.status: %d is not an HTTP status; the route is left out", field, dr.GetStatus())
			return nil, false
		}
		r.Action = &routepb.Route_DirectResponse{DirectResponse: directResponse(dr)}
	case len(hr.GetRoute()) > 0:
		ra, only, ok := rc.routeAction(vs, field, hr)
		if !ok {
			return nil, false
		}
		r.Action = &routepb.Route_Route{Route: ra}
		single = only
	default:
		rc.fs.add(kindVirtualService, vs.Key, "%s has no route, redirect or directResponse; it is left out", field)
		return nil, false
	}
	if f := hr.GetFault(); f != nil {
		cfg, ok := rc.faultConfig(vs, field+".fault", f)
		if !ok {
			return nil, false
		}
		r.TypedPerFilterConfig = map[string]*anypb.Any{faultFilterName: cfg}
		rc.usesFault = true
	}
	req, resp := hr.GetHeaders().GetRequest(), hr.GetHeaders().GetResponse()
	r.RequestHeadersToAdd, r.RequestHeadersToRemove = rc.headerOps(vs, field+".headers.request", req)
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = rc.headerOps(vs, field+".headers.response", resp)
	rc.addDestinationHeaders(vs, r, single)
	return r, true
}

// addDestinationHeaders adds the header changes of a route's only destination to the
// route's own, after them (with several destinations they go to each weighted cluster).
func (rc *routeContext) addDestinationHeaders(vs *virtualService, r *routepb.Route, d *resolved) {
	if d == nil || d.headers == nil {
		return
	}
	add, remove := rc.headerOps(vs, d.field+".headers.request", d.headers.GetRequest())
	r.RequestHeadersToAdd, r.RequestHeadersToRemove = append(r.RequestHeadersToAdd, add...), append(r.RequestHeadersToRemove, remove...)
	add, remove = rc.headerOps(vs, d.field+".headers.response", d.headers.GetResponse())
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = append(r.ResponseHeadersToAdd, add...), append(r.ResponseHeadersToRemove, remove...)
}

func directResponse(dr *networking.HTTPDirectResponse) *routepb.DirectResponseAction {
	out := &routepb.DirectResponseAction{Status: dr.GetStatus()}
	switch {
	case dr.GetBody().GetString_() != "":
		out.Body = &corepb.DataSource{Specifier: &corepb.DataSource_InlineString{InlineString: dr.GetBody().GetString_()}}
	case len(dr.GetBody().GetBytes()) > 0:
		out.Body = &corepb.DataSource{Specifier: &corepb.DataSource_InlineBytes{InlineBytes: dr.GetBody().GetBytes()}}
	}
	return out
}

// routeAction routes to the route's destinations. A destination that cannot be resolved (an
// unknown host, port or subset) is left out with a fault and the others keep their relative
// weights, so a canary whose subset is missing sends everything to what exists rather than
// failing a share of the requests. A route left with no destination is left out. With one
// destination left, it is returned too: its header changes are the route's.
func (rc *routeContext) routeAction(vs *virtualService, field string, hr *networking.HTTPRoute) (*routepb.RouteAction, *resolved, bool) {
	ds, ok := rc.weightedDestinations(vs, field, hr.GetRoute())
	if !ok {
		return nil, nil, false
	}
	if len(ds) == 0 {
		rc.fs.add(kindVirtualService, vs.Key, "%s: no destination is left; the route is left out", field)
		return nil, nil, false
	}
	var single *resolved
	ra := &routepb.RouteAction{Timeout: durationpb.New(0)} // Istio's default: no timeout
	if len(ds) == 1 {
		single = &ds[0]
		ra.ClusterSpecifier = &routepb.RouteAction_Cluster{Cluster: single.cluster}
		ra.HashPolicy = single.pol.hashPolicy()
	} else {
		wc := &routepb.WeightedCluster{}
		for _, d := range ds {
			cw := &routepb.WeightedCluster_ClusterWeight{Name: d.cluster, Weight: wrapperspb.UInt32(d.weight)}
			cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = rc.headerOps(vs, d.field+".headers.request", d.headers.GetRequest())
			cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = rc.headerOps(vs, d.field+".headers.response", d.headers.GetResponse())
			wc.Clusters = append(wc.Clusters, cw)
		}
		ra.ClusterSpecifier = &routepb.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	if t := hr.GetTimeout(); t != nil && t.AsDuration() > 0 {
		// grpc-go takes the timeout from max_stream_duration; Envoy from timeout.
		ra.Timeout = t
		ra.MaxStreamDuration = &routepb.RouteAction_MaxStreamDuration{MaxStreamDuration: t, GrpcTimeoutHeaderMax: t}
	}
	ra.RetryPolicy = rc.retryPolicy(vs, field+".retries", hr.GetRetries())
	if !rc.rewrite(vs, field+".rewrite", hr.GetRewrite(), ra) {
		return nil, nil, false
	}
	ra.RequestMirrorPolicies = rc.mirrors(vs, field, hr)
	return ra, single, true
}

// resolved is a destination resolved to its cluster.
type resolved struct {
	cluster string
	pol     policy // the destination's traffic policy, for its hash policy
	weight  uint32
	headers *networking.Headers
	field   string
}

// weightedDestinations resolves a route's destinations. It reports false (the route is left
// out, with a fault) when their weights add up past what Envoy and grpc-go accept.
func (rc *routeContext) weightedDestinations(vs *virtualService, field string, rds []*networking.HTTPRouteDestination) ([]resolved, bool) {
	var out []resolved
	for i, rd := range rds {
		dfield := fmt.Sprintf("%s.route[%d]", field, i)
		d, ok := rc.destination(vs, dfield+".destination", rd.GetDestination())
		if !ok {
			continue
		}
		if rd.GetWeight() < 0 {
			rc.fs.add(kindVirtualService, vs.Key, "%s.weight: %d is negative; the destination is left out", dfield, rd.GetWeight())
			continue
		}
		d.weight, d.headers, d.field = uint32(rd.GetWeight()), rd.GetHeaders(), dfield
		out = append(out, d)
	}
	if len(out) <= 1 {
		return out, true
	}
	var total uint64
	for _, d := range out {
		total += uint64(d.weight)
	}
	if total > math.MaxUint32 {
		rc.fs.add(kindVirtualService, vs.Key, "%s: the destinations' weights add up past %d; the route is left out", field, uint64(math.MaxUint32))
		return nil, false
	}
	// Weights are relative (Envoy and grpc-go take any total); a destination of weight 0
	// gets nothing. All zero is a mistake: split evenly.
	kept := slices.DeleteFunc(slices.Clone(out), func(d resolved) bool { return d.weight == 0 })
	if len(kept) > 0 {
		return kept, true
	}
	rc.fs.add(kindVirtualService, vs.Key, "%s: the destinations' weights are all 0; traffic is split evenly", field)
	for i := range out {
		out[i].weight = 1
	}
	return out, true
}

// destination resolves a destination to its cluster: the host (completed in the
// VirtualService's namespace) must be defined by a ServiceEntry, the port must be one of its
// ports (without one: its only port, else the port being routed), and the subset must be
// defined by the host's DestinationRule.
func (rc *routeContext) destination(vs *virtualService, field string, d *networking.Destination) (resolved, bool) {
	if d.GetHost() == "" {
		rc.fs.add(kindVirtualService, vs.Key, "%s.host is empty; the destination is left out", field)
		return resolved{}, false
	}
	host := fqdn(d.GetHost(), vs.Namespace, rc.t.suffix)
	rc.dependOn(depHost, host)
	se, _ := rc.t.serviceEntryFor(host)
	if se == nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s.host: %s is not defined by any ServiceEntry; the destination is left out", field, host)
		return resolved{}, false
	}
	p, ok := rc.destinationPort(vs, field, host, se, d.GetPort().GetNumber())
	if !ok {
		return resolved{}, false
	}
	dr, _ := rc.t.destinationRuleFor(host)
	var ss *networking.Subset
	if d.GetSubset() != "" {
		if ss = dr.subset(d.GetSubset()); ss == nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.subset: %q is not defined by a DestinationRule for %s; the destination is left out", field, d.GetSubset(), host)
			return resolved{}, false
		}
	}
	return resolved{cluster: ClusterName(p, d.GetSubset(), host), pol: effectivePolicy(dr, ss, p)}, true
}

func (rc *routeContext) destinationPort(vs *virtualService, field, host string, se *serviceEntry, want uint32) (uint32, bool) {
	var ignored faults // the ServiceEntry's own faults are its host's to report
	ports := servicePorts(se, &ignored)
	has := func(n uint32) bool {
		return slices.ContainsFunc(ports, func(p port) bool { return p.number == n })
	}
	switch {
	case want != 0 && has(want):
		return want, true
	case want != 0:
		rc.fs.add(kindVirtualService, vs.Key, "%s.port: %s has no port %d; the destination is left out", field, host, want)
	case len(ports) == 1:
		return ports[0].number, true
	case has(rc.port):
		return rc.port, true
	default:
		rc.fs.add(kindVirtualService, vs.Key, "%s.port is needed: %s has %d ports and none is %d; the destination is left out", field, host, len(ports), rc.port)
	}
	return 0, false
}

// defaultRoute is the route of a host without a VirtualService: everything to its cluster.
func (rc *routeContext) defaultRoute(host string, port uint32) *routepb.Route {
	dr, _ := rc.t.destinationRuleFor(host)
	pol := effectivePolicy(dr, nil, port)
	return &routepb.Route{
		Name:  "default",
		Match: &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routepb.Route_Route{Route: &routepb.RouteAction{
			ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: ClusterName(port, "", host)},
			Timeout:          durationpb.New(0),
			RetryPolicy:      defaultRetryPolicy(),
			HashPolicy:       pol.hashPolicy(),
		}},
	}
}

// Istio's default retry policy for routes without retries: two retries on connection
// failures, refused streams, gRPC UNAVAILABLE and CANCELLED, and HTTP 503, each on another host.
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

func defaultRetryPolicy() *routepb.RetryPolicy {
	return &routepb.RetryPolicy{
		RetryOn:                       defaultRetryOn,
		NumRetries:                    wrapperspb.UInt32(2),
		RetriableStatusCodes:          []uint32{503},
		RetryHostPredicate:            previousHosts(),
		HostSelectionRetryMaxAttempts: 5,
	}
}

func previousHosts() []*routepb.RetryPolicy_RetryHostPredicate {
	cfg, _ := pack(&previoushosts.PreviousHostsPredicate{}) // an empty message always packs
	return []*routepb.RetryPolicy_RetryHostPredicate{{
		Name: previousHostsName, ConfigType: &routepb.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: cfg},
	}}
}

// retryPolicy translates retries: none given is Istio's default policy; attempts 0 turns
// retries off. HTTP status codes in retryOn become retriable status codes.
func (rc *routeContext) retryPolicy(vs *virtualService, field string, r *networking.HTTPRetry) *routepb.RetryPolicy {
	if r == nil {
		return defaultRetryPolicy()
	}
	if r.GetAttempts() <= 0 {
		return nil
	}
	rp := &routepb.RetryPolicy{NumRetries: wrapperspb.UInt32(uint32(r.GetAttempts())), PerTryTimeout: r.GetPerTryTimeout()}
	if r.GetRetryOn() == "" {
		rp.RetryOn, rp.RetriableStatusCodes = defaultRetryOn, []uint32{503}
	} else {
		rp.RetryOn, rp.RetriableStatusCodes = parseRetryOn(r.GetRetryOn())
	}
	if r.GetRetryIgnorePreviousHosts() == nil || r.GetRetryIgnorePreviousHosts().GetValue() {
		rp.RetryHostPredicate, rp.HostSelectionRetryMaxAttempts = previousHosts(), 5
	}
	if b := r.GetBackoff(); b != nil && b.AsDuration() > 0 {
		rp.RetryBackOff = &routepb.RetryPolicy_RetryBackOff{BaseInterval: b}
	}
	if r.GetRetryRemoteLocalities() != nil {
		rc.fs.add(kindVirtualService, vs.Key, "%s.retryRemoteLocalities is not translated", field)
	}
	return rp
}

// parseRetryOn splits Istio's retryOn: numbers are HTTP status codes to retry, the rest are
// Envoy (and gRPC) retry conditions, passed as written.
func parseRetryOn(s string) (string, []uint32) {
	var conds []string
	var codes []uint32
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		var code uint32
		if _, err := fmt.Sscanf(part, "%d", &code); err == nil && fmt.Sprint(code) == part {
			codes = append(codes, code)
			continue
		}
		if part != "" && !slices.Contains(conds, part) {
			conds = append(conds, part)
		}
	}
	if len(codes) > 0 && !slices.Contains(conds, "retriable-status-codes") {
		conds = append(conds, "retriable-status-codes")
	}
	return strings.Join(conds, ","), codes
}

// rewrite sets the path and authority rewrites. It reports false (the route is left out)
// for a regular expression that does not compile.
func (rc *routeContext) rewrite(vs *virtualService, field string, rw *networking.HTTPRewrite, ra *routepb.RouteAction) bool {
	if rw == nil {
		return true
	}
	switch {
	case rw.GetUri() != "" && rw.GetUriRegexRewrite() != nil:
		rc.fs.add(kindVirtualService, vs.Key, "%s: uri and uriRegexRewrite exclude each other; uri is used", field)
		ra.PrefixRewrite = rw.GetUri()
	case rw.GetUri() != "":
		// Istio rewrites the matched prefix (the whole path for an exact match).
		ra.PrefixRewrite = rw.GetUri()
	case rw.GetUriRegexRewrite() != nil:
		re := rw.GetUriRegexRewrite()
		m, err := regexMatcher(re.GetMatch())
		if err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.uriRegexRewrite.match: %v; the route is left out", field, err)
			return false
		}
		ra.RegexRewrite = &matcherpb.RegexMatchAndSubstitute{Pattern: m, Substitution: re.GetRewrite()}
	}
	if rw.GetAuthority() != "" {
		ra.HostRewriteSpecifier = &routepb.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.GetAuthority()}
	}
	return true
}

// redirect translates an HTTP redirect; Istio's default code is 301.
func (rc *routeContext) redirect(vs *virtualService, field string, rd *networking.HTTPRedirect) (*routepb.RedirectAction, bool) {
	out := &routepb.RedirectAction{HostRedirect: rd.GetAuthority()}
	if rd.GetUri() != "" {
		out.PathRewriteSpecifier = &routepb.RedirectAction_PathRedirect{PathRedirect: rd.GetUri()}
	}
	if p := rd.GetPort(); p != 0 {
		if p > 65535 {
			rc.fs.add(kindVirtualService, vs.Key, "%s.port: %d is not a port number; the route is left out", field, p)
			return nil, false
		}
		out.PortRedirect = p
	}
	if s := rd.GetScheme(); s != "" {
		out.SchemeRewriteSpecifier = &routepb.RedirectAction_SchemeRedirect{SchemeRedirect: s}
	}
	switch rd.GetRedirectCode() {
	case 0, 301:
		out.ResponseCode = routepb.RedirectAction_MOVED_PERMANENTLY
	case 302:
		out.ResponseCode = routepb.RedirectAction_FOUND
	case 303:
		out.ResponseCode = routepb.RedirectAction_SEE_OTHER
	case 307:
		out.ResponseCode = routepb.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		out.ResponseCode = routepb.RedirectAction_PERMANENT_REDIRECT
	default:
		rc.fs.add(kindVirtualService, vs.Key, "%s.redirectCode: %d is not a redirect code Envoy can send (301, 302, 303, 307, 308); 301 is used", field, rd.GetRedirectCode())
	}
	return out, true
}

// headerOps translates header changes: set overwrites, add appends. A header Envoy would
// refuse to change (a pseudo-header, Host, or not a header name) is left out with a fault.
func (rc *routeContext) headerOps(vs *virtualService, field string, ops *networking.Headers_HeaderOperations) ([]*corepb.HeaderValueOption, []string) {
	if ops == nil {
		return nil, nil
	}
	var add []*corepb.HeaderValueOption
	for _, group := range []struct {
		name   string
		m      map[string]string
		action corepb.HeaderValueOption_HeaderAppendAction
	}{
		{"set", ops.GetSet(), corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{"add", ops.GetAdd(), corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
	} {
		for _, k := range sortedKeys(group.m) {
			if !mutableHeader(k) {
				rc.fs.add(kindVirtualService, vs.Key, "%s.%s: %q is not a header a route can change; it is left out", field, group.name, k)
				continue
			}
			h := &corepb.HeaderValueOption{Header: &corepb.HeaderValue{Key: k, Value: group.m[k]}, AppendAction: group.action}
			if err := h.ValidateAll(); err != nil {
				rc.fs.add(kindVirtualService, vs.Key, "%s.%s[%s]: %v; the header is left out", field, group.name, k, err)
				continue
			}
			add = append(add, h)
		}
	}
	var remove []string
	for _, k := range ops.GetRemove() {
		if !mutableHeader(k) {
			rc.fs.add(kindVirtualService, vs.Key, "%s.remove: %q is not a header a route can change; it is left out", field, k)
			continue
		}
		remove = append(remove, k)
	}
	return add, remove
}

// mirrors translates mirror (with mirrorPercentage or the older mirrorPercent) and mirrors.
// Without a percentage everything is mirrored.
func (rc *routeContext) mirrors(vs *virtualService, field string, hr *networking.HTTPRoute) []*routepb.RouteAction_RequestMirrorPolicy {
	var out []*routepb.RouteAction_RequestMirrorPolicy
	add := func(f string, d *networking.Destination, pct *float64) {
		r, ok := rc.destination(vs, f, d)
		if !ok {
			return
		}
		mp := &routepb.RouteAction_RequestMirrorPolicy{Cluster: r.cluster}
		if pct != nil {
			mp.RuntimeFraction = &corepb.RuntimeFractionalPercent{DefaultValue: fractionOf(*pct)}
		}
		out = append(out, mp)
	}
	if m := hr.GetMirror(); m != nil {
		var pct *float64
		switch {
		case hr.GetMirrorPercentage() != nil:
			v := hr.GetMirrorPercentage().GetValue()
			pct = &v
		case hr.GetMirrorPercent() != nil:
			v := float64(hr.GetMirrorPercent().GetValue())
			pct = &v
		}
		add(field+".mirror", m, pct)
	}
	for i, m := range hr.GetMirrors() {
		var pct *float64
		if m.GetPercentage() != nil {
			v := m.GetPercentage().GetValue()
			pct = &v
		}
		add(fmt.Sprintf("%s.mirrors[%d].destination", field, i), m.GetDestination(), pct)
	}
	return out
}
