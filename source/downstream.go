package source

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

// Downstream pushes to a remote ResourceSink: the bridge dials it, opens the stream with the
// trigger, and then serves the sink's RequestResources exactly as the ResourceSource service
// would. It reconnects with exponential backoff and jitter.
type Downstream struct {
	Target dial.Target
	Engine *Engine
	Logger *slog.Logger
	// Connected, if set, is called with true when a stream opens and false when it ends.
	Connected func(bool)
}

// Run keeps a stream to the sink open until ctx ends.
func (d *Downstream) Run(ctx context.Context) error {
	opts, err := dial.Options(d.Target)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(d.Target.Address, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("downstream", d.Target.Address)
	client := mcp.NewResourceSinkClient(conn)
	backoff := dial.Backoff{}
	// The peer's state feeds mcpbridge_peer_connected, the reconnection count and the status
	// page; it exists (disconnected) before the first attempt so that a sink never reached shows.
	peer := d.Engine.metrics.Peer(metrics.Downstream, d.Target.Address)
	for {
		started := time.Now()
		err := d.stream(ctx, client, peer)
		if ctx.Err() != nil {
			peer.Down(nil)
			return nil
		}
		peer.Down(err)
		if time.Since(started) > 10*time.Second {
			backoff.Reset() // it worked for a while: come back quickly
		}
		wait := backoff.Next()
		log.Warn("downstream stream ended; reconnecting", "error", err, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (d *Downstream) stream(ctx context.Context, client mcp.ResourceSinkClient, peer *metrics.Peer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, which ends the engine's receive loop
	stream, err := client.EstablishResourceStream(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&mcp.Resources{Collection: mcp.TriggerCollection}); err != nil {
		return err
	}
	peer.Up()
	if d.Connected != nil {
		d.Connected(true)
		defer d.Connected(false)
	}
	a := &resourcesStream{recv: stream.Recv, send: stream.SendMsg}
	return d.Engine.Serve(ctx, a, ProtocolDownstream, d.Target.Address)
}
