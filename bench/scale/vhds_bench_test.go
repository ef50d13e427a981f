package scale

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const virtualHostType = "type.googleapis.com/envoy.config.route.v3.VirtualHost"

// vhdsClient is an Envoy-like client that takes port 8080's virtual hosts on demand (VHDS,
// node metadata MCPBRIDGE_VHDS): its route configuration 8080, then the virtual hosts of
// 8080 by the namespace 8080, on one delta ADS stream of its own.
type vhdsClient struct {
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	held   map[string]bool // virtual hosts, by name
}

// startVHDS opens the VHDS client's stream, asks for the route configuration 8080 and then
// its virtual hosts, and reports how long each took, the route configuration's size, the
// largest virtual host and the largest response of virtual hosts.
func startVHDS(b *testing.B, addr string, n int) *vhdsClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c := &vhdsClient{conn: conn, cancel: cancel, stream: stream, held: map[string]bool{}}
	node := &corepb.Node{Id: "bench~vhds", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"MCPBRIDGE_VHDS": structpb.NewStringValue("true")}}}
	start := time.Now()
	c.send(b, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: routeType, ResourceNamesSubscribe: []string{"8080"}})
	resp := c.recv(b, routeType)
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetResource() == nil {
		b.Fatalf("vhds: route configuration 8080 answered %v", resp.GetResources())
	}
	b.ReportMetric(time.Since(start).Seconds(), "s-vhds-route")
	b.ReportMetric(float64(proto.Size(resp.GetResources()[0].GetResource())), "B-vhds-route")
	start = time.Now()
	c.send(b, &discovery.DeltaDiscoveryRequest{TypeUrl: virtualHostType, ResourceNamesSubscribe: []string{"8080"}})
	largestVH, largestResp := 0, 0
	for len(c.held) < n {
		resp := c.recv(b, virtualHostType)
		largestResp = max(largestResp, proto.Size(resp))
		for _, r := range resp.GetResources() {
			largestVH = max(largestVH, proto.Size(r.GetResource()))
		}
	}
	b.Logf("vhds: all %d virtual hosts held after %v", len(c.held), time.Since(start))
	b.ReportMetric(time.Since(start).Seconds(), "s-vhds-all-held")
	b.ReportMetric(float64(largestVH), "B-largest-virtual-host")
	b.ReportMetric(float64(largestResp), "B-largest-vhds-response")
	return c
}

func (c *vhdsClient) send(b *testing.B, req *discovery.DeltaDiscoveryRequest) {
	b.Helper()
	if err := c.stream.Send(req); err != nil {
		b.Fatalf("vhds: %v", err)
	}
}

// recv reads the next response (of typ: any other fails the benchmark), applies it to what
// the client holds and acknowledges it.
func (c *vhdsClient) recv(b *testing.B, typ string) *discovery.DeltaDiscoveryResponse {
	b.Helper()
	resp, err := c.stream.Recv()
	if err != nil {
		b.Fatalf("vhds: %v", err)
	}
	if resp.GetTypeUrl() != typ {
		b.Fatalf("vhds: a response of %s, waiting for %s", resp.GetTypeUrl(), typ)
	}
	if typ == virtualHostType {
		for _, r := range resp.GetResources() {
			if r.GetResource() != nil {
				c.held[r.GetName()] = true
			}
		}
		for _, name := range resp.GetRemovedResources() {
			delete(c.held, name)
		}
	}
	c.send(b, &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()})
	return resp
}

// addHost writes one more ServiceEntry, in a file of its own, and reports the time until the
// VHDS client holds its virtual host, and the size of the response that carried it: one
// virtual host, where a client of the whole route configuration is sent all of them again.
func (c *vhdsClient) addHost(b *testing.B, dir string, n, files int) {
	b.Helper()
	var sb strings.Builder
	ServiceEntry(&sb, n, 0)
	path := filepath.Join(dir, FileName(files))
	start := time.Now()
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	want := "8080/" + Host(n) + ":8080"
	bytes := 0
	for !c.held[want] {
		deadline := time.AfterFunc(time.Minute, func() { c.cancel() })
		resp := c.recv(b, virtualHostType)
		deadline.Stop()
		bytes += proto.Size(resp)
	}
	b.ReportMetric(time.Since(start).Seconds()*1000, "ms-vhds-add-host")
	b.ReportMetric(float64(bytes), "B-vhds-add-host-sent")
}

func (c *vhdsClient) close() {
	c.cancel()
	c.conn.Close()
}
