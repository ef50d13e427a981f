package limits

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a gRPC server under a Guard, with two real streaming services: health's Watch
// (the client sends one message, the server streams) and reflection (a message each way).
type server struct {
	conn    *grpc.ClientConn
	health  *health.Server
	metrics *metrics.Metrics
}

// peerKey names the test's peers: the Guard's identity is read from it, so that one loopback
// client can be several peers.
const peerKey = "x-test-peer"

func startServer(t *testing.T, opts StreamOptions, serverOpts ...grpc.ServerOption) *server {
	t.Helper()
	opts.Metrics = metrics.New()
	opts.Identity = func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return strings.Join(md.Get(peerKey), "")
	}
	g := NewGuard(opts)
	srv := grpc.NewServer(append(serverOpts, grpc.ChainStreamInterceptor(g.Intercept))...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return &server{conn: conn, health: hs, metrics: opts.Metrics}
}

func (s *server) refusals(t *testing.T, limit string) float64 {
	t.Helper()
	families, err := s.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "mcpbridge_limit_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == limit {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// watch opens a health Watch as peer and returns it after its first status, with the
// function that ends it, or the stream's error.
func (s *server) watch(t *testing.T, peer string) (healthpb.Health_WatchClient, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), peerKey, peer))
	t.Cleanup(cancel)
	w, err := healthpb.NewHealthClient(s.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, cancel, err
	}
	if _, err := w.Recv(); err != nil {
		return nil, cancel, err
	}
	return w, cancel, nil
}

func wantExhausted(t *testing.T, err error, mention string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), mention) {
		t.Fatalf("got %v, want ResourceExhausted naming %s", err, mention)
	}
}

// Streams over the total or a peer's share are refused at their start; those open keep
// receiving, and a stream that ends gives its slot back.
func TestStreamsAreBoundedInTotalAndPerPeer(t *testing.T) {
	s := startServer(t, StreamOptions{Streams: 3, StreamsPerPeer: 2})
	a1, _, err := s.watch(t, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.watch(t, "a"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.watch(t, "a")
	wantExhausted(t, err, "limits.streams_per_peer")
	b, endB, err := s.watch(t, "b")
	if err != nil {
		t.Fatalf("another peer refused: %v", err)
	}
	_, _, err = s.watch(t, "c")
	wantExhausted(t, err, "limits.streams:")
	if got, got2 := s.refusals(t, StreamsPerPeer), s.refusals(t, Streams); got != 1 || got2 != 1 {
		t.Fatalf("refusals: streams_per_peer %v, streams %v; want 1 and 1", got, got2)
	}

	// The streams that were let in are unaffected: they receive the next change.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	for _, w := range []healthpb.Health_WatchClient{a1, b} {
		if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("an admitted stream after the refusals: %v %v", m, err)
		}
	}

	// b's stream ends: its slot is free for c.
	endB()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err := s.watch(t, "c")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of an ended stream was not given back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reflect opens a reflection stream (a request each way) as peer.
func (s *server) reflect(t *testing.T, peer string) reflectionpb.ServerReflection_ServerReflectionInfoClient {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), peerKey, peer))
	t.Cleanup(cancel)
	r, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var listServices = &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}

// ask sends one request and waits for its answer.
func ask(r reflectionpb.ServerReflection_ServerReflectionInfoClient) error {
	if err := r.Send(listServices); err != nil {
		return err
	}
	_, err := r.Recv()
	return err
}

// A peer sending faster than its bucket allows has the stream over it ended; another peer at
// a lawful pace is not. The bucket is the peer's, not the stream's: its other streams draw on
// it, and a stream it opens again finds it spent (reopening streams does not reset it), until
// it refills.
func TestRequestRateIsPerPeerAndSurvivesReopening(t *testing.T) {
	s := startServer(t, StreamOptions{RequestsPerSecond: 1, RequestBurst: 3})
	fast, sibling, other := s.reflect(t, "a"), s.reflect(t, "a"), s.reflect(t, "b")
	if err := ask(sibling); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		err = ask(fast)
	}
	wantExhausted(t, err, "limits.requests_per_second")
	if got := s.refusals(t, RequestsPerSecond); got != 1 {
		t.Fatalf("refusals = %v, want 1", got)
	}
	if err := ask(other); err != nil {
		t.Fatalf("another peer after the refusal: %v", err)
	}
	wantExhausted(t, ask(s.reflect(t, "a")), "limits.requests_per_second")
	time.Sleep(1100 * time.Millisecond) // a token back
	if err := ask(s.reflect(t, "a")); err != nil {
		t.Fatalf("after a second: %v", err)
	}
}

// The buckets of peers that left are forgotten once they would be full again: a peer's
// memory does not outlive its budget.
func TestPeerBucketsAreForgottenWhenFull(t *testing.T) {
	p := NewPeers(5, 2) // a token back in 200 ms: the 50 takes are done long before, even on a loaded machine
	for i := range 50 {
		p.Take(fmt.Sprint("peer-", i))
	}
	if n := p.Len(); n != 50 {
		t.Fatalf("%d buckets kept right after, want 50 (each spent a token)", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.Len(); n != 0 {
		t.Fatalf("%d buckets kept after they refilled", n)
	}
	if NewPeers(0, 5) != nil || !(*Peers)(nil).Take("x") {
		t.Fatal("no rate: no limit")
	}
}

// A stream whose client says nothing within the first-request timeout is ended, also when
// its handler waits in a receive without watching its context (reflection; gRPC's own code
// of a server-streaming method, health's Watch); one that spoke stays open past it.
func TestSilentStreamIsEndedAfterFirstRequestTimeout(t *testing.T) {
	s := startServer(t, StreamOptions{FirstRequestTimeout: 100 * time.Millisecond})
	spoke, silent := s.reflect(t, "a"), s.reflect(t, "a")
	if err := ask(spoke); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := silent.Recv()
	wantExhausted(t, err, "limits.first_request_timeout")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("ended after %s, with a timeout of 100ms", d)
	}

	// A server-streaming call whose client never sends its one request.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/grpc.health.v1.Health/Watch")
	if err != nil {
		t.Fatal(err)
	}
	wantExhausted(t, w.RecvMsg(&healthpb.HealthCheckResponse{}), "limits.first_request_timeout")

	time.Sleep(150 * time.Millisecond)
	if err := ask(spoke); err != nil {
		t.Fatalf("the stream that spoke, past the timeout: %v", err)
	}
	if got := s.refusals(t, FirstRequestTimeout); got != 2 {
		t.Fatalf("refusals = %v, want 2", got)
	}
}

// gRPC refuses a message over grpc.max_recv_msg_size; the Guard counts it with the others.
func TestMessageOverMaxRecvSizeIsCounted(t *testing.T) {
	s := startServer(t, StreamOptions{MaxRecvMsgSize: 1024}, grpc.MaxRecvMsgSize(1024))
	big, small := s.reflect(t, "a"), s.reflect(t, "a")
	err := big.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{
		FileByFilename: strings.Repeat("x", 4096)}})
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: ended by the server; Recv has its status
		_, err = big.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over the limit: %v", err)
	}
	if got := s.refusals(t, MaxRecvMsgSize); got != 1 {
		t.Fatalf("refusals = %v, want 1", got)
	}
	if err := ask(small); err != nil {
		t.Fatalf("the neighbour: %v", err)
	}
}
