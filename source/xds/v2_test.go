package xds

import (
	"context"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	apiv2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2"
	corev2 "github.com/mcpbridge/mcpbridge/api/envoy/api/v2/core"
	discoveryv2 "github.com/mcpbridge/mcpbridge/api/envoy/service/discovery/v2"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

// End-to-end tests of the xDS v2 transport over a loopback socket, with clients generated from
// the v2 protos (api/envoy), each named after its rule.

type sotwClientV2 struct {
	*streamtest.Client[apiv2.DiscoveryRequest, apiv2.DiscoveryResponse]
	t testing.TB
}

// newSotWV2 opens a v2 state-of-the-world stream: open is a generated client's method.
func newSotWV2(t testing.TB, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[apiv2.DiscoveryRequest, apiv2.DiscoveryResponse], error)) *sotwClientV2 {
	t.Helper()
	return &sotwClientV2{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[apiv2.DiscoveryRequest, apiv2.DiscoveryResponse], error) {
		return open(ctx)
	})}
}

func newADSV2(t testing.TB, addr string) *sotwClientV2 {
	t.Helper()
	return newSotWV2(t, discoveryv2.NewAggregatedDiscoveryServiceClient(dialTest(t, addr)).StreamAggregatedResources)
}

func (c *sotwClientV2) ack(m *apiv2.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce, ResourceNames: names})
}

func (c *sotwClientV2) nack(m *apiv2.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce, ResourceNames: names,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected by test"}})
}

type deltaClientV2 struct {
	*streamtest.Client[apiv2.DeltaDiscoveryRequest, apiv2.DeltaDiscoveryResponse]
	t testing.TB
}

func newDeltaV2(t testing.TB, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[apiv2.DeltaDiscoveryRequest, apiv2.DeltaDiscoveryResponse], error)) *deltaClientV2 {
	t.Helper()
	return &deltaClientV2{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[apiv2.DeltaDiscoveryRequest, apiv2.DeltaDiscoveryResponse], error) {
		return open(ctx)
	})}
}

func newDeltaADSV2(t testing.TB, addr string) *deltaClientV2 {
	t.Helper()
	return newDeltaV2(t, discoveryv2.NewAggregatedDiscoveryServiceClient(dialTest(t, addr)).DeltaAggregatedResources)
}

func (c *deltaClientV2) ack(m *apiv2.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce})
}

// readV2 checks that every resource of a v2 response is an Any of the response's type URL
// and decodes its value as the v3 message of that type (the same field numbers), returning
// the resources' names.
func readV2(t *testing.T, typeURL string, anys []*anypb.Any) []string {
	t.Helper()
	var out []string
	for _, a := range anys {
		if a.TypeUrl != typeURL {
			t.Fatalf("resource carries type URL %s in a response of %s", a.TypeUrl, typeURL)
		}
		var m proto.Message
		switch typeURL {
		case ClusterTypeV2:
			m = &cluster.Cluster{}
		case EndpointTypeV2:
			m = &endpoint.ClusterLoadAssignment{}
		case RouteTypeV2:
			m = &route.RouteConfiguration{}
		default:
			t.Fatalf("no v3 message for %s", typeURL)
		}
		if err := proto.Unmarshal(a.Value, m); err != nil {
			t.Fatalf("%s body does not decode: %v", typeURL, err)
		}
		out = append(out, resourceName(m))
	}
	slices.Sort(out)
	return out
}

func TestV2SotWServesTheV3BodiesUnderTheV2TypeURL(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a", "b"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2, Node: &corev2.Node{Id: "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local"}})
	m := c.Recv()
	if m.TypeUrl != ClusterTypeV2 || m.VersionInfo == "" || m.Nonce == "" {
		t.Fatalf("response type %q version %q nonce %q", m.TypeUrl, m.VersionInfo, m.Nonce)
	}
	assertNames(t, "v2 CDS", readV2(t, ClusterTypeV2, m.Resources), "a", "b")
	// The value is the stored v3 body, byte for byte.
	_, es := s.store.View().Snapshot(ClusterType)
	for i, e := range es {
		if _, want := e.Body(); !slices.Equal(m.Resources[i].Value, want) {
			t.Fatalf("resource %d is not the stored body", i)
		}
	}
}

func TestV2ACKThenChangeSendsTheNewVersion(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	m := c.Recv()
	c.ack(m)
	c.Quiet(300 * time.Millisecond) // an ACK asks for nothing
	s.putEnvoy(t, ClusterType, clusters("b"))
	next := c.Recv()
	if next.VersionInfo == m.VersionInfo || next.Nonce == m.Nonce {
		t.Fatalf("change sent under version %q nonce %q, as before", next.VersionInfo, next.Nonce)
	}
	assertNames(t, "CDS after the change", readV2(t, ClusterTypeV2, next.Resources), "a", "b")
}

func TestV2NACKedVersionIsNotResent(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	m := c.Recv()
	c.nack(m)
	c.Quiet(300 * time.Millisecond)
	clients := s.engine.Clients()
	if len(clients) != 1 || clients[0].Subscriptions[0].LastNACK == nil || clients[0].Subscriptions[0].LastNACK.Version != m.VersionInfo {
		t.Fatalf("NACK not recorded: %+v", clients)
	}
	s.putEnvoy(t, ClusterType, clusters("b"))
	assertNames(t, "after the NACK, the next change", readV2(t, ClusterTypeV2, c.Recv().Resources), "a", "b")
}

func TestV2StaleNonceIsIgnored(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: EndpointTypeV2, ResourceNames: []string{"a"}})
	first := c.Recv()
	c.ack(first, "a")
	waitAllAcknowledged(t, s.engine)
	s.putEnvoy(t, EndpointType, loadAssignments("v2", "a"))
	second := c.Recv()
	// A request that answers the first response, not the latest, changes nothing.
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: EndpointTypeV2, ResponseNonce: first.Nonce, ResourceNames: []string{"a", "b"}})
	c.Quiet(300 * time.Millisecond)
	c.ack(second, "a", "b")
	assertNames(t, "newly asked after the current nonce", readV2(t, EndpointTypeV2, c.Recv().Resources), "b")
}

func TestV2MakeBeforeBreakAmongTheV2Types(t *testing.T) {
	s := serverWithRouteOnA(t)
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	c.ack(c.Recv())
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: RouteTypeV2, ResourceNames: []string{"r"}})
	c.ack(c.Recv(), "r")
	waitAllAcknowledged(t, s.engine)
	s.moveRoute(t, "A", "B")
	first := c.Recv()
	if first.TypeUrl != ClusterTypeV2 {
		t.Fatalf("first after the move: %s, want the clusters (B made before the route names it)", first.TypeUrl)
	}
	assertNames(t, "make half", readV2(t, ClusterTypeV2, first.Resources), "A", "B")
	routes := c.Recv()
	if routes.TypeUrl != RouteTypeV2 {
		t.Fatalf("second: %s, want the routes", routes.TypeUrl)
	}
	c.ack(routes, "r")
	c.ack(first)
	assertNames(t, "break half, after the routes left A", readV2(t, ClusterTypeV2, c.Recv().Resources), "B")
}

func TestV2DeltaSubscribeMissingAndRemove(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a", "b"))
	c := newDeltaADSV2(t, s.addr)
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: EndpointTypeV2, ResourceNamesSubscribe: []string{"a", "nope"}})
	m := c.Recv()
	if m.TypeUrl != EndpointTypeV2 || m.Nonce == "" || m.SystemVersionInfo == "" {
		t.Fatalf("response type %q version %q nonce %q", m.TypeUrl, m.SystemVersionInfo, m.Nonce)
	}
	var found, missing []string
	for _, r := range m.Resources {
		if r.Resource == nil {
			missing = append(missing, r.Name)
			continue
		}
		if r.Version == "" {
			t.Fatalf("resource %s without a version", r.Name)
		}
		found = append(found, readV2(t, EndpointTypeV2, []*anypb.Any{r.Resource})...)
	}
	assertNames(t, "found", found, "a")
	assertNames(t, "told missing", missing, "nope")
	c.ack(m)
	s.removeEnvoy(t, EndpointType, "a")
	m = c.Recv()
	assertNames(t, "removed", m.RemovedResources, "a")
	c.ack(m)
	c.Quiet(300 * time.Millisecond)
}

func TestV2DeltaReconnectSendsOnlyWhatDiffersFromInitialVersions(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a", "b"))
	c := newDeltaADSV2(t, s.addr)
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: ClusterTypeV2})
	m := c.Recv()
	held := map[string]string{"gone": "x"}
	for _, r := range m.Resources {
		held[r.Name] = r.Version
	}
	c.Cancel()
	s.putEnvoy(t, ClusterType, clusters("c"))
	c = newDeltaADSV2(t, s.addr)
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: ClusterTypeV2, InitialResourceVersions: held})
	m = c.Recv()
	var names []string
	for _, r := range m.Resources {
		names = append(names, r.Name)
	}
	assertNames(t, "sent on reconnect", names, "c")
	assertNames(t, "removed with the first response", m.RemovedResources) // clusters: after the answer
	c.ack(m)
	assertNames(t, "removed after the answer", c.Recv().RemovedResources, "gone")
}

// Each per-type v2 service fills the type URL a request leaves empty with its own.
func TestV2PerTypeServicesServeTheirOwnType(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a"))
	s.putEnvoy(t, RouteType, routes("a"))
	conn := dialTest(t, s.addr)
	cases := []struct {
		typeURL      string
		names        []string
		sotw, delta  func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[apiv2.DiscoveryRequest, apiv2.DiscoveryResponse], error)
		deltaOpen    func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[apiv2.DeltaDiscoveryRequest, apiv2.DeltaDiscoveryResponse], error)
		wantResource bool
	}{
		{typeURL: ClusterTypeV2, sotw: apiv2.NewClusterDiscoveryServiceClient(conn).StreamClusters, deltaOpen: apiv2.NewClusterDiscoveryServiceClient(conn).DeltaClusters},
		{typeURL: EndpointTypeV2, names: []string{"a"}, sotw: apiv2.NewEndpointDiscoveryServiceClient(conn).StreamEndpoints, deltaOpen: apiv2.NewEndpointDiscoveryServiceClient(conn).DeltaEndpoints},
		{typeURL: ListenerTypeV2, sotw: apiv2.NewListenerDiscoveryServiceClient(conn).StreamListeners, deltaOpen: apiv2.NewListenerDiscoveryServiceClient(conn).DeltaListeners},
		{typeURL: RouteTypeV2, names: []string{"a"}, sotw: apiv2.NewRouteDiscoveryServiceClient(conn).StreamRoutes, deltaOpen: apiv2.NewRouteDiscoveryServiceClient(conn).DeltaRoutes},
	}
	for _, tc := range cases {
		sc := newSotWV2(t, tc.sotw)
		sc.Send(&apiv2.DiscoveryRequest{ResourceNames: tc.names})
		m := sc.Recv()
		if m.TypeUrl != tc.typeURL {
			t.Fatalf("state of the world: type %q, want %q", m.TypeUrl, tc.typeURL)
		}
		if tc.typeURL != ListenerTypeV2 { // no listener stored
			assertNames(t, tc.typeURL, readV2(t, tc.typeURL, m.Resources), "a")
		}
		dc := newDeltaV2(t, tc.deltaOpen)
		dc.Send(&apiv2.DeltaDiscoveryRequest{ResourceNamesSubscribe: tc.names})
		if dm := dc.Recv(); dm.TypeUrl != tc.typeURL {
			t.Fatalf("delta: type %q, want %q", dm.TypeUrl, tc.typeURL)
		}
	}
}

// MCP-over-xDS collections and MeshConfig keep their names and forms on the v2 ADS.
func TestV2MCPCollectionsKeepTheirNames(t *testing.T) {
	s := startServer(t)
	if err := StoreMeshConfig(s.store, nil); err != nil {
		t.Fatal(err)
	}
	se := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "ns/a"}, Body: anyOf(&networking.ServiceEntry{Hosts: []string{"a.example"}})}
	if _, err := s.store.Apply("test", store.Update{Collection: "istio/networking/v1alpha3/serviceentries", Resources: []*mcpapi.Resource{se}}); err != nil {
		t.Fatal(err)
	}
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: "networking.istio.io/v1alpha3/ServiceEntry"})
	m := c.Recv()
	if m.TypeUrl != "networking.istio.io/v1alpha3/ServiceEntry" || len(m.Resources) != 1 || m.Resources[0].TypeUrl != wire.MCPResourceTypeURL {
		t.Fatalf("ServiceEntries over v2: %v", m)
	}
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: kinds.MeshConfigTypeURL})
	if m := c.Recv(); m.TypeUrl != kinds.MeshConfigTypeURL || len(m.Resources) != 1 {
		t.Fatalf("MeshConfig over v2: %v", m)
	}
}

// The type URL decides the resource version, whatever the transport (Envoy's
// resource_api_version is separate from its transport_api_version): a v3 type on the v2 ADS
// gets v3 resources, a v2 type on the v3 ADS v2 ones.
func TestV2TransportServesTheResourceVersionAskedFor(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c2 := newADSV2(t, s.addr)
	c2.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterType})
	m2 := c2.Recv()
	if m2.TypeUrl != ClusterType || len(m2.Resources) != 1 || m2.Resources[0].TypeUrl != ClusterType {
		t.Fatalf("v3 type on the v2 transport: %v", m2)
	}
	c3 := newSotW(t, s.addr)
	c3.send(&discovery.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	m3 := c3.recv()
	if m3.TypeUrl != ClusterTypeV2 {
		t.Fatalf("v2 type on the v3 transport: type %s", m3.TypeUrl)
	}
	assertNames(t, "v2 type on the v3 transport", readV2(t, ClusterTypeV2, m3.Resources), "a")
}

// One encoded body per version serves every stream of that version: four v2 and four v3
// streams take one change with two encodes.
func TestV2OneBodyPerVersionSharedByEveryStream(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	var v2s []*sotwClientV2
	var v3s []*sotwClient
	for range 4 {
		c2 := newADSV2(t, s.addr)
		c2.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
		c2.ack(c2.Recv())
		v2s = append(v2s, c2)
		c3 := newSotW(t, s.addr)
		c3.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
		c3.ack(c3.recv())
		v3s = append(v3s, c3)
	}
	waitAllAcknowledged(t, s.engine)
	before := s.engine.Stats().Encodes
	s.putEnvoy(t, ClusterType, clusters("b"))
	for i := range 4 {
		assertNames(t, "v2 stream", readV2(t, ClusterTypeV2, v2s[i].Recv().Resources), "a", "b")
		assertNames(t, "v3 stream", sotwNames(t, v3s[i].recv()), "a", "b")
	}
	if got := s.engine.Stats().Encodes - before; got != 2 {
		t.Fatalf("%d encodes for one change to 4 v2 and 4 v3 streams, want 2 (one per version)", got)
	}
}

// A v2 node's fields, build_version (5, reserved in v3) among them, are read: its id and
// LABELS metadata reach the engine as a v3 node's do.
func TestV2NodeIsRead(t *testing.T) {
	s := startServer(t)
	labels, _ := structpb.NewStruct(map[string]any{"LABELS": map[string]any{"app": "x"}})
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2, Node: &corev2.Node{Id: "sidecar~10.0.0.9~p.ns~ns.svc.cluster.local",
		BuildVersion: "envoy/1.16.0", UserAgentName: "envoy", Metadata: labels}})
	c.Recv()
	clients := s.engine.Clients()
	if len(clients) != 1 || clients[0].Node != "sidecar~10.0.0.9~p.ns~ns.svc.cluster.local" || clients[0].Protocol != ProtocolSotWV2 {
		t.Fatalf("clients = %+v", clients)
	}
	req := sotwRequestV2(&apiv2.DiscoveryRequest{Node: &corev2.Node{Id: "n", Metadata: labels}}, ClusterTypeV2)
	if req.Node == nil || req.Node.Labels["app"] != "x" {
		t.Fatalf("node = %+v", req.Node)
	}
}

func TestV2ServicesAreLeftOutWhenDisabled(t *testing.T) {
	v2 := []string{"envoy.service.discovery.v2.AggregatedDiscoveryService", "envoy.api.v2.ClusterDiscoveryService",
		"envoy.api.v2.EndpointDiscoveryService", "envoy.api.v2.ListenerDiscoveryService", "envoy.api.v2.RouteDiscoveryService"}
	for _, disable := range []bool{false, true} {
		st := store.New(store.Options{Validate: kinds.ValidateResource})
		eng := source.New(source.Options{Store: st})
		srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
		(&Server{Engine: eng, DisableV2: disable}).Register(srv)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		for _, n := range v2 {
			if _, ok := srv.GetServiceInfo()[n]; ok == disable {
				t.Fatalf("disabled %v: %s registered %v", disable, n, ok)
			}
		}
		if disable {
			stream, err := discoveryv2.NewAggregatedDiscoveryServiceClient(dialTest(t, lis.Addr().String())).StreamAggregatedResources(context.Background())
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.Unimplemented {
				t.Fatalf("v2 ADS when disabled: %v, want Unimplemented", err)
			}
		}
		eng.Stop()
		srv.Stop()
	}
}

// A field v2 spells otherwise reaches a v2 client in its v2 spelling, and a v3 client as
// stored: a header match the v2 client would otherwise drop (matching more than asked).
func TestV2FieldsV2SpellsOtherwiseAreRewritten(t *testing.T) {
	s := startServer(t)
	rc := routeTo("r", "c")
	rc.VirtualHosts[0].Routes[0].Match.Headers = []*route.HeaderMatcher{{Name: "x-user",
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "jason"}}}}}
	s.putEnvoy(t, RouteType, map[string]proto.Message{"r": rc})
	c2 := newADSV2(t, s.addr)
	c2.Send(&apiv2.DiscoveryRequest{TypeUrl: RouteTypeV2, ResourceNames: []string{"r"}})
	m2 := c2.Recv()
	var got route.RouteConfiguration
	if len(m2.Resources) != 1 || proto.Unmarshal(m2.Resources[0].Value, &got) != nil {
		t.Fatalf("v2 RDS: %v", m2)
	}
	if h := got.VirtualHosts[0].Routes[0].Match.Headers[0]; h.GetExactMatch() != "jason" || h.GetStringMatch() != nil { //nolint:staticcheck // the v2 field
		t.Fatalf("v2 header match: %v", h)
	}
	c3 := newSotW(t, s.addr)
	c3.send(&discovery.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"r"}})
	m3 := c3.recv()
	var got3 route.RouteConfiguration
	if len(m3.Resources) != 1 || proto.Unmarshal(m3.Resources[0].Value, &got3) != nil || !proto.Equal(&got3, rc) {
		t.Fatalf("v3 RDS changed: %v", m3)
	}
}

// One stream may mix versions (Envoy 1.16 on v2 asks EDS and RDS in the version its v2
// listeners' and clusters' config sources name, V3): the make-before-break order holds
// between a v2 and a v3 type as between two of one version.
func TestV2AndV3TypesOnOneStreamKeepMakeBeforeBreak(t *testing.T) {
	s := serverWithRouteOnA(t)
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	c.ack(c.Recv())
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"r"}})
	c.ack(c.Recv(), "r")
	waitAllAcknowledged(t, s.engine)
	s.moveRoute(t, "A", "B")
	first := c.Recv()
	if first.TypeUrl != ClusterTypeV2 {
		t.Fatalf("first after the move: %s, want the v2 clusters (B made before the v3 route names it)", first.TypeUrl)
	}
	assertNames(t, "make half", readV2(t, ClusterTypeV2, first.Resources), "A", "B")
	routes := c.Recv()
	if routes.TypeUrl != RouteType {
		t.Fatalf("second: %s, want the v3 routes", routes.TypeUrl)
	}
	c.ack(routes, "r")
	c.ack(first)
	assertNames(t, "break half, after the routes left A", readV2(t, ClusterTypeV2, c.Recv().Resources), "B")
}

// While a response is unacknowledged no other of its type goes; changes meanwhile coalesce
// into one response after the ACK.
func TestV2AtMostOneUnacknowledgedResponsePerTypeAndCoalescing(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	first := c.Recv()
	s.putEnvoy(t, ClusterType, clusters("b"))
	s.putEnvoy(t, ClusterType, clusters("c"))
	c.Quiet(300 * time.Millisecond) // the first is not ACKed yet
	c.ack(first)
	assertNames(t, "after the ACK, both changes at once", readV2(t, ClusterTypeV2, c.Recv().Resources), "a", "b", "c")
	c.Quiet(300 * time.Millisecond)
}

// An unknown type is answered, empty, under its own name, and the stream goes on.
func TestV2UnknownTypeIsAnsweredEmptyAndDoesNotDisturbOthers(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.api.v2.ScopedRouteConfiguration"})
	m := c.Recv()
	if m.TypeUrl != "type.googleapis.com/envoy.api.v2.ScopedRouteConfiguration" || len(m.Resources) != 0 || m.Nonce == "" {
		t.Fatalf("unknown type: %v", m)
	}
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	assertNames(t, "CDS after the unknown type", readV2(t, ClusterTypeV2, c.Recv().Resources), "a")
}

// Authorization applies to v2 streams as to v3 ones, and a rule may name a kind by its v2 type
// URL: a consumer allowed the clusters (named v2) and not the endpoints gets the clusters,
// over either version, and the endpoints empty.
func TestV2ConsumerViewsApply(t *testing.T) {
	policy, err := authz.Compile([]authz.Rule{{Identity: authz.Unauthenticated,
		Consume: authz.Scope{Collections: []string{ClusterTypeV2}, Namespaces: []string{"*"}}}}, CollectionOf)
	if err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, source.Options{Logger: testLogger(t), Authz: policy})
	s.putEnvoy(t, ClusterType, clusters("a"))
	s.putEnvoy(t, EndpointType, loadAssignments("v1", "a"))
	c := newADSV2(t, s.addr)
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: ClusterTypeV2})
	assertNames(t, "allowed v2 clusters", readV2(t, ClusterTypeV2, c.Recv().Resources), "a")
	c.Send(&apiv2.DiscoveryRequest{TypeUrl: EndpointTypeV2, ResourceNames: []string{"a"}})
	if m := c.Recv(); m.TypeUrl != EndpointTypeV2 || len(m.Resources) != 0 {
		t.Fatalf("refused endpoints: %v", m)
	}
	c3 := newSotW(t, s.addr)
	c3.send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
	assertNames(t, "the same clusters over v3", sotwNames(t, c3.recv()), "a")
}

// Over delta, a NACK is recorded, its version not resent, and the next change goes.
func TestV2DeltaNACKIsRecordedAndNotResent(t *testing.T) {
	s := startServer(t)
	s.putEnvoy(t, ClusterType, clusters("a"))
	c := newDeltaADSV2(t, s.addr)
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: ClusterTypeV2})
	m := c.Recv()
	c.Send(&apiv2.DeltaDiscoveryRequest{TypeUrl: ClusterTypeV2, ResponseNonce: m.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad a"}})
	c.Quiet(300 * time.Millisecond)
	if cl := s.engine.Clients(); len(cl) != 1 || cl[0].Subscriptions[0].LastNACK == nil || cl[0].Subscriptions[0].LastNACK.Message != "bad a" {
		t.Fatalf("NACK not recorded: %+v", cl)
	}
	s.putEnvoy(t, ClusterType, clusters("b"))
	m = c.Recv()
	var names []string
	for _, r := range m.Resources {
		names = append(names, r.Name)
	}
	assertNames(t, "the next change", names, "b")
}

// The v2 body of an entry is derived once while the entry lives, and forgotten with it.
func TestV2BodyIsDerivedOncePerEntryVersion(t *testing.T) {
	c := &entryCache{m: map[weak.Pointer[store.Entry]][]byte{}}
	e := &store.Entry{Name: "a", Version: "1", Bytes: []byte("stored")}
	derived := 0
	derive := func() []byte { derived++; return []byte("v2") }
	for range 3 {
		if got := c.value(e, e.Bytes, derive); string(got) != "v2" {
			t.Fatalf("value = %q", got)
		}
	}
	if derived != 1 {
		t.Fatalf("derived %d times for one entry", derived)
	}
	// Unchanged bodies are marked, not copied: the stored bytes come back.
	same := &store.Entry{Name: "b", Version: "1", Bytes: []byte("stored")}
	if got := c.value(same, same.Bytes, func() []byte { return same.Bytes }); &got[0] != &same.Bytes[0] || c.m[weak.Make(same)] != nil {
		t.Fatal("an unchanged body was copied")
	}
	runtime.KeepAlive(e)
	runtime.KeepAlive(same)
	e, same = nil, nil
	deadline := time.Now().Add(5 * time.Second)
	for c.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries kept after their entries were collected", c.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestV2ClientsGetNoTTLs: v2's Resource has no TTL field, so a v2 client is sent plain
// bodies and no heartbeats even when it announces TTL support and xds.ttl is set: a
// bodiless heartbeat would read as a removal to it.
func TestV2ClientsGetNoTTLs(t *testing.T) {
	s := ttlServer(t, source.Options{})
	s.putAs(t, "p", "a")
	c := newDeltaADSV2(t, s.addr)
	c.Send(&apiv2.DeltaDiscoveryRequest{
		Node:    &corev2.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", ClientFeatures: []string{FeatureResourceTTL}},
		TypeUrl: ClusterTypeV2,
	})
	first := c.Recv()
	if len(first.Resources) != 1 || first.Resources[0].Resource == nil {
		t.Fatalf("v2 delta response %v; want cluster a with its body", first.Resources)
	}
	c.ack(first)
	c.Quiet(2 * testTTL) // no heartbeat
}
