package envoy

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/mcpbridge/mcpbridge/internal/hostname"
	"google.golang.org/protobuf/proto"
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
	port    uint32
	gateway string
}

func newRouteContext(b *build, port uint32, gateway string) *routeContext {
	return &routeContext{build: b, port: port, gateway: gateway}
}

// virtualServiceRoutes translates a VirtualService's http routes, in order, with its
// delegates' routes merged in (see delegate.go). A route with a fault is left out (with the
// fault reported); the others are kept, so that one bad route never takes a host's other
// routes away. Requests that match no route get no route: Envoy answers 404 and grpc-go fails
// the call with UNAVAILABLE, as with Istio. As istiod does (BuildHTTPRoutesForVirtualService),
// nothing is translated after a catch-all route (an http route without match, or a match of
// every path with no header or query parameter condition): no request could reach it.
func (rc *routeContext) virtualServiceRoutes(vs *virtualService) []*routepb.Route {
	var out []*routepb.Route
	for _, mr := range rc.mergedRoutes(vs) {
		routes, catchAll := rc.httpRoute(vs, mr.field, mr.route)
		out = append(out, routes...)
		if catchAll {
			break
		}
	}
	return out
}

// httpRoute translates one http route: one Envoy route per match (the matches of an Istio
// route are alternatives), all with the same action. It reports whether a catch-all route was
// translated, after which nothing more is.
func (rc *routeContext) httpRoute(vs *virtualService, field string, hr *networking.HTTPRoute) ([]*routepb.Route, bool) {
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
		return nil, false
	}
	tmpl, ok := rc.routeTemplate(vs, field, hr)
	if !ok {
		return nil, false
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
			Decorator:            &routepb.Decorator{Operation: routeOperation(tmpl.Action, rm, vs.name(), rc.port)},
			TypedPerFilterConfig: tmpl.TypedPerFilterConfig,
			RequestHeadersToAdd:  tmpl.RequestHeadersToAdd, RequestHeadersToRemove: tmpl.RequestHeadersToRemove,
			ResponseHeadersToAdd: tmpl.ResponseHeadersToAdd, ResponseHeadersToRemove: tmpl.ResponseHeadersToRemove,
		}
		if m != nil && m.GetStatPrefix() != "" {
			r.StatPrefix = m.GetStatPrefix()
		}
		if err := r.ValidateAll(); err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s: the Envoy route is invalid and is left out: %v", mfield, err)
			continue
		}
		out = append(out, r)
		if m == nil || isCatchAll(r.GetMatch()) {
			return out, true
		}
	}
	return out, false
}

// isCatchAll is istiod's IsCatchAllRoute: a match of every path ("/" or the regex ".*") with
// no header, query parameter or metadata condition.
func isCatchAll(m *routepb.RouteMatch) bool {
	all := false
	switch ps := m.GetPathSpecifier().(type) {
	case *routepb.RouteMatch_Prefix:
		all = ps.Prefix == "/"
	case *routepb.RouteMatch_PathSeparatedPrefix:
		all = ps.PathSeparatedPrefix == "/"
	case *routepb.RouteMatch_SafeRegex:
		all = ps.SafeRegex.GetRegex() == ".*"
	}
	return all && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetDynamicMetadata()) == 0
}

// routeOperation is the route's decorator operation, as istiod writes it (GetRouteOperation):
// "HOST:PORT" of the route's only cluster, else "VIRTUALSERVICE:PORT" (the VirtualService's
// name), followed by the path matched: "PREFIX*", the exact path, the regular expression, or
// "/*".
func routeOperation(action any, m *routepb.RouteMatch, vsName string, port uint32) string {
	path := "/*"
	switch ps := m.GetPathSpecifier().(type) {
	case *routepb.RouteMatch_Prefix:
		path = ps.Prefix + "*"
	case *routepb.RouteMatch_Path:
		path = ps.Path
	case *routepb.RouteMatch_SafeRegex:
		path = ps.SafeRegex.GetRegex()
	}
	if ra, ok := action.(*routepb.Route_Route); ok {
		if c := ra.Route.GetCluster(); c != "" {
			if p, _, host, ok := parseClusterName(c); ok {
				return host + ":" + strconv.FormatUint(uint64(p), 10) + path
			}
		}
	}
	return vsName + ":" + strconv.FormatUint(uint64(port), 10) + path
}

// parseClusterName reads outbound|PORT|SUBSET|HOST.
func parseClusterName(c string) (port uint32, subset, host string, ok bool) {
	parts := strings.Split(c, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return 0, "", "", false
	}
	n, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil {
		return 0, "", "", false
	}
	return uint32(n), parts[2], parts[3], true
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
// redirect, or a direct response), fault injection, CORS and header changes.
func (rc *routeContext) routeTemplate(vs *virtualService, field string, hr *networking.HTTPRoute) (*routepb.Route, bool) {
	r := &routepb.Route{}
	req, resp := hr.GetHeaders().GetRequest(), hr.GetHeaders().GetResponse()
	var authority string
	r.RequestHeadersToAdd, r.RequestHeadersToRemove, authority = rc.headerOps(vs, field+".headers.request", req, true)
	r.ResponseHeadersToAdd, r.ResponseHeadersToRemove, _ = rc.headerOps(vs, field+".headers.response", resp, false)
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
		ra, ok := rc.routeAction(vs, field, hr, r, authority)
		if !ok {
			return nil, false
		}
		r.Action = &routepb.Route_Route{Route: ra}
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
	}
	if c := hr.GetCorsPolicy(); c != nil {
		cfg, err := corsPerRoute(c)
		if err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.corsPolicy: %v; the route is left out", field, err)
			return nil, false
		}
		if r.TypedPerFilterConfig == nil {
			r.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		r.TypedPerFilterConfig[corsFilterName] = cfg
	}
	return r, true
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

// routeAction routes to the route's destinations, as istiod does (applyHTTPRouteDestination):
// one destination is a cluster, whose header changes are appended to the route's (r); several
// are weighted clusters (those of weight 0 left out), each with its own header changes. An
// authority set by the route's request headers, else by its rewrite, else (one destination)
// by the destination's, rewrites the Host header. A destination that cannot be resolved (an
// unknown host, port or subset) is left out with a fault and the others keep their relative
// weights, so a canary whose subset is missing sends everything to what exists rather than
// failing a share of the requests. A route left with no destination is left out.
func (rc *routeContext) routeAction(vs *virtualService, field string, hr *networking.HTTPRoute, r *routepb.Route, authority string) (*routepb.RouteAction, bool) {
	ds, ok := rc.weightedDestinations(vs, field, hr.GetRoute())
	if !ok {
		return nil, false
	}
	if len(ds) == 0 {
		rc.fs.add(kindVirtualService, vs.Key, "%s: no destination is left; the route is left out", field)
		return nil, false
	}
	ra := &routepb.RouteAction{}
	setTimeout(ra, hr.GetTimeout())
	if !rc.rewrite(vs, field+".rewrite", hr.GetRewrite(), ra, &authority) {
		return nil, false
	}
	if authority != "" {
		ra.HostRewriteSpecifier = &routepb.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
	ra.RequestMirrorPolicies = rc.mirrors(vs, field, hr)
	consistentHash := false
	if len(hr.GetRoute()) == 1 {
		d := &ds[0]
		ra.ClusterSpecifier = &routepb.RouteAction_Cluster{Cluster: d.cluster}
		add, remove, auth := rc.headerOps(vs, d.field+".headers.request", d.headers.GetRequest(), true)
		r.RequestHeadersToAdd, r.RequestHeadersToRemove = append(r.RequestHeadersToAdd, add...), append(r.RequestHeadersToRemove, remove...)
		add, remove, _ = rc.headerOps(vs, d.field+".headers.response", d.headers.GetResponse(), false)
		r.ResponseHeadersToAdd, r.ResponseHeadersToRemove = append(r.ResponseHeadersToAdd, add...), append(r.ResponseHeadersToRemove, remove...)
		if auth != "" && ra.HostRewriteSpecifier == nil {
			ra.HostRewriteSpecifier = &routepb.RouteAction_HostRewriteLiteral{HostRewriteLiteral: auth}
		}
		if hp := hashPolicyOf(d.hash); hp != nil {
			ra.HashPolicy = append(ra.HashPolicy, hp)
			consistentHash = true
		}
	} else {
		wc := &routepb.WeightedCluster{}
		for _, d := range ds {
			cw := &routepb.WeightedCluster_ClusterWeight{Name: d.cluster, Weight: wrapperspb.UInt32(d.weight)}
			var auth string
			cw.RequestHeadersToAdd, cw.RequestHeadersToRemove, auth = rc.headerOps(vs, d.field+".headers.request", d.headers.GetRequest(), true)
			cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove, _ = rc.headerOps(vs, d.field+".headers.response", d.headers.GetResponse(), false)
			if auth != "" {
				cw.HostRewriteSpecifier = &routepb.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: auth}
			}
			if hp := hashPolicyOf(d.hash); hp != nil {
				ra.HashPolicy = append(ra.HashPolicy, hp)
			}
			wc.Clusters = append(wc.Clusters, cw)
		}
		ra.ClusterSpecifier = &routepb.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	ra.RetryPolicy = rc.retryPolicy(vs, field+".retries", hr.GetRetries(), consistentHash)
	return ra, true
}

// setTimeout sets a route's timeout as istiod sets it for an Envoy proxy (setTimeout): the
// VirtualService's, else 0 (none), and max_grpc_timeout the same, so that a gRPC request's
// grpc-timeout header is honoured up to it (0: without a cap). A proxyless gRPC client reads
// max_stream_duration instead: grpcRoutes moves the value there for its route
// configurations, as istiod does for a proxyless node.
func setTimeout(ra *routepb.RouteAction, t *durationpb.Duration) {
	ra.Timeout = noTimeout
	if t != nil {
		ra.Timeout = t
	}
	ra.MaxGrpcTimeout = ra.Timeout //nolint:staticcheck // what istiod sets for Envoy: max_stream_duration regressed there
}

// noTimeout is a zero duration: no timeout. Shared, never modified.
var noTimeout = durationpb.New(0)

// resolved is a destination resolved to its cluster.
type resolved struct {
	cluster string
	hash    *networking.LoadBalancerSettings_ConsistentHashLB // the destination's consistent hash, if any
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
	host := hostname.Complete(d.GetHost(), vs.Namespace, rc.t.suffix)
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
	return resolved{cluster: ClusterName(p, d.GetSubset(), host), hash: destinationHash(dr, d)}, true
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

// defaultRoute is the route of a host without a VirtualService, as istiod builds it
// (BuildDefaultHTTPOutboundRoute): everything to the host's cluster, no timeout, the default
// retry policy, and the host's consistent hash (hp, from its DestinationRule: defaultRouteHash).
// istiod builds it with no proxy at hand, so it is the same for Envoy and proxyless gRPC
// clients (max_grpc_timeout, which grpc-go ignores), and its retries keep the previous-hosts
// predicate even with a consistent hash.
func defaultRoute(host string, port uint32, hp *routepb.RouteAction_HashPolicy) *routepb.Route {
	r := defaultRouteFor(ClusterName(port, "", host), defaultRouteOperation(host, port))
	if hp != nil {
		r.GetRoute().HashPolicy = []*routepb.RouteAction_HashPolicy{hp}
	}
	return r
}

// defaultRouteHash is the hash policy of a host's default route: its DestinationRule's
// consistent hash for the port, if any.
func defaultRouteHash(dr *destinationRule, port uint32) *routepb.RouteAction_HashPolicy {
	return hashPolicyOf(serviceHash(dr, port))
}

// defaultRouteOperation is the decorator operation of a host's default route.
func defaultRouteOperation(host string, port uint32) string { return domainName(host, port) + "/*" }

// defaultRouteFor is istiod's default route to a cluster, without a hash policy
// (defaultRouteRest encodes it from parts).
func defaultRouteFor(cluster, operation string) *routepb.Route {
	ra := &routepb.RouteAction{
		ClusterSpecifier: &routepb.RouteAction_Cluster{Cluster: cluster},
		RetryPolicy:      defaultRetries.previousHosts,
	}
	setTimeout(ra, nil)
	return &routepb.Route{
		Name:      "default",
		Match:     &routepb.RouteMatch{PathSpecifier: &routepb.RouteMatch_Prefix{Prefix: "/"}},
		Decorator: &routepb.Decorator{Operation: operation},
		Action:    &routepb.Route_Route{Route: ra},
	}
}

// retryPolicy translates retries as istiod does (retry.ConvertPolicy). Without retries,
// Istio's default policy: two retries on connection failures, refused streams, gRPC
// UNAVAILABLE and CANCELLED, and retriable status codes, of which there are none (so no HTTP
// response is retried and a request that reached its upstream is not sent twice), each on
// another host (previous_hosts, up to 5 tries to find one) unless the route's only destination
// is hashed consistently, where retrying elsewhere would break the affinity. attempts 0 turns
// retries off. A policy given starts from the default: retryOn replaces the conditions (its
// HTTP status codes become retriable status codes), retryIgnorePreviousHosts set decides the
// predicate either way, retryRemoteLocalities adds the previous_priorities priority.
func (rc *routeContext) retryPolicy(vs *virtualService, field string, r *networking.HTTPRetry, consistentHash bool) *routepb.RetryPolicy {
	if r == nil {
		if consistentHash {
			return defaultRetries.hashed
		}
		return defaultRetries.previousHosts
	}
	if r.GetAttempts() <= 0 {
		return nil
	}
	rp := &routepb.RetryPolicy{
		NumRetries:                    wrapperspb.UInt32(uint32(r.GetAttempts())),
		RetryOn:                       defaultRetryOn,
		HostSelectionRetryMaxAttempts: 5,
		PerTryTimeout:                 r.GetPerTryTimeout(),
	}
	if !consistentHash {
		rp.RetryHostPredicate = defaultRetries.predicate
	}
	if r.GetRetryOn() != "" {
		rp.RetryOn, rp.RetriableStatusCodes = parseRetryOn(r.GetRetryOn())
		if len(rp.RetriableStatusCodes) > 0 && !strings.Contains(rp.RetryOn, "retriable-status-codes") {
			// istiod appends ",retriable-status-codes" even to an empty list of conditions;
			// a leading comma is an empty condition, which Envoy need not accept.
			if rp.RetryOn != "" {
				rp.RetryOn += ","
			}
			rp.RetryOn += "retriable-status-codes"
		}
	}
	if ip := r.GetRetryIgnorePreviousHosts(); ip != nil {
		rp.RetryHostPredicate = nil
		if ip.GetValue() {
			rp.RetryHostPredicate = defaultRetries.predicate
		}
	}
	if r.GetRetryRemoteLocalities().GetValue() {
		rp.RetryPriority = defaultRetries.priority
	}
	if b := r.GetBackoff(); b != nil {
		if b.AsDuration() <= 0 {
			rc.fs.add(kindVirtualService, vs.Key, "%s.backoff: %v is not a positive duration; Envoy's default backoff is used", field, b.AsDuration())
		} else {
			rp.RetryBackOff = &routepb.RetryPolicy_RetryBackOff{BaseInterval: b}
		}
	}
	return rp
}

// defaultRetryOn is istiod's default retry conditions.
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// defaultRetries are istiod's default retry policies and the parts of a policy every route
// shares, built once and never modified (concurrent host builds marshal them).
var defaultRetries = func() (d struct {
	previousHosts, hashed *routepb.RetryPolicy
	predicate             []*routepb.RetryPolicy_RetryHostPredicate
	priority              *routepb.RetryPolicy_RetryPriority
}) {
	hosts, err := pack(&previoushosts.PreviousHostsPredicate{})
	if err != nil {
		panic(err) // an empty message always packs
	}
	prio, err := pack(&previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 2})
	if err != nil {
		panic(err) // a valid constant message
	}
	d.predicate = []*routepb.RetryPolicy_RetryHostPredicate{{
		Name: previousHostsName, ConfigType: &routepb.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: hosts},
	}}
	d.priority = &routepb.RetryPolicy_RetryPriority{
		Name: previousPrioritiesName, ConfigType: &routepb.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: prio},
	}
	d.hashed = &routepb.RetryPolicy{RetryOn: defaultRetryOn, NumRetries: wrapperspb.UInt32(2), HostSelectionRetryMaxAttempts: 5}
	d.previousHosts = &routepb.RetryPolicy{RetryOn: defaultRetryOn, NumRetries: wrapperspb.UInt32(2), HostSelectionRetryMaxAttempts: 5,
		RetryHostPredicate: d.predicate}
	return d
}()

// previousPrioritiesName is the retry priority that retryRemoteLocalities asks for.
const previousPrioritiesName = "envoy.retry_priorities.previous_priorities"

// parseRetryOn splits Istio's retryOn as istiod does: a number that is an HTTP status code
// (one Go's net/http knows) is a status code to retry; the rest are Envoy (and gRPC) retry
// conditions, passed as written, in order.
func parseRetryOn(s string) (string, []uint32) {
	var conds []string
	var codes []uint32
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if code, err := strconv.Atoi(part); err == nil && http.StatusText(code) != "" {
			codes = append(codes, uint32(code))
			continue
		}
		conds = append(conds, part)
	}
	return strings.Join(conds, ","), codes
}

// rewrite sets the path rewrite, and the authority (which the caller turns into a Host
// rewrite). It reports false (the route is left out) for a regular expression that does not
// compile.
func (rc *routeContext) rewrite(vs *virtualService, field string, rw *networking.HTTPRewrite, ra *routepb.RouteAction, authority *string) bool {
	if rw == nil {
		return true
	}
	switch {
	case rw.GetUriRegexRewrite() != nil:
		if rw.GetUri() != "" {
			rc.fs.add(kindVirtualService, vs.Key, "%s: uri and uriRegexRewrite exclude each other; uriRegexRewrite is used, as istiod uses it", field)
		}
		re := rw.GetUriRegexRewrite()
		m, err := regexMatcher(re.GetMatch())
		if err != nil {
			rc.fs.add(kindVirtualService, vs.Key, "%s.uriRegexRewrite.match: %v; the route is left out", field, err)
			return false
		}
		ra.RegexRewrite = &matcherpb.RegexMatchAndSubstitute{Pattern: m, Substitution: re.GetRewrite()}
	case rw.GetUri() != "":
		// Istio rewrites the matched prefix (the whole path for an exact match).
		ra.PrefixRewrite = rw.GetUri()
	}
	if rw.GetAuthority() != "" {
		*authority = rw.GetAuthority()
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

// headerOps translates header changes as istiod does (TranslateHeadersOperations): set
// overwrites, add appends, each sorted by name. Setting (or adding) Host or :authority on
// requests is no header change but the authority, returned for a Host rewrite (set wins over
// add). A header Envoy would refuse to change (another pseudo-header, Host on responses or
// removed, or not a header name) is left out with a fault; istiod drops it silently.
func (rc *routeContext) headerOps(vs *virtualService, field string, ops *networking.Headers_HeaderOperations, request bool) ([]*corepb.HeaderValueOption, []string, string) {
	if ops == nil {
		return nil, nil, ""
	}
	var add []*corepb.HeaderValueOption
	var authority, setAuthority string
	for _, group := range []struct {
		name   string
		m      map[string]string
		action corepb.HeaderValueOption_HeaderAppendAction
	}{
		{"set", ops.GetSet(), corepb.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{"add", ops.GetAdd(), corepb.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
	} {
		for _, k := range sortedKeys(group.m) {
			if request && (strings.EqualFold(k, "host") || strings.EqualFold(k, ":authority")) {
				if group.name == "set" {
					setAuthority = group.m[k]
				} else {
					authority = group.m[k]
				}
				continue
			}
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
	if setAuthority != "" {
		authority = setAuthority
	}
	var remove []string
	for _, k := range ops.GetRemove() {
		if !mutableHeader(k) {
			rc.fs.add(kindVirtualService, vs.Key, "%s.remove: %q is not a header a route can change; it is left out", field, k)
			continue
		}
		remove = append(remove, k)
	}
	return add, remove, authority
}

// mirrors translates mirror (with mirrorPercentage or the older mirrorPercent) and mirrors,
// as istiod does (TranslateRequestMirrorPolicy): without a percentage everything is
// mirrored, a percentage of 0 mirrors nothing (no policy), trace_sampled is false (a mirrored
// request does not force a trace), and disable_shadow_host_suffix_append is true (istiod's
// DISABLE_SHADOW_HOST_SUFFIX default): the mirrored request keeps its Host header, without
// Envoy's "-shadow" suffix.
func (rc *routeContext) mirrors(vs *virtualService, field string, hr *networking.HTTPRoute) []*routepb.RouteAction_RequestMirrorPolicy {
	var out []*routepb.RouteAction_RequestMirrorPolicy
	add := func(f string, d *networking.Destination, pct *typepb.FractionalPercent) {
		if pct == nil {
			return
		}
		r, ok := rc.destination(vs, f, d)
		if !ok {
			return
		}
		out = append(out, &routepb.RouteAction_RequestMirrorPolicy{
			Cluster:                       r.cluster,
			RuntimeFraction:               &corepb.RuntimeFractionalPercent{DefaultValue: pct},
			TraceSampled:                  wrapperspb.Bool(false),
			DisableShadowHostSuffixAppend: true,
		})
	}
	if m := hr.GetMirror(); m != nil {
		pct := &typepb.FractionalPercent{Numerator: 100, Denominator: typepb.FractionalPercent_HUNDRED}
		switch {
		case hr.GetMirrorPercentage() != nil:
			pct = mirrorFraction(hr.GetMirrorPercentage().GetValue())
		case hr.GetMirrorPercent() != nil: //nolint:staticcheck // the deprecated field is still read, as istiod reads it
			pct = nil
			if v := hr.GetMirrorPercent().GetValue(); v > 0 { //nolint:staticcheck // as above
				pct = &typepb.FractionalPercent{Numerator: v, Denominator: typepb.FractionalPercent_HUNDRED}
			}
		}
		add(field+".mirror", m, pct)
	}
	for i, m := range hr.GetMirrors() {
		pct := &typepb.FractionalPercent{Numerator: 100, Denominator: typepb.FractionalPercent_HUNDRED}
		if m.GetPercentage() != nil {
			pct = mirrorFraction(m.GetPercentage().GetValue())
		}
		if m.GetDestination() == nil {
			continue
		}
		add(fmt.Sprintf("%s.mirrors[%d].destination", field, i), m.GetDestination(), pct)
	}
	return out
}

// mirrorFraction is a mirror percentage in millionths, truncated as istiod truncates it; nil
// (no mirroring) for 0 or less.
func mirrorFraction(pct float64) *typepb.FractionalPercent {
	if pct <= 0 {
		return nil
	}
	return &typepb.FractionalPercent{Numerator: uint32(min(pct, 100) * 10000), Denominator: typepb.FractionalPercent_MILLION}
}

// grpcRoutes are a VirtualService's routes as istiod builds them for a proxyless gRPC client:
// the timeout in max_stream_duration (what grpc-go reads), not max_grpc_timeout, and no CORS
// policy. istiod does put the CORS policy in a proxyless client's routes, but grpc-go has no
// CORS filter and rejects a route configuration with the configuration of a filter it does
// not know. Routes that need neither change are shared, not copied.
func grpcRoutes(routes []*routepb.Route) []*routepb.Route {
	out := make([]*routepb.Route, len(routes))
	for i, r := range routes {
		_, cors := r.GetTypedPerFilterConfig()[corsFilterName]
		if r.GetRoute() == nil && !cors {
			out[i] = r
			continue
		}
		c := proto.Clone(r).(*routepb.Route)
		if ra := c.GetRoute(); ra != nil {
			ra.MaxGrpcTimeout = nil //nolint:staticcheck // the Envoy proxy's field, which grpc-go does not read
			ra.MaxStreamDuration = &routepb.RouteAction_MaxStreamDuration{MaxStreamDuration: ra.GetTimeout()}
		}
		if cors {
			delete(c.TypedPerFilterConfig, corsFilterName)
			if len(c.TypedPerFilterConfig) == 0 {
				c.TypedPerFilterConfig = nil
			}
		}
		out[i] = c
	}
	return out
}

// catchAllLast moves the catch-all routes (isCatchAll) after the others, keeping the order
// within each (istiod's SortVHostRoutes).
func catchAllLast(routes []*routepb.Route) []*routepb.Route {
	out := make([]*routepb.Route, 0, len(routes))
	var last []*routepb.Route
	for _, r := range routes {
		if isCatchAll(r.GetMatch()) {
			last = append(last, r)
		} else {
			out = append(out, r)
		}
	}
	return append(out, last...)
}
