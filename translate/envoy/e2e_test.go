package envoy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds" // registers the xDS resolver's balancers and filters
	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	xdsserver "github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// These tests run grpc-go's own xDS client against a bridge (store, translation controller,
// xDS server on loopback) and real gRPC backends on loopback: the translated resources are
// proven by a strict client nobody here wrote, not by reading them back.

const (
	e2eHost = "echo.e2e.svc.cluster.local"
	e2ePort = 8080
	// e2eTarget is what a proxyless gRPC client dials; its listener is named HOST:PORT.
	e2eTarget = "xds:///echo.e2e.svc.cluster.local:8080"
)

// bridge is a store with a running translation controller, served over xDS on loopback.
type bridge struct {
	*harness
	addr string
	eng  *source.Engine
}

func startBridge(t *testing.T) *bridge {
	t.Helper()
	return startBridgeWith(t, source.Options{})
}

// startBridgeWith serves the translation with an engine of opts (its store and logger set
// here).
func startBridgeWith(t *testing.T, opts source.Options) *bridge {
	t.Helper()
	return startBridgeOn(t, nil, opts)
}

// startBridgeUnchecked is startBridge on a store that checks only that bodies are of their
// kind and well formed, not istiod's validation: for the tests that feed the translation
// resources istiod refuses, to show that it reports them and goes on.
func startBridgeUnchecked(t *testing.T) *bridge {
	t.Helper()
	return startBridgeOn(t, store.New(store.Options{Validate: func(collection string, r *mcpapi.Resource) error {
		k, ok := kinds.ByCollection(collection)
		if !ok {
			return nil
		}
		if r.GetBody().GetTypeUrl() != k.AMCSTypeURL {
			return fmt.Errorf("body type %q is not %q", r.GetBody().GetTypeUrl(), k.AMCSTypeURL)
		}
		return k.CheckBody(r.GetBody().GetValue())
	}}), source.Options{})
}

// startBridgeOn serves the translation of st (nil: a new store) with an engine of opts.
func startBridgeOn(t *testing.T, st *store.Store, opts source.Options) *bridge {
	t.Helper()
	return startBridgeTTL(t, st, opts, nil)
}

// startBridgeTTL is startBridgeOn whose xDS server gives TTL-announcing clients ttls.
func startBridgeTTL(t *testing.T, st *store.Store, opts source.Options, ttls *xdsserver.TTLs) *bridge {
	t.Helper()
	h := startController(t, st)
	opts.Store, opts.Logger = h.st, testLogger(t).With("component", "source")
	eng := source.New(opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	(&xdsserver.Server{Engine: eng, TTL: ttls, Views: h.ctrl}).Register(srv) // proxies' views built as the bridge builds them
	go srv.Serve(lis)
	t.Cleanup(func() {
		eng.Stop()
		srv.Stop()
	})
	return &bridge{harness: h, addr: lis.Addr().String(), eng: eng}
}

// setConfig makes the YAML the test producer's whole config and waits for its translation.
func (b *bridge) setConfig(yaml string) {
	b.t.Helper()
	res, err := b.st.ReplaceOwner(testOwner, decodeYAML(b.t, yaml))
	if err != nil {
		b.t.Fatal(err)
	}
	b.wait(res.Revision)
	if faults := b.ctrl.Faults(); len(faults) > 0 {
		b.t.Fatalf("the test config has faults: %v", faults)
	}
}

// client dials a target through grpc-go's xDS resolver, with a bootstrap of its own that
// points at the bridge.
func (b *bridge) client(target string) testgrpc.TestServiceClient {
	b.t.Helper()
	resolver := b.resolver()
	conn, err := grpc.NewClient(target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { conn.Close() })
	b.t.Cleanup(b.assertNoNACK) // runs before the connection closes
	return testgrpc.NewTestServiceClient(conn)
}

// assertNoNACK fails the test if grpc-go rejected any response: every resource the
// translation produced passed the client's own validation.
func (b *bridge) assertNoNACK() {
	b.t.Helper()
	for _, c := range b.eng.Clients() {
		for _, s := range c.Subscriptions {
			if s.LastNACK != nil {
				b.t.Errorf("grpc-go rejected %s version %s: %s", s.Type, s.LastNACK.Version, s.LastNACK.Message)
			}
		}
	}
}

// backend is a gRPC server on loopback that answers with its ID.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	id   string
	port int
}

func (s *backend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if d := md.Get("sleep"); len(d) > 0 {
		wait, _ := time.ParseDuration(d[0])
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

func startBackends(t *testing.T, ids ...string) map[string]*backend {
	t.Helper()
	out := map[string]*backend{}
	for _, id := range ids {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &backend{id: id, port: lis.Addr().(*net.TCPAddr).Port}
		srv := grpc.NewServer()
		testgrpc.RegisterTestServiceServer(srv, b)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		out[id] = b
	}
	return out
}

// echoService is the ServiceEntry of e2eHost with the given backends as endpoints on
// 127.0.0.1, each mapped to its own port and labelled version: the ID's first two characters,
// and a DestinationRule with a subset per version.
func echoService(bs ...*backend) string {
	var eps strings.Builder
	var versions []string
	for _, b := range bs {
		fmt.Fprintf(&eps, "  - address: 127.0.0.1\n    ports: {grpc: %d}\n    labels: {version: %s}\n", b.port, b.id[:2])
		if !slices.Contains(versions, b.id[:2]) {
			versions = append(versions, b.id[:2])
		}
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [%s]
  ports:
  - {number: %d, name: grpc, protocol: GRPC}
  resolution: STATIC
  endpoints:
%s`, e2eHost, e2ePort, eps.String()) + echoSubsets(versions...)
}

func echoSubsets(versions ...string) string {
	var subsets strings.Builder
	for _, v := range versions {
		fmt.Fprintf(&subsets, "  - name: %s\n    labels: {version: %s}\n", v, v)
	}
	return `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: e2e}
spec:
  host: echo
  subsets:
` + subsets.String()
}

// echoRoutes is a VirtualService for e2eHost with the given http routes (YAML, indented
// as list items under http).
func echoRoutes(routes string) string {
	return fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [echo]
  http:
%s`, routes)
}

// call makes one RPC and returns the backend that answered.
func call(t *testing.T, c testgrpc.TestServiceClient, md ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetServerId(), nil
}

// answers makes n calls and counts who answered.
func answers(t *testing.T, c testgrpc.TestServiceClient, n int, md ...string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		id, err := call(t, c, md...)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		got[id]++
	}
	return got
}

// eventually calls until the answers satisfy cond, or fails after 10s: changes reach the
// client asynchronously, and polling with a deadline is how to wait for them without sleeping.
func eventually(t *testing.T, c testgrpc.TestServiceClient, what string, cond func(id string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		id, err := call(t, c)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		if cond(id) {
			return
		}
		last = id
	}
	t.Fatalf("%s: not within 10s (last answer from %s)", what, last)
}

func TestGRPCClientCallsAServiceWithoutVirtualService(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v1-b")
	b.setConfig(echoService(bs["v1-a"], bs["v1-b"]))
	c := b.client(e2eTarget)
	// Round robin spreads calls over the endpoints whose connections are up: once both answer.
	seen := map[string]bool{}
	eventually(t, c, "both endpoints answer", func(id string) bool { seen[id] = true; return seen["v1-a"] && seen["v1-b"] })
	got := answers(t, c, 40)
	if got["v1-a"] == 0 || got["v1-b"] == 0 {
		t.Errorf("answers %v; want both endpoints of the default route's cluster", got)
	}
}

// A current grpc-go client, as Istio's bootstrap describes it (GENERATOR grpc), resolves and
// calls a ServiceEntry host with the bridge's default configuration and nothing else: no
// DestinationRule, no VirtualService (issue 23: the cluster it gets by default is one it takes).
func TestGRPCClientCallsAServiceEntryHostWithoutDestinationRule(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v1-b")
	serviceEntryOnly, _, _ := strings.Cut(echoService(bs["v1-a"], bs["v1-b"]), "---\n")
	if strings.Contains(serviceEntryOnly, "DestinationRule") {
		t.Fatalf("the config still holds a DestinationRule:\n%s", serviceEntryOnly)
	}
	b.setConfig(serviceEntryOnly)
	c := b.client(e2eTarget)
	seen := map[string]bool{}
	eventually(t, c, "both endpoints answer", func(id string) bool { seen[id] = true; return seen["v1-a"] && seen["v1-b"] })
	b.assertNoNACK()
}

// A grpc-go client without Istio's bootstrap (no GENERATOR in its node) is not known to be
// proxyless by its node; its request for its API listener by name says it. The API listener
// and the host's route configuration are built for it (none before: a mesh of Envoys never
// pays for them), and it calls the service.
func TestGRPCClientWithoutIstioBootstrapGetsItsAPIListener(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a")
	b.setConfig(echoService(bs["v1-a"]))
	if b.st.View().Collection(ListenerType).Count == 0 {
		t.Fatal("no listener translated")
	}
	listener := strings.TrimPrefix(e2eTarget, "xds:///")
	route := HostRouteName(strings.TrimSuffix(listener, ":8080"), 8080)
	if b.st.View().Get(ListenerType, listener) != nil || b.st.View().Get(RouteType, route) != nil {
		t.Fatal("the API listener or the host's route configuration is built with no proxyless client connected")
	}
	conn, err := grpc.NewClient(e2eTarget, grpc.WithResolvers(b.resolverWithMetadata(`{}`)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := testgrpc.NewTestServiceClient(conn)
	eventually(t, c, "the endpoint answers", func(id string) bool { return id == "v1-a" })
	if b.st.View().Get(RouteType, route) == nil {
		t.Error("the host's route configuration is not in the store while the client is connected")
	}
	b.assertNoNACK()
}

// A proxyless client's outputs are built for the hosts it asks for alone: a client of one
// service in a mesh of many does not make the translation build every host's.
func TestGRPCClientHasOnlyItsHostsProxylessOutputsBuilt(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a")
	others := ""
	for i := range 20 {
		others += fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other-%d, namespace: e2e}
spec:
  hosts: [other-%d.e2e.svc.cluster.local]
  ports: [{number: 8080, name: grpc, protocol: GRPC}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.%d}]
`, i, i, i+1)
	}
	b.setConfig(echoService(bs["v1-a"]) + others)
	c := b.client(e2eTarget)
	eventually(t, c, "the endpoint answers", func(id string) bool { return id == "v1-a" })
	v := b.st.View()
	_, grpcClusters := v.Snapshot(GRPCClusterType)
	var listeners []string
	_, ls := v.Snapshot(ListenerType)
	for _, e := range ls {
		if strings.Contains(e.Name, ":") {
			listeners = append(listeners, e.Name)
		}
	}
	if want := []string{strings.TrimPrefix(e2eTarget, "xds:///")}; !slices.Equal(listeners, want) {
		t.Errorf("API listeners %v, want only the one dialled %v", listeners, want)
	}
	for _, e := range grpcClusters {
		if strings.Contains(e.Name, "other-") {
			t.Errorf("gRPC cluster %s built for a host no client asked for", e.Name)
		}
	}
	if len(grpcClusters) == 0 {
		t.Error("no gRPC cluster built for the client's host")
	}
	b.assertNoNACK()
}

func TestGRPCClientFollowsWeightedSplit(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v2-a")
	b.setConfig(echoService(bs["v1-a"], bs["v2-a"]) + echoRoutes(`  - route:
    - destination: {host: echo, subset: v1}
      weight: 80
    - destination: {host: echo, subset: v2}
      weight: 20
`))
	const n = 1000
	got := answers(t, b.client(e2eTarget), n)
	// 80% of 1,000 has a standard deviation of 1.3%: ±5% is about 4 deviations.
	if share := float64(got["v1-a"]) / n; share < 0.75 || share > 0.85 || got["v1-a"]+got["v2-a"] != n {
		t.Errorf("answers %v: v1 took %.1f%%; want 80%% ± 5%%", got, 100*share)
	}
}

func TestGRPCClientReachesOnlyTheRoutedSubset(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v2-a", "v2-b")
	b.setConfig(echoService(bs["v1-a"], bs["v2-a"], bs["v2-b"]) + echoRoutes(`  - route:
    - destination: {host: echo, subset: v2}
`))
	c := b.client(e2eTarget)
	// Round robin spreads calls over the endpoints whose connections are up: once both answer.
	seen := map[string]bool{}
	eventually(t, c, "both v2 endpoints answer", func(id string) bool { seen[id] = true; return seen["v2-a"] && seen["v2-b"] })
	got := answers(t, c, 60)
	if seen["v1-a"] || got["v1-a"] != 0 || got["v2-a"] == 0 || got["v2-b"] == 0 {
		t.Errorf("answers %v; want both v2 endpoints and never v1", got)
	}
}

func TestGRPCClientRoutesOnHeaderMatch(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v2-a")
	b.setConfig(echoService(bs["v1-a"], bs["v2-a"]) + echoRoutes(`  - name: canary
    match:
    - headers:
        x-variant: {exact: canary}
    route:
    - destination: {host: echo, subset: v2}
  - name: stable
    route:
    - destination: {host: echo, subset: v1}
`))
	c := b.client(e2eTarget)
	if got := answers(t, c, 20, "x-variant", "canary"); got["v2-a"] != 20 {
		t.Errorf("with x-variant: canary, answers %v; want v2 only", got)
	}
	if got := answers(t, c, 20, "x-variant", "other"); got["v1-a"] != 20 {
		t.Errorf("with x-variant: other, answers %v; want v1 only", got)
	}
	if got := answers(t, c, 20); got["v1-a"] != 20 {
		t.Errorf("without x-variant, answers %v; want v1 only", got)
	}
}

// TestGRPCClientSeesEndpointChanges adds and removes endpoints, inline and as selected
// WorkloadEntries, on one client connection: each change reaches the client without a restart.
func TestGRPCClientSeesEndpointChanges(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a", "v1-b", "v1-c")
	b.setConfig(echoService(bs["v1-a"]))
	c := b.client(e2eTarget)
	if got := answers(t, c, 10); got["v1-a"] != 10 {
		t.Fatalf("answers %v; want v1-a only", got)
	}

	b.setConfig(echoService(bs["v1-a"], bs["v1-b"]))
	eventually(t, c, "the added endpoint v1-b answers", func(id string) bool { return id == "v1-b" })

	b.setConfig(echoService(bs["v1-b"]))
	b.eventuallyOnly(c, "v1-b")

	// The same service by workloadSelector: a WorkloadEntry added is used, one removed is not.
	selector := func(wes ...*backend) string {
		text := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [%s]
  ports:
  - {number: %d, name: grpc, protocol: GRPC}
  resolution: STATIC
  workloadSelector:
    labels: {app: echo}
`, e2eHost, e2ePort)
		for _, w := range wes {
			text += fmt.Sprintf(`---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s, namespace: e2e}
spec:
  address: 127.0.0.1
  ports: {grpc: %d}
  labels: {app: echo, version: v1}
`, w.id, w.port)
		}
		return text
	}
	b.setConfig(selector(bs["v1-b"], bs["v1-c"]))
	eventually(t, c, "the selected WorkloadEntry v1-c answers", func(id string) bool { return id == "v1-c" })
	b.setConfig(selector(bs["v1-c"]))
	b.eventuallyOnly(c, "v1-c")
}

// eventuallyOnly waits until 20 calls in a row are answered by id.
func (b *bridge) eventuallyOnly(c testgrpc.TestServiceClient, id string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got := answers(b.t, c, 20); got[id] == 20 {
			return
		}
	}
	b.t.Fatalf("calls are not all answered by %s within 10s", id)
}

func TestGRPCClientGetsInjectedAbort(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a")
	b.setConfig(echoService(bs["v1-a"]) + echoRoutes(`  - name: chaos
    match:
    - headers:
        x-chaos: {exact: abort}
    fault:
      abort:
        grpcStatus: RESOURCE_EXHAUSTED
        percentage: {value: 100}
    route:
    - destination: {host: echo}
  - name: delayed
    match:
    - headers:
        x-chaos: {exact: delay}
    fault:
      delay:
        fixedDelay: 0.200s
        percentage: {value: 100}
    route:
    - destination: {host: echo}
  - route:
    - destination: {host: echo}
`))
	c := b.client(e2eTarget)
	if _, err := call(t, c, "x-chaos", "abort"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("with the abort route, call error %v; want code ResourceExhausted", err)
	}
	start := time.Now()
	if _, err := call(t, c, "x-chaos", "delay"); err != nil {
		t.Errorf("with the delay route: %v", err)
	} else if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("with the delay route, the call took %v; want at least the 200ms delay", took)
	}
	if id, err := call(t, c); err != nil || id != "v1-a" {
		t.Errorf("without a fault, call = %q, %v; want v1-a", id, err)
	}
}

func TestGRPCClientHonoursRouteTimeout(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-a")
	b.setConfig(echoService(bs["v1-a"]) + echoRoutes(`  - timeout: 0.300s
    route:
    - destination: {host: echo}
`))
	c := b.client(e2eTarget)
	if _, err := call(t, c); err != nil {
		t.Fatalf("a fast call failed: %v", err)
	}
	_, err := call(t, c, "sleep", "2s")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call slower than the route's timeout ended with %v; want DeadlineExceeded", err)
	}
}

// TestGRPCClientIsNotDisturbedByOtherFaults checks that a faulty VirtualService for another
// host leaves this host served.
func TestGRPCClientIsNotDisturbedByOtherFaults(t *testing.T) {
	b := startBridgeUnchecked(t) // istiod would refuse the broken VirtualService too
	bs := startBackends(t, "v1-a")
	res, err := b.st.ReplaceOwner(testOwner, decodeYAML(t, echoService(bs["v1-a"])+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: e2e}
spec:
  hosts: [echo]
  http:
  - match:
    - uri: {regex: "(unclosed"}
    route:
    - destination: {host: nowhere.example.com}
  - route:
    - destination: {host: echo, subset: v1}
`))
	if err != nil {
		t.Fatal(err)
	}
	b.wait(res.Revision)
	if len(b.ctrl.Faults()) == 0 {
		t.Fatal("no fault reported for the broken VirtualService")
	}
	if id, err := call(t, b.client(e2eTarget), "x", "y"); err != nil || id != "v1-a" {
		t.Errorf("call = %q, %v; want v1-a through the VirtualService's valid route", id, errors.Unwrap(err))
	}
}

// TestGRPCClientResolvesLogicalDNSCluster routes to a DNS_ROUND_ROBIN service: a
// LOGICAL_DNS cluster whose one endpoint grpc-go resolves itself.
func TestGRPCClientResolvesLogicalDNSCluster(t *testing.T) {
	b := startBridge(t)
	bs := startBackends(t, "v1-dns")
	b.setConfig(fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: echo, namespace: e2e}
spec:
  hosts: [%s]
  ports:
  - {number: %d, name: grpc, protocol: GRPC}
  resolution: DNS_ROUND_ROBIN
  endpoints:
  - address: localhost
    ports: {grpc: %d}
`, e2eHost, e2ePort, bs["v1-dns"].port))
	if id, err := call(t, b.client(e2eTarget)); err != nil || id != "v1-dns" {
		t.Errorf("call = %q, %v; want v1-dns", id, err)
	}
}

// TestGRPCClientAcceptsEveryTranslatedHost dials, with grpc-go's xDS client, every API
// listener that the golden inputs produce (except those whose clusters grpc-go does not
// support at all: STRICT_DNS, RANDOM, Maglev), and waits until the client has fetched and
// acknowledged each listener, its route configuration, the clusters its routes name and
// their load assignments. A NACK of any of them fails the test.
func TestGRPCClientAcceptsEveryTranslatedHost(t *testing.T) {
	b := startBridgeUnchecked(t) // the golden inputs hold faults istiod refuses too
	// The proxyless clients' clusters are built while one is connected; the check below
	// reads them before any is.
	release, built := b.ctrl.AcquireProxyless()
	defer release()
	m := allTestdata(t)
	res, err := b.st.ReplaceOwner(testOwner, m.inputs())
	if err != nil {
		t.Fatal(err)
	}
	<-built
	b.wait(res.Revision)
	want := grpcReachable(t, served(b.st))
	if len(want[ListenerType]) < 20 {
		t.Fatalf("only %d listeners to check: %v", len(want[ListenerType]), want[ListenerType])
	}
	t.Logf("checking %d listeners, %d route configurations, %d clusters, %d load assignments",
		len(want[ListenerType]), len(want[RouteType]), len(want[ClusterType]), len(want[EndpointType]))
	resolver := b.resolver()
	for _, l := range sortedKeys(want[ListenerType]) {
		conn, err := grpc.NewClient("xds:///"+l, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.Connect()
	}
	t.Cleanup(b.assertNoNACK)
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := b.unacknowledged(want)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not fetched and acknowledged within 20s: %v", missing)
		}
		time.Sleep(10 * time.Millisecond) // polling the engine's debug view; nothing to wait on
	}
}

// resolver is an xDS resolver whose bootstrap points at the bridge, with the node metadata
// Istio's gRPC bootstrap writes for a proxyless client (GENERATOR=grpc), which gets the
// clusters built for gRPC.
func (b *bridge) resolver() resolver.Builder {
	return b.resolverWithMetadata(`{"GENERATOR": "grpc"}`)
}

// resolverWithMetadata is resolver with node metadata (JSON), and the "default" certificate
// provider Istio's gRPC bootstrap names (its files are read only by xDS credentials, which the
// tests do not use; grpc-go refuses an ISTIO_MUTUAL cluster whose provider it does not know).
func (b *bridge) resolverWithMetadata(metadata string) resolver.Builder {
	b.t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "e2e-%s", "metadata": %s},
		"certificate_providers": {"default": {"plugin_name": "file_watcher", "config": {
			"certificate_file": "/etc/certs/cert-chain.pem", "private_key_file": "/etc/certs/key.pem",
			"ca_certificate_file": "/etc/certs/root-cert.pem", "refresh_interval": "900s"}}}
	}`, b.addr, b.t.Name(), metadata)
	r, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// unacknowledged returns the wanted names, by type, that the client has not subscribed to,
// or whose latest response it has not acknowledged.
func (b *bridge) unacknowledged(want map[string]keySet) map[string][]string {
	acked := map[string]keySet{}
	for _, c := range b.eng.Clients() {
		for _, s := range c.Subscriptions {
			if !s.Acked || s.Pending != "" {
				continue
			}
			for _, n := range s.Names {
				if acked[s.Type] == nil {
					acked[s.Type] = keySet{}
				}
				acked[s.Type][n] = struct{}{}
			}
		}
	}
	missing := map[string][]string{}
	for typ, names := range want {
		for n := range names {
			if _, ok := acked[typ][n]; !ok {
				missing[typeName(typ)] = append(missing[typeName(typ)], n)
			}
		}
	}
	return missing
}

// grpcReachable walks the outputs from each API listener to its route configuration, the
// clusters its routes name and their load assignments, keeping the listeners whose clusters
// grpc-go supports.
func grpcReachable(t *testing.T, outs []Resource) map[string]keySet {
	t.Helper()
	byName := map[string]map[string]proto.Message{}
	for _, r := range outs {
		m, err := r.Body().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if byName[r.TypeURL] == nil {
			byName[r.TypeURL] = map[string]proto.Message{}
		}
		byName[r.TypeURL][r.Name] = m
	}
	want := map[string]keySet{}
	add := func(typ, name string) {
		if want[typ] == nil {
			want[typ] = keySet{}
		}
		want[typ][name] = struct{}{}
	}
	for name, m := range byName[ListenerType] {
		api := m.(*listenerpb.Listener).GetApiListener().GetApiListener()
		if api == nil {
			continue
		}
		hcm := &hcmpb.HttpConnectionManager{}
		if err := api.UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		rcName := hcm.GetRds().GetRouteConfigName()
		clusters := routedClusters(byName[RouteType][rcName].(*routepb.RouteConfiguration))
		// A proxyless client is served the gRPC form of each cluster, under ClusterType.
		if !slices.ContainsFunc(clusters, func(c string) bool { return !grpcSupports(byName[GRPCClusterType][c]) }) {
			add(ListenerType, name)
			add(RouteType, rcName)
			for _, c := range clusters {
				add(ClusterType, c)
				if svc := byName[GRPCClusterType][c].(*clusterpb.Cluster).GetEdsClusterConfig().GetServiceName(); svc != "" {
					add(EndpointType, svc)
				}
			}
		}
	}
	return want
}

func routedClusters(rc *routepb.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if c := r.GetRoute().GetCluster(); c != "" && !slices.Contains(out, c) {
				out = append(out, c)
			}
			for _, wc := range r.GetRoute().GetWeightedClusters().GetClusters() {
				if !slices.Contains(out, wc.GetName()) {
					out = append(out, wc.GetName())
				}
			}
		}
	}
	return out
}

// grpcSupports tells whether grpc-go accepts a cluster: EDS or LOGICAL_DNS, balanced by
// round robin, least request or ring hash. A cluster that is not served at all is not.
func grpcSupports(m proto.Message) bool {
	c, ok := m.(*clusterpb.Cluster)
	if !ok {
		return false
	}
	switch c.GetLbPolicy() {
	case clusterpb.Cluster_ROUND_ROBIN, clusterpb.Cluster_LEAST_REQUEST, clusterpb.Cluster_RING_HASH:
	default:
		return false
	}
	return c.GetType() == clusterpb.Cluster_EDS || c.GetType() == clusterpb.Cluster_LOGICAL_DNS
}

// A proxyless gRPC client that narrows its view to its namespace (MCPBRIDGE_NAMESPACES in its
// bootstrap's node metadata) reaches that namespace's services, and the others do not exist
// for it: grpc-go's own xDS client, through the Envoy resources' namespaces.
func TestGRPCClientSeesOnlyItsNamespaceWhenItNarrowsItsView(t *testing.T) {
	namer := NewNamespacer("")
	b := startBridgeWith(t, source.Options{NamespaceOf: func(collection, name string) (string, bool) {
		if slices.Contains(OutputTypes(), collection) {
			return namer.NamespaceOf(name)
		}
		ns, _, ok := strings.Cut(name, "/")
		return ns, ok
	}})
	bs := startBackends(t, "v1-a")
	other := strings.NewReplacer("echo.e2e.svc", "echo.other.svc", "namespace: e2e", "namespace: other").Replace(echoService(bs["v1-a"]))
	b.setConfig(echoService(bs["v1-a"]) + "---\n" + other)

	narrowed := func(target string) testgrpc.TestServiceClient {
		conn, err := grpc.NewClient(target, grpc.WithResolvers(b.resolverWithMetadata(`{"MCPBRIDGE_NAMESPACES": "e2e", "GENERATOR": "grpc"}`)),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return testgrpc.NewTestServiceClient(conn)
	}
	if id, err := call(t, narrowed(e2eTarget)); err != nil || id != "v1-a" {
		t.Fatalf("its own namespace's service: %q, %v", id, err)
	}
	// grpc-go gives up on a listener it never received when its watch expires (15s): the
	// bridge's answers never name it.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	_, err := narrowed("xds:///echo.other.svc.cluster.local:8080").UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("another namespace's service: %v, want Unavailable (its listener does not exist for the client)", err)
	}
	if id, err := call(t, b.client("xds:///echo.other.svc.cluster.local:8080")); err != nil || id != "v1-a" {
		t.Fatalf("a client without narrowing, to the other namespace: %q, %v", id, err)
	}
	b.assertNoNACK()
}
