package app

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/streamtest"
	"github.com/mcpbridge/mcpbridge/store"
)

// Every limit on a whole bridge over loopback: the refused stream's status, the refusal's
// count in mcpbridge_limit_refusals_total, and a neighbouring stream that keeps its updates.

const endpointsType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// dialFrom connects from a loopback address of its own (127.0.0.2, ...): another peer.
func dialFrom(t *testing.T, addr, from string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// deltaOn opens a delta ADS stream on conn.
func deltaOn(t *testing.T, conn *grpc.ClientConn) *streamtest.Client[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse] {
	t.Helper()
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)
	return streamtest.Open(t, func(ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return client.DeltaAggregatedResources(ctx)
	})
}

// write stores ServiceEntries as owner "limits-test" (no producer stream: it would take a
// stream slot).
func write(t *testing.T, b *running, names ...string) {
	t.Helper()
	var rs []*mcpapi.Resource
	for _, n := range names {
		// "ns/a" hosts "a.ns.example": a host istiod accepts.
		ns, name, _ := strings.Cut(n, "/")
		rs = append(rs, serviceEntry(n, name+"."+ns+".example"))
	}
	if _, err := b.Store().Apply("limits-test", store.Update{Collection: seColl, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

// gets waits for an update naming name.
func gets(t *testing.T, c *sinkClient, name string) {
	t.Helper()
	for {
		m := c.Recv()
		for _, r := range m.Resources {
			if r.Metadata.Name == name {
				c.ack(m)
				return
			}
		}
		c.ack(m)
	}
}

func refused(t *testing.T, err error, key string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), key) {
		t.Fatalf("stream ended with %v, want ResourceExhausted naming %s", err, key)
	}
}

func refusals(t *testing.T, b *running, limit string, want float64) {
	t.Helper()
	eventually(t, b, want, "mcpbridge_limit_refusals_total", "limit", limit)
}

// limits.streams and limits.streams_per_peer refuse a stream at its start; the streams let in
// keep receiving, and another peer has its own share.
func TestStreamsAreBoundedInTotalAndPerPeer(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.Streams, c.Limits.StreamsPerPeer = 3, 2 })
	one := dialConn(t, b.grpcAddr)
	var admitted []*sinkClient
	for i := range 2 {
		c := subscribeOn(t, one, fmt.Sprint("one-", i), seColl)
		c.ack(c.Recv())
		admitted = append(admitted, c)
	}
	refused(t, subscribeOn(t, one, "one-2", seColl).Ended(), "limits.streams_per_peer")
	refusals(t, b, "streams_per_peer", 1)

	two := subscribeOn(t, dialFrom(t, b.grpcAddr, "127.0.0.2"), "two", seColl)
	two.ack(two.Recv())
	refused(t, subscribeOn(t, dialFrom(t, b.grpcAddr, "127.0.0.3"), "three", seColl).Ended(), "limits.streams:")
	refusals(t, b, "streams", 1)

	write(t, b, "ns/after-the-refusals")
	for _, c := range append(admitted, two) {
		gets(t, c, "ns/after-the-refusals")
	}
	// A stream that ends gives its slot back.
	two.Close()
	waitUntil(t, func() bool { return value(t, b, "mcpbridge_streams", "protocol", "mcp-resource-source") == 2 })
	again := subscribeOn(t, dialFrom(t, b.grpcAddr, "127.0.0.3"), "three", seColl)
	again.ack(again.Recv())
}

// limits.subscriptions_per_stream: the request that would take a stream over it ends that
// stream; another stream on the same connection is not touched.
func TestSubscriptionsPerStreamEndOnlyThatStream(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.SubscriptionsPerStream = 4 })
	conn := dialConn(t, b.grpcAddr)
	neighbour := subscribeOn(t, conn, "neighbour", seColl)
	neighbour.ack(neighbour.Recv())

	envoy := deltaOn(t, conn)
	envoy.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: endpointsType, ResourceNamesSubscribe: []string{"e1", "e2", "e3"}})
	first := envoy.Recv() // the type and three names: 4, the limit
	envoy.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: endpointsType, ResponseNonce: first.Nonce, ResourceNamesSubscribe: []string{"e4"}})
	refused(t, envoy.Ended(), "limits.subscriptions_per_stream")
	refusals(t, b, "subscriptions_per_stream", 1)

	write(t, b, "ns/after")
	gets(t, neighbour, "ns/after")
}

// limits.requests_per_second and limits.request_burst: a stream sending faster is ended; its
// neighbour on the same connection keeps its updates.
func TestRequestRateEndsOnlyTheStreamOverIt(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.RequestsPerSecond, c.Limits.RequestBurst = 1, 3 })
	conn := dialConn(t, b.grpcAddr)
	neighbour := subscribeOn(t, conn, "neighbour", seColl)
	neighbour.ack(neighbour.Recv())
	// The bucket is the peer's, both streams': the neighbour's two messages are taken from
	// it before the chatty stream starts, so that the chatty one is the one over it (else
	// whichever stream's message comes when the bucket is empty is ended).
	waitUntil(t, func() bool {
		return value(t, b, "mcpbridge_request_acks_total", "role", "source", "collection", seColl) >= 1
	})

	chatty := subscribeOn(t, conn, "chatty", seColl)
	for i := range 5 { // each starts the subscription over: 6 messages, burst 3
		chatty.Send(&mcp.RequestResources{SinkNode: &mcp.SinkNode{Id: "chatty"}, Collection: fmt.Sprint("example.com/opaque/", i)})
	}
	refused(t, chatty.Ended(), "limits.requests_per_second")
	refusals(t, b, "requests_per_second", 1)

	write(t, b, "ns/after")
	gets(t, neighbour, "ns/after")
}

// limits.first_request_timeout: a stream that says nothing is ended; one that spoke, on the
// same connection, stays and keeps its updates.
func TestSilentStreamIsEndedAfterTheFirstRequestTimeout(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.FirstRequestTimeout = 200 * time.Millisecond })
	conn := dialConn(t, b.grpcAddr)
	neighbour := subscribeOn(t, conn, "neighbour", seColl)
	neighbour.ack(neighbour.Recv())

	silent := deltaOn(t, conn)
	start := time.Now()
	refused(t, silent.Ended(), "limits.first_request_timeout")
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("ended after %s, before the timeout of 200ms", d)
	}
	refusals(t, b, "first_request_timeout", 1)

	write(t, b, "ns/after")
	gets(t, neighbour, "ns/after")
}

// limits.resources_per_producer: the push that would take a producer over it is NACKed with
// ResourceExhausted, nothing of it applied; the producer's stream, other producers and the
// consumers go on.
func TestProducerOverItsResourcesIsNACKed(t *testing.T) {
	b := start(t, func(c *Config) { c.Limits.ResourcesPerProducer = 3 })
	consumer := subscribe(t, b.grpcAddr, "consumer", seColl)
	consumer.ack(consumer.Recv())
	p := dialProducer(t, b.grpcAddr, "greedy")
	if ans := p.push(t, seColl, serviceEntry("ns/a", "a.example"), serviceEntry("ns/b", "b.example")); ans.ErrorDetail != nil {
		t.Fatalf("2 of 3: %v", ans.ErrorDetail)
	}
	gets(t, consumer, "ns/b")
	// The translation writes what it derives from the push after it: wait for it, so that the
	// revision read is the last before the refused push.
	select {
	case <-b.translator.Synced(b.Store().View().Revision()):
	case <-time.After(10 * time.Second):
		t.Fatal("the translation of the first push did not finish")
	}
	rev := b.Store().View().Revision()

	ans := p.push(t, seColl, serviceEntry("ns/a", "a.example"), serviceEntry("ns/b", "b.example"),
		serviceEntry("ns/c", "c.example"), serviceEntry("ns/d", "d.example"))
	if ans.ErrorDetail == nil || codes.Code(ans.ErrorDetail.Code) != codes.ResourceExhausted ||
		!strings.Contains(ans.ErrorDetail.Message, "limits.resources_per_producer") {
		t.Fatalf("4 of 3: %v, want a NACK with ResourceExhausted naming the key", ans.ErrorDetail)
	}
	if got := b.Store().View(); got.Revision() != rev || got.OwnedCount("producer:greedy") != 2 {
		t.Fatalf("the refused push changed the store: revision %d→%d, greedy holds %d", rev, got.Revision(), got.OwnedCount("producer:greedy"))
	}
	refusals(t, b, "resources_per_producer", 1)
	eventually(t, b, 1, "mcpbridge_request_nacks_total", "role", "sink", "collection", seColl, "code", "ResourceExhausted")

	if ans := p.push(t, seColl, serviceEntry("ns/c", "c.example")); ans.ErrorDetail != nil {
		t.Fatalf("the same producer, within its limit: %v", ans.ErrorDetail)
	}
	q := dialProducer(t, b.grpcAddr, "other")
	if ans := q.push(t, seColl, serviceEntry("ns/x", "x.example"), serviceEntry("ns/y", "y.example"), serviceEntry("ns/z", "z.example")); ans.ErrorDetail != nil {
		t.Fatalf("another producer: %v", ans.ErrorDetail)
	}
	gets(t, consumer, "ns/z")
}

// grpc.max_recv_msg_size is enforced by gRPC; its refusals are counted with the limits'.
func TestMessageOverMaxRecvSizeIsCounted(t *testing.T) {
	b := start(t, func(c *Config) { c.GRPC.MaxRecvMsgSize = 1 << 10 })
	conn := dialConn(t, b.grpcAddr)
	neighbour := subscribeOn(t, conn, "neighbour", seColl)
	neighbour.ack(neighbour.Recv())
	big := subscribeOn(t, conn, "big", strings.Repeat("x", 2<<10))
	if err := big.Ended(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request over 1 KiB: %v, want ResourceExhausted", err)
	}
	refusals(t, b, "max_recv_msg_size", 1)
	write(t, b, "ns/after")
	gets(t, neighbour, "ns/after")
}

// Over mutual TLS a peer is its certificate's identity: two identities on one address have a
// share each, and the streams let in keep receiving after another is refused.
func TestStreamsPerPeerOverMutualTLSCountByIdentity(t *testing.T) {
	s := startSecured(t, func(c *Config) { c.Limits.StreamsPerPeer = 2 })
	app := s.conn(t, idApp)
	var admitted []*sinkClient
	for i := range 2 {
		c := subscribeOn(t, app, fmt.Sprint("app-", i), seColl)
		c.ack(c.Recv())
		admitted = append(admitted, c)
	}
	refused(t, subscribeOn(t, app, "app-2", seColl).Ended(), "limits.streams_per_peer")
	refusals(t, s.running, "streams_per_peer", 1)

	// The same address, another identity: its own share.
	istiod := subscribeOn(t, s.conn(t, idIstiod), "istiod", seColl)
	istiod.ack(istiod.Recv())

	write(t, s.running, "payments/after-the-refusal")
	for _, c := range append(admitted, istiod) {
		gets(t, c, "payments/after-the-refusal")
	}
}
