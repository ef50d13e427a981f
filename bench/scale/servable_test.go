package scale

import (
	"context"
	"fmt"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// servableProbe measures what readiness promises: every output of the loaded revision
// servable at most 0.5 s after /readyz says 200. Once it does, the probe asks, on a stream of
// its own, for the outputs of the load's first and last ServiceEntry (name order has nothing
// to do with the order they are built in), by name: their clusters and load assignments,
// the ServiceEntries themselves (MCP over xDS), and the port's outbound listener. The
// translation writes a revision's outputs in one store write, so these stand for all of
// them. (The port's route configuration is built when a client asks for it, and is left
// out.) Where the two clients' "held" times include the delivery of everything to them, 410
// MB at a million, which their own reading bounds, this is the time for a client that asks
// for something to get it. It starts when the benchmark sees /readyz say 200 (polled every
// 5 ms).
type servableProbe struct {
	conn *grpc.ClientConn
}

// dialProbe opens the probe's connection before the bridge is ready, so that what it
// measures from then is the bridge's answer alone. Its stream opens once the bridge is
// ready: one that sent nothing for xds.first_request_timeout would be closed.
func dialProbe(b testing.TB, addr string) *servableProbe {
	b.Helper()
	// The bridge may not listen yet: retry as the benchmark's clients do, not after gRPC's
	// default second.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), retryQuickly)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	conn.Connect()
	return &servableProbe{conn: conn}
}

// connected waits until the probe's connection is up (it is by the time the bridge is ready,
// bar a retry in flight), so that what the probe measures is the bridge's answer. A
// connection whose attempt failed goes idle after its backoff, and connects again only when
// asked to.
func (p *servableProbe) connected(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for st := p.conn.GetState(); st != connectivity.Ready; st = p.conn.GetState() {
		if st == connectivity.Idle {
			p.conn.Connect()
		}
		if !p.conn.WaitForStateChange(ctx, st) {
			return fmt.Errorf("connecting: %w (state %s)", ctx.Err(), st)
		}
	}
	return nil
}

// probeResult is what the probe measured, or why it could not.
type probeResult struct {
	took    time.Duration // from asking to holding every name
	missing int           // names first answered as missing: not servable when asked
	err     error
}

// run asks for the names and waits until each came with its body; it returns at once, and
// its result comes on the channel.
func (p *servableProbe) run(n int) <-chan probeResult {
	out := make(chan probeResult, 1)
	want := map[string][]string{
		clusterType:  {Cluster(0), Cluster(n - 1)},
		endpointType: {Cluster(0), Cluster(n - 1)},
		seType:       {Name(0), Name(n - 1)},
		listenerType: {"0.0.0.0_8080"},
	}
	go func() {
		defer p.conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := p.connected(ctx); err != nil {
			out <- probeResult{err: err}
			return
		}
		start := time.Now()
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(p.conn).DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		if err != nil {
			out <- probeResult{err: err}
			return
		}
		for typ, names := range want {
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: &corepb.Node{Id: "bench~servable"}, TypeUrl: typ, ResourceNamesSubscribe: names}); err != nil {
				out <- probeResult{err: err}
				return
			}
		}
		asked := map[string]bool{}
		for typ, names := range want {
			for _, n := range names {
				asked[typ+" "+n] = true
			}
		}
		held, missing := map[string]bool{}, map[string]bool{}
		for len(held) < len(asked) {
			resp, err := stream.Recv()
			if err != nil {
				out <- probeResult{err: err}
				return
			}
			for _, r := range resp.Resources {
				name := resp.TypeUrl + " " + r.Name
				switch {
				case !asked[name]:
				case r.GetResource() == nil:
					missing[name] = true
				default:
					held[name] = true
				}
			}
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
				out <- probeResult{err: err}
				return
			}
		}
		out <- probeResult{took: time.Since(start), missing: len(missing)}
	}()
	return out
}
