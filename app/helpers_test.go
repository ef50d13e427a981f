package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const seColl = "istio/networking/v1alpha3/serviceentries"

// running is a bridge served on loopback for one test.
type running struct {
	*Bridge
	grpcAddr, httpURL string
}

// start serves a bridge on loopback until the test ends; configure edits the defaults.
func start(t *testing.T, configure func(*Config)) *running {
	t.Helper()
	cfg := DefaultConfig()
	cfg.GRPC.ShutdownGrace = time.Second
	if configure != nil {
		configure(cfg)
	}
	r, _ := serveOnLoopback(t, cfg)
	return r
}

// serveOnLoopback serves a bridge of cfg on loopback ports; stop ends it (once), and is
// called when the test ends if not before.
func serveOnLoopback(t testing.TB, cfg *Config) (*running, func()) {
	t.Helper()
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, grpcLis, httpLis) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{Bridge: b, grpcAddr: grpcLis.Addr().String(), httpURL: "http://" + httpLis.Addr().String()}, stop
}

func dialConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func serviceEntry(name, host string) *mcpapi.Resource {
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, &networking.ServiceEntry{Hosts: []string{host}}, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// sinkClient subscribes to the bridge's ResourceSource as an MCP sink.
type sinkClient struct {
	*streamtest.Client[mcp.RequestResources, mcp.Resources]
	node string
}

func subscribe(t *testing.T, addr, node, collection string) *sinkClient {
	t.Helper()
	return subscribeOn(t, dialConn(t, addr), node, collection)
}

// subscribeOn subscribes on a connection of the test's own (TLS, for one).
func subscribeOn(t *testing.T, conn *grpc.ClientConn, node, collection string) *sinkClient {
	t.Helper()
	client := mcp.NewResourceSourceClient(conn)
	c := &sinkClient{node: node, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], error) {
		return client.EstablishResourceStream(ctx)
	})}
	c.Send(&mcp.RequestResources{SinkNode: &mcp.SinkNode{Id: node}, Collection: collection})
	return c
}

func (c *sinkClient) ack(m *mcp.Resources) {
	c.Send(&mcp.RequestResources{SinkNode: &mcp.SinkNode{Id: c.node}, Collection: m.Collection, ResponseNonce: m.Nonce})
}

func (c *sinkClient) nack(m *mcp.Resources, msg string) {
	c.Send(&mcp.RequestResources{SinkNode: &mcp.SinkNode{Id: c.node}, Collection: m.Collection, ResponseNonce: m.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}})
}

// producer pushes to the bridge's ResourceSink.
type producer struct {
	*streamtest.Client[mcp.Resources, mcp.RequestResources]
	nonce int
}

func dialProducer(t *testing.T, addr, id string) *producer {
	t.Helper()
	client := mcp.NewResourceSinkClient(dialConn(t, addr))
	return &producer{Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources], error) {
		return client.EstablishResourceStream(metadata.AppendToOutgoingContext(ctx, "mcp-producer-id", id))
	})}
}

// push sends a full state and returns the bridge's answer to it.
func (p *producer) push(t *testing.T, collection string, rs ...*mcpapi.Resource) *mcp.RequestResources {
	t.Helper()
	p.nonce++
	nonce := fmt.Sprint(p.nonce)
	p.Send(&mcp.Resources{Collection: collection, Nonce: nonce, Resources: rs})
	for {
		if m := p.Recv(); m.ResponseNonce == nonce {
			return m
		}
	}
}

// value returns a metric's value (a histogram's sample count) for the labels given, or 0.
func value(t *testing.T, b *running, name string, labels ...string) float64 {
	t.Helper()
	m := series(t, b, name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// series is a metric's series with the labels given, or nil when it is not exported.
func series(t *testing.T, b *running, name string, labels ...string) *dto.Metric {
	t.Helper()
	families, err := b.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// eventually waits for a metric to reach want: streams end and counters move asynchronously.
func eventually(t *testing.T, b *running, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := value(t, b, name, labels...)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, s)
		}
	}
}

// waitUntil polls cond until it holds or 10s pass, and reports whether it held.
func waitUntil(t *testing.T, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("condition not met within 10s")
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
