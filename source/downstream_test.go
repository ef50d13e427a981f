package source

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/dial"
)

// recordingSink is a ResourceSink that checks the trigger, asks for one collection, ACKs
// everything and reports what it receives.
type recordingSink struct {
	mcp.UnimplementedResourceSinkServer
	collection string
	triggers   chan string
	got        chan *mcp.Resources
}

func (s *recordingSink) EstablishResourceStream(stream grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	s.triggers <- first.Collection
	// As the contract has sinks do: NACK the trigger with Unimplemented, then ask.
	stream.Send(&mcp.RequestResources{Collection: first.Collection, ResponseNonce: first.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.Unimplemented), Message: "trigger"}})
	stream.Send(&mcp.RequestResources{Collection: s.collection, SinkNode: &mcp.SinkNode{Id: "downstream-sink"}})
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		s.got <- m
		stream.Send(&mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce})
	}
}

func serveSink(t *testing.T, addr string, sink *recordingSink) (string, func()) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port of a just-stopped server may take a moment to be free again
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	mcp.RegisterResourceSinkServer(srv, sink)
	go srv.Serve(lis)
	return lis.Addr().String(), srv.Stop
}

func TestDownstreamPushSendsTriggerThenServesRequestsAndReconnects(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	sink := &recordingSink{collection: seColl, triggers: make(chan string, 4), got: make(chan *mcp.Resources, 10)}
	addr, stop := serveSink(t, "127.0.0.1:0", sink)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		d := &Downstream{Target: dial.Target{Address: addr}, Engine: b.engine}
		d.Run(ctx)
	})
	defer func() {
		cancel()
		wg.Wait()
	}()

	waitFor := func(what string) *mcp.Resources {
		t.Helper()
		select {
		case m := <-sink.got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("sink got no %s", what)
		}
		return nil
	}
	select {
	case c := <-sink.triggers:
		if c != mcp.TriggerCollection {
			t.Fatalf("first message's collection = %q, want %q", c, mcp.TriggerCollection)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no trigger")
	}
	m := waitFor("full state")
	assertNames(t, "pushed", resourceNames(m.Resources), "ns/a")

	b.put(t, seColl, "ns/b")
	assertNames(t, "pushed change", resourceNames(waitFor("change").Resources), "ns/a", "ns/b")

	// The sink goes away and comes back on the same address: the bridge reconnects, triggers
	// again and pushes the full state.
	stop()
	_, stop = serveSink(t, addr, sink)
	defer stop()
	select {
	case <-sink.triggers:
	case <-time.After(10 * time.Second):
		t.Fatal("no trigger after the sink restarted")
	}
	assertNames(t, "pushed after reconnect", resourceNames(waitFor("full state after reconnect").Resources), "ns/a", "ns/b")
}
