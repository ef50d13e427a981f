package source

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// startBridgeWith is startBridge with engine options.
func startBridgeWith(t *testing.T, opts Options) *bridge {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	opts.Store = st
	eng := New(opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	mcp.RegisterResourceSourceServer(srv, &ResourceSource{Engine: eng})
	go srv.Serve(lis)
	t.Cleanup(func() { eng.Stop(); srv.Stop() })
	return &bridge{store: st, engine: eng, addr: lis.Addr().String()}
}

// A client that stops reading holds back no one else, and once a send to it blocks (gRPC
// queues one message past the flow-control window; the next one waits) it is reset after the
// send timeout. With at most one unacknowledged response per type, the bridge holds at most
// one response per type for such a client.
func TestStuckClientIsResetAndDoesNotHoldBackOthers(t *testing.T) {
	b := startBridgeWith(t, Options{SendTimeout: 300 * time.Millisecond})
	// A collection large enough that a response fills the flow-control windows.
	var names []string
	for i := range 3000 {
		names = append(names, fmt.Sprintf("ns/padding-%04d-%s", i, strings.Repeat("x", 100)))
	}
	b.put(t, seColl, names...)
	const other = "example.com/opaque/big"
	var rs []*mcpapi.Resource
	for _, n := range names {
		rs = append(rs, serviceEntry(n, "h.example"))
	}
	if _, err := b.store.Apply("test", store.Update{Collection: other, Resources: rs}); err != nil {
		t.Fatal(err)
	}

	// The stuck client subscribes (state of the world: every change resends everything) and
	// never reads.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Fixed small flow-control windows (which also turn off gRPC's window growth), so that a
	// response larger than them blocks the bridge's send.
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stuck, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx, grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	// Two types: the first response is queued whole, the second one's send blocks.
	stuck.Send(&mcp.RequestResources{Collection: seColl, SinkNode: &mcp.SinkNode{Id: "stuck"}})
	stuck.Send(&mcp.RequestResources{Collection: other})

	healthy := newSinkClient(t, b.addr)
	healthy.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	healthy.ack(healthy.recv())

	for i := range 5 {
		start := time.Now()
		b.put(t, seColl, fmt.Sprintf("ns/change-%d", i))
		m := healthy.recv()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("healthy client waited %s", d)
		}
		healthy.ack(m)
	}
	// The stuck stream is gone from the bridge within a few send timeouts.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stuckLeft := false
		for _, c := range b.engine.Clients() {
			if c.Node == "stuck" {
				stuckLeft = true
			}
		}
		if !stuckLeft {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the stuck stream was not reset")
}

func TestResponseOverTheClientLimitIsLoggedWithNameAndSize(t *testing.T) {
	var logs streamtest.Buffer
	b := startBridgeWith(t, Options{MaxResponseSize: 200, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b.put(t, seColl, "ns/a", "ns/b", "ns/c")
	c := newSinkClient(t, b.addr)
	c.send(&mcp.RequestResources{Collection: seColl})
	m := c.recv()
	line := logs.String()
	for _, want := range []string{"larger than the client's likely receive limit", "type=" + seColl, "limit=200", "bytes="} {
		if !strings.Contains(line, want) {
			t.Fatalf("log %q lacks %q", line, want)
		}
	}
	if len(m.Resources) != 3 {
		t.Fatalf("the response must still be sent: %d resources", len(m.Resources))
	}
}

// A request that takes a stream over MaxSubscriptions ends that stream with
// ResourceExhausted, unanswered; other streams keep their subscriptions and their updates.
func TestSubscriptionsOverTheLimitEndOnlyThatStream(t *testing.T) {
	m := metrics.New()
	b := startBridgeWith(t, Options{MaxSubscriptions: 2, Metrics: m})
	b.put(t, seColl, "ns/a")
	greedy, neighbour := newSinkClient(t, b.addr), newSinkClient(t, b.addr)
	neighbour.send(&mcp.RequestResources{Collection: seColl, Incremental: true})
	neighbour.ack(neighbour.recv())
	for _, coll := range []string{seColl, vsColl} {
		greedy.send(&mcp.RequestResources{Collection: coll})
		greedy.ack(greedy.recv())
	}
	greedy.send(&mcp.RequestResources{Collection: "example.com/opaque/third"})
	err := greedy.Ended()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limits.subscriptions_per_stream") {
		t.Fatalf("a third type with a limit of 2: %v, want ResourceExhausted naming the key", err)
	}
	if got := limitRefusals(t, m, limits.SubscriptionsPerStream); got != 1 {
		t.Fatalf("refusals = %v, want 1", got)
	}
	b.put(t, seColl, "ns/b")
	if got := neighbour.recv(); len(got.Resources) != 1 || got.Resources[0].Metadata.Name != "ns/b" {
		t.Fatalf("the neighbour after the refusal got %v", got)
	}
}

// limitRefusals reads mcpbridge_limit_refusals_total for one limit.
func limitRefusals(t *testing.T, m *metrics.Metrics, limit string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if f.GetName() == "mcpbridge_limit_refusals_total" && s.GetLabel()[0].GetValue() == limit {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}
