package bridgetest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/bridgetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const seColl = "istio/networking/v1alpha3/serviceentries"

// mySink is a user's MCP sink: it subscribes to one collection on the bridge's ResourceSource
// and ACKs every response, or NACKs them all with a message.
type mySink struct {
	mu    sync.Mutex
	hosts map[string]bool
}

func startMySink(t *testing.T, addr string) *mySink {
	return startSink(t, addr, "my-sink", seColl, "")
}

func startSink(t *testing.T, addr, node, collection, nack string) *mySink {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &mySink{hosts: map[string]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	node0 := &mcp.SinkNode{Id: node}
	if err := stream.Send(&mcp.RequestResources{SinkNode: node0, Collection: collection}); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			ack := &mcp.RequestResources{SinkNode: node0, Collection: m.Collection, ResponseNonce: m.Nonce}
			if nack != "" {
				ack.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
			} else {
				s.record(m)
			}
			if stream.Send(ack) != nil {
				return
			}
		}
	})
	return s
}

func (s *mySink) record(m *mcp.Resources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.hosts)
	for _, r := range m.Resources {
		var se networking.ServiceEntry
		if r.Body.UnmarshalTo(&se) == nil {
			for _, h := range se.Hosts {
				s.hosts[h] = true
			}
		}
	}
}

func (s *mySink) has(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hosts[host]
}

// The example of docs/testing.md ("bridgetest"), as it is written there.
func TestMySinkGetsReviews(t *testing.T) {
	b := bridgetest.Start(t)
	b.LoadYAML(t, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: reviews, namespace: shop}
spec: {hosts: [reviews.shop.example], ports: [{number: 80, name: http, protocol: HTTP}]}`)
	sink := startMySink(t, b.GRPCAddr()) // subscribes with node id "my-sink"
	b.WaitSynced(t, "my-sink", "istio/networking/v1alpha3/serviceentries")

	if !sink.has("reviews.shop.example") {
		t.Fatal("WaitSynced returned before the sink held what it ACKed")
	}
}

func TestStartServesEveryEndpoint(t *testing.T) {
	b := bridgetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(b.Dial(t)).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	for _, path := range []string{"/readyz", "/metrics", "/debug/collections", "/"} {
		resp, err := http.Get(b.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
	}
}

// Each load replaces the test's state; a waiting client follows every version.
func TestLoadReplacesStateAndWaitFollowsVersions(t *testing.T) {
	b := bridgetest.Start(t)
	b.Load(t, bridgetest.Object{Namespace: "shop", Name: "a", Spec: &networking.ServiceEntry{Hosts: []string{"a.example"}}})
	sink := startMySink(t, b.GRPCAddr())
	first := b.Version(seColl)
	b.WaitAcked(t, "my-sink", seColl, first)

	b.Load(t, bridgetest.Object{Namespace: "shop", Name: "b", Spec: &networking.ServiceEntry{Hosts: []string{"b.example"}}})
	second := b.Version("networking.istio.io/v1/ServiceEntry") // any name of the kind
	if n1, n2 := mustUint(t, first), mustUint(t, second); n2 <= n1 {
		t.Fatalf("version %s after a change, was %s", second, first)
	}
	ci := b.WaitSynced(t, "my-sink", seColl)
	if ci.Node != "my-sink" || !sink.has("b.example") || sink.has("a.example") {
		t.Fatalf("client %+v; sink holds a: %v, b: %v", ci, sink.has("a.example"), sink.has("b.example"))
	}
	if _, es := b.Store().View().Snapshot(seColl); len(es) != 1 || es[0].Owner != bridgetest.Owner {
		t.Fatalf("store holds %d entries, want the one loaded by %q", len(es), bridgetest.Owner)
	}
}

func TestWaitNACKReturnsTheClientsMessage(t *testing.T) {
	b := bridgetest.Start(t)
	startSink(t, b.GRPCAddr(), "picky", seColl, "no ServiceEntry is good enough")
	if msg := b.WaitNACK(t, "picky", seColl); msg != "no ServiceEntry is good enough" {
		t.Fatalf("WaitNACK = %q", msg)
	}
}

func TestWithFilesServesAndWatchesThem(t *testing.T) {
	dir := t.TempDir()
	write := func(host string) {
		yaml := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: ns}\nspec: {hosts: [" + host + "]}\n"
		if err := os.WriteFile(filepath.Join(dir, "se.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one.example")
	b := bridgetest.Start(t, bridgetest.WithFiles(dir))
	sink := startMySink(t, b.GRPCAddr())
	b.WaitSynced(t, "my-sink", seColl)
	if !sink.has("one.example") {
		t.Fatal("the file's ServiceEntry did not reach the sink")
	}
	version := b.Version(seColl)
	write("two.example")
	next := strconv.FormatUint(mustUint(t, version)+1, 10)
	b.WaitAcked(t, "my-sink", seColl, next)
	if !sink.has("two.example") {
		t.Fatal("the edited file did not reach the sink")
	}
}

// fatalT records a test's failure instead of failing the test running it.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = format
	if len(args) > 0 {
		f.msg = fmt.Sprintf(format, args...)
	}
	runtime.Goexit()
}

// failure runs fn with a fatalT and returns its failure message ("" when it did not fail).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestWaitFailsNamingWhatEveryClientHolds(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.WithWaitTimeout(300*time.Millisecond))
	startSink(t, b.GRPCAddr(), "picky", seColl, "rejected by picky")
	b.WaitNACK(t, "picky", seColl)
	msg := failure(t, func(tb testing.TB) { b.WaitSynced(tb, "picky", seColl) })
	for _, want := range []string{`no client "picky" ACKed`, seColl, "rejected by picky"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q does not say %q", msg, want)
		}
	}
	if msg := failure(t, func(tb testing.TB) {
		b.LoadYAML(tb, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec: {hostz: [x]}\n")
	}); !strings.Contains(msg, "hostz") {
		t.Errorf("LoadYAML of a faulty document failed with %q, want the field named", msg)
	}
	if msg := failure(t, func(tb testing.TB) { b.WaitAcked(tb, "picky", seColl, "latest") }); !strings.Contains(msg, `"latest"`) {
		t.Errorf("WaitAcked with a bad version failed with %q", msg)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return n
}

// TestStartReturnsWithTheFilesLoaded: Start returns once the bridge is ready, and a bridge is
// never ready before it started serving, so the files are in the store when Start returns.
func TestStartReturnsWithTheFilesLoaded(t *testing.T) {
	dir := t.TempDir()
	yaml := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: ns}\nspec: {hosts: [one.example]}\n"
	if err := os.WriteFile(filepath.Join(dir, "se.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b := bridgetest.Start(t, bridgetest.WithFiles(dir))
		if b.Store().View().Get(seColl, "ns/a") == nil {
			t.Fatal("Start returned before the files were loaded")
		}
	}
}
