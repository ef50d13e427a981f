//go:build e2e_istiod

package istiod

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The comparison of what istiod and the bridge send one node, by field family.
//
// Each resource is turned into JSON (protojson, Anys resolved), normalized (below), and cut
// into one projection per family: the sub-messages of that family, with the lists whose order
// does not matter sorted. Two projections match when their canonical JSON is equal.
//
//   - clusters: a cluster less the fields of the families below (its type, discovery, EDS or
//     DNS settings, connect timeout, lb policy and whatever else it sets). Key: its name
//     (outbound|PORT|SUBSET|HOST on both sides).
//   - load balancing: lb policy, ring hash / maglev / least request / round robin config,
//     common lb config, and the hash policies of the routes whose single cluster it is.
//   - connection pool: circuit breakers, typed extension protocol options (HTTP protocol
//     options, max requests per connection, idle timeout), upstream connection options (TCP
//     keepalive), max requests per connection, per connection buffer limit.
//   - outlier detection: outlier_detection.
//   - TLS: a cluster's transport socket (and transport socket matches); a listener filter
//     chain's downstream transport socket.
//   - endpoints: a load assignment, by cluster name (EDS, and the inline one of a DNS or
//     static cluster): localities and their endpoints (address, port, weight, metadata,
//     health), sorted.
//   - virtual hosts: a route configuration's own fields (key: its name, route configurations by
//     port on both sides), and each virtual host less its routes, domains sorted (key: the route
//     configuration and the virtual host's first domain without a port: the FQDN).
//   - route matches: each route's match, by its position in its virtual host.
//   - route actions: each route less its match: cluster or weighted clusters, timeouts, retry
//     policy, rewrites, redirect, direct response, mirrors, hash policy, max stream duration,
//     header changes, per-filter config (fault, CORS).
//   - HTTP filters: a connection manager's HTTP filter chain, by name and config, in order.
//     Key: the listener and the route configuration the connection manager fetches (else its
//     filter chain's match).
//   - listeners: a listener less its connection managers' settings (each replaced by the
//     route configuration it fetches) and less its chains' downstream TLS: address, bind, listener
//     filters, filter chains by match (sorted), network filters, tcp_proxy targets.
//   - connection manager: a connection manager less its HTTP filters: codec, timeouts,
//     upgrades, path normalization, forwarding, RDS or inline routes.
//
// A resource only one side has is a mismatch of its own family (clusters, endpoints, virtual
// hosts, listeners); the families within it (load balancing... of a cluster, matches and
// actions of a virtual host's routes, filters and connection manager of a listener) are only
// compared where both sides have it, and only when at least one side sets something of the
// family: a cluster with no outlier detection on either side is not counted as a match.
//
// Normalizations, applied to both sides alike, each because the bridge has no equivalent by
// design and the thing is no traffic behaviour of the Istio config served:
//
//  1. Gateway class prefixes: the bridge serves every gateway class in one collection and names
//     a class's listeners and route configurations "gateway.CLASS/NAME"; NAME is istiod's name
//     for them within one gateway proxy. The prefix is removed.
//  2. istiod's inbound|PORT||... clusters, and the "allow_any" virtual host that sends unknown
//     hosts to PassthroughCluster: they model a pod's inbound side, which a standalone bridge
//     does not know (it knows no pods), and a virtual host the bridge does not build yet. The
//     capture plumbing (virtualOutbound, virtualInbound and its passthrough chains,
//     PassthroughCluster, BlackHoleCluster, InboundPassthroughCluster, PassthroughFilterChain)
//     is compared.
//  3. The Kubernetes Services istiod reads from the test's Kubernetes API server
//     (kubernetes.default.svc.cluster.local): its clusters, load assignments, listeners and
//     virtual hosts. They are not in the config the bridge serves.
//  4. Telemetry: clusters' alt_stat_name, istio filter metadata on clusters, endpoints and
//     routes (service, workload and config names for telemetry and debugging), the istio.metadata_exchange network
//     filter on clusters, the istio.metadata_exchange, istio.stats and grpc_stats HTTP filters,
//     connection managers' stat_prefix, tracing, access_log and a UUID request ID extension
//     (its only setting is trace sampling), tcp_proxy's stat_prefix and access_log, routes'
//     decorator (the tracing span name), circuit breakers' track_remaining (it only publishes
//     remaining-capacity gauges).
//  5. Auto mTLS to pods istiod knows: the "tlsMode-istio" transport socket match (Istio mTLS,
//     used only for endpoints labelled security.istio.io/tlsMode=istio) is removed, and a
//     remaining "tlsMode-disabled" match becomes the cluster's transport socket (none when it
//     is raw_buffer, what Envoy does without one); the istio.alpn HTTP filter, which only sets
//     the ALPN of that mTLS, is removed; so are virtualInbound's chains that terminate Istio
//     mTLS (transport protocol tls with Istio's ALPNs), the server side of auto mTLS, and the
//     istio.metadata_exchange network filter of listener chains (telemetry, normalization 4).
//     Endpoints' envoy.transport_socket_match metadata stays
//     compared, so an endpoint that would take the mTLS match still shows.
//  6. A host with several addresses (a dual-stack ServiceEntry): istiod makes a service of
//     each address (serviceentry conversion), and a sidecar keeps one of them per host name,
//     the first in an order that is not stable between runs (the services share their creation
//     time, name and namespace): the address among a virtual host's domains is either. The
//     host's addresses as domains are compared as one placeholder, "<an address of HOST>". And
//     istiod lists a DNS cluster's endpoints once per service, each endpoint as many times as
//     the host has addresses: repeated identical endpoints are counted once (the locality
//     weight summed again), which balances as the repeats do; the bridge lists each once, as
//     grpc-go requires of a load assignment.
//
// Nothing else is removed: defaults one side spells out and the other leaves implicit (a
// 0s timeout, an empty filter, max_grpc_timeout), listener filters for protocol sniffing,
// bind_to_port, domains and the like all count as mismatches.

// families, in the table's order.
var families = []string{
	famClusters, famLB, famPool, famOutlier, famTLS, famEndpoints,
	famVhosts, famMatches, famActions, famFilters, famListeners, famHCM,
}

const (
	famClusters  = "clusters"
	famLB        = "load balancing"
	famPool      = "connection pool"
	famOutlier   = "outlier detection"
	famTLS       = "TLS"
	famEndpoints = "endpoints"
	famVhosts    = "virtual hosts"
	famMatches   = "route matches"
	famActions   = "route actions"
	famFilters   = "HTTP filters"
	famListeners = "listeners"
	famHCM       = "connection manager"
)

// famShort are the table's column heads.
var famShort = map[string]string{
	famClusters: "clust", famLB: "lb", famPool: "pool", famOutlier: "outl", famTLS: "tls",
	famEndpoints: "eps", famVhosts: "vhost", famMatches: "match", famActions: "action",
	famFilters: "filt", famListeners: "lsnr", famHCM: "hcm",
}

// item is one projection: a value of one family for one key; parent is the family|key of
// the resource it belongs to, "" for a resource of its own.
type item struct {
	parent string
	value  any
}

// projection is one side's items: family -> key -> item.
type projection map[string]map[string]item

func (p projection) put(fam, key, parent string, v any) {
	if p[fam] == nil {
		p[fam] = map[string]item{}
	}
	p[fam][key] = item{parent: parent, value: v}
}

func (p projection) has(famKey string) bool {
	fam, key, _ := strings.Cut(famKey, "|")
	_, ok := p[fam][key]
	return ok
}

type count struct{ Matched, Total int }

// mismatch is one item that differs: both projections (nil where a side has none) and the
// JSON paths at which they differ.
type mismatch struct {
	Node, Family, Key string
	Istiod, Bridge    any
	Paths             []string
}

type scenarioResult struct {
	Name, Title string
	Errors      []string
	Counts      map[string]*count
	Mismatches  []mismatch
}

func (r *scenarioResult) totals() (matched, total int) {
	for _, c := range r.Counts {
		matched += c.Matched
		total += c.Total
	}
	return matched, total
}

// compareNode compares what one node was sent by each side and adds it to res.
func compareNode(res *scenarioResult, n parityNode, istiod, bridge *xdsDump, ma multiAddress) {
	if res.Counts == nil {
		res.Counts = map[string]*count{}
	}
	pi, pb := project(istiod, ma), project(bridge, ma)
	for _, fam := range families {
		keys := map[string]bool{}
		for k := range pi[fam] {
			keys[k] = true
		}
		for k := range pb[fam] {
			keys[k] = true
		}
		for _, k := range slices.Sorted(mapKeysIter(keys)) {
			a, aok := pi[fam][k]
			b, bok := pb[fam][k]
			parent := a.parent
			if !aok {
				parent = b.parent
			}
			if parent != "" && !(pi.has(parent) && pb.has(parent)) {
				continue // the resource itself is missing on a side: counted in its family
			}
			if parent != "" && isEmpty(a.value) && isEmpty(b.value) {
				continue // neither side sets anything of the family
			}
			c := res.Counts[fam]
			if c == nil {
				c = &count{}
				res.Counts[fam] = c
			}
			c.Total++
			var av, bv any
			if aok {
				av = a.value
			}
			if bok {
				bv = b.value
			}
			if canonJSON(av, false) == canonJSON(bv, false) {
				c.Matched++
				continue
			}
			res.Mismatches = append(res.Mismatches, mismatch{Node: n.Name, Family: fam, Key: k,
				Istiod: av, Bridge: bv, Paths: diffPaths(av, bv, aok, bok)})
		}
	}
}

func mapKeysIter(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// classPrefix is the bridge's gateway class prefix of listener and route names.
var classPrefix = regexp.MustCompile(`gateway\.[0-9a-f]{16}/`)

// protoJSON is a message as generic JSON (maps, slices, strings, float64s, bools), with
// the bridge's gateway class prefixes removed (normalization 1).
func protoJSON(m proto.Message) any {
	b, err := protojson.Marshal(m)
	if err != nil {
		panic(err)
	}
	b = classPrefix.ReplaceAll(b, nil)
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		panic(err)
	}
	return v
}

// canonJSON is v's canonical JSON (map keys sorted by encoding/json).
func canonJSON(v any, indent bool) string {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		panic(err)
	}
	return string(b)
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, e := range x {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	case []any:
		return len(x) == 0
	}
	return false
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// take moves keys of m into a new map (only those m has).
func take(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
			delete(m, k)
		}
	}
	return out
}

// pick copies keys of m into a new map.
func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// sortList sorts a list by its elements' canonical JSON: for lists whose order Envoy ignores.
func sortList(v any) []any {
	l := slices.Clone(list(v))
	sort.SliceStable(l, func(i, j int) bool { return canonJSON(l[i], false) < canonJSON(l[j], false) })
	return l
}

// dropIstioMetadata removes istio filter metadata from a metadata field (normalization 4).
func dropIstioMetadata(m map[string]any) {
	md := obj(m["metadata"])
	fm := obj(md["filterMetadata"])
	delete(fm, "istio")
	if len(fm) == 0 {
		delete(md, "filterMetadata")
	}
	if len(md) == 0 {
		delete(m, "metadata")
	}
}

// Names of istiod's infrastructure (normalizations 2 and 3). The capture plumbing
// (virtualOutbound, virtualInbound, PassthroughCluster, BlackHoleCluster,
// InboundPassthroughCluster, the PassthroughFilterChain) is compared: the bridge builds it.
var (
	infraClusters = map[string]bool{"BlackHoleCluster": true, "PassthroughCluster": true, "InboundPassthroughCluster": true}
	kubeHosts     = []string{"kubernetes.default.svc.cluster.local"}
)

// istioMTLSChainJSON: a virtualInbound chain that terminates Istio mTLS, matched by transport
// protocol tls and Istio's ALPNs (normalization 5).
func istioMTLSChainJSON(fc map[string]any) bool {
	fm := obj(fc["filterChainMatch"])
	if fm["transportProtocol"] != "tls" {
		return false
	}
	for _, a := range list(fm["applicationProtocols"]) {
		if s, _ := a.(string); strings.HasPrefix(s, "istio") {
			return true
		}
	}
	return false
}

func isInfraCluster(name string) bool {
	if strings.HasPrefix(name, "inbound|") {
		return true
	}
	for _, h := range kubeHosts {
		if strings.HasSuffix(name, "|"+h) {
			return true
		}
	}
	return false
}

// multiAddress maps each address of the scenario's hosts with several addresses to its host
// (normalization 6).
type multiAddress map[string]string

// domain is a virtual host domain under normalization 6.
func (ma multiAddress) domain(d any) any {
	s, _ := d.(string)
	if h, ok := ma[strings.Trim(s, "[]")]; ok {
		return "<an address of " + h + ">"
	}
	return d
}

// repeats tells the clusters whose repeated endpoints normalization 6 counts once: those of
// the hosts with several addresses.
func (ma multiAddress) repeats(cluster string) bool {
	host := cluster[strings.LastIndex(cluster, "|")+1:]
	for _, h := range ma {
		if h == host {
			return true
		}
	}
	return false
}

// normCLA normalizes a load assignment: istio metadata off, localities and endpoints sorted,
// and with dedupe, repeated endpoints once (normalization 6).
func normCLA(v any, dedupe bool) any {
	m := obj(v)
	if m == nil {
		return v
	}
	var groups []any
	for _, g := range list(m["endpoints"]) {
		gm := obj(g)
		var eps []any
		seen := map[string]bool{}
		weight, repeated := 0.0, false
		for _, e := range list(gm["lbEndpoints"]) {
			em := obj(e)
			dropIstioMetadata(em)
			if key := canonJSON(em, false); dedupe && seen[key] {
				repeated = true
				continue
			} else {
				seen[key] = true
			}
			w, _ := em["loadBalancingWeight"].(float64)
			weight += w
			eps = append(eps, em)
		}
		if repeated {
			gm["loadBalancingWeight"] = weight
		}
		if eps != nil {
			gm["lbEndpoints"] = sortList(eps)
		}
		groups = append(groups, gm)
	}
	if groups != nil {
		m["endpoints"] = sortList(groups)
	}
	return m
}

// project cuts a dump into its families' items.
func project(d *xdsDump, ma multiAddress) projection {
	p := projection{}
	hashPolicies := map[string][]any{} // cluster -> hash policies of routes to it alone

	for name, r := range d.Routes {
		rc := obj(protoJSON(r))
		name = classPrefix.ReplaceAllString(name, "")
		vhosts := list(rc["virtualHosts"])
		delete(rc, "virtualHosts")
		delete(rc, "name")
		p.put(famVhosts, name, "", rc)
		for _, vh := range vhosts {
			vm := obj(vh)
			if vm["name"] == "allow_any" || isKubeVhost(vm) {
				continue // normalizations 2, 3
			}
			domains := list(vm["domains"])
			key := name + " " + firstHost(domains)
			for i, d := range domains {
				domains[i] = ma.domain(d)
			}
			vm["domains"] = sortList(domains)
			routes := list(vm["routes"])
			delete(vm, "routes")
			p.put(famVhosts, key, "", vm)
			for i, rt := range routes {
				rm := obj(rt)
				delete(rm, "decorator") // normalization 4
				dropIstioMetadata(rm)
				rkey := fmt.Sprintf("%s route %d", key, i)
				p.put(famMatches, rkey, famVhosts+"|"+key, take(rm, "match"))
				p.put(famActions, rkey, famVhosts+"|"+key, rm)
				if a := obj(rm["route"]); a != nil && a["cluster"] != nil && a["hashPolicy"] != nil {
					c := a["cluster"].(string)
					hashPolicies[c] = append(hashPolicies[c], a["hashPolicy"])
				}
			}
		}
	}

	for name, c := range d.Clusters {
		if isInfraCluster(name) {
			continue
		}
		m := obj(protoJSON(c))
		delete(m, "altStatName") // normalization 4
		dropIstioMetadata(m)
		var filters []any
		for _, f := range list(m["filters"]) {
			if obj(f)["name"] != "istio.metadata_exchange" {
				filters = append(filters, f)
			}
		}
		if filters == nil {
			delete(m, "filters")
		} else {
			m["filters"] = filters
		}
		normAutoMTLS(m)
		for _, th := range list(obj(m["circuitBreakers"])["thresholds"]) {
			delete(obj(th), "trackRemaining")
		}
		parent := famClusters + "|" + name
		if la, ok := m["loadAssignment"]; ok {
			p.put(famEndpoints, "inline "+name, "", normCLA(la, ma.repeats(name)))
			delete(m, "loadAssignment")
		}
		lb := take(m, "ringHashLbConfig", "maglevLbConfig", "leastRequestLbConfig", "roundRobinLbConfig",
			"commonLbConfig", "loadBalancingPolicy")
		if pol, ok := m["lbPolicy"]; ok {
			lb["lbPolicy"] = pol
		}
		if hp := hashPolicies[name]; hp != nil {
			lb["hashPolicies"] = sortList(hp)
		}
		p.put(famLB, name, parent, lb)
		p.put(famPool, name, parent, take(m, "circuitBreakers", "typedExtensionProtocolOptions",
			"upstreamConnectionOptions", "maxRequestsPerConnection", "perConnectionBufferLimitBytes"))
		p.put(famOutlier, name, parent, take(m, "outlierDetection"))
		p.put(famTLS, "cluster "+name, parent, take(m, "transportSocket", "transportSocketMatches"))
		p.put(famClusters, name, "", m)
	}

	for name, e := range d.Endpoints {
		if isInfraCluster(name) {
			continue
		}
		p.put(famEndpoints, name, "", normCLA(protoJSON(e), ma.repeats(name)))
	}

	for name, l := range d.Listeners {
		name = classPrefix.ReplaceAllString(name, "")
		m := obj(protoJSON(l))
		hcms := listenerHCMs(l)
		parent := famListeners + "|" + name
		var chains []any
		for _, fc := range list(m["filterChains"]) {
			if istioMTLSChainJSON(obj(fc)) {
				continue // normalization 5
			}
			var filters []any
			for _, f := range list(obj(fc)["filters"]) {
				if obj(f)["name"] != "istio.metadata_exchange" {
					filters = append(filters, f) // normalization 4
				}
			}
			if filters == nil {
				delete(obj(fc), "filters")
			} else {
				obj(fc)["filters"] = filters
			}
			chains = append(chains, fc)
		}
		if isKubeListener(m) {
			continue // normalization 3
		}
		all := chains
		if dc := obj(m["defaultFilterChain"]); dc != nil {
			all = append([]any{dc}, chains...)
		}
		for i, fc := range all {
			fm := obj(fc)
			key := chainMatchKey(fm["filterChainMatch"])
			if i == 0 && m["defaultFilterChain"] != nil {
				key = "default chain"
			}
			p.put(famTLS, name+" "+key, parent, take(fm, "transportSocket"))
			for _, f := range list(fm["filters"]) {
				f := obj(f)
				tc := obj(f["typedConfig"])
				switch tc["@type"] {
				case "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager":
					f["typedConfig"] = map[string]any{"rds": obj(tc["rds"])["routeConfigName"], "routeConfig": tc["routeConfig"] != nil}
				case "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy":
					delete(tc, "statPrefix") // normalization 4
					delete(tc, "accessLog")
				}
			}
		}
		if chains != nil {
			m["filterChains"] = sortList(chains)
		} else {
			delete(m, "filterChains")
		}
		if api := obj(m["apiListener"]); api != nil {
			m["apiListener"] = map[string]any{"rds": obj(obj(api["apiListener"])["rds"])["routeConfigName"]}
		}
		delete(m, "accessLog")
		p.put(famListeners, name, "", m)
		for key, h := range hcms {
			hm := obj(protoJSON(h))
			var filters []any
			for _, f := range list(hm["httpFilters"]) {
				switch obj(f)["name"] {
				case "istio.metadata_exchange", "istio.stats", "envoy.filters.http.grpc_stats", "istio.alpn":
					// normalizations 4, 5
				default:
					filters = append(filters, f)
				}
			}
			delete(hm, "httpFilters")
			delete(hm, "statPrefix")
			delete(hm, "tracing")
			delete(hm, "accessLog")
			if obj(obj(hm["requestIdExtension"])["typedConfig"])["@type"] == "type.googleapis.com/envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig" {
				delete(hm, "requestIdExtension")
			}
			p.put(famFilters, name+" "+key, parent, map[string]any{"httpFilters": filters})
			p.put(famHCM, name+" "+key, parent, hm)
		}
	}
	return p
}

// chainMatchKey names a filter chain by its match, which is what Envoy picks it by, with the
// match's lists sorted (their order does not matter); it sorts them in place.
func chainMatchKey(v any) string {
	mt := obj(v)
	if mt == nil {
		return "chain {}"
	}
	for _, f := range []string{"serverNames", "applicationProtocols", "prefixRanges", "sourcePrefixRanges"} {
		if l, ok := mt[f]; ok {
			mt[f] = sortList(l)
		}
	}
	return "chain " + canonJSON(mt, false)
}

// normAutoMTLS applies normalization 5 to a cluster.
func normAutoMTLS(m map[string]any) {
	tsm := list(m["transportSocketMatches"])
	if tsm == nil {
		return
	}
	var rest []any
	for _, t := range tsm {
		if obj(t)["name"] != "tlsMode-istio" {
			rest = append(rest, t)
		}
	}
	if len(rest) == len(tsm) {
		return
	}
	delete(m, "transportSocketMatches")
	if len(rest) == 1 && obj(rest[0])["name"] == "tlsMode-disabled" && isEmpty(obj(rest[0])["match"]) {
		ts := obj(obj(rest[0])["transportSocket"])
		if ts["name"] != "envoy.transport_sockets.raw_buffer" {
			m["transportSocket"] = ts
		}
		return
	}
	if rest != nil {
		m["transportSocketMatches"] = rest
	}
}

// isKubeListener: a listener whose every chain sends to a Kubernetes Service's cluster
// (normalization 3).
func isKubeListener(m map[string]any) bool {
	chains := list(m["filterChains"])
	if len(chains) == 0 {
		return false
	}
	for _, fc := range chains {
		ok := false
		for _, f := range list(obj(fc)["filters"]) {
			c, _ := obj(obj(f)["typedConfig"])["cluster"].(string)
			ok = ok || (c != "" && isInfraCluster(c))
		}
		if !ok {
			return false
		}
	}
	return true
}

func isKubeVhost(vm map[string]any) bool {
	for _, d := range list(vm["domains"]) {
		for _, h := range kubeHosts {
			if d == h {
				return true
			}
		}
	}
	return false
}

// firstHost is a virtual host's first domain without its port: its FQDN on both sides.
func firstHost(domains []any) string {
	if len(domains) == 0 {
		return ""
	}
	d, _ := domains[0].(string)
	if h, p, ok := strings.Cut(d, ":"); ok && !strings.Contains(p, ":") && !strings.HasPrefix(d, "[") {
		return h
	}
	return d
}

// diffPaths are the JSON paths at which a and b differ, list indices written [].
func diffPaths(a, b any, aok, bok bool) []string {
	switch {
	case !aok:
		return []string{"(bridge only)"}
	case !bok:
		return []string{"(istiod only)"}
	}
	seen := map[string]bool{}
	var out []string
	var walk func(a, b any, path string)
	walk = func(a, b any, path string) {
		add := func(what string) {
			s := strings.TrimPrefix(path, ".") + " " + what
			if path == "" {
				s = what
			}
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
		if canonJSON(a, false) == canonJSON(b, false) {
			return
		}
		am, aIsMap := a.(map[string]any)
		bm, bIsMap := b.(map[string]any)
		if aIsMap && bIsMap {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for _, k := range slices.Sorted(mapKeysIter(keys)) {
				_, ina := am[k]
				_, inb := bm[k]
				switch {
				case !ina:
					path := path + "." + k
					s := strings.TrimPrefix(path, ".") + " (bridge only)"
					if !seen[s] {
						seen[s] = true
						out = append(out, s)
					}
				case !inb:
					path := path + "." + k
					s := strings.TrimPrefix(path, ".") + " (istiod only)"
					if !seen[s] {
						seen[s] = true
						out = append(out, s)
					}
				default:
					walk(am[k], bm[k], path+"."+k)
				}
			}
			return
		}
		al, aIsList := a.([]any)
		bl, bIsList := b.([]any)
		if aIsList && bIsList {
			if len(al) != len(bl) {
				add(fmt.Sprintf("(length %d vs %d)", len(al), len(bl)))
				return
			}
			for i := range al {
				walk(al[i], bl[i], path+"[]")
			}
			return
		}
		add("(differs)")
	}
	walk(a, b, "")
	return out
}

// matchTable is the scenario x family table (matched/compared) and the overall parity.
func matchTable(results []*scenarioResult) (string, float64) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s", "scenario")
	for _, f := range families {
		fmt.Fprintf(&b, " %7s", famShort[f])
	}
	fmt.Fprintf(&b, " %9s\n", "all")
	sum := map[string]*count{}
	var m, t int
	for _, r := range results {
		fmt.Fprintf(&b, "%-34s", r.Name)
		for _, f := range families {
			c := r.Counts[f]
			if c == nil {
				fmt.Fprintf(&b, " %7s", "-")
				continue
			}
			fmt.Fprintf(&b, " %7s", fmt.Sprintf("%d/%d", c.Matched, c.Total))
			if sum[f] == nil {
				sum[f] = &count{}
			}
			sum[f].Matched += c.Matched
			sum[f].Total += c.Total
		}
		rm, rt := r.totals()
		m += rm
		t += rt
		fmt.Fprintf(&b, " %9s\n", fmt.Sprintf("%d/%d", rm, rt))
	}
	fmt.Fprintf(&b, "%-34s", "TOTAL")
	for _, f := range families {
		c := sum[f]
		if c == nil {
			c = &count{}
		}
		fmt.Fprintf(&b, " %7s", fmt.Sprintf("%d/%d", c.Matched, c.Total))
	}
	fmt.Fprintf(&b, " %9s\n", fmt.Sprintf("%d/%d", m, t))
	fmt.Fprintf(&b, "%-34s", "percent")
	for _, f := range families {
		c := sum[f]
		if c == nil || c.Total == 0 {
			fmt.Fprintf(&b, " %7s", "-")
			continue
		}
		fmt.Fprintf(&b, " %6.1f%%", 100*float64(c.Matched)/float64(c.Total))
	}
	pct := 100.0
	if t > 0 {
		pct = 100 * float64(m) / float64(t)
	}
	fmt.Fprintf(&b, " %8.2f%%\n", pct)
	return b.String(), pct
}

// writeReport writes DIR/parity.md: the table, the differing paths by how often they occur
// (a first grouping by cause), and each mismatch with both projections and a line diff.
func writeReport(dir string, results []*scenarioResult, table string, pct float64) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# istiod parity\n\nOverall parity: %.2f%%\n\n```\n%s```\n\n", pct, table)

	type agg struct {
		n         int
		scenarios map[string]bool
		example   string
	}
	byPath := map[string]*agg{}
	for _, r := range results {
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- error: %s: %s\n", r.Name, e)
		}
		for _, mm := range r.Mismatches {
			for _, p := range mm.Paths {
				k := mm.Family + ": " + p
				a := byPath[k]
				if a == nil {
					a = &agg{scenarios: map[string]bool{}, example: r.Name + " " + mm.Node + " " + mm.Key}
					byPath[k] = a
				}
				a.n++
				a.scenarios[r.Name] = true
			}
		}
	}
	keys := make([]string, 0, len(byPath))
	for k := range byPath {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(byPath[keys[i]].scenarios) != len(byPath[keys[j]].scenarios) {
			return len(byPath[keys[i]].scenarios) > len(byPath[keys[j]].scenarios)
		}
		if byPath[keys[i]].n != byPath[keys[j]].n {
			return byPath[keys[i]].n > byPath[keys[j]].n
		}
		return keys[i] < keys[j]
	})
	fmt.Fprintf(&b, "\n## Differences by path (scenarios, items, an example)\n\n")
	for _, k := range keys {
		a := byPath[k]
		fmt.Fprintf(&b, "- %s: %d scenarios, %d items (e.g. %s)\n", k, len(a.scenarios), a.n, a.example)
	}
	fmt.Fprintf(&b, "\n## Mismatches\n")
	for _, r := range results {
		if len(r.Mismatches) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s: %s\n", r.Name, r.Title)
		for _, mm := range r.Mismatches {
			fmt.Fprintf(&b, "\n#### %s / %s / %s\n\ndiffers at: %s\n\n", mm.Node, mm.Family, mm.Key, strings.Join(mm.Paths, "; "))
			fmt.Fprintf(&b, "```diff\n%s```\n", lineDiff(sideJSON(mm.Istiod), sideJSON(mm.Bridge)))
		}
	}
	path := filepath.Join(dir, "parity.md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func sideJSON(v any) string {
	if v == nil {
		return "(none)\n"
	}
	return canonJSON(v, true) + "\n"
}

// lineDiff is a line diff of a (istiod, "-") and b (bridge, "+"), by longest common
// subsequence, with every line shown.
func lineDiff(a, b string) string {
	al := strings.Split(strings.TrimRight(a, "\n"), "\n")
	bl := strings.Split(strings.TrimRight(b, "\n"), "\n")
	n, m := len(al), len(bl)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && al[i] == bl[j]:
			out.WriteString("  " + al[i] + "\n")
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out.WriteString("+ " + bl[j] + "\n")
			j++
		default:
			out.WriteString("- " + al[i] + "\n")
			i++
		}
	}
	return out.String()
}
