package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
)

func TestMetricsEndpointServesPrometheusText(t *testing.T) {
	b := start(t, nil)
	code, body := httpGet(t, b.httpURL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	mustContain(t, "/metrics", body,
		`mcpbridge_streams{protocol="xds-sotw",role="source"} 0`, `mcpbridge_streams{protocol="mcp-upstream",role="sink"} 0`,
		`mcpbridge_push_latency_seconds_count{protocol="xds-delta"} 0`,
		`mcpbridge_collection_resources{collection="core/v1alpha1/MeshConfig"} 1`,
		"mcpbridge_owner_conflicts_total 0", "go_goroutines", "process_cpu_seconds_total",
		`mcpbridge_limit_refusals_total{limit="streams"} 0`, `mcpbridge_limit_refusals_total{limit="resources_per_producer"} 0`)
}

// A consumer's stream: open streams, requests, ACKs, NACKs, response sizes and push latency.
func TestMetricsMoveWithAConsumerStream(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"))

	streams := []string{"protocol", source.ProtocolResourceSource, "role", "source"}
	coll := []string{"role", "source", "collection", seColl}
	c := subscribe(t, b.grpcAddr, "sink-1", seColl)
	first := c.Recv()
	eventually(t, b, 1, "mcpbridge_streams", streams...)
	eventually(t, b, 1, "mcpbridge_message_size_bytes", coll...)
	c.ack(first)
	eventually(t, b, 1, "mcpbridge_request_acks_total", coll...)
	eventually(t, b, 2, "mcpbridge_requests_total", coll...)
	if got := value(t, b, "mcpbridge_push_latency_seconds", "protocol", source.ProtocolResourceSource); got != 0 {
		t.Errorf("push latency observed %v times for a first response; it measures pushes of changes only", got)
	}

	p.push(t, seColl, serviceEntry("ns/a", "a2.example"))
	second := c.Recv()
	eventually(t, b, 1, "mcpbridge_push_latency_seconds", "protocol", source.ProtocolResourceSource)
	c.nack(second, "bad host")
	eventually(t, b, 1, "mcpbridge_request_nacks_total", append(coll, "code", "InvalidArgument")...)
	eventually(t, b, 1, "mcpbridge_request_acks_total", coll...)

	c.Close()
	eventually(t, b, 0, "mcpbridge_streams", streams...)
}

// A producer's stream: the bridge's ACKs and NACKs, the unasked and trigger labels, sizes,
// resources per collection and owner conflicts.
func TestMetricsMoveWithAProducerStream(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	streams := []string{"protocol", sink.ProtocolResourceSink, "role", "sink"}
	coll := []string{"role", "sink", "collection", seColl}
	if ans := p.push(t, seColl, serviceEntry("ns/a", "a.example")); ans.ErrorDetail != nil {
		t.Fatalf("NACK: %v", ans.ErrorDetail)
	}
	eventually(t, b, 1, "mcpbridge_streams", streams...)
	eventually(t, b, 1, "mcpbridge_request_acks_total", coll...)
	eventually(t, b, 2, "mcpbridge_requests_total", coll...) // the opening request and the ACK
	eventually(t, b, 1, "mcpbridge_message_size_bytes", coll...)
	eventually(t, b, 1, "mcpbridge_collection_resources", "collection", seColl)
	eventually(t, b, float64(b.Store().View().Collection(seColl).Revision), "mcpbridge_collection_revision", "collection", seColl)
	if got := value(t, b, "mcpbridge_store_writes_total"); got < 2 { // the MeshConfig, the push
		t.Errorf("mcpbridge_store_writes_total = %v after a push", got)
	}

	p.push(t, "example.com/not-asked", serviceEntry("ns/a", "a.example"))
	eventually(t, b, 1, "mcpbridge_request_nacks_total", "role", "sink", "collection", "unasked", "code", "InvalidArgument")
	p.push(t, mcp.TriggerCollection)
	eventually(t, b, 1, "mcpbridge_request_nacks_total", "role", "sink", "collection", mcp.TriggerCollection, "code", "Unimplemented")

	other := dialProducer(t, b.grpcAddr, "p2")
	other.push(t, seColl, serviceEntry("ns/a", "shadowed.example"), serviceEntry("ns/b", "b.example"))
	eventually(t, b, 2, "mcpbridge_collection_resources", "collection", seColl)
	if got := value(t, b, "mcpbridge_owner_conflicts_total"); got < 1 {
		t.Errorf("mcpbridge_owner_conflicts_total = %v after two producers pushed ns/a", got)
	}
	p.Close()
	other.Close()
	eventually(t, b, 0, "mcpbridge_streams", streams...)
}

// A message over grpc.max_recv_msg_size ends the stream with ResourceExhausted: a receive
// failure, on either role.
func TestMetricsCountReceiveFailures(t *testing.T) {
	b := start(t, func(c *Config) { c.GRPC.MaxRecvMsgSize = 1024 })
	huge := map[string]string{"padding": strings.Repeat("x", 4096)}

	c := subscribe(t, b.grpcAddr, "sink-1", seColl)
	c.Recv()
	c.Send(&mcp.RequestResources{Collection: seColl, SinkNode: &mcp.SinkNode{Id: "sink-1", Annotations: huge}})
	eventually(t, b, 1, "mcpbridge_recv_failures_total", "role", "source", "protocol", source.ProtocolResourceSource, "code", "ResourceExhausted")

	p := dialProducer(t, b.grpcAddr, "p1")
	r := serviceEntry("ns/a", "a.example")
	r.Metadata.Annotations = huge
	p.Send(&mcp.Resources{Collection: seColl, Nonce: "1", Resources: []*mcpapi.Resource{r}})
	eventually(t, b, 1, "mcpbridge_recv_failures_total", "role", "sink", "protocol", sink.ProtocolResourceSink, "code", "ResourceExhausted")
}

// listenAgain listens on addr, which a server of the test just closed.
func listenAgain(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	return lis
}

// An upstream that goes away and comes back: connection state and one reconnection.
func TestMetricsFollowAnUpstreamConnection(t *testing.T) {
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	eng := source.New(source.Options{Store: st})
	t.Cleanup(eng.Stop)
	serveSource := func(lis net.Listener) *grpc.Server {
		srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}))
		mcp.RegisterResourceSourceServer(srv, &source.ResourceSource{Engine: eng})
		go srv.Serve(lis)
		return srv
	}
	lis := listenAgain(t, "127.0.0.1:0")
	addr := lis.Addr().String()
	srv := serveSource(lis)
	b := start(t, func(c *Config) { c.Sources.Upstreams = []dial.Target{{Address: addr}} })
	peer := []string{"direction", "upstream", "address", addr}

	eventually(t, b, 1, "mcpbridge_peer_connected", peer...)
	eventually(t, b, 1, "mcpbridge_streams", "protocol", sink.ProtocolUpstream, "role", "sink")
	srv.Stop()
	eventually(t, b, 0, "mcpbridge_peer_connected", peer...)
	srv = serveSource(listenAgain(t, addr))
	defer srv.Stop()
	eventually(t, b, 1, "mcpbridge_peer_connected", peer...)
	eventually(t, b, 1, "mcpbridge_reconnections_total", peer...)
}

// A downstream sink that goes away and comes back: connection state and one reconnection.
func TestMetricsFollowADownstreamConnection(t *testing.T) {
	serveSink := func(lis net.Listener) (*grpc.Server, *sink.Server) {
		s, err := sink.NewServer(sink.Options{Store: store.New(store.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		mcp.RegisterResourceSinkServer(srv, s)
		go srv.Serve(lis)
		return srv, s
	}
	lis := listenAgain(t, "127.0.0.1:0")
	addr := lis.Addr().String()
	srv, s := serveSink(lis)
	b := start(t, func(c *Config) { c.Downstreams = []dial.Target{{Address: addr}} })
	peer := []string{"direction", "downstream", "address", addr}

	eventually(t, b, 1, "mcpbridge_peer_connected", peer...)
	eventually(t, b, 1, "mcpbridge_streams", "protocol", source.ProtocolDownstream, "role", "source")
	s.Stop()
	srv.Stop()
	eventually(t, b, 0, "mcpbridge_peer_connected", peer...)
	srv, s = serveSink(listenAgain(t, addr))
	defer func() { s.Stop(); srv.Stop() }()
	eventually(t, b, 1, "mcpbridge_peer_connected", peer...)
	eventually(t, b, 1, "mcpbridge_reconnections_total", peer...)
}

func TestMetricsCountFileFaults(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.yaml"), []byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a, namespace: ns}\nspec: {hosts: [a.example]}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b, namespace: ns}\nspec: {hostz: [b.example]}\n"), 0o600)
	b := start(t, func(c *Config) { c.Sources.Files = []string{dir} })
	eventually(t, b, 1, "mcpbridge_file_faults")
	eventually(t, b, 1, "mcpbridge_collection_resources", "collection", seColl)
}
