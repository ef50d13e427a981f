package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/bridgetest"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

const seCollection = "istio/networking/v1alpha3/serviceentries"

func seResource(name, host string) *mcpapi.Resource {
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, &networking.ServiceEntry{Hosts: []string{host}}, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// runBridge serves a whole bridge in-process on loopback, with the test kit users have, and
// returns its gRPC address.
func runBridge(t *testing.T, opts ...bridgetest.Option) string {
	t.Helper()
	return bridgetest.Start(t, opts...).GRPCAddr()
}

// producerSource is a config producer that serves a ResourceSource: the bridge dials it.
type producerSource struct {
	store *store.Store
	addr  string
}

func startProducerSource(t *testing.T) *producerSource {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	eng := source.New(source.Options{Store: st})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	mcp.RegisterResourceSourceServer(srv, &source.ResourceSource{Engine: eng})
	go srv.Serve(lis)
	t.Cleanup(func() { eng.Stop(); srv.Stop() })
	return &producerSource{store: st, addr: lis.Addr().String()}
}

func (p *producerSource) set(t *testing.T, rs ...*mcpapi.Resource) {
	t.Helper()
	if _, err := p.store.Apply("producer", store.Update{Collection: seCollection, Full: true, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

// pushProducer is a config producer that dials the bridge's ResourceSink and pushes.
type pushProducer struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[mcp.Resources, mcp.RequestResources]
	nonce  int
}

func startPushProducer(t *testing.T, bridgeAddr string) *pushProducer {
	t.Helper()
	conn, err := grpc.NewClient(bridgeAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := mcp.NewResourceSinkClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &pushProducer{t: t, stream: stream}
}

// push sends a full state or an increment and waits for its ACK.
func (p *pushProducer) push(incremental bool, removed []string, rs ...*mcpapi.Resource) {
	p.t.Helper()
	p.nonce++
	nonce := fmt.Sprint(p.nonce)
	if err := p.stream.Send(&mcp.Resources{Collection: seCollection, Nonce: nonce, Incremental: incremental, Resources: rs, RemovedResources: removed}); err != nil {
		p.t.Fatal(err)
	}
	for {
		m, err := p.stream.Recv()
		if err != nil {
			p.t.Fatal(err)
		}
		if m.ResponseNonce == nonce {
			if m.ErrorDetail != nil {
				p.t.Fatalf("NACK: %s", m.ErrorDetail.Message)
			}
			return
		}
	}
}

// downstreamSink is a config consumer that serves a ResourceSink: the bridge dials it.
type downstreamSink struct {
	store *store.Store
	addr  string
}

func startDownstreamSink(t *testing.T, incremental bool) *downstreamSink {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	srv := grpc.NewServer()
	s, err := sink.NewServer(sink.Options{Store: st, Collections: []sink.Collection{{Name: seCollection, Incremental: incremental}}})
	if err != nil {
		t.Fatal(err)
	}
	mcp.RegisterResourceSinkServer(srv, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() { s.Stop(); srv.Stop() })
	return &downstreamSink{store: st, addr: lis.Addr().String()}
}

// dialingSink is a config consumer that dials the bridge's ResourceSource.
func startDialingSink(t *testing.T, bridgeAddr string, incremental bool) *store.Store {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	up, err := sink.NewUpstream(sink.UpstreamOptions{
		Target: dial.Target{Address: bridgeAddr}, Store: st,
		Collections: []sink.Collection{{Name: seCollection, Incremental: incremental}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { up.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return st
}

// waitHosts waits until a store's ServiceEntries are exactly name → host.
func waitHosts(t *testing.T, st *store.Store, want map[string]string) {
	t.Helper()
	w := st.Watch(seCollection)
	defer w.Close()
	deadline := time.After(10 * time.Second)
	for {
		_, es := st.View().Snapshot(seCollection)
		got := map[string]string{}
		for _, e := range es {
			var se networking.ServiceEntry
			_, body := e.Body()
			proto.Unmarshal(body, &se)
			got[e.Name] = se.Hosts[0]
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-w.C():
		case <-deadline:
			t.Fatalf("consumer holds %v, want %v", got, want)
		}
	}
}

// Producer → bridge → sink, in every direction of dialling, full state and incremental.
func TestBridgeEndToEndInEveryDirection(t *testing.T) {
	for _, producerDials := range []bool{true, false} {
		for _, sinkDials := range []bool{true, false} {
			for _, incremental := range []bool{false, true} {
				name := fmt.Sprintf("producer-dials=%v/sink-dials=%v/incremental=%v", producerDials, sinkDials, incremental)
				t.Run(name, func(t *testing.T) {
					endToEnd(t, producerDials, sinkDials, incremental)
				})
			}
		}
	}
}

func endToEnd(t *testing.T, producerDials, sinkDials, incremental bool) {
	var opts []bridgetest.Option
	if !incremental {
		opts = append(opts, bridgetest.WithFullStateFromProducers())
	}
	var upstream *producerSource
	if !producerDials {
		upstream = startProducerSource(t)
		upstream.set(t, seResource("ns/a", "a.example"), seResource("ns/b", "b.example"))
		opts = append(opts, bridgetest.WithUpstreams(upstream.addr))
	}
	var down *downstreamSink
	if !sinkDials {
		down = startDownstreamSink(t, incremental)
		opts = append(opts, bridgetest.WithDownstreams(down.addr))
	}
	bridgeAddr := runBridge(t, opts...)

	var pusher *pushProducer
	if producerDials {
		pusher = startPushProducer(t, bridgeAddr)
		pusher.push(false, nil, seResource("ns/a", "a.example"), seResource("ns/b", "b.example"))
	}
	var consumer *store.Store
	if sinkDials {
		consumer = startDialingSink(t, bridgeAddr, incremental)
	} else {
		consumer = down.store
	}
	waitHosts(t, consumer, map[string]string{"ns/a": "a.example", "ns/b": "b.example"})

	// A change: b changes, a goes, c arrives.
	if producerDials {
		if incremental {
			pusher.push(true, []string{"ns/a"}, seResource("ns/b", "b2.example"), seResource("ns/c", "c.example"))
		} else {
			pusher.push(false, nil, seResource("ns/b", "b2.example"), seResource("ns/c", "c.example"))
		}
	} else {
		upstream.set(t, seResource("ns/b", "b2.example"), seResource("ns/c", "c.example"))
	}
	waitHosts(t, consumer, map[string]string{"ns/b": "b2.example", "ns/c": "c.example"})
}

// Every service of CONTRACT.md section 3 is on the one gRPC port, with health and reflection.
func TestEveryServiceIsOnTheGRPCPort(t *testing.T) {
	addr := runBridge(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		listed[s.Name] = true
	}
	for _, want := range []string{
		"istio.mcp.v1alpha1.ResourceSink", "istio.mcp.v1alpha1.ResourceSource", "istio.mcp.v1alpha1.AggregatedMeshConfigService",
		"envoy.service.discovery.v3.AggregatedDiscoveryService",
		"envoy.service.listener.v3.ListenerDiscoveryService", "envoy.service.route.v3.RouteDiscoveryService",
		"envoy.service.cluster.v3.ClusterDiscoveryService", "envoy.service.endpoint.v3.EndpointDiscoveryService",
		"envoy.service.status.v3.ClientStatusDiscoveryService",
		"envoy.service.discovery.v2.AggregatedDiscoveryService",
		"envoy.api.v2.ListenerDiscoveryService", "envoy.api.v2.RouteDiscoveryService",
		"envoy.api.v2.ClusterDiscoveryService", "envoy.api.v2.EndpointDiscoveryService",
		"grpc.health.v1.Health",
	} {
		if !listed[want] {
			t.Errorf("service %s is not served (reflection lists %v)", want, listed)
		}
	}
}
