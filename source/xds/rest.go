package xds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	// The Envoy types, linked for protojson's resolver of the resources' Anys (what their
	// own Anys hold, such as the HTTP connection manager, comes with the translation that
	// makes them).
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/source"
)

// PollRequest turns a DiscoveryRequest that is asked once (a REST poll, a file export's
// configured node and type) into an engine request and its type for Engine.Snapshot: the
// same type resolution, node view and narrowing as a state-of-the-world stream's request.
// A poll takes no TTLs: nothing renews what it was given.
func PollRequest(m *discovery.DiscoveryRequest) (*source.Request, source.Type) {
	req := sotwRequest(m, "")
	typ := Type(req.Key, source.StateOfTheWorld)
	if req.Node != nil {
		typ.Collection = NodeCollection(typ.Collection, *req.Node)
	}
	return req, typ
}

// nodeOf is what a request says of its node (nothing when it names none).
func nodeOf(req *source.Request) source.Node {
	if req.Node == nil {
		return source.Node{}
	}
	return *req.Node
}

// HoldView acquires the view of a request's node from views, so that it is built: a router
// node's gateway class (its listeners and routes); a sidecar's namespace (ScopeOf); every
// host's proxyless outputs for a proxyless node (Proxyless) or a request for them
// (AsksProxylessOutputs); and every port's route configuration for a request of route
// configurations by port (PortRoutesOf). release gives it back. Nil views, or any other node, holds nothing.
// It is the hold of the clients that come and go, REST polls and file exports; a stream holds
// only the hosts it asks for instead (viewHold). A namespace's view and the proxyless outputs
// are waited for until they are built (see waitBuilt), so that the client is not
// first served the mesh-wide view, with services its namespace must not see, or Envoy's
// clusters; a gateway class is not (its listeners come a moment later: nothing served is
// wrong meanwhile).
func HoldView(views Views, req *source.Request, stop <-chan struct{}) (release func()) {
	if views == nil {
		return func() {}
	}
	node := nodeOf(req)
	releases, waits := holdNodeView(views, node)
	if isRouter(node.ID) {
		return releaseAll(releases) // a gateway holds its class alone (ViewKey says so)
	}
	if Proxyless(node) || AsksProxylessOutputs(req) {
		r, built := views.AcquireProxyless()
		releases, waits = append(releases, r), append(waits, built)
	}
	if len(PortRoutesOf(req)) > 0 {
		r, built := views.AcquirePortRoutes()
		releases, waits = append(releases, r), append(waits, built)
	}
	waitBuilt(waits, views.TranslationProgress, stop)
	return releaseAll(releases)
}

// holdNodeView acquires what a node's kind holds: a router's gateway class, a sidecar's
// namespace; waits are what to wait for before serving it.
func holdNodeView(views Views, node source.Node) (releases []func(), waits []<-chan struct{}) {
	if isRouter(node.ID) {
		return []func(){views.AcquireGatewayClass(GatewayClassOf(node))}, nil
	}
	if ns, ok := ScopeOf(node); ok {
		r, built, _ := views.AcquireScope(ns)
		return []func(){r}, []<-chan struct{}{built}
	}
	return nil, nil
}

func releaseAll(releases []func()) func() {
	return func() {
		for _, r := range releases {
			r()
		}
	}
}

// askedNames are the names a request asks for: a delta request's subscribed, a state of the
// world request's all.
func askedNames(req *source.Request) []string {
	if len(req.Subscribe) > 0 {
		return req.Subscribe
	}
	return req.Names
}

// ProxylessHostsOf are the hosts whose proxyless outputs (translate/envoy SetProxylessHost) a
// request asks for: HOST of an API listener HOST:PORT asked by name (Envoy asks for its
// listeners by wildcard), of a host's route configuration outbound|PORT||HOST (Envoy's
// sidecars ask for the port's, gateways for their class's), and, for a proxyless node
// (whose clusters are their gRPC form), of a cluster outbound|PORT|SUBSET|HOST. A grpc-go
// client without Istio's bootstrap has no GENERATOR in its node: its requests say what it
// reads. The request's names are read in place.
func ProxylessHostsOf(req *source.Request, proxylessNode bool) []string {
	names := askedNames(req)
	var hosts []string
	switch resolve(req.Key).collection {
	case ListenerType:
		for _, n := range names {
			if host, ok := apiListenerHost(n); ok {
				hosts = append(hosts, host)
			}
		}
	case RouteType:
		hosts = outboundHosts(names, hosts)
	case ClusterType:
		if proxylessNode {
			hosts = outboundHosts(names, hosts)
		}
	}
	return hosts
}

// PortRoutesOf are the ports whose outbound route configurations (PORT: translate/envoy
// SetPortRoute) a request asks for, by name: an Envoy sidecar asks for those its 0.0.0.0_PORT
// listeners name. The request's names are read in place.
func PortRoutesOf(req *source.Request) []uint32 {
	if resolve(req.Key).collection != RouteType {
		return nil
	}
	names := askedNames(req)
	var ports []uint32
	for _, n := range names {
		if p, ok := portOfRouteName(n); ok {
			ports = append(ports, p)
		}
	}
	return ports
}

// AsksProxylessOutputs tells a request for some host's proxyless outputs by a listener or a
// route configuration (ProxylessHostsOf).
func AsksProxylessOutputs(req *source.Request) bool {
	return len(ProxylessHostsOf(req, false)) > 0
}

// apiListenerHost is the host of an API listener's name, HOST:PORT.
func apiListenerHost(name string) (string, bool) {
	i := strings.LastIndexByte(name, ':')
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 16); err != nil {
		return "", false
	}
	return name[:i], true
}

// outboundHosts appends the hosts of Istio's outbound names, outbound|PORT|SUBSET|HOST.
func outboundHosts(names, hosts []string) []string {
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, "outbound|")
		if !ok {
			continue
		}
		if parts := strings.SplitN(rest, "|", 3); len(parts) == 3 && parts[2] != "" {
			hosts = append(hosts, parts[2])
		}
	}
	return hosts
}

// waitBuilt waits until every channel is closed (nil ones are not waited for): ScopeBuildWait
// at most while nothing is translated, and on, ScopeBuildWait at a time, while progress tells
// that a translation runs or that one started since the last look, up to ScopeBuildWaitMax
// (a look between two translations sees the count moved). What a client holds is built by the
// next translation, which at a million services may take longer than ScopeBuildWait (a
// port's route configuration, 4–5 s; a namespace's view, a rebuild of every host), or wait
// behind one that does (the first load's); answered before it, the client would be told that
// the route does not exist, or be served services its namespace must not see. It stops
// waiting once stop is closed (the stream ended, the server stops).
func waitBuilt(chs []<-chan struct{}, progress func() (running bool, started uint64), stop <-chan struct{}) {
	if len(chs) == 0 {
		return
	}
	var last uint64
	if progress != nil {
		_, last = progress()
	}
	deadline := time.Now().Add(scopeBuildWaitMax)
	t := time.NewTimer(scopeBuildWait)
	defer t.Stop()
	for _, ch := range chs {
		if ch == nil {
			continue
		}
		for built := false; !built; {
			select {
			case <-ch:
				built = true
			case <-stop:
				return
			case <-t.C:
				left := time.Until(deadline)
				if progress == nil || left <= 0 {
					return
				}
				running, started := progress()
				if !running && started == last {
					return
				}
				last = started
				t.Reset(min(scopeBuildWait, left))
			}
		}
	}
}

// ViewKey names the view a request's node holds (HoldView), for holding one view once however
// many pollers ask for it; empty for a node that holds none.
func ViewKey(req *source.Request) string {
	node := nodeOf(req)
	if isRouter(node.ID) {
		return "class\x00" + GatewayClassOf(node).ID()
	}
	var key string
	if ns, ok := ScopeOf(node); ok {
		key = "scope\x00" + ns
	}
	if Proxyless(node) || AsksProxylessOutputs(req) {
		key += "\x00grpc"
	}
	if len(PortRoutesOf(req)) > 0 {
		key += "\x00ports"
	}
	return key
}

// ScopeBuildWait bounds how long a client's first request waits for its namespace's view, the
// proxyless outputs or a port's route configuration to be built (the next translation,
// normally milliseconds) while no translation runs; ScopeBuildWaitMax, while one does
// (waitBuilt). Past them, what is built is served until the rest is written.
const (
	ScopeBuildWait    = 5 * time.Second
	ScopeBuildWaitMax = 2 * time.Minute
)

// scopeBuildWait and scopeBuildWaitMax are the bounds waitBuilt keeps: tests shorten them.
var scopeBuildWait, scopeBuildWaitMax = ScopeBuildWait, ScopeBuildWaitMax

// EncodeJSON is a state-of-the-world DiscoveryResponse of msg in the canonical JSON encoding
// of proto3 (protojson), as Envoy's REST and filesystem subscriptions read it: each resource
// an Any with its "@type". It encodes the response's bytes as a stream would send them
// (internal/wire), then re-reads them as the generated message, so that JSON and gRPC clients
// hold the same content. An Any of a type this binary does not link is an error naming it.
func EncodeJSON(msg *wire.Message, form wire.Form) ([]byte, error) {
	var resp discovery.DiscoveryResponse
	if err := proto.Unmarshal(sotwLayout.Encode(msg, form), &resp); err != nil {
		return nil, fmt.Errorf("re-reading the response to %s: %w", msg.Key, err)
	}
	out, err := protojson.Marshal(&resp)
	if err != nil {
		return nil, fmt.Errorf("encoding the response to %s as JSON: %w", msg.Key, err)
	}
	// protojson varies its whitespace on purpose (so that nobody relies on its bytes); the
	// bytes served and written are made plain and stable here: compacted, then indented.
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		return nil, err
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	indented.WriteByte('\n')
	return indented.Bytes(), nil
}

// RESTPaths are the REST-JSON endpoints of the Envoy types, as Envoy's REST subscription
// posts to them (api_config_source api_type REST), and the type each serves. Every other type
// (the MCP collections over xDS, MeshConfig) is served at RESTResourcesPath, by the request's
// type_url.
var RESTPaths = map[string]string{
	"/v3/discovery:clusters":  ClusterType,
	"/v3/discovery:endpoints": EndpointType,
	"/v3/discovery:listeners": ListenerType,
	"/v3/discovery:routes":    RouteType,
}

// RESTResourcesPath serves any type by the request's type_url.
const RESTResourcesPath = "/v3/discovery:resources"

// ProtocolREST names REST polling in logs and metrics.
const ProtocolREST = "xds-rest"
