package rest

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// served is a REST server over a store of its own, on a loopback HTTP server.
type served struct {
	store  *store.Store
	server *Server
	url    string
	client *http.Client
}

func serve(tb testing.TB, opts Options) *served {
	tb.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	eng := source.New(source.Options{Store: st})
	opts.Engine, opts.Store = eng, st
	// The bridge's defaults (http.rest.*), where the test sets none.
	if opts.PollTimeout == 0 {
		opts.PollTimeout = 30 * time.Second
	}
	if opts.MaxPolls == 0 {
		opts.MaxPolls = 10_000
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = 1 << 20
	}
	s := New(opts)
	mux := http.NewServeMux()
	s.Register(mux)
	hs := httptest.NewServer(mux)
	tr := &http.Transport{MaxIdleConnsPerHost: 2000}
	tb.Cleanup(func() {
		s.Stop()
		eng.Stop()
		tr.CloseIdleConnections()
		hs.Close()
	})
	return &served{store: st, server: s, url: hs.URL, client: &http.Client{Transport: tr}}
}

// putClusters stores Envoy clusters of these names, as the translation does.
func (s *served) putClusters(tb testing.TB, timeout time.Duration, names ...string) {
	tb.Helper()
	var rs []*mcpapi.Resource
	for _, n := range names {
		body := &anypb.Any{}
		c := &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(timeout)}
		if err := anypb.MarshalFrom(body, c, proto.MarshalOptions{Deterministic: true}); err != nil {
			tb.Fatal(err)
		}
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: n}, Body: body})
	}
	if _, err := s.store.Apply("test", store.Update{Collection: xds.ClusterType, Resources: rs}); err != nil {
		tb.Fatal(err)
	}
}

func (s *served) poll(tb testing.TB, version string) (int, *discovery.DiscoveryResponse) {
	body, _ := protojson.Marshal(&discovery.DiscoveryRequest{VersionInfo: version})
	resp, err := s.client.Post(s.url+"/v3/discovery:clusters", "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	var dr discovery.DiscoveryResponse
	if err := protojson.Unmarshal(b, &dr); err != nil {
		tb.Error(err)
	}
	return resp.StatusCode, &dr
}

// Pollers woken by one change share one encoding of the answer: the JSON of one version is
// encoded once per type and view, not once per poller.
func TestRESTPollersWokenByOneChangeShareOneEncoding(t *testing.T) {
	s := serve(t, Options{PollTimeout: 10 * time.Second})
	s.putClusters(t, time.Second, "a")
	_, first := s.poll(t, "")
	const pollers = 50
	before := s.server.Stats().Encodes
	var wg sync.WaitGroup
	versions := make(chan string, pollers)
	for range pollers {
		wg.Go(func() {
			if code, r := s.poll(t, first.VersionInfo); code == http.StatusOK {
				versions <- r.VersionInfo
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.server.Stats().Waiting < pollers && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.putClusters(t, time.Second, "a", "b")
	wg.Wait()
	close(versions)
	n := 0
	for v := range versions {
		n++
		if v == first.VersionInfo {
			t.Fatalf("answered with the version held")
		}
	}
	if n != pollers {
		t.Fatalf("%d of %d pollers answered 200", n, pollers)
	}
	if got := s.server.Stats().Encodes - before; got != 1 {
		t.Fatalf("%d encodings for %d pollers of one change, want 1", got, pollers)
	}
}

// FuzzDecodeRequest: whatever a client posts, the decoder answers a request or an error of
// status 400 or 413, and never panics; a request it accepts has the endpoint's type.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"version_info":"1","node":{"id":"sidecar~1.2.3.4~a.b~b.svc.cluster.local"},"resource_names":["x"]}`), "")
	f.Add([]byte(`{"typeUrl":"type.googleapis.com/envoy.config.cluster.v3.Cluster"}`), xds.ClusterType)
	f.Add([]byte(`{"type_url":"networking.istio.io/v1alpha3/ServiceEntry","node":{"metadata":{"MCPBRIDGE_NAMESPACES":"a,b"}}}`), "")
	f.Add([]byte(`{"error_detail":{"code":3,"details":[{"@type":"type.googleapis.com/google.protobuf.Duration","value":"1s"}]}}`), xds.EndpointType)
	f.Add([]byte(`[]`), xds.RouteType)
	f.Fuzz(func(t *testing.T, body []byte, typeURL string) {
		dr, err := DecodeRequest(bytes.NewReader(body), typeURL)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || (he.code != http.StatusBadRequest && he.code != http.StatusRequestEntityTooLarge) || he.msg == "" {
				t.Fatalf("error %v is not a 400 naming the fault", err)
			}
			return
		}
		if typeURL != "" && dr.GetTypeUrl() != typeURL {
			t.Fatalf("type %q accepted at the endpoint of %q", dr.GetTypeUrl(), typeURL)
		}
		if dr.GetTypeUrl() == "" {
			t.Fatal("a request without a type accepted")
		}
		req, _ := xds.PollRequest(dr) // what the server does next must not panic either
		if req.Key != dr.GetTypeUrl() {
			t.Fatalf("request key %q for type %q", req.Key, dr.GetTypeUrl())
		}
	})
}

// BenchmarkThousandLongPollsWokenByOneChange: 1,000 polls wait over loopback with the current
// version; one store change answers all of them. Reported: the time from the change to the
// last answer, and encodes per change (1: shared).
func BenchmarkThousandLongPollsWokenByOneChange(b *testing.B) {
	const pollers = 1000
	s := serve(b, Options{PollTimeout: time.Minute})
	s.putClusters(b, time.Second, "a", "b", "c")
	_, first := s.poll(b, "")
	version := first.VersionInfo
	encodes := s.server.Stats().Encodes
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		var wg sync.WaitGroup
		answers := make(chan string, pollers)
		for range pollers {
			wg.Go(func() {
				if code, r := s.poll(b, version); code == http.StatusOK {
					answers <- r.VersionInfo
				}
			})
		}
		for s.server.Stats().Waiting < pollers {
			time.Sleep(100 * time.Microsecond)
		}
		start := time.Now()
		s.putClusters(b, time.Duration(i+2)*time.Second, "a", "b", "c")
		wg.Wait()
		total += time.Since(start)
		close(answers)
		n := 0
		for v := range answers {
			n++
			version = v
		}
		if n != pollers {
			b.Fatalf("%d of %d polls answered", n, pollers)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-change-to-last-answer")
	b.ReportMetric(float64(s.server.Stats().Encodes-encodes)/float64(b.N), "encodes/change")
}

// classes counts the gateway classes, and the namespaces' scopes, acquired and released.
type classes struct {
	mu                             sync.Mutex
	acquired, released             int
	scopesAcquired, scopesReleased map[string]int
}

func (c *classes) AcquireScope(ns string) (func(), <-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scopesAcquired == nil {
		c.scopesAcquired, c.scopesReleased = map[string]int{}, map[string]int{}
	}
	c.scopesAcquired[ns]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.scopesReleased[ns]++
	}, nil, true
}

func (c *classes) AcquireProxyless() (func(), <-chan struct{}) { return func() {}, nil }
func (c *classes) AcquireProxylessHost(string) (func(), <-chan struct{}) {
	return func() {}, nil
}

func (c *classes) AcquirePortRoute(uint32) (func(), <-chan struct{}) { return func() {}, nil }
func (c *classes) TranslationProgress() (bool, uint64)               { return false, 0 }
func (c *classes) AcquirePortRoutes() (func(), <-chan struct{})      { return func() {}, nil }
func (c *classes) AcquirePortVirtualHosts(uint32) (func(), <-chan struct{}) {
	return func() {}, nil
}
func (c *classes) scopeCounts(ns string) (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scopesAcquired[ns], c.scopesReleased[ns]
}

func (c *classes) AcquireGatewayClass(translate.GatewayClass) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acquired++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.released++
	}
}

func (c *classes) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acquired, c.released
}

// A router node's gateway class is held once however many of its polls wait, kept between
// polls, and released the poll timeout after the last poll ended; a sidecar holds no class
// but its namespace's scope, alike.
func TestRESTRouterClassIsHeldWhilePollingAndReleasedAfter(t *testing.T) {
	const linger = 200 * time.Millisecond
	cl := &classes{}
	s := serve(t, Options{PollTimeout: linger, Views: cl})
	post := func(node string) {
		body, _ := protojson.Marshal(&discovery.DiscoveryRequest{VersionInfo: "x", Node: &core.Node{Id: node}})
		resp, err := s.client.Post(s.url+"/v3/discovery:listeners", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post("sidecar~10.0.0.1~a.b~b.svc.cluster.local")
	post("sidecar~10.0.0.4~c.b~b.svc.cluster.local") // another of the namespace
	if a, _ := cl.counts(); a != 0 {
		t.Fatalf("a sidecar acquired %d gateway classes", a)
	}
	if a, r := cl.scopeCounts("b"); a != 1 || r != 0 {
		t.Fatalf("two sidecars of namespace b acquired its scope %d times and released it %d; want 1 and 0", a, r)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { post("router~10.0.0.2~gw-1.istio-system~istio-system.svc.cluster.local") })
	}
	wg.Wait()
	post("router~10.0.0.3~gw-2.istio-system~istio-system.svc.cluster.local") // the same class, a poll later
	if a, r := cl.counts(); a != 1 || r != 0 {
		t.Fatalf("after the polls: acquired %d, released %d; want 1 and 0", a, r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, r := cl.counts(); r != 1; _, r = cl.counts() {
		if time.Now().After(deadline) {
			t.Fatal("the class was never released after the last poll")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := cl.scopeCounts("b"); r != 1; _, r = cl.scopeCounts("b") {
		if time.Now().After(deadline) {
			t.Fatal("the scope was never released after the last poll")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Pollers of one type that read different collections never share an answer: a proxyless
// client's clusters (GENERATOR=grpc) and an Envoy's, written in one write (one revision),
// and two namespaces' views of them (one hides the cluster).
func TestRESTAnswersAreNotSharedBetweenCollections(t *testing.T) {
	s := serve(t, Options{})
	const name = "outbound|80||a.example.com"
	resource := func(timeout time.Duration) []*mcpapi.Resource {
		body := &anypb.Any{}
		if err := anypb.MarshalFrom(body, &cluster.Cluster{Name: name, ConnectTimeout: durationpb.New(timeout)}, proto.MarshalOptions{Deterministic: true}); err != nil {
			t.Fatal(err)
		}
		return []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: name}, Body: body}}
	}
	hidden := translate.ScopeCollection("a", xds.ClusterType)
	if _, err := s.store.Apply("test", store.Update{Collection: xds.ClusterType, Resources: resource(time.Second)},
		store.Update{Collection: translate.EnvoyGRPCClusterCollection, Resources: resource(7 * time.Second)},
		store.Update{Collection: hidden, Encoded: []store.Encoded{store.Hidden(name)}}); err != nil {
		t.Fatal(err)
	}
	grpcMD, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc"})
	poll := func(node *core.Node) []time.Duration {
		body, _ := protojson.Marshal(&discovery.DiscoveryRequest{Node: node})
		resp, err := s.client.Post(s.url+"/v3/discovery:clusters", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var dr discovery.DiscoveryResponse
		if err := protojson.Unmarshal(b, &dr); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
		}
		var out []time.Duration
		for _, a := range dr.GetResources() {
			var c cluster.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c.GetConnectTimeout().AsDuration())
		}
		return out
	}
	for range 2 { // either order: the first answer is cached, the second must not reuse it
		for _, c := range []struct {
			what string
			node *core.Node
			want []time.Duration
		}{
			{"an Envoy of namespace b", &core.Node{Id: "sidecar~10.0.0.1~x.b~b.svc.cluster.local"}, []time.Duration{time.Second}},
			{"a proxyless client of b", &core.Node{Id: "sidecar~10.0.0.2~y.b~b.svc.cluster.local", Metadata: grpcMD}, []time.Duration{7 * time.Second}},
			{"an Envoy of namespace a, which does not see it", &core.Node{Id: "sidecar~10.0.0.3~z.a~a.svc.cluster.local"}, nil},
		} {
			if got := poll(c.node); !slices.Equal(got, c.want) {
				t.Errorf("%s: clusters with connect timeouts %v, want %v", c.what, got, c.want)
			}
		}
	}
}
