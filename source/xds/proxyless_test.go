package xds

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
	"google.golang.org/protobuf/types/known/durationpb"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/translate"
)

// A node whose metadata says GENERATOR=grpc (Istio's gRPC bootstrap) is served its clusters,
// v3 and v2, from the gRPC clusters' collection; every other type, and every other node, as
// before; each through its namespace's view (both are sidecars of namespace ns); a gateway's
// clusters through the gateways' overlay.
func TestProxylessNodeIsServedTheGRPCClusters(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	grpcNode := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Metadata: md})
	envoyNode := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~b.ns~ns.svc.cluster.local"})
	routerNode := nodeFields(&core.Node{Id: "router~10.0.0.2~gw.istio-system~istio-system.svc.cluster.local"})
	if grpcNode.Generator != "grpc" || !Proxyless(*grpcNode) || Proxyless(*envoyNode) {
		t.Fatalf("generator %q, proxyless %v and %v; want grpc, true and false", grpcNode.Generator, Proxyless(*grpcNode), Proxyless(*envoyNode))
	}
	a := &adapter[discovery.DiscoveryRequest, discovery.DiscoveryResponse]{mode: source.StateOfTheWorld}
	for _, c := range []struct {
		key  string
		node *source.Node
		want string
	}{
		{ClusterType, grpcNode, ScopedCollection("ns", translate.EnvoyGRPCClusterCollection)},
		{ClusterTypeV2, grpcNode, ScopedCollection("ns", translate.EnvoyGRPCClusterCollection)},
		{ClusterType, envoyNode, ScopedCollection("ns", ClusterType)},
		{ClusterType, nil, ClusterType},
		{ClusterType, routerNode, store.Layered(ClusterType, translate.GatewayCollection(ClusterType))},
		{ListenerType, routerNode, ListenerType},
		{ListenerType, grpcNode, ScopedCollection("ns", ListenerType)},
		{EndpointType, grpcNode, ScopedCollection("ns", EndpointType)},
	} {
		if got := a.Type(&source.Request{Key: c.key}, c.node).Collection; got != c.want {
			t.Errorf("%s for node %v: collection %q, want %q", c.key, c.node, got, c.want)
		}
	}
}

// A proxyless client and an Envoy proxy that ask for clusters at the same revision are
// served two different collections under one type URL: neither may be given the response
// encoded for the other (the engine shares encoded responses between streams by what they
// asked for, which includes the collection read).
func TestProxylessAndEnvoyClustersAreNotSharedBetweenStreams(t *testing.T) {
	s := startServer(t)
	// Both collections in one write, as the translation writes them: the same revision.
	name := "outbound|80||a.example.com"
	envoyForm := &cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Second)}
	grpcForm := &cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(7 * time.Second)}
	resource := func(c *cluster.Cluster) []*mcpapi.Resource {
		return []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(c)}}
	}
	if _, err := s.store.Apply("test", store.Update{Collection: ClusterType, Resources: resource(envoyForm)},
		store.Update{Collection: translate.EnvoyGRPCClusterCollection, Resources: resource(grpcForm)}); err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	timeoutOf := func(node *core.Node) time.Duration {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: ClusterType})
		m := c.recv()
		if len(m.GetResources()) != 1 {
			t.Fatalf("node %s: %d clusters, want 1", node.GetId(), len(m.GetResources()))
		}
		var got cluster.Cluster
		if err := m.GetResources()[0].UnmarshalTo(&got); err != nil {
			t.Fatal(err)
		}
		return got.GetConnectTimeout().AsDuration()
	}
	// Either order: the first encodes the response, the second must not reuse it.
	for range 2 {
		if got := timeoutOf(&core.Node{Id: "sidecar~10.0.0.1~b.ns~ns.svc.cluster.local"}); got != time.Second {
			t.Errorf("Envoy node: connect timeout %v, want the Envoy form's 1s", got)
		}
		if got := timeoutOf(&core.Node{Id: "sidecar~10.0.0.2~a.ns~ns.svc.cluster.local", Metadata: md}); got != 7*time.Second {
			t.Errorf("proxyless node: connect timeout %v, want the gRPC form's 7s", got)
		}
	}
}

// Sidecars of namespaces whose views hold nothing particular for a type (their overlays were
// never written) share one encoded response, as before namespaces had views.
func TestNamespacesWithNothingParticularShareResponses(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a", "b"))
	before := s.engine.Stats().Encodes
	for _, ns := range []string{"one", "two", "three"} {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, Node: &core.Node{Id: "sidecar~10.0.0.1~app." + ns + "~" + ns + ".svc.cluster.local"}})
		if got := sotwNames(t, c.recv()); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("namespace %s: clusters %v", ns, got)
		}
	}
	if n := s.engine.Stats().Encodes - before; n != 1 {
		t.Fatalf("three namespaces' sidecars cost %d encodings of one response, want 1", n)
	}
}

// The hosts a request asks the proxyless outputs of: API listeners by name, host route
// configurations, and, for a proxyless node, clusters; not Envoy's wildcard listeners, a
// port's or a gateway's route configuration, load assignments, nor names of other forms.
func TestProxylessHostsOf(t *testing.T) {
	for _, c := range []struct {
		req       source.Request
		proxyless bool
		want      []string
	}{
		{source.Request{Key: ListenerType, Names: []string{"echo.ns.svc.cluster.local:8080"}}, false, []string{"echo.ns.svc.cluster.local"}},
		{source.Request{Key: ListenerTypeV2, Names: []string{"echo:8080", "other:80"}}, false, []string{"echo", "other"}},
		{source.Request{Key: ListenerType, Subscribe: []string{"echo:8080"}}, false, []string{"echo"}},
		{source.Request{Key: ListenerType}, false, nil},
		{source.Request{Key: ListenerType, Names: []string{"*"}}, false, nil},
		{source.Request{Key: ListenerType, Names: []string{"0.0.0.0_8080", ":80", "echo:http", "echo:99999"}}, false, nil},
		{source.Request{Key: RouteType, Names: []string{"8080", "outbound|8080||echo"}}, false, []string{"echo"}},
		{source.Request{Key: RouteType, Names: []string{"8080"}}, false, nil},
		{source.Request{Key: RouteType, Subscribe: []string{"gateway.x/http.80", "outbound|80|"}}, false, nil},
		{source.Request{Key: ClusterType, Names: []string{"outbound|8080|v1|echo"}}, true, []string{"echo"}},
		{source.Request{Key: ClusterType, Names: []string{"outbound|8080|v1|echo"}}, false, nil},
		{source.Request{Key: EndpointType, Names: []string{"outbound|8080||echo"}}, true, nil},
	} {
		if got := ProxylessHostsOf(&c.req, c.proxyless); !slices.Equal(got, c.want) {
			t.Errorf("%s names %v subscribe %v (proxyless node %v): %v, want %v", c.req.Key, c.req.Names, c.req.Subscribe, c.proxyless, got, c.want)
		}
	}
	if !AsksProxylessOutputs(&source.Request{Key: ListenerType, Names: []string{"echo:80"}}) ||
		AsksProxylessOutputs(&source.Request{Key: ClusterType, Names: []string{"outbound|80||echo"}}) {
		t.Error("AsksProxylessOutputs: want listeners by name, not clusters")
	}
}

// countingViews counts what a stream holds of the translation's views.
type countingViews struct {
	mu                       sync.Mutex
	scopes, all              int
	hosts                    []string
	releasedScopes, released int
	ports                    []uint32
	allPorts, releasedPorts  int
	vhdsPorts                []uint32
	releasedVHDS             int
}

func (v *countingViews) AcquireGatewayClass(translate.GatewayClass) func() { return func() {} }
func (v *countingViews) AcquireScope(string) (func(), <-chan struct{}, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scopes++
	return func() { v.mu.Lock(); v.releasedScopes++; v.mu.Unlock() }, nil, true
}
func (v *countingViews) AcquireProxyless() (func(), <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.all++
	return func() {}, nil
}
func (v *countingViews) AcquireProxylessHost(host string) (func(), <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.hosts = append(v.hosts, host)
	return func() { v.mu.Lock(); v.released++; v.mu.Unlock() }, nil
}

func (v *countingViews) AcquirePortRoute(port uint32) (func(), <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ports = append(v.ports, port)
	return func() { v.mu.Lock(); v.releasedPorts++; v.mu.Unlock() }, nil
}
func (v *countingViews) AcquirePortVirtualHosts(port uint32) (func(), <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.vhdsPorts = append(v.vhdsPorts, port)
	return func() { v.mu.Lock(); v.releasedVHDS++; v.mu.Unlock() }, nil
}
func (v *countingViews) TranslationProgress() (bool, uint64) { return false, 0 }
func (v *countingViews) AcquirePortRoutes() (func(), <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.allPorts++
	return func() { v.mu.Lock(); v.releasedPorts++; v.mu.Unlock() }, nil
}

// The ports a request asks the route configurations of: route configurations named by a
// port number, as Envoy's sidecars ask for the ones their 0.0.0.0_PORT listeners name; not
// a host's, a gateway's, a number with a leading zero or out of range, nor other types.
func TestPortRoutesOf(t *testing.T) {
	for _, c := range []struct {
		req  source.Request
		want []uint32
	}{
		{source.Request{Key: RouteType, Names: []string{"8080", "outbound|8080||echo", "80"}}, []uint32{8080, 80}},
		{source.Request{Key: RouteTypeV2, Subscribe: []string{"9090"}, Names: []string{"8080"}}, []uint32{9090}},
		{source.Request{Key: RouteType, Names: []string{"08080", "0", "65536", "-1", "+80", "http.80", "*"}}, nil},
		{source.Request{Key: ListenerType, Names: []string{"8080"}}, nil},
		{source.Request{Key: ClusterType, Names: []string{"8080"}}, nil},
	} {
		if got := PortRoutesOf(&c.req); !slices.Equal(got, c.want) {
			t.Errorf("%s names %v subscribe %v: %v, want %v", c.req.Key, c.req.Names, c.req.Subscribe, got, c.want)
		}
	}
}

// A stream holds the route configuration of each port it asks for, once each, and gives them
// back when it ends; past maxProxylessHosts ports, one hold of every port's.
func TestStreamHoldsThePortRoutesItAsksFor(t *testing.T) {
	views := &countingViews{}
	h := viewHold{views: views}
	h.see(&source.Request{Key: RouteType, Names: []string{"8080"}, Node: nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"})})
	h.see(&source.Request{Key: RouteType, Nonce: "1"})
	h.see(&source.Request{Key: RouteType, Names: []string{"8080", "80"}})
	h.see(&source.Request{Key: RouteType, Subscribe: []string{"9090"}})
	if !slices.Equal(views.ports, []uint32{8080, 80, 9090}) || views.allPorts != 0 {
		t.Fatalf("held ports %v and %d holds of every port; want 8080, 80, 9090 once each and none", views.ports, views.allPorts)
	}
	h.end()
	h.see(&source.Request{Key: RouteType, Names: []string{"443"}})
	if views.releasedPorts != 3 || len(views.ports) != 3 {
		t.Errorf("after the end: released %d of %v; want all 3, nothing acquired after", views.releasedPorts, views.ports)
	}

	views = &countingViews{}
	h = viewHold{views: views}
	names := make([]string, maxProxylessHosts+1)
	for i := range names {
		names[i] = strconv.Itoa(i + 1)
	}
	h.see(&source.Request{Key: RouteType, Names: names[:maxProxylessHosts]})
	h.see(&source.Request{Key: RouteType, Names: names})
	h.see(&source.Request{Key: RouteType, Names: []string{"60000"}})
	if views.allPorts != 1 || len(views.ports) != maxProxylessHosts {
		t.Errorf("over %d ports: %d holds of every port, %d ports held; want 1 and %d", maxProxylessHosts, views.allPorts, len(views.ports), maxProxylessHosts)
	}
	h.end()
}

// A stream holds its node's view from its first request, and the proxyless outputs of each
// host a request asks for, once each (a proxyless node's clusters too); nothing for every
// host; all given back when the stream ends.
func TestStreamHoldsTheProxylessHostsItAsksFor(t *testing.T) {
	views := &countingViews{}
	h := viewHold{views: views}
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	node := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Metadata: md})
	h.see(&source.Request{Key: ListenerType, Names: []string{"a:8080"}, Node: node})
	h.see(&source.Request{Key: ListenerType, Nonce: "1"}) // an ACK without names holds nothing
	h.see(&source.Request{Key: RouteType, Names: []string{"outbound|8080||a"}})
	h.see(&source.Request{Key: ClusterType, Names: []string{"outbound|8080|v1|a", "outbound|9090||b"}})
	h.see(&source.Request{Key: ListenerType, Names: []string{"a:8080", "c:80"}})
	if views.scopes != 1 || views.all != 0 || !slices.Equal(views.hosts, []string{"a", "b", "c"}) {
		t.Fatalf("%d scopes, %d holds of every host, hosts %v; want 1, 0 and a, b, c once each", views.scopes, views.all, views.hosts)
	}
	h.end()
	h.see(&source.Request{Key: ListenerType, Names: []string{"d:8080"}})
	if views.releasedScopes != 1 || views.released != 3 || len(views.hosts) != 3 {
		t.Errorf("after the end: released %d scopes and %d hosts of %v; want everything once, nothing acquired after", views.releasedScopes, views.released, views.hosts)
	}
}

// A proxyless node that lists clusters (or listeners) by wildcard holds every host's proxyless
// outputs, once; an ACK without names does not; and a stream that names more hosts than
// maxProxylessHosts holds every host's too, not one hold each.
func TestStreamHoldsEveryHostForAWildcardOrTooManyHosts(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	views := &countingViews{}
	h := viewHold{views: views}
	h.see(&source.Request{Key: ClusterType, Node: nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Metadata: md})})
	h.see(&source.Request{Key: ClusterType, Nonce: "1"})
	h.see(&source.Request{Key: ListenerType, Names: []string{"*"}})
	h.see(&source.Request{Key: ListenerType, Names: []string{"a:80"}})
	if views.all != 1 || len(views.hosts) != 0 {
		t.Errorf("a proxyless node's wildcard: %d holds of every host and hosts %v; want 1 and none", views.all, views.hosts)
	}
	h.end()

	views = &countingViews{}
	h = viewHold{views: views}
	h.see(&source.Request{Key: ClusterType, Node: nodeFields(&core.Node{Id: "envoy"})})
	if views.all != 0 {
		t.Error("an Envoy's wildcard clusters held every host's proxyless outputs")
	}
	names := make([]string, maxProxylessHosts+1)
	for i := range names {
		names[i] = fmt.Sprintf("h%d:80", i)
	}
	h.see(&source.Request{Key: ListenerType, Names: names[:maxProxylessHosts]})
	h.see(&source.Request{Key: ListenerType, Names: names})
	h.see(&source.Request{Key: ListenerType, Names: []string{"more:80"}})
	if views.all != 1 || len(views.hosts) != maxProxylessHosts {
		t.Errorf("over %d hosts: %d holds of every host, %d hosts held; want 1 and %d", maxProxylessHosts, views.all, len(views.hosts), maxProxylessHosts)
	}
	h.end()
}

// A REST poll or a file export (HoldView) that asks for a port's route configuration holds
// every port's, and its view key says so (one hold however many poll it); one that asks for
// other route configurations, or a gateway's, does not.
func TestHoldViewHoldsThePortRoutesOfARequestForOne(t *testing.T) {
	sidecar := nodeFields(&core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"})
	for _, c := range []struct {
		req   source.Request
		ports bool
	}{
		{source.Request{Key: RouteType, Names: []string{"8080"}, Node: sidecar}, true},
		{source.Request{Key: RouteType, Names: []string{"9080"}}, true},
		{source.Request{Key: RouteType, Names: []string{"outbound|8080||a"}, Node: sidecar}, false},
		{source.Request{Key: ListenerType, Node: sidecar}, false},
		{source.Request{Key: RouteType, Names: []string{"8080"}, Node: nodeFields(&core.Node{Id: "router~10.0.0.2~gw.ns~ns.svc.cluster.local"})}, false},
	} {
		views := &countingViews{}
		release := HoldView(views, &c.req, nil)
		if got := views.allPorts == 1; got != c.ports || len(views.ports) != 0 {
			t.Errorf("%s %v (node %v): %d holds of every port, ports %v; want every port's held: %v", c.req.Key, c.req.Names, c.req.Node, views.allPorts, views.ports, c.ports)
		}
		if got := strings.Contains(ViewKey(&c.req), "\x00ports"); got != c.ports {
			t.Errorf("%s %v: view key %q; want the ports in it: %v", c.req.Key, c.req.Names, ViewKey(&c.req), c.ports)
		}
		release()
		if c.ports && views.releasedPorts != 1 {
			t.Errorf("%s %v: released %d holds of the ports; want 1", c.req.Key, c.req.Names, views.releasedPorts)
		}
	}
}
