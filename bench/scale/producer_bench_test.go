package scale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
)

const seCollection = "istio/networking/v1alpha3/serviceentries"

// serviceEntryResource is ServiceEntry i of the workload as an MCP resource, generation gen.
func serviceEntryResource(i, gen int) *mcpapi.Resource {
	se := &networking.ServiceEntry{
		Hosts:      []string{Host(i)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
	}
	for e := 1; e <= 3; e++ {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
			Address: fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, e), Labels: map[string]string{"version": fmt.Sprint("v", e, "-", gen)},
		})
	}
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: Name(i)}, Body: body}
}

// BenchmarkProducerWithSubscribers: a producer pushes one changed ServiceEntry at a time to
// the ResourceSink of a real mcpbridge process, each push after the ACK of the one before,
// while 1,000 delta ADS streams subscribe to the ServiceEntries (and the translation derives
// Envoy resources from each change). It reports the changes the producer got accepted per
// second and its push-to-ACK latency: a producer must never wait for the fan-out to consumers.
func BenchmarkProducerWithSubscribers(b *testing.B) {
	const streams, services = 1000, 1000
	bridge := startBridge(b, buildBridge(b), "")
	defer bridge.stop(b)
	bridge.waitReady(b, time.Minute)
	p := dialProducer(b, bridge.grpcAddr)
	defer p.close()
	var all []*mcpapi.Resource
	for i := range services {
		all = append(all, serviceEntryResource(i, 0))
	}
	p.push(b, false, all...)
	fleet := startFleetProcess(b, bridge.grpcAddr, streams)
	defer fleet.stop()
	responses0 := fleet.received()

	var latencies []time.Duration
	b.ResetTimer()
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		t0 := time.Now()
		p.push(b, true, serviceEntryResource(i%services, i+1))
		latencies = append(latencies, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(latencies)
	pct := func(q float64) float64 { return latencies[int(q*float64(len(latencies)-1))].Seconds() * 1000 }
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "changes/s")
	b.ReportMetric(pct(0.5), "ack-p50-ms")
	b.ReportMetric(pct(0.99), "ack-p99-ms")
	b.ReportMetric(float64(fleet.received()-responses0)/elapsed.Seconds(), "responses/s")
}

// producer pushes to the bridge's ResourceSink.
type producer struct {
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	cancel context.CancelFunc
	nonce  int
}

func dialProducer(b *testing.B, addr string) *producer {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := mcp.NewResourceSinkClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return &producer{conn: conn, stream: stream, cancel: cancel}
}

func (p *producer) push(b *testing.B, incremental bool, rs ...*mcpapi.Resource) {
	p.nonce++
	nonce := fmt.Sprint(p.nonce)
	if err := p.stream.Send(&mcp.Resources{Collection: seCollection, Nonce: nonce, Incremental: incremental, Resources: rs}); err != nil {
		b.Fatal(err)
	}
	for {
		m, err := p.stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if m.ResponseNonce == nonce {
			if m.ErrorDetail != nil {
				b.Fatalf("NACK: %s", m.ErrorDetail.Message)
			}
			return
		}
	}
}

func (p *producer) close() { p.cancel(); p.conn.Close() }

// deltaFleet is n delta ADS streams on the ServiceEntries, over a few connections, each
// ACKing every response.
type deltaFleet struct {
	conns     []*grpc.ClientConn
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	responses atomic.Int64
}

func startDeltaFleet(b *testing.B, addr string, n int) *deltaFleet {
	b.Helper()
	f, err := openDeltaFleet(addr, n)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// openDeltaFleet opens the streams and waits until each has its first response. The streams'
// node announces features (node.client_features), if any.
func openDeltaFleet(addr string, n int, features ...string) (*deltaFleet, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &deltaFleet{cancel: cancel}
	for range 20 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), withLeanCodec())
		if err != nil {
			f.stop()
			return nil, err
		}
		f.conns = append(f.conns, conn)
	}
	first := make(chan struct{}, n)
	for i := range n {
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(f.conns[i%len(f.conns)]).DeltaAggregatedResources(ctx)
		if err == nil {
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: seType}
			if len(features) > 0 {
				req.Node = &core.Node{Id: fmt.Sprintf("fleet-%d", i), ClientFeatures: features}
			}
			err = stream.Send(req)
		}
		if err != nil {
			f.stop()
			return nil, err
		}
		f.wg.Go(func() {
			once := false
			for {
				m, err := stream.Recv()
				if err != nil {
					return
				}
				f.responses.Add(1)
				if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: m.TypeUrl, ResponseNonce: m.Nonce}); err != nil {
					return
				}
				if !once {
					once = true
					first <- struct{}{}
				}
			}
		})
	}
	for range n {
		select {
		case <-first:
		case <-time.After(time.Minute):
			f.stop()
			return nil, errors.New("the fleet did not get its first responses within a minute")
		}
	}
	return f, nil
}

func (f *deltaFleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, c := range f.conns {
		c.Close()
	}
}
