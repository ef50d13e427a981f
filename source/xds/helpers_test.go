package xds

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type server struct {
	store  *store.Store
	engine *source.Engine
	addr   string
}

func startServer(t *testing.T) *server {
	t.Helper()
	return startServerLogging(t, testLogger(t))
}

// startServerLogging starts a server whose engine logs to log (nil: nowhere, for benchmarks).
func startServerLogging(t testing.TB, log *slog.Logger) *server {
	t.Helper()
	return startServerWith(t, source.Options{Logger: log})
}

// startServerWith starts a server whose engine has opts (its store is made here).
func startServerWith(t testing.TB, opts source.Options) *server {
	t.Helper()
	return startServerTTL(t, opts, nil)
}

// startServerTTL starts a server whose xDS services give clients that announce TTL support
// the TTLs ttls (nil: none).
func startServerTTL(t testing.TB, opts source.Options, ttls *TTLs) *server {
	t.Helper()
	return startServerOf(t, opts, Server{TTL: ttls})
}

// startServerOf starts x (its Engine made of opts, over a store of its own).
func startServerOf(t testing.TB, opts source.Options, x Server) *server {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	opts.Store = st
	eng := source.New(opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	x.Engine = eng
	x.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(func() {
		eng.Stop()
		srv.Stop()
	})
	return &server{store: st, engine: eng, addr: lis.Addr().String()}
}

func anyOf(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return a
}

// putEnvoy stores Envoy resources in their type's collection, as the translation does.
func (s *server) putEnvoy(t testing.TB, typeURL string, msgs map[string]proto.Message) {
	t.Helper()
	var rs []*mcpapi.Resource
	for name, m := range msgs {
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: anyOf(m)})
	}
	if _, err := s.store.Apply("test", store.Update{Collection: typeURL, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

func (s *server) removeEnvoy(t *testing.T, typeURL string, names ...string) {
	t.Helper()
	if _, err := s.store.Apply("test", store.Update{Collection: typeURL, Removed: names}); err != nil {
		t.Fatal(err)
	}
}

func clusters(names ...string) map[string]proto.Message {
	out := map[string]proto.Message{}
	for _, n := range names {
		out[n] = &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Second)}
	}
	return out
}

func loadAssignments(version string, names ...string) map[string]proto.Message {
	out := map[string]proto.Message{}
	for _, n := range names {
		out[n] = &endpoint.ClusterLoadAssignment{ClusterName: n, Endpoints: []*endpoint.LocalityLbEndpoints{{
			Locality: &core.Locality{Zone: version},
		}}}
	}
	return out
}

// routeTo is a route configuration whose one route sends everything to a cluster.
func routeTo(name, cluster string) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*route.Route{{
			Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

// moveRoute moves route configuration "r" from cluster from to cluster to, adding to and
// removing from, in one store write, as the translator does.
func (s *server) moveRoute(t *testing.T, from, to string) {
	t.Helper()
	r := &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: "r"}, Body: anyOf(routeTo("r", to))}
	if _, err := s.store.Apply("test", clusterUpdate(clusters(to), from), store.Update{Collection: RouteType, Resources: []*mcpapi.Resource{r}}); err != nil {
		t.Fatal(err)
	}
}

func routes(names ...string) map[string]proto.Message {
	out := map[string]proto.Message{}
	for _, n := range names {
		out[n] = &route.RouteConfiguration{Name: n}
	}
	return out
}

func dialTest(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// sotwClient is a state-of-the-world ADS client built from go-control-plane's types.
type sotwClient struct {
	*streamtest.Client[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	t testing.TB
}

func newSotW(t testing.TB, addr string) *sotwClient {
	t.Helper()
	ads := discovery.NewAggregatedDiscoveryServiceClient(dialTest(t, addr))
	return &sotwClient{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
		return ads.StreamAggregatedResources(ctx)
	})}
}

func (c *sotwClient) send(r *discovery.DiscoveryRequest) { c.t.Helper(); c.Send(r) }
func (c *sotwClient) recv() *discovery.DiscoveryResponse { c.t.Helper(); return c.Recv() }
func (c *sotwClient) quiet(d time.Duration)              { c.t.Helper(); c.Quiet(d) }

func (c *sotwClient) ack(m *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: m.TypeUrl, VersionInfo: m.VersionInfo, ResponseNonce: m.Nonce, ResourceNames: names})
}

func (c *sotwClient) nack(m *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce, ResourceNames: names,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected by test"}})
}

// deltaClient is a delta ADS client built from go-control-plane's types.
type deltaClient struct {
	*streamtest.Client[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	t testing.TB
}

func newDelta(t testing.TB, addr string) *deltaClient {
	t.Helper()
	ads := discovery.NewAggregatedDiscoveryServiceClient(dialTest(t, addr))
	return &deltaClient{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return ads.DeltaAggregatedResources(ctx)
	})}
}

func (c *deltaClient) send(r *discovery.DeltaDiscoveryRequest) { c.t.Helper(); c.Send(r) }
func (c *deltaClient) recv() *discovery.DeltaDiscoveryResponse { c.t.Helper(); return c.Recv() }
func (c *deltaClient) quiet(d time.Duration)                   { c.t.Helper(); c.Quiet(d) }
func (c *deltaClient) cancel()                                 { c.Cancel() }

func (c *deltaClient) ack(m *discovery.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce})
}

// sotwNames decodes a state-of-the-world response's resources and returns their names.
func sotwNames(t *testing.T, m *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range m.Resources {
		msg, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("resource of type %s does not decode: %v", a.TypeUrl, err)
		}
		switch r := msg.(type) {
		case *cluster.Cluster:
			out = append(out, r.Name)
		case *endpoint.ClusterLoadAssignment:
			out = append(out, r.ClusterName)
		case *route.RouteConfiguration:
			out = append(out, r.Name)
		case *mcpapi.Resource:
			out = append(out, r.Metadata.Name)
		default:
			t.Fatalf("unexpected resource type %T", msg)
		}
	}
	slices.Sort(out)
	return out
}

func deltaNames(m *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, r := range m.Resources {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func assertNames(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// waitAllAcknowledged waits until the server has processed every ACK sent so far, so that a
// test's next write finds every type ready to send (at most one response is unacknowledged
// per type, so an ACK still in flight would hold that type back).
func waitAllAcknowledged(t testing.TB, eng *source.Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pending := 0
		for _, c := range eng.Clients() {
			for _, s := range c.Subscriptions {
				if s.Pending != "" {
					pending++
				}
			}
		}
		if pending == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("ACKs not processed within 5s: %+v", eng.Clients())
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t) }

// waitNames waits until the server's subscription to typeURL holds exactly these names, so a
// test's next write is judged against the subscription it just sent.
func waitNames(t *testing.T, eng *source.Engine, typeURL string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range eng.Clients() {
			for _, s := range c.Subscriptions {
				if s.Type == typeURL && slices.Equal(s.Names, names) {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("subscription to %s never became %v: %+v", typeURL, names, eng.Clients())
}
