package source

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// failingAdapter subscribes to one collection, then fails every send.
type failingAdapter struct {
	requests chan *Request
	sendErr  error
}

func (a *failingAdapter) Recv() (*Request, error) {
	r, ok := <-a.requests
	if !ok {
		return nil, errors.New("closed")
	}
	return r, nil
}

func (a *failingAdapter) Send(*wire.Frame) error { return a.sendErr }
func (a *failingAdapter) Layout() *wire.Layout   { return resourcesLayout }
func (a *failingAdapter) Type(req *Request, _ *Node) Type {
	return mcpType(req.Key, true, StateOfTheWorld)
}

// A send that fails ends the stream and is counted with its gRPC code.
func TestMetricsCountSendFailures(t *testing.T) {
	m := metrics.New()
	eng := New(Options{Store: store.New(store.Options{Validate: kinds.ValidateResource}), Metrics: m})
	defer eng.Stop()
	a := &failingAdapter{requests: make(chan *Request, 1), sendErr: status.Error(codes.Unavailable, "peer went away")}
	a.requests <- &Request{Key: seColl}
	err := eng.Serve(context.Background(), a, ProtocolResourceSource, "test")
	close(a.requests)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Serve = %v, want the send's Unavailable", err)
	}
	const want = `
# HELP mcpbridge_send_failures_total Messages that could not be sent on a stream (the stream then ends), by gRPC code.
# TYPE mcpbridge_send_failures_total counter
mcpbridge_send_failures_total{code="Unavailable",protocol="mcp-resource-source",role="source"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcpbridge_send_failures_total"); err != nil {
		t.Fatal(err)
	}
	const streams = `
# HELP mcpbridge_streams Streams currently open, by protocol and the bridge's role on them (source: it sends config; sink: it receives config).
# TYPE mcpbridge_streams gauge
mcpbridge_streams{protocol="mcp-resource-source",role="source"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(streams), "mcpbridge_streams"); err != nil {
		t.Fatal(err)
	}
}
