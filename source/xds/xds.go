// Package xds is the bridge's xDS server: the aggregated (ADS) and per-type discovery services,
// state of the world and delta, as thin adapters over the source engine. It serves the MCP
// collections under their xDS type URLs (MCP over xDS, as istiod consumes a config source given
// as xds://), the configured MeshConfig, and the Envoy resources the translation derives.
package xds

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/rpcpeer"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

// Envoy resource type URLs. The store keeps the derived Envoy resources in collections named
// by these type URLs.
const (
	ClusterType  = translate.EnvoyClusterType
	EndpointType = translate.EnvoyEndpointType
	ListenerType = translate.EnvoyListenerType
	RouteType    = translate.EnvoyRouteType
	// VirtualHostType is VHDS's (vhds.go).
	VirtualHostType = translate.EnvoyVirtualHostType
)

// Protocol names, as logs, metrics and the debug endpoint show them.
const (
	ProtocolSotW  = "xds-sotw"
	ProtocolDelta = "xds-delta"
)

// MeshConfigCollection is the store collection that holds the configured MeshConfig, served
// under kinds.MeshConfigTypeURL as a bare Any of istio.mesh.v1alpha1.MeshConfig.
const MeshConfigCollection = kinds.MeshConfigTypeURL

var (
	// BodyAsKey: v2 types asked for on the v3 services are served as on the v2 ones.
	sotwLayout = wire.NewLayout(&discovery.DiscoveryResponse{}, wire.Roles{
		Version: "version_info", Resources: "resources", Key: "type_url", Nonce: "nonce", Errors: "resource_errors", BodyAsKey: v2Value,
		Wrapper: &discovery.Resource{},
	})
	deltaLayout = wire.NewLayout(&discovery.DeltaDiscoveryResponse{}, wire.Roles{
		Version: "system_version_info", Resources: "resources", Key: "type_url",
		Removed: "removed_resources", Nonce: "nonce", DeltaResource: &discovery.Resource{}, Errors: "resource_errors", BodyAsKey: v2Value,
	})
)

// typeInfo is how one type URL is served.
type typeInfo struct {
	collection string
	known      bool
	form       wire.Form
	wildcard   bool // LDS, CDS, the MCP collections and MeshConfig accept wildcard subscriptions
	priority   int
	order      translate.Dependencies // what goes before it on an aggregated stream
	// scope narrows a wildcard subscription by the client's node (listeners: a sidecar's are
	// not a gateway's)
	scope func(node source.Node) (string, func(string) bool)
	// namespaced: VHDS's virtual hosts, asked for by their route configuration's name
	// (source.Type Namespaced), in the incremental variants, the only ones VHDS has
	namespaced bool
}

// Response order on one ADS stream when several types are due at once. What must wait for
// what (make before break) is translate.EnvoyOrder; priority only orders what is free to go.
const (
	priorityCluster = iota
	priorityEndpoint
	priorityListener
	priorityRoute
	priorityVirtualHost
	priorityOther
)

// resolve maps a type URL to what serves it.
func resolve(typeURL string) typeInfo {
	switch typeURL {
	case ClusterType:
		return typeInfo{collection: typeURL, known: true, form: wire.FormAnyBody, wildcard: true, priority: priorityCluster,
			scope: ClusterView, order: envoyOrder(typeURL)}
	case EndpointType:
		return typeInfo{collection: typeURL, known: true, form: wire.FormAnyBody, priority: priorityEndpoint, order: envoyOrder(typeURL)}
	case ListenerType:
		return typeInfo{collection: typeURL, known: true, form: wire.FormAnyBody, wildcard: true, priority: priorityListener,
			scope: ListenerView, order: envoyOrder(typeURL)}
	case RouteType:
		return typeInfo{collection: typeURL, known: true, form: wire.FormAnyBody, priority: priorityRoute, order: envoyOrder(typeURL)}
	case VirtualHostType:
		return typeInfo{collection: typeURL, known: true, form: wire.FormAnyBody, priority: priorityVirtualHost, order: envoyOrder(typeURL),
			namespaced: true}
	case kinds.MeshConfigTypeURL:
		return typeInfo{collection: MeshConfigCollection, known: true, form: wire.FormAnyBody, wildcard: true, priority: priorityOther}
	}
	if v3, ok := v3Of[typeURL]; ok {
		return resolveV2(v3)
	}
	if k, ok := kinds.ByXDSTypeURL(typeURL); ok {
		return typeInfo{collection: k.Collection, known: true, form: wire.FormAnyMCPResource, wildcard: true, priority: priorityOther}
	}
	// Unknown: an opaque collection of that name, served as MCP resources (empty if nothing
	// was ever stored under it).
	return typeInfo{collection: typeURL, form: wire.FormAnyMCPResource, wildcard: true, priority: priorityOther}
}

// typ is how the type is served over xDS in mode (before TTLs, which depend on the client).
func (ti typeInfo) typ(mode source.Mode) source.Type {
	return source.Type{
		Collection: ti.collection, Known: ti.known, Mode: mode, Form: ti.form,
		Priority: ti.priority, After: ti.order.After, RemoveAfter: ti.order.RemoveAfter,
		AfterSameNames: ti.order.SameNames, Scope: ti.scope, WildcardCapable: ti.wildcard,
		// xDS sends listeners and clusters whole in state of the world; other types, like the
		// incremental variants, only what changed (the MCP collections are wildcard: whole).
		PartialStateOfTheWorld: !ti.wildcard,
		// Delta may answer in several responses.
		Splittable: mode == source.Incremental,
		Namespaced: ti.namespaced && mode == source.Incremental,
	}
}

// Type is how a type URL is served over xDS in mode, to a client with node (nil: none known):
// the same resolution as a stream's (REST polls and file exports use it).
func Type(typeURL string, mode source.Mode) source.Type { return resolve(typeURL).typ(mode) }

// Server serves every xDS service. Register it with Register.
type Server struct {
	Engine *source.Engine
	// Views, if set, is told of each connected proxy's view: a gateway proxy's class, so that
	// its listeners and routes are built, and a sidecar's namespace, so that what its
	// namespace sees differently is built (the translation controller). Nil: gateway proxies
	// get whatever classes are built, and every proxy the mesh-wide view.
	Views Views
	// DisableV2 leaves the xDS v2 services out (xds.serve_v2: false).
	DisableV2 bool
	// TTL is the TTL of each collection's resources for clients that announce TTL support
	// (ttl.go); nil: none.
	TTL *TTLs
}

// Views is what builds the views of connected proxies: gateway classes' outputs, and the
// namespaces' scopes (translate.ScopeCollection).
type Views interface {
	AcquireGatewayClass(translate.GatewayClass) (release func())
	// AcquireScope holds a namespace's view; built is closed once it is built. ok is false
	// when it is refused (too many), and the namespace's proxies see the mesh-wide view
	// meanwhile.
	AcquireScope(namespace string) (release func(), built <-chan struct{}, ok bool)
	// AcquireProxyless holds the outputs only proxyless gRPC clients read (translate/envoy
	// SetProxyless: their clusters, API listeners, per-host route configurations) for every
	// host, built only while held; built is closed once they are.
	AcquireProxyless() (release func(), built <-chan struct{})
	// AcquireProxylessHost holds them for one host (translate/envoy SetProxylessHost).
	AcquireProxylessHost(host string) (release func(), built <-chan struct{})
	// AcquirePortRoute holds a port's outbound route configuration (PORT, a virtual host
	// for every HTTP host on the port), built only while held (translate/envoy
	// SetPortRoute); built is closed once it is. AcquirePortRoutes holds every port's.
	AcquirePortRoute(port uint32) (release func(), built <-chan struct{})
	AcquirePortRoutes() (release func(), built <-chan struct{})
	// AcquirePortVirtualHosts holds a port's VHDS outputs (vhds.go: its route configuration
	// for VHDS clients and its virtual hosts, translate/envoy SetPortVirtualHosts), built only
	// while held; built is closed once they are.
	AcquirePortVirtualHosts(port uint32) (release func(), built <-chan struct{})
	// TranslationProgress tells whether a translation runs now and how many have started: a
	// request whose views are not built yet waits for them longer while translations go on
	// (waitBuilt).
	TranslationProgress() (running bool, started uint64)
}

// viewHold acquires the view of a stream's proxy, once, from the first request that names
// its node (on the receiving goroutine), the proxyless outputs of each host a request asks
// for (ProxylessHostsOf) and the route configuration of each port it asks for (PortRoutesOf),
// once each; it releases them when the stream ends (on the handler's, which may come first:
// then nothing more is acquired). A request is answered once what it newly holds is built
// (see waitBuilt and adapter.Recv), so that it is answered with it.
type viewHold struct {
	views Views

	mu            sync.Mutex
	seen          bool // the node's view is held
	proxylessNode bool // the node is a proxyless gRPC client (Proxyless)
	hosts         map[string]bool
	// all: every host's proxyless outputs are held: a proxyless node listed listeners or
	// clusters by wildcard, or the stream asked for more than maxProxylessHosts hosts.
	all bool
	// ports are the ports whose route configurations are held; allPorts: every port's is
	// (the stream asked for more than maxProxylessHosts ports).
	ports    map[uint32]bool
	allPorts bool
	// vhdsPorts are the ports whose VHDS outputs are held (vhds.go).
	vhdsPorts map[uint32]bool
	done      bool
	releases  []func()
	// ended is closed by end: a request still waiting for what it holds to be built stops
	// waiting when its stream ends.
	ended chan struct{}
	// building is what each view held said it is built by (keys: hostView and the others
	// below), until seen built: a request that names a view an earlier request of the stream
	// holds waits for it too (the earlier one may be of another type, answered later).
	building map[string]<-chan struct{}
}

// maxProxylessHosts bounds the hosts one stream holds the proxyless outputs of one by one
// (a grpc-go client dials a few services); past it the stream holds every host's, so that a
// client naming many hosts (or names of hosts that do not exist) costs one hold, not one each.
const maxProxylessHosts = 1000

// see acquires what req newly holds. It returns what the request waits for: the channels
// closed once each is built (none: nothing), of what it acquires and of what it names that an
// earlier request acquired, still building; whether every request after it waits for it too
// (it is the first to name the node, and waits); and the channel the stream's end closes.
func (h *viewHold) see(req *source.Request) (waits []<-chan struct{}, node bool, ended <-chan struct{}) {
	if h.views == nil {
		return nil, false, nil
	}
	h.mu.Lock()
	first := !h.seen && req.Node != nil
	if first {
		h.seen, h.proxylessNode = true, Proxyless(*req.Node)
	}
	var hosts []string
	all := false
	ports, allPorts := h.newPorts(req)
	vports := h.newVHDSPorts(req)
	if !h.all {
		for _, host := range ProxylessHostsOf(req, h.proxylessNode) {
			if !h.hosts[host] {
				if h.hosts == nil {
					h.hosts = map[string]bool{}
				}
				h.hosts[host] = true
				hosts = append(hosts, host)
			}
		}
		all = len(h.hosts) > maxProxylessHosts || h.proxylessNode && proxylessWildcard(req)
		if all {
			h.all, hosts = true, nil
		}
	}
	done := h.done
	if h.ended == nil {
		h.ended = make(chan struct{})
	}
	ended = h.ended
	if done {
		h.mu.Unlock()
		return nil, false, ended
	}
	if !first && len(hosts) == 0 && !all && len(ports) == 0 && !allPorts && len(vports) == 0 {
		defer h.mu.Unlock()
		return h.unbuilt(req), false, ended // nothing new: what it names may still be building
	}
	h.mu.Unlock()
	var releases []func()
	if first {
		releases, waits = holdNodeView(h.views, *req.Node)
	}
	building := map[string]<-chan struct{}{}
	held := func(key string, release func(), built <-chan struct{}) {
		releases, building[key] = append(releases, release), built
	}
	for _, host := range hosts {
		release, built := h.views.AcquireProxylessHost(host)
		held(hostKey(host), release, built)
	}
	if all {
		release, built := h.views.AcquireProxyless()
		held(allHostsView, release, built)
	}
	for _, p := range ports {
		release, built := h.views.AcquirePortRoute(p)
		held(portKey(p), release, built)
	}
	if allPorts {
		release, built := h.views.AcquirePortRoutes()
		held(allPortsView, release, built)
	}
	for _, p := range vports {
		release, built := h.views.AcquirePortVirtualHosts(p)
		held(vhdsKey(p), release, built)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		releaseAll(releases)() // the stream ended meanwhile
		return nil, false, ended
	}
	h.releases = append(h.releases, releases...)
	if h.building == nil {
		h.building = map[string]<-chan struct{}{}
	}
	maps.Copy(h.building, building)
	waits = append(slices.DeleteFunc(waits, isNil), h.unbuilt(req)...)
	// The first request that names the node is how the engine learns it: a request answered
	// before it would be subscribed without the node's view, TTLs or kind of client, so
	// whatever it waits for holds back every request after it.
	return waits, first && len(waits) > 0, ended
}

// settled forgets the views a request waited for once its wait ended, built or not: a later
// request naming one does not wait again for a view its first request gave up on (what is
// built is served until the rest is written, as for that request).
func (h *viewHold) settled(waited []<-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	maps.DeleteFunc(h.building, func(_ string, ch <-chan struct{}) bool { return slices.Contains(waited, ch) })
}

// The keys of viewHold.building: hostKey and portKey, and these.
const (
	allHostsView = "all hosts"
	allPortsView = "all ports"
)

func hostKey(host string) string { return "host " + host }
func portKey(port uint32) string { return "port " + strconv.FormatUint(uint64(port), 10) }

// unbuilt are what the views req names wait for, of those the stream holds, not seen built
// yet (called under mu).
func (h *viewHold) unbuilt(req *source.Request) []<-chan struct{} {
	if len(h.building) == 0 {
		return nil
	}
	var keys []string
	if hosts := ProxylessHostsOf(req, h.proxylessNode); len(hosts) > 0 || h.all && h.proxylessNode && proxylessWildcard(req) {
		if h.all {
			keys = append(keys, allHostsView)
		}
		for _, host := range hosts {
			keys = append(keys, hostKey(host))
		}
	}
	if ports := PortRoutesOf(req); len(ports) > 0 {
		if h.allPorts {
			keys = append(keys, allPortsView)
		}
		for _, p := range ports {
			keys = append(keys, portKey(p))
		}
	}
	for _, p := range VHDSPortsOf(req) {
		keys = append(keys, vhdsKey(p))
	}
	var out []<-chan struct{}
	for _, k := range keys {
		ch, ok := h.building[k]
		if !ok || ch == nil {
			continue
		}
		select {
		case <-ch:
			delete(h.building, k) // built: nothing more waits for it
		default:
			if !slices.Contains(out, ch) {
				out = append(out, ch)
			}
		}
	}
	return out
}

func isNil(ch <-chan struct{}) bool { return ch == nil }

// newPorts are the ports a request asks the route configurations of (PortRoutesOf) that the
// stream does not hold yet, or all: the stream asked for more than maxProxylessHosts ports
// (route configurations are asked for by name: there is no wildcard). Called under mu.
func (h *viewHold) newPorts(req *source.Request) (ports []uint32, all bool) {
	if h.allPorts {
		return nil, false
	}
	for _, p := range PortRoutesOf(req) {
		if !h.ports[p] {
			if h.ports == nil {
				h.ports = map[uint32]bool{}
			}
			h.ports[p] = true
			ports = append(ports, p)
		}
	}
	if len(h.ports) > maxProxylessHosts {
		h.allPorts = true
		return nil, true
	}
	return ports, false
}

// proxylessWildcard tells a proxyless node's request that opens a wildcard subscription of
// listeners or clusters (a tool's, or an SDK's): it is served every host's proxyless outputs,
// as it was before they were built per host.
func proxylessWildcard(req *source.Request) bool {
	if req.Nonce != "" {
		return false // an ACK or NACK: its names, if any, were seen when they were asked
	}
	switch resolve(req.Key).collection {
	case ListenerType, ClusterType:
		names := askedNames(req)
		return len(names) == 0 || slices.Contains(names, "*")
	}
	return false
}

func (h *viewHold) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done && h.ended != nil {
		close(h.ended)
	}
	h.done = true
	releaseAll(h.releases)()
	h.releases = nil
}

// Register adds the ADS and the per-type (LDS, RDS, CDS, EDS) services to s, v3 and, unless
// DisableV2, v2.
func (x *Server) Register(s grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(s, &ads{x: x})
	registerPerType(s, x)
	if !x.DisableV2 {
		registerV2(s, x)
	}
}

// sotw serves one state-of-the-world stream; defaultType fills requests that omit type_url
// on a per-type stream.
func (x *Server) sotw(stream grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse], defaultType string) error {
	return serve(x, stream, sotwRequest, sotwLayout, source.StateOfTheWorld, ProtocolSotW, defaultType)
}

func (x *Server) delta(stream grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], defaultType string) error {
	return serve(x, stream, deltaRequest, deltaLayout, source.Incremental, ProtocolDelta, defaultType)
}

// serve runs one stream of any xDS transport version and variant: decode reads its requests,
// node finds their node (nil when a request names none), layout writes its responses, mode
// is the variant's.
func serve[Req, Resp any](x *Server, stream grpc.BidiStreamingServer[Req, Resp], decode func(*Req, string) *source.Request,
	layout *wire.Layout, mode source.Mode, protocol, defaultType string) error {
	ttls := x.TTL
	if protocol == ProtocolSotWV2 || protocol == ProtocolDeltaV2 {
		ttls = nil // v2's Resource has no TTL: v2 clients get plain bodies and no heartbeats
	}
	a := &adapter[Req, Resp]{stream: stream, decode: decode, layout: layout, mode: mode, defaultType: defaultType,
		view: viewHold{views: x.Views}, ttls: ttls}
	defer a.view.end()
	return x.Engine.Serve(stream.Context(), a, protocol, rpcpeer.Addr(stream.Context()))
}

type ads struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	x *Server
}

func (a *ads) StreamAggregatedResources(s grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return a.x.sotw(s, "")
}

func (a *ads) DeltaAggregatedResources(s grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return a.x.delta(s, "")
}

// adapter is one xDS stream for the engine; the transport version and variant are in its
// decode, layout and mode.
type adapter[Req, Resp any] struct {
	stream      grpc.BidiStreamingServer[Req, Resp]
	decode      func(m *Req, defaultType string) *source.Request
	layout      *wire.Layout
	mode        source.Mode
	defaultType string
	view        viewHold // the receive goroutine's; ended by the handler after Serve returns
	ttls        *TTLs
	// vhds: the client takes virtual hosts on demand (VirtualHostsOnDemand, over v3 delta);
	// set by the request that first names the node, read by Send.
	vhds, nodeSeen atomic.Bool

	// Requests that wait for what they hold (see Recv), the engine's receive goroutine's.
	// reading carries the requests read by the goroutine that reads the stream once one
	// waited (nil before); woken is signalled as each wait ends.
	waiting []inbound
	reading chan inbound
	woken   chan struct{}
}

// inbound is a request read from the stream (or how reading it failed), with what it waits
// for: ready closes once what it holds is built (nil: nothing to wait for); node, that it waits
// for the node's view, which every type reads.
type inbound struct {
	req   *source.Request
	err   error
	ready chan struct{}
	node  bool
}

// Recv hands the engine the next request it may answer. A request that newly holds a view
// (a namespace's, a host's proxyless outputs, a port's route configuration) is answered once
// it is built, which at a million services takes seconds (a port's route configuration, 4-5
// s; see waitBuilt); the requests after it of other types go on meanwhile (an Envoy's ACKs of
// clusters and endpoints, while its route configuration is built), those of its type after
// it, so that a type's requests keep their order, and every one after a request that waits for
// the node's view, which every type reads. The first request that waits starts a goroutine
// that reads the stream from then on; until then the stream is read here, one goroutine a
// stream as before.
func (a *adapter[Req, Resp]) Recv() (*source.Request, error) {
	if a.reading == nil {
		in := a.read()
		if in.ready == nil {
			return in.req, in.err
		}
		a.waiting = append(a.waiting, in)
		a.reading = make(chan inbound)
		go a.readOn()
	}
	for {
		if i := a.answerable(); i >= 0 {
			in := a.waiting[i]
			a.waiting = slices.Delete(a.waiting, i, i+1)
			return in.req, in.err
		}
		reading := a.reading
		if len(a.waiting) >= maxWaitingRequests {
			reading = nil // the client waits too: no more is read until some go
		}
		select {
		case in := <-reading:
			a.waiting = append(a.waiting, in)
		case <-a.woken:
		case <-a.stream.Context().Done():
			return nil, status.FromContextError(a.stream.Context().Err()).Err() // as the stream's Recv says it
		}
	}
}

// maxWaitingRequests bounds the requests of one stream read while earlier ones wait (each up
// to grpc.max_recv_msg_size): an Envoy has a few in flight, one a type, while one waits.
const maxWaitingRequests = 16

// read reads one request and acquires what it holds; a request that must wait gets a
// goroutine that closes its ready channel once what it holds is built, or its wait ends.
func (a *adapter[Req, Resp]) read() inbound {
	m, err := a.stream.Recv()
	if err != nil {
		return inbound{err: err}
	}
	req := a.decode(m, a.defaultType)
	if req.Node != nil && !a.nodeSeen.Swap(true) {
		a.vhds.Store(req.Node.VirtualHostsOnDemand && a.layout == deltaLayout)
	}
	if a.vhds.Load() {
		renameVHDSRoutes(req)
	}
	waits, node, ended := a.view.see(req)
	in := inbound{req: req, node: node}
	if len(waits) > 0 {
		if a.woken == nil { // before the reading goroutine starts: only it calls read then
			a.woken = make(chan struct{}, 1)
		}
		ready, woken, progress := make(chan struct{}), a.woken, a.view.views.TranslationProgress
		in.ready = ready
		go func() {
			waitBuilt(waits, progress, ended)
			a.view.settled(waits)
			close(ready)
			select {
			case woken <- struct{}{}:
			default:
			}
		}()
	}
	return in
}

// readOn reads the stream until it ends, once a request waited.
func (a *adapter[Req, Resp]) readOn() {
	for {
		in := a.read()
		select {
		case a.reading <- in:
		case <-a.stream.Context().Done():
			return
		}
		if in.err != nil {
			return
		}
	}
}

// answerable is the index of the first request read that may be answered now, or -1: one
// whose wait ended, with no request of its type before it still waiting, nor one that waits
// for the node's view. A failed read (the client ended the stream) comes after every request
// before it, as it came: a client that sends its requests and closes its side is answered.
// (A stream cancelled ends Recv through its context.)
func (a *adapter[Req, Resp]) answerable() int {
	var blocked map[string]bool
	for i := range a.waiting {
		in := &a.waiting[i]
		if in.err != nil {
			if i == 0 {
				return 0
			}
			return -1
		}
		if in.ready != nil {
			select {
			case <-in.ready:
				in.ready = nil
			default:
			}
		}
		if in.ready == nil && !blocked[in.req.Key] {
			return i
		}
		if in.ready != nil && in.node {
			return -1
		}
		if blocked == nil {
			blocked = map[string]bool{}
		}
		blocked[in.req.Key] = true
	}
	return -1
}

func (a *adapter[Req, Resp]) Send(f *wire.Frame) error {
	if a.vhds.Load() {
		f = restoreVHDSRouteNames(f)
	}
	return a.stream.SendMsg(f)
}
func (a *adapter[Req, Resp]) Layout() *wire.Layout { return a.layout }

// Type resolves the type URL, with the TTL the client takes (ttl.go), for the client's node
// (NodeType).
func (a *adapter[Req, Resp]) Type(req *source.Request, node *source.Node) source.Type {
	typ := Type(req.Key, a.mode)
	withTTL(&typ, a.ttls, node)
	if node != nil {
		typ.Collection = NodeCollection(typ.Collection, *node)
	}
	return typ
}

// ScopedCollection is a derived collection as a namespace's proxies see it: the namespace's
// overlay (translate.ScopeCollection) over the mesh-wide collection.
func ScopedCollection(namespace, collection string) string {
	return store.Layered(collection, translate.ScopeCollection(namespace, collection))
}

// NodeCollection is the collection a node reads for a type served from coll: a proxyless
// gRPC client's clusters (v3 or v2) come from the collection of their gRPC form (Proxyless),
// a sidecar's derived collections through its namespace's overlays (ScopeOf), and a gateway
// proxy's clusters through the gateways' overlay (translate.GatewayCollection).
func NodeCollection(coll string, node source.Node) string {
	if coll == ClusterType && Proxyless(node) {
		coll = translate.EnvoyGRPCClusterCollection
	}
	if ns, ok := ScopeOf(node); ok && translate.Scoped(coll) {
		coll = ScopedCollection(ns, coll)
	}
	if coll == ClusterType && isRouter(node.ID) {
		coll = store.Layered(coll, translate.GatewayCollection(coll)) // clusters as istiod builds them for gateways
	}
	return coll
}

// The parts of the requests the engine reads, by the getters that the v2 and v3 messages
// share (same names, same field numbers).
type (
	nodeMessage interface {
		GetId() string
		GetMetadata() *structpb.Struct
		GetClientFeatures() []string
	}
	sotwMessage interface {
		GetTypeUrl() string
		GetResourceNames() []string
		GetResponseNonce() string
		GetErrorDetail() *rpcstatus.Status
	}
	deltaMessage interface {
		GetTypeUrl() string
		GetResourceNamesSubscribe() []string
		GetResourceNamesUnsubscribe() []string
		GetInitialResourceVersions() map[string]string
		GetResponseNonce() string
		GetErrorDetail() *rpcstatus.Status
	}
)

// nodeNamespaces is the narrowing a node asks for in its metadata (source.NodeNamespacesKey,
// a string).
func nodeNamespaces(n nodeMessage) []string {
	v := n.GetMetadata().GetFields()[source.NodeNamespacesKey]
	return source.ParseNodeNamespaces(v.GetStringValue())
}

// nodeLabels are the workload labels in a node's metadata, under LABELS, as Istio's agent
// writes them (a struct of strings); nil when there are none.
func nodeLabels(n nodeMessage) map[string]string {
	fields := n.GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields()
	if len(fields) == 0 {
		return nil
	}
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			out[k] = s.StringValue
		}
	}
	return out
}

// sotwRequest turns a DiscoveryRequest into an engine request.
func sotwRequest(m *discovery.DiscoveryRequest, defaultType string) *source.Request {
	return sotwFields(m, m.GetNode(), defaultType)
}

// deltaRequest turns a DeltaDiscoveryRequest into an engine request.
func deltaRequest(m *discovery.DeltaDiscoveryRequest, defaultType string) *source.Request {
	return deltaFields(m, m.GetNode(), defaultType)
}

func typeURLOr(typeURL, defaultType string) string {
	if typeURL == "" {
		return defaultType
	}
	return typeURL
}

func sotwFields[N nodeMessage](m sotwMessage, node N, defaultType string) *source.Request {
	return &source.Request{
		Key: typeURLOr(m.GetTypeUrl(), defaultType), Names: m.GetResourceNames(),
		Nonce: m.GetResponseNonce(), ErrorDetail: m.GetErrorDetail(), Node: nodeFields(node),
	}
}

func deltaFields[N nodeMessage](m deltaMessage, node N, defaultType string) *source.Request {
	req := &source.Request{
		Key:       typeURLOr(m.GetTypeUrl(), defaultType),
		Subscribe: m.GetResourceNamesSubscribe(), Unsubscribe: m.GetResourceNamesUnsubscribe(),
		Nonce: m.GetResponseNonce(), ErrorDetail: m.GetErrorDetail(), Node: nodeFields(node),
	}
	if len(m.GetInitialResourceVersions()) > 0 {
		req.InitialVersions = m.GetInitialResourceVersions()
	}
	return req
}

// nodeFields is what a request's node says of the client; nil when it names none (v2 and v3
// nodes share the getters).
func nodeFields[N nodeMessage](node N) *source.Node {
	if node.GetId() == "" {
		return nil // no node, or one without an ID: the request names none
	}
	return &source.Node{
		ID: node.GetId(), Namespaces: nodeNamespaces(node), Labels: nodeLabels(node),
		Metadata: node.GetMetadata(), Features: node.GetClientFeatures(),
		Generator:            node.GetMetadata().GetFields()["GENERATOR"].GetStringValue(),
		VirtualHostsOnDemand: virtualHostsOnDemand(node.GetMetadata()),
	}
}
