package csds_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/csds"
	"github.com/mcpbridge/mcpbridge/source/xds"
	"github.com/mcpbridge/mcpbridge/store"
)

// BenchmarkCSDSFetch1000Streams1000Resources: FetchClientStatus over loopback, from a client
// generated from the CSDS proto, of 1,000 xDS streams that each hold (ACKed) the same 1,000
// ServiceEntries: a million per-resource entries, computed at request time.
func BenchmarkCSDSFetch1000Streams1000Resources(b *testing.B) {
	const streams, resources = 1000, 1000
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	var rs []*mcpapi.Resource
	for i := range resources {
		body, _ := anypb.New(&networking.ServiceEntry{Hosts: []string{fmt.Sprintf("svc-%d.example.com", i)}})
		rs = append(rs, &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: fmt.Sprintf("shop/svc-%04d", i)}, Body: body})
	}
	if _, err := st.ReplaceOwner("bench", map[string][]*mcpapi.Resource{seColl: rs}); err != nil {
		b.Fatal(err)
	}
	eng := source.New(source.Options{Store: st})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	(&xds.Server{Engine: eng}).Register(srv)
	(&csds.Server{Engine: eng}).Register(srv)
	go srv.Serve(lis)
	defer func() { eng.Stop(); srv.Stop() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*grpc.ClientConn
	for range 10 {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			s, err := discovery.NewAggregatedDiscoveryServiceClient(conns[i%len(conns)]).StreamAggregatedResources(ctx)
			if err != nil {
				errs <- err
				return
			}
			s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: fmt.Sprintf("node-%d", i)}, TypeUrl: seXDS})
			r, err := s.Recv()
			if err != nil {
				errs <- err
				return
			}
			s.Send(&discovery.DiscoveryRequest{TypeUrl: seXDS, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	client := status.NewClientStatusDiscoveryServiceClient(conns[0])
	fetchAll := func() *status.ClientStatusResponse {
		resp, err := client.FetchClientStatus(ctx, &status.ClientStatusRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	// Every stream's ACK has arrived once every entry is SYNCED.
	for deadline := time.Now().Add(time.Minute); ; {
		synced := 0
		for _, cc := range fetchAll().GetConfig() {
			for _, g := range cc.GetGenericXdsConfigs() {
				if g.GetName() != "" && g.GetConfigStatus() == status.ConfigStatus_SYNCED {
					synced++
				}
			}
		}
		if synced == streams*resources {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d entries SYNCED after a minute", synced, streams*resources)
		}
		time.Sleep(50 * time.Millisecond)
	}
	perEntry := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(streams*resources), "ns/entry")
	}
	b.Run("fetch", func(b *testing.B) { // what a client waits for: view, encoding, transfer, decoding
		b.ReportAllocs()
		for b.Loop() {
			fetchAll()
		}
		perEntry(b)
	})
	b.Run("view", func(b *testing.B) { // the engine's per-resource view alone
		b.ReportAllocs()
		for b.Loop() {
			eng.Status(source.StatusOptions{Resources: true})
		}
		perEntry(b)
	})
	b.Run("view-and-response", func(b *testing.B) { // and the CSDS messages, before encoding
		b.ReportAllocs()
		for b.Loop() {
			csds.Response(eng.Status(source.StatusOptions{Resources: true}))
		}
		perEntry(b)
	})
}
