package app

import (
	"context"
	"net"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
)

// A stop ends open consumer streams, MCP and xDS, with Unavailable (so clients reconnect
// elsewhere at once) and Serve returns nil within the shutdown grace.
func TestStopEndsConsumerStreamsWithUnavailable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GRPC.ShutdownGrace = 2 * time.Second
	b, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, _ := net.Listen("tcp", "127.0.0.1:0")
	httpLis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, grpcLis, httpLis) }()

	conn := dialConn(t, grpcLis.Addr().String())
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	mcpStream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	mcpStream.Send(&mcp.RequestResources{Collection: seColl})
	if _, err := mcpStream.Recv(); err != nil {
		t.Fatal(err)
	}
	xdsStream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	xdsStream.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"})
	if _, err := xdsStream.Recv(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	cancel()
	for name, recv := range map[string]func() error{
		"ResourceSource": func() error { _, err := mcpStream.Recv(); return err },
		"ADS":            func() error { _, err := xdsStream.Recv(); return err },
	} {
		if err := recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("%s stream ended with %v, want Unavailable", name, err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after a stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(start); d > cfg.GRPC.ShutdownGrace+time.Second {
		t.Fatalf("stop took %s, more than the shutdown grace", d)
	}
}
