package source

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	seColl = "istio/networking/v1alpha3/serviceentries"
	vsColl = "istio/networking/v1alpha3/virtualservices"
	seAMCS = "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
)

// bridge is a store and engine served over a real loopback socket.
type bridge struct {
	store  *store.Store
	engine *Engine
	addr   string
}

func startBridge(t testing.TB) *bridge {
	t.Helper()
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	eng := New(Options{Store: st})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
	mcp.RegisterResourceSourceServer(srv, &ResourceSource{Engine: eng})
	mcp.RegisterAggregatedMeshConfigServiceServer(srv, &AggregatedMeshConfig{Engine: eng})
	go srv.Serve(lis)
	t.Cleanup(func() {
		eng.Stop()
		srv.Stop()
	})
	return &bridge{store: st, engine: eng, addr: lis.Addr().String()}
}

func dialTest(t testing.TB, addr string) *grpc.ClientConn {
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
	se := &networking.ServiceEntry{Hosts: []string{host}, Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}
	if err := anypb.MarshalFrom(body, se, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

func virtualService(name, host string) *mcpapi.Resource {
	body := &anypb.Any{}
	// A route: istiod refuses a VirtualService without one.
	vs := &networking.VirtualService{Hosts: []string{host}, Http: []*networking.HTTPRoute{{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}},
	}}}
	if err := anypb.MarshalFrom(body, vs, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: name}, Body: body}
}

// put writes ServiceEntries for owner "test" as upserts.
func (b *bridge) put(t testing.TB, coll string, names ...string) store.Result {
	t.Helper()
	var rs []*mcpapi.Resource
	for _, n := range names {
		host := fmt.Sprintf("%s.%d.example", dnsLabel(n), time.Now().UnixNano())
		if coll == vsColl {
			rs = append(rs, virtualService(n, host))
			continue
		}
		rs = append(rs, serviceEntry(n, host))
	}
	r, err := b.store.Apply("test", store.Update{Collection: coll, Resources: rs})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *bridge) remove(t *testing.T, coll string, names ...string) {
	t.Helper()
	if _, err := b.store.Apply("test", store.Update{Collection: coll, Removed: names}); err != nil {
		t.Fatal(err)
	}
}

// sinkClient is a ResourceSource client as a sink would be.
type sinkClient struct {
	*streamtest.Client[mcp.RequestResources, mcp.Resources]
	t testing.TB
}

func newSinkClient(t testing.TB, addr string) *sinkClient {
	t.Helper()
	client := mcp.NewResourceSourceClient(dialTest(t, addr))
	return &sinkClient{t: t, Client: streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], error) {
		return client.EstablishResourceStream(ctx)
	})}
}

func (c *sinkClient) send(r *mcp.RequestResources) {
	c.t.Helper()
	if r.SinkNode == nil {
		r.SinkNode = &mcp.SinkNode{Id: "test-sink"}
	}
	c.Send(r)
}

func (c *sinkClient) ack(m *mcp.Resources) {
	c.t.Helper()
	c.send(&mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce})
}

func (c *sinkClient) nack(m *mcp.Resources, msg string) {
	c.t.Helper()
	c.send(&mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce, ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}})
}

func (c *sinkClient) recv() *mcp.Resources  { c.t.Helper(); return c.Recv() }
func (c *sinkClient) quiet(d time.Duration) { c.t.Helper(); c.Quiet(d) }
func (c *sinkClient) cancel()               { c.Cancel() }

func resourceNames(rs []*mcpapi.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetMetadata().GetName()
	}
	slices.Sort(out)
	return out
}

func assertNames(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(got)
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// dnsLabel makes a resource name ("ns/a") a DNS label for a host ("ns-a"), as istiod's
// validation wants hosts: letters, digits and dashes, 63 at most.
func dnsLabel(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	if len(b) > 40 {
		b = append(b[:32], fmt.Sprintf("-%x", crc32.ChecksumIEEE([]byte(name)))...)
	}
	return "h" + strings.Trim(string(b), "-") + "0"
}
