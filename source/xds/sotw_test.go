package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

func TestNodeIsTakenFromTheFirstRequest(t *testing.T) {
	s := startServer(t)
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, Node: &core.Node{Id: "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local"}})
	m := c.recv()
	c.ack(m) // no node on later requests, as Envoy does
	c.send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"x"}})
	c.recv()
	clients := s.engine.Clients()
	if len(clients) != 1 || clients[0].Node != "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local" {
		t.Fatalf("clients = %+v", clients)
	}
}

func TestWildcardForClustersAndItStaysOnceEntered(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a", "b"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	m := c.recv()
	assertNames(t, "wildcard CDS", sotwNames(t, m), "a", "b")
	// Names in a later request are ignored: still wildcard.
	c.ack(m, "a")
	s.putEnvoy(t, ClusterType, clusters("c"))
	assertNames(t, "CDS after a change", sotwNames(t, c.recv()), "a", "b", "c")
}

func TestResourceNamesAreTheSubscriptionForEndpoints(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b", "c"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}})
	m := c.recv()
	assertNames(t, "EDS for a", sotwNames(t, m), "a")
	c.ack(m, "a")

	// A change to a name the client did not ask for sends nothing.
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "b"))
	c.quiet(300 * time.Millisecond)

	// Newly asked names are sent at once, though unchanged.
	c.ack(m, "a", "c")
	m = c.recv()
	assertNames(t, "EDS for the newly asked c", sotwNames(t, m), "c")
	c.ack(m, "a", "c")
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "c"))
	assertNames(t, "EDS after c changed", sotwNames(t, c.recv()), "c")
}

// xDS state of the world sends listeners and clusters whole, but groups the other types like
// the incremental variants: a change to one endpoint assignment sends that one only.
func TestStateOfTheWorldSendsOnlyChangedEndpointsButWholeClusters(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b", "c"))
	s.putEnvoy(t, ClusterType, clusters("a", "b", "c"))
	eds, cds := newSotW(t, s.addr), newSotW(t, s.addr)
	eds.send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b", "c"}})
	m := eds.recv()
	assertNames(t, "first EDS response: every asked name", sotwNames(t, m), "a", "b", "c")
	eds.ack(m, "a", "b", "c")
	cds.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: []string{"a", "b", "c"}})
	cm := cds.recv()
	cds.ack(cm, "a", "b", "c")
	waitAllAcknowledged(t, s.engine)

	s.putEnvoy(t, EndpointType, loadAssignments("v2", "b"))
	assertNames(t, "EDS after b changed", sotwNames(t, eds.recv()), "b")
	s.putEnvoy(t, ClusterType, map[string]proto.Message{"b": &cluster.Cluster{Name: "b", ConnectTimeout: durationpb.New(3 * time.Second)}})
	assertNames(t, "CDS (named) after b changed", sotwNames(t, cds.recv()), "a", "b", "c")
}

// Streams asking for the same names at the same revisions share one encoded response.
func TestStreamsWithTheSameNamesShareEncodedResponses(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b"))
	var clients []*sotwClient
	for range 5 {
		c := newSotW(t, s.addr)
		c.send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"b", "a"}})
		c.ack(c.recv(), "a", "b")
		clients = append(clients, c)
	}
	waitAllAcknowledged(t, s.engine)
	before := s.engine.Stats()
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "a"))
	for _, c := range clients {
		assertNames(t, "change", sotwNames(t, c.recv()), "a")
	}
	after := s.engine.Stats()
	if enc, hits := after.Encodes-before.Encodes, after.FrameHits-before.FrameHits; enc != 1 || hits != 4 {
		t.Fatalf("5 streams with the same names: %d encodes and %d reuses, want 1 and 4", enc, hits)
	}
}

func TestVersionsArePerType(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	s.putEnvoy(t, RouteType, routes("r"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	cds := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"r"}})
	rds := c.recv()
	c.ack(cds)
	c.ack(rds, "r")
	s.putEnvoy(t, RouteType, routes("r2"))
	s.putEnvoy(t, RouteType, map[string]proto.Message{"r": &route.RouteConfiguration{Name: "r", ValidateClusters: wrapperspb.Bool(true)}})
	rds2 := c.recv()
	if rds2.TypeUrl != RouteType || rds2.VersionInfo == rds.VersionInfo {
		t.Fatalf("route version did not move: %s -> %s (%s)", rds.VersionInfo, rds2.VersionInfo, rds2.TypeUrl)
	}
	c.quiet(200 * time.Millisecond) // clusters did not change: no CDS response, version untouched
	if cds.VersionInfo == "" || rds.VersionInfo == "" {
		t.Fatal("empty version_info")
	}
}

func TestStaleNonceRequestsAreIgnored(t *testing.T) {
	s := startServer(t)
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	first := c.recv()
	c.ack(first)
	s.putEnvoy(t, ClusterType, clusters("a"))
	second := c.recv()
	c.ack(first) // stale
	s.putEnvoy(t, ClusterType, clusters("b"))
	c.quiet(300 * time.Millisecond)
	c.ack(second)
	assertNames(t, "after the real ACK", sotwNames(t, c.recv()), "a", "b")
}

// go-control-plane's snapshot cache resends a NACKed listener thousands of times a second;
// the bridge records the NACK and sends nothing for that type until the data changes.
func TestNACKIsRecordedAndNothingIsResentUntilTheDataChanges(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("bad"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, Node: &core.Node{Id: "n"}})
	c.nack(c.recv())

	deadline := time.After(2 * time.Second)
	responses := 0
count:
	for {
		select {
		case _, ok := <-c.Responses():
			if !ok {
				t.Fatal("stream ended")
			}
			responses++
		case <-deadline:
			break count
		}
	}
	if responses != 0 {
		t.Fatalf("%d responses in the 2s after a NACK, want 0", responses)
	}
	sub := s.engine.Clients()[0].Subscriptions[0]
	if sub.LastNACK == nil || sub.LastNACK.Message != "rejected by test" {
		t.Fatalf("NACK not recorded: %+v", sub)
	}
	s.putEnvoy(t, ClusterType, clusters("good"))
	assertNames(t, "after the next change", sotwNames(t, c.recv()), "bad", "good")
}

func TestNoDuplicateNamesInAResponse(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "a"}})
	assertNames(t, "names", sotwNames(t, c.recv()), "a")
}

// istiod opens one state-of-the-world ADS stream to an xds:// config source, asks (wildcard)
// for MeshConfig and every Istio kind, and is not ready until every type is answered.
func TestIstiodOpeningEveryTypeIsAnswered(t *testing.T) {
	s := startServer(t)
	if err := StoreMeshConfig(s.store, &meshv1alpha1.MeshConfig{TrustDomain: "example.org"}); err != nil {
		t.Fatal(err)
	}
	se := &networking.ServiceEntry{Hosts: []string{"a.example"}}
	if _, err := s.store.Apply("test", store.Update{Collection: "istio/networking/v1alpha3/serviceentries",
		Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: "ns/a"}, Body: anyOf(se)}}}); err != nil {
		t.Fatal(err)
	}
	c := newSotW(t, s.addr)
	types := []string{kinds.MeshConfigTypeURL}
	for _, k := range kinds.Kinds() {
		types = append(types, k.XDSTypeURL)
	}
	for i, typeURL := range types {
		req := &discovery.DiscoveryRequest{TypeUrl: typeURL}
		if i == 0 {
			req.Node = &core.Node{Id: "istiod"}
		}
		c.send(req)
	}
	answered := map[string]*discovery.DiscoveryResponse{}
	for range types {
		m := c.recv()
		if answered[m.TypeUrl] != nil {
			t.Fatalf("%s answered twice before any ACK", m.TypeUrl)
		}
		answered[m.TypeUrl] = m
	}
	for _, typeURL := range types {
		if answered[typeURL] == nil {
			t.Fatalf("%s not answered", typeURL)
		}
	}
	mc := answered[kinds.MeshConfigTypeURL]
	if len(mc.Resources) != 1 || mc.Resources[0].TypeUrl != "type.googleapis.com/istio.mesh.v1alpha1.MeshConfig" {
		t.Fatalf("MeshConfig response: %v", mc.Resources)
	}
	var got meshv1alpha1.MeshConfig
	if err := mc.Resources[0].UnmarshalTo(&got); err != nil || got.TrustDomain != "example.org" {
		t.Fatalf("MeshConfig body: %v %v", &got, err)
	}
	ses := answered["networking.istio.io/v1alpha3/ServiceEntry"]
	assertNames(t, "ServiceEntries over xDS", sotwNames(t, ses), "ns/a")
	var r mcpapi.Resource
	ses.Resources[0].UnmarshalTo(&r)
	var gotSE networking.ServiceEntry
	if err := r.Body.UnmarshalTo(&gotSE); err != nil || gotSE.Hosts[0] != "a.example" || r.Metadata.Version == "" {
		t.Fatalf("ServiceEntry resource: %v", &r)
	}
	if n := len(answered["networking.istio.io/v1alpha3/Gateway"].Resources); n != 0 {
		t.Fatalf("empty kind answered with %d resources", n)
	}
}

// Over SotW an MCP collection is always sent whole, even when one resource changed.
func TestStateOfTheWorldSendsAnMCPCollectionWhole(t *testing.T) {
	s := startServer(t)
	put := func(names ...string) {
		var rs []*mcpapi.Resource
		for i, n := range names {
			rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n},
				Body: anyOf(&networking.ServiceEntry{Hosts: []string{fmt.Sprintf("h%d-%d.example", i, time.Now().UnixNano())}})})
		}
		if _, err := s.store.Apply("test", store.Update{Collection: "istio/networking/v1alpha3/serviceentries", Resources: rs}); err != nil {
			t.Fatal(err)
		}
	}
	put("ns/a", "ns/b")
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: "networking.istio.io/v1/ServiceEntry"})
	m := c.recv()
	c.ack(m)
	put("ns/b")
	m = c.recv()
	if m.TypeUrl != "networking.istio.io/v1/ServiceEntry" {
		t.Fatalf("type_url %q, want the alias as asked", m.TypeUrl)
	}
	assertNames(t, "whole collection", sotwNames(t, m), "ns/a", "ns/b")
}

func TestUnknownTypeIsAnsweredEmptyAndDoesNotDisturbOthers(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newSotW(t, s.addr)
	c.send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/no.such.Type"})
	m := c.recv()
	if m.TypeUrl != "type.googleapis.com/no.such.Type" || len(m.Resources) != 0 {
		t.Fatalf("unknown type: %v", m)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	assertNames(t, "CDS on the same stream", sotwNames(t, c.recv()), "a")
}

// ADS make-before-break: when a change touches several Envoy types, clusters go before
// endpoints, before listeners, before routes; a clusters response that removes some goes
// after the routes that stopped using them.
func TestADSOrderingMakeBeforeBreak(t *testing.T) {
	s := startServer(t)
	c := newSotW(t, s.addr)
	subscribe := []*discovery.DiscoveryRequest{
		{TypeUrl: RouteType, ResourceNames: []string{"r"}},
		{TypeUrl: ListenerType},
		{TypeUrl: EndpointType, ResourceNames: []string{"old", "new"}},
		{TypeUrl: ClusterType},
	}
	last := map[string]*discovery.DiscoveryResponse{}
	for _, r := range subscribe {
		c.send(r)
		m := c.recv()
		last[m.TypeUrl] = m
	}
	ackAll := func() {
		for _, r := range subscribe {
			c.ack(last[r.TypeUrl], r.ResourceNames...)
		}
		waitAllAcknowledged(t, s.engine)
	}
	ackAll()

	// One write touching all four types, adding: clusters, endpoints, listeners, routes.
	write := func(upserts map[string]map[string]proto.Message, removals map[string][]string) {
		byType := map[string]*store.Update{}
		update := func(typeURL string) *store.Update {
			if byType[typeURL] == nil {
				byType[typeURL] = &store.Update{Collection: typeURL}
			}
			return byType[typeURL]
		}
		for typeURL, msgs := range upserts {
			u := update(typeURL)
			for name, m := range msgs {
				u.Resources = append(u.Resources, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(m)})
			}
		}
		for typeURL, names := range removals {
			update(typeURL).Removed = names
		}
		var updates []store.Update
		for _, u := range byType {
			updates = append(updates, *u)
		}
		if _, err := s.store.Apply("test", updates...); err != nil {
			t.Fatal(err)
		}
	}
	order := func() []string {
		var types []string
		for range 4 {
			m := c.recv()
			last[m.TypeUrl] = m
			types = append(types, m.TypeUrl)
		}
		return types
	}
	write(map[string]map[string]proto.Message{
		RouteType: routes("r"), ListenerType: {"l": &listener.Listener{Name: "l"}},
		EndpointType: loadAssignments("v1", "old"), ClusterType: clusters("old"),
	}, nil)
	if got, want := order(), []string{ClusterType, EndpointType, ListenerType, RouteType}; !slices.Equal(got, want) {
		t.Fatalf("adding: order %v, want %v", got, want)
	}
	ackAll()

	// The route moves from cluster "old" to a new cluster "new", and "old" is removed, in one
	// write. Make before break: clusters {old, new} first, then endpoints, listeners and
	// routes; only after that, clusters without "old".
	write(map[string]map[string]proto.Message{
		RouteType:    {"r": &route.RouteConfiguration{Name: "r", ValidateClusters: wrapperspb.Bool(true)}},
		EndpointType: loadAssignments("v1", "new"), ListenerType: {"l": &listener.Listener{Name: "l", StatPrefix: "v2"}},
		ClusterType: clusters("new"),
	}, map[string][]string{ClusterType: {"old"}})
	if got, want := order(), []string{ClusterType, EndpointType, ListenerType, RouteType}; !slices.Equal(got, want) {
		t.Fatalf("moving: order %v, want %v", got, want)
	}
	assertNames(t, "clusters while routes move", sotwNames(t, last[ClusterType]), "new", "old")
	for _, r := range subscribe {
		c.ack(last[r.TypeUrl], r.ResourceNames...)
	}
	m := c.recv()
	if m.TypeUrl != ClusterType {
		t.Fatalf("after the routes: %s, want the clusters' removal", m.TypeUrl)
	}
	assertNames(t, "clusters after the routes moved", sotwNames(t, m), "new")
	c.ack(m)
	c.quiet(200 * time.Millisecond)
}

// A cluster a namespace's view hides (store.Hidden in its overlay) in the write that moves
// its route away goes as any removal does: held back in the clusters' state of the world
// until the route moved, shown meanwhile as the cluster it was, never as the marker.
func TestHiddenClusterIsHeldBackAsTheClusterItWas(t *testing.T) {
	s := startServer(t)
	c := newSotW(t, s.addr)
	node := &core.Node{Id: "sidecar~10.0.0.1~app.a~a.svc.cluster.local"}
	subscribe := []*discovery.DiscoveryRequest{{TypeUrl: ClusterType, Node: node}, {TypeUrl: RouteType, ResourceNames: []string{"r"}}}
	r := func(to string) []*mcpapi.Resource {
		return []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: "r"}, Body: anyOf(routeTo("r", to))}}
	}
	if _, err := s.store.Apply("test", clusterUpdate(clusters("A")), store.Update{Collection: RouteType, Resources: r("A")}); err != nil {
		t.Fatal(err)
	}
	last := map[string]*discovery.DiscoveryResponse{}
	for _, req := range subscribe {
		c.send(req)
		m := c.recv()
		last[m.TypeUrl] = m
	}
	for _, req := range subscribe {
		c.ack(last[req.TypeUrl], req.ResourceNames...)
	}
	waitAllAcknowledged(t, s.engine)

	overlay := translate.ScopeCollection("a", ClusterType)
	if _, err := s.store.Apply("test", clusterUpdate(clusters("B")), store.Update{Collection: RouteType, Resources: r("B")},
		store.Update{Collection: overlay, Encoded: []store.Encoded{store.Hidden("A")}}); err != nil {
		t.Fatal(err)
	}
	for seen := 0; ; seen++ {
		m := c.recv()
		for _, a := range m.GetResources() {
			if a.GetTypeUrl() != ClusterType && m.TypeUrl == ClusterType {
				t.Fatalf("response %s holds a resource of type %q", m.VersionInfo, a.GetTypeUrl())
			}
		}
		if m.TypeUrl == ClusterType {
			names := sotwNames(t, m)
			if !slices.Contains(names, "A") {
				if !slices.Equal(names, []string{"B"}) {
					t.Fatalf("clusters %v after A went, want [B]", names)
				}
				return
			}
		}
		if seen > 6 {
			t.Fatal("cluster A never went")
		}
		c.ack(m, subscribeNames(subscribe, m.TypeUrl)...)
	}
}

func subscribeNames(reqs []*discovery.DiscoveryRequest, typeURL string) []string {
	for _, r := range reqs {
		if r.TypeUrl == typeURL {
			return r.ResourceNames
		}
	}
	return nil
}
