package source_test

// The world of the model-based test (model_test.go): the resources the store holds, as the
// model knows them, and their history.
//
// The Envoy resources are written straight to the store under the translation's owner, all
// four types in one write per step (one store revision covers a whole move, as the real
// translator writes them), referentially consistent: every cluster a route or listener names,
// and every route configuration a listener names, exists in the same write. Their names carry a
// namespace the way the bridge's do (outbound|80||HOST, HOST:80), and the engine is given the
// translation's Namespacer so that views apply to them.
//
// The ServiceEntries are pushed by real producers over the ResourceSink service; each producer
// owns its own names (n0/p1-a ...), so that which copy is served never depends on the store's
// conflict rule (a store matter, tested in store/).
//
// Every version the world ever wrote is kept (history), with its body and the clusters it
// names, so that the model can tell, from a response alone, which version of which resource a
// client was sent and what it refers to. Versions are the writer's (metadata.version), unique
// across the world and ordered by an ordinal.

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/store"
)

// The type URLs and collections the model uses, spelled out here rather than taken from the
// engine's packages.
const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"

	collSE      = "istio/networking/v1alpha3/serviceentries"  // MCP collection
	xdsSE       = "networking.istio.io/v1alpha3/ServiceEntry" // its xDS type URL (MCP over xDS)
	amcsSE      = "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
	xdsUnknown  = "type.googleapis.com/model.v1.Nothing" // unknown types: served as empty
	mcpUnknown  = "model/v1/nothings"
	amcsUnknown = "type.googleapis.com/model.v1.NothingEither"

	ownerTranslate   = "translate"
	mcpResourceType  = "type.googleapis.com/istio.mcp.v1alpha1.Resource"
	xdsWrapperType   = "type.googleapis.com/envoy.service.discovery.v3.Resource"
	nodeNamespaceKey = "MCPBRIDGE_NAMESPACES"
)

// envoyTypes are the four Envoy types, in the make-before-break order of xds-protocol.rst.
var envoyTypes = []string{typeCluster, typeEndpoint, typeListener, typeRoute}

// modelHosts are the hosts the Envoy world is made of: Kubernetes services of three
// namespaces, and one host of no namespace (its resources are cluster-scoped).
var modelHosts = []string{
	"c0.n0.svc.cluster.local", "c1.n0.svc.cluster.local", "c2.n1.svc.cluster.local",
	"c3.n2.svc.cluster.local", "ext.example.com",
}

const (
	ghostHost       = "ghost.n0.svc.cluster.local" // never exists: asked for, answered "does not exist"
	portRoute       = "80"                         // the outbound route configuration of port 80
	portListener    = "0.0.0.0_80"                 // the outbound listener of port 80: RDS "80"
	tcpListenerName = "0.0.0.0_9000"               // a tcp_proxy listener naming a cluster
)

func clusterOf(host string) string     { return "outbound|80||" + host }
func hostRouteOf(host string) string   { return "outbound|80||" + host } // a host's own route configuration
func apiListenerOf(host string) string { return host + ":80" }

// modelNamespace is the namespace of a resource as the model sees it (its own reading of the
// naming rules of CONTRACT.md section 5 and the translation's Namespacer): a Kubernetes
// service's resources are in its namespace, the per-port listener and route configuration and
// another host's resources are cluster-scoped; an Istio resource's name is "namespace/name".
func modelNamespace(coll, name string) (string, bool) {
	if slices.Contains(envoyTypes, coll) {
		host := name
		if strings.HasPrefix(host, "outbound|") {
			host = host[strings.LastIndex(host, "|")+1:]
		}
		host = strings.TrimSuffix(host, ":80")
		if parts := strings.Split(host, "."); len(parts) == 5 && parts[2] == "svc" {
			return parts[1], true
		}
		return "", false
	}
	if ns, _, ok := strings.Cut(name, "/"); ok {
		return ns, true
	}
	return "", false
}

// modelClock orders every event of a schedule: the model's sends, its writes, presence
// changes, and (stamped by the transport) the arrival of every response.
type modelClock struct{ n atomic.Int64 }

func (c *modelClock) Tick() int64 { return c.n.Add(1) }
func (c *modelClock) Now() int64  { return c.n.Load() }

// rv is one version of one resource, as the world wrote it.
type rv struct {
	ord   int    // order of writing, across the world
	body  []byte // the body Any's value
	btype string // the body Any's type URL
	refs  []string
	owner string
}

// snapshot says which names surely exist from its clock until the next snapshot's. A change is
// sure only once the step that made it has settled (the server has been quiet since): until
// then a name exists surely only if it exists both before and after the change.
type snapshot struct {
	from int64
	sure map[string]map[string]bool
}

type world struct {
	clock *modelClock
	st    *store.Store
	ord   int
	hist  map[string]map[string]map[string]*rv // collection → name → version
	cur   map[string]map[string]string         // collection → name → version, as it is now
	snaps []snapshot
	dirty bool // a change not yet sure (see snapshot)

	// changedAt are, per collection, the clock of each change that made its current state differ.
	changedAt map[string][]int64
	// deletedAt are, per collection and name, the version order (ord) when each deletion of
	// the name happened: a version written before it was deleted since.
	deletedAt map[string]map[string][]int

	env       envoyState
	envSpec   map[string]map[string]string // collection → name → what its content says, to tell a change
	producers []*mproducer
}

func newWorld(clock *modelClock, st *store.Store) *world {
	w := &world{clock: clock, st: st, hist: map[string]map[string]map[string]*rv{},
		cur: map[string]map[string]string{}, envSpec: map[string]map[string]string{}, changedAt: map[string][]int64{}, deletedAt: map[string]map[string][]int{}}
	w.snaps = append(w.snaps, snapshot{from: 0, sure: map[string]map[string]bool{}})
	return w
}

func (w *world) nextVersion() (string, int) {
	w.ord++
	return fmt.Sprintf("v%d", w.ord), w.ord
}

func (w *world) record(coll, name, ver string, body *anypb.Any, refs []string, owner string, ord int) {
	if w.hist[coll] == nil {
		w.hist[coll] = map[string]map[string]*rv{}
	}
	if w.hist[coll][name] == nil {
		w.hist[coll][name] = map[string]*rv{}
	}
	w.hist[coll][name][ver] = &rv{ord: ord, body: body.GetValue(), btype: body.GetTypeUrl(), refs: refs, owner: owner}
}

func (w *world) version(coll, name, ver string) *rv { return w.hist[coll][name][ver] }

// versionOfBody finds the version of a resource from its body alone (state-of-the-world
// Envoy responses carry no per-resource version).
func (w *world) versionOfBody(coll, name string, body []byte) (string, bool) {
	for ver, r := range w.hist[coll][name] {
		if bytes.Equal(r.body, body) {
			return ver, true
		}
	}
	return "", false
}

// change records a change of the world's current state: from now until the step settles, only
// what exists both before and after is sure.
func (w *world) change(apply func()) {
	from := w.clock.Tick() // before the change: a response stamped earlier cannot reflect it
	before := w.sureNow()
	was := map[string]map[string]string{}
	for coll, names := range w.cur {
		was[coll] = maps.Clone(names)
	}
	apply()
	for coll := range w.cur {
		if !maps.Equal(was[coll], w.cur[coll]) {
			w.changedAt[coll] = append(w.changedAt[coll], from)
		}
		for name := range was[coll] {
			if _, still := w.cur[coll][name]; !still {
				if w.deletedAt[coll] == nil {
					w.deletedAt[coll] = map[string][]int{}
				}
				w.deletedAt[coll][name] = append(w.deletedAt[coll][name], w.ord)
			}
		}
	}
	after := w.sureNow()
	both := map[string]map[string]bool{}
	for coll, names := range before {
		for n := range names {
			if after[coll][n] {
				if both[coll] == nil {
					both[coll] = map[string]bool{}
				}
				both[coll][n] = true
			}
		}
	}
	w.snaps = append(w.snaps, snapshot{from: from, sure: both})
	w.dirty = true
}

// settled marks the world's changes sure: the step's action is done and the server has been
// quiet since (or, in process, was given the changes).
func (w *world) settled() {
	if !w.dirty {
		return
	}
	w.dirty = false
	w.snaps = append(w.snaps, snapshot{from: w.clock.Tick(), sure: w.sureNow()})
}

func (w *world) sureNow() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for coll, names := range w.cur {
		out[coll] = map[string]bool{}
		for n := range names {
			out[coll][n] = true
		}
	}
	return out
}

// existsThroughout: the resource surely existed at every moment of [lo, hi].
func (w *world) existsThroughout(coll, name string, lo, hi int64) bool {
	for i, s := range w.snaps {
		end := int64(1 << 62)
		if i+1 < len(w.snaps) {
			end = w.snaps[i+1].from
		}
		if end <= lo || s.from > hi {
			continue
		}
		if !s.sure[coll][name] {
			return false
		}
	}
	return true
}

func (w *world) set(coll, name, ver string) {
	if w.cur[coll] == nil {
		w.cur[coll] = map[string]string{}
	}
	w.cur[coll][name] = ver
}

func (w *world) unset(coll, name string) { delete(w.cur[coll], name) }

// ---- Envoy resources ----

// envoyState is what the Envoy world holds, from which the bodies follow.
type envoyState struct {
	clusters  map[string]bool              // host → its cluster (and load assignment) exists
	routes    map[string]map[string]string // route configuration → virtual host's host → cluster's host
	listeners map[string]bool              // RDS listeners (0.0.0.0_80, HOST:80) that exist
	tcp       string                       // the tcp_proxy listener's cluster's host; "" when there is none
	touched   map[string]map[string]bool   // resources given a new version though unchanged
}

func (e *envoyState) clone() envoyState {
	out := envoyState{clusters: maps.Clone(e.clusters), routes: map[string]map[string]string{},
		listeners: maps.Clone(e.listeners), tcp: e.tcp, touched: map[string]map[string]bool{}}
	for rc, vh := range e.routes {
		out.routes[rc] = maps.Clone(vh)
	}
	return out
}

// listenerRoute is the route configuration an RDS listener names.
func listenerRoute(name string) string {
	if name == portListener {
		return portRoute
	}
	return hostRouteOf(strings.TrimSuffix(name, ":80"))
}

func (e *envoyState) liveHosts() []string {
	var out []string
	for _, h := range modelHosts {
		if e.clusters[h] {
			out = append(out, h)
		}
	}
	return out
}

// repair makes the state referentially consistent after a change: references to a cluster
// that went are moved to another (pick chooses among the live ones), or dropped when none is
// left; a listener whose route configuration went goes too.
func (e *envoyState) repair(pick func([]string) string) {
	live := e.liveHosts()
	retarget := func(h string) (string, bool) {
		if e.clusters[h] {
			return h, true
		}
		if len(live) == 0 {
			return "", false
		}
		return pick(live), true
	}
	for rc, vh := range e.routes {
		for host, target := range vh {
			if t, ok := retarget(target); ok {
				vh[host] = t
			} else {
				delete(vh, host)
			}
		}
		if len(vh) == 0 {
			delete(e.routes, rc)
		}
	}
	if e.tcp != "" {
		if t, ok := retarget(e.tcp); ok {
			e.tcp = t
		} else {
			e.tcp = ""
		}
	}
	for l := range e.listeners {
		if e.routes[listenerRoute(l)] == nil {
			delete(e.listeners, l)
		}
	}
}

// specs is, for every resource the state holds, a string that changes whenever its content
// does (the model's bodies are functions of it and of the version).
func (e *envoyState) specs() map[string]map[string]string {
	out := map[string]map[string]string{typeCluster: {}, typeEndpoint: {}, typeListener: {}, typeRoute: {}}
	for h := range e.clusters {
		out[typeCluster][clusterOf(h)] = "eds"
		out[typeEndpoint][clusterOf(h)] = "endpoints"
	}
	for rc, vh := range e.routes {
		var parts []string
		for _, h := range slices.Sorted(maps.Keys(vh)) {
			parts = append(parts, h+"->"+vh[h])
		}
		out[typeRoute][rc] = strings.Join(parts, ",")
	}
	for l := range e.listeners {
		out[typeListener][l] = "rds:" + listenerRoute(l)
	}
	if e.tcp != "" {
		out[typeListener][tcpListenerName] = "tcp:" + e.tcp
	}
	return out
}

// writeEnvoy writes next as the Envoy world's new state, in one store write: every resource
// whose content changed (or that was touched) gets a new version, and what went is removed.
func (w *world) writeEnvoy(next envoyState) error {
	specs := next.specs()
	var updates []store.Update
	type pending struct {
		coll, name, ver string
		body            *anypb.Any
		refs            []string
		ord             int
	}
	var written []pending
	var removed [][2]string
	for _, coll := range envoyTypes {
		u := store.Update{Collection: coll}
		for _, name := range slices.Sorted(maps.Keys(specs[coll])) {
			spec := specs[coll][name]
			if old, ok := w.envSpec[coll][name]; ok && old == spec && !next.touched[coll][name] {
				continue
			}
			ver, ord := w.nextVersion()
			msg, refs := envoyBody(coll, name, ver, &next)
			body := mustAny(msg)
			u.Resources = append(u.Resources, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name, Version: ver}, Body: body})
			written = append(written, pending{coll, name, ver, body, refs, ord})
		}
		for name := range w.envSpec[coll] {
			if _, ok := specs[coll][name]; !ok {
				u.Removed = append(u.Removed, name)
				removed = append(removed, [2]string{coll, name})
			}
		}
		if len(u.Resources) > 0 || len(u.Removed) > 0 {
			updates = append(updates, u)
		}
	}
	next.touched = nil
	if len(updates) == 0 {
		w.env = next
		return nil
	}
	var err error
	w.change(func() {
		if _, err = w.st.Apply(ownerTranslate, updates...); err != nil {
			return
		}
		for _, p := range written {
			w.record(p.coll, p.name, p.ver, p.body, p.refs, ownerTranslate, p.ord)
			w.set(p.coll, p.name, p.ver)
		}
		for _, r := range removed {
			w.unset(r[0], r[1])
		}
	})
	if err != nil {
		return err
	}
	w.env = next
	w.envSpec = specs
	return nil
}

// envoyBody is the body of an Envoy resource at a version, and the clusters it names: a load
// assignment names its own cluster, a route configuration its routes' clusters, a tcp_proxy
// listener its cluster; an RDS listener names a route configuration, no cluster.
func envoyBody(coll, name, ver string, e *envoyState) (proto.Message, []string) {
	switch coll {
	case typeCluster:
		return &clusterv3.Cluster{
			Name: name, AltStatName: "model_" + ver,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
			ConnectTimeout:       durationpb.New(time.Second),
		}, nil
	case typeEndpoint:
		return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Zone: ver},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress("10.0.0.1", 8080)}}}},
		}}}, []string{name}
	case typeRoute:
		vh := e.routes[name]
		rc := &routev3.RouteConfiguration{Name: name, InternalOnlyHeaders: []string{"x-model-" + ver}}
		var refs []string
		for _, h := range slices.Sorted(maps.Keys(vh)) {
			c := clusterOf(vh[h])
			refs = append(refs, c)
			rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
				Name: h + ":80", Domains: []string{h, h + ":80"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}}},
				}},
			})
		}
		return rc, refs
	case typeListener:
		if name == tcpListenerName {
			c := clusterOf(e.tcp)
			tcp := &tcpv3.TcpProxy{StatPrefix: "model_" + ver, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: c}}
			return &listenerv3.Listener{Name: name, Address: socketAddress("0.0.0.0", 9000),
				FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
					Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tcp)},
				}}}}}, []string{c}
		}
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix: "model_" + ver,
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
				RouteConfigName: listenerRoute(name), ConfigSource: adsSource()}},
			HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
				ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}}},
		}
		if name == portListener {
			return &listenerv3.Listener{Name: name, Address: socketAddress("0.0.0.0", 80),
				FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
					Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
				}}}}}, nil
		}
		return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}, nil
	}
	panic("not an Envoy type: " + coll)
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return a
}

// envoyNames are the names a client may ask for, per Envoy type: everything the world can
// hold, and one that never exists.
func envoyNames(coll string) []string {
	var out []string
	switch coll {
	case typeCluster, typeEndpoint:
		for _, h := range modelHosts {
			out = append(out, clusterOf(h))
		}
		out = append(out, clusterOf(ghostHost))
	case typeRoute:
		out = append(out, portRoute)
		for _, h := range modelHosts {
			out = append(out, hostRouteOf(h))
		}
		out = append(out, hostRouteOf(ghostHost))
	case typeListener:
		out = append(out, portListener, tcpListenerName)
		for _, h := range modelHosts {
			out = append(out, apiListenerOf(h))
		}
		out = append(out, apiListenerOf(ghostHost))
	}
	return out
}

// initialEnvoy is where every schedule starts: three clusters, the port's route configuration
// and listener, one host's own route configuration and API listener, and a tcp listener.
func initialEnvoy() envoyState {
	return envoyState{
		clusters: map[string]bool{modelHosts[0]: true, modelHosts[2]: true, modelHosts[4]: true},
		routes: map[string]map[string]string{
			portRoute:                  {modelHosts[0]: modelHosts[0], modelHosts[2]: modelHosts[2]},
			hostRouteOf(modelHosts[0]): {modelHosts[0]: modelHosts[0]},
		},
		listeners: map[string]bool{portListener: true, apiListenerOf(modelHosts[0]): true},
		tcp:       modelHosts[4],
		touched:   map[string]map[string]bool{},
	}
}

// ---- ServiceEntries, pushed by producers ----

// mproducer is a producer as the model knows it: its names, what the store holds of it (after
// its last ACKed push), and when it was surely away.
type mproducer struct {
	id        string
	owner     string // the store owner: "producer:" + id
	names     []string
	held      map[string]string // name → version the store holds from it
	connected bool
	conn      modelProducer
	// absent are the clock intervals in which the producer was surely away (its absence
	// seen in the store, and the step settled), [from, to); to is 0 while it lasts.
	absent     [][2]int64
	goneAt     int64 // its absence seen, not yet settled
	holdingsAt []int // len(held) at the start of each absent interval
}

func newProducer(i int) *mproducer {
	id := fmt.Sprintf("p%d", i)
	return &mproducer{id: id, owner: "producer:" + id, held: map[string]string{},
		names: []string{"n0/" + id + "-a", "n1/" + id + "-b", "n2/" + id + "-c"}}
}

// seBody is a ServiceEntry istiod's validation accepts; its endpoint's label carries the version,
// so that every version has its own body.
func seBody(name, ver string) *networking.ServiceEntry {
	ns, short, _ := strings.Cut(name, "/")
	return &networking.ServiceEntry{
		Hosts:      []string{short + "." + ns + ".svc.cluster.local"},
		Ports:      []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints:  []*networking.WorkloadEntry{{Address: "10.1.0.1", Labels: map[string]string{"model-version": ver}}},
	}
}

// seResource makes a new version of a producer's ServiceEntry and records it.
func (w *world) seResource(p *mproducer, name string) *mcpapi.Resource {
	ver, ord := w.nextVersion()
	body := mustAny(seBody(name, ver))
	w.record(collSE, name, ver, body, nil, p.owner, ord)
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name, Version: ver}, Body: body}
}

// ownerOf is the store owner of a resource's copy (names are never shared between owners).
func (w *world) ownerOf(coll, name string) string {
	if coll != collSE {
		return ownerTranslate
	}
	id, _, _ := strings.Cut(strings.SplitN(name, "/", 2)[1], "-")
	return "producer:" + id
}

// deadThroughout: the owner's resources were surely not to be renewed at every moment of
// [lo, hi]: a producer surely away, or the translation while a producer holding ServiceEntries
// (its inputs) was surely away (Options.Derived).
func (w *world) deadThroughout(owner string, lo, hi int64) bool {
	for k := lo; k <= hi; k++ {
		if !w.deadAt(owner, k) {
			return false
		}
	}
	return true
}

func (w *world) deadAt(owner string, k int64) bool {
	for _, p := range w.producers {
		for i, iv := range p.absent {
			if k < iv[0] || (iv[1] != 0 && k >= iv[1]) {
				continue
			}
			if owner == p.owner || (owner == ownerTranslate && p.holdingsAt[i] > 0) {
				return true
			}
		}
	}
	return false
}

// ---- views: authz rules and the node's own narrowing ----

// policySpec is one set of authz rules for every consumer (all of them are unauthenticated
// over plaintext, so one rule decides for all), and the model's own reading of it: per
// canonical collection, the namespaces it may read ("*": all, cluster-scoped included); a
// collection not listed is refused.
type policySpec struct {
	label   string
	rules   []authz.Rule
	consume map[string]nsSet // nil: no rules, everything allowed
}

type nsSet struct {
	all bool
	ns  map[string]bool
}

func (p *policySpec) refused(coll string) bool {
	if p == nil || p.consume == nil {
		return false
	}
	_, ok := p.consume[coll]
	_, all := p.consume["*"]
	return !ok && !all
}

func (p *policySpec) allows(coll, ns string, namespaced bool) bool {
	if p == nil || p.consume == nil {
		return true
	}
	for _, key := range []string{coll, "*"} {
		s, ok := p.consume[key]
		if !ok {
			continue
		}
		if s.all || (namespaced && s.ns[ns]) {
			return true
		}
	}
	return false
}

var producerRule = authz.Rule{Identity: authz.Unauthenticated,
	Produce: authz.Scope{Collections: []string{collSE}, Namespaces: []string{"*"}}}

// modelPolicies are the rule sets a schedule runs under.
func modelPolicies() []*policySpec {
	ns := func(names ...string) nsSet {
		s := nsSet{ns: map[string]bool{}}
		for _, n := range names {
			if n == "*" {
				s.all = true
			}
			s.ns[n] = true
		}
		return s
	}
	return []*policySpec{
		{label: "no rules"},
		{label: "namespaces n0 and n1 of everything",
			rules: []authz.Rule{producerRule, {Identity: authz.Unauthenticated,
				Consume: authz.Scope{Collections: []string{"*"}, Namespaces: []string{"n0", "n1"}}}},
			consume: map[string]nsSet{"*": ns("n0", "n1")}},
		{label: "routes and unknown types refused",
			rules: []authz.Rule{producerRule, {Identity: authz.Unauthenticated,
				Consume: authz.Scope{Collections: []string{typeCluster, typeEndpoint, typeListener, collSE}, Namespaces: []string{"*"}}}},
			consume: map[string]nsSet{typeCluster: ns("*"), typeEndpoint: ns("*"), typeListener: ns("*"), collSE: ns("*")}},
		{label: "clusters and endpoints all; listeners, routes, ServiceEntries and unknown types of n0 and n2",
			rules: []authz.Rule{producerRule,
				{Identity: authz.Unauthenticated, Consume: authz.Scope{Collections: []string{typeCluster, typeEndpoint}, Namespaces: []string{"*"}}},
				{Identity: authz.Unauthenticated, Consume: authz.Scope{
					Collections: []string{typeListener, typeRoute, collSE, xdsUnknown, mcpUnknown, amcsUnknown}, Namespaces: []string{"n0", "n2"}}}},
			consume: map[string]nsSet{typeCluster: ns("*"), typeEndpoint: ns("*"), typeListener: ns("n0", "n2"),
				typeRoute: ns("n0", "n2"), collSE: ns("n0", "n2"), xdsUnknown: ns("n0", "n2"), mcpUnknown: ns("n0", "n2"), amcsUnknown: ns("n0", "n2")}},
	}
}

// changedSince tells whether a collection's state changed after the clock at.
func (w *world) changedSince(coll string, at int64) bool {
	ts := w.changedAt[coll]
	return len(ts) > 0 && ts[len(ts)-1] > at
}

// deletedSince tells whether a name was deleted after a version of it was written.
func (w *world) deletedSince(coll, name, ver string) bool {
	r := w.version(coll, name, ver)
	if r == nil {
		return false
	}
	for _, ord := range w.deletedAt[coll][name] {
		if ord >= r.ord {
			return true
		}
	}
	return false
}
