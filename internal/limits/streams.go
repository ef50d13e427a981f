package limits

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
)

// StreamOptions are the limits on every stream of a gRPC server. A zero limit is no limit.
type StreamOptions struct {
	// Streams bounds the streams open at once, of every service; StreamsPerPeer those of one
	// peer identity.
	Streams, StreamsPerPeer int
	// RequestsPerSecond and RequestBurst bound the messages a peer sends on all its streams
	// and its unary calls together (and, through Peers, its REST polls): a token bucket of
	// RequestBurst tokens refilled at RequestsPerSecond, per peer identity.
	RequestsPerSecond float64
	RequestBurst      int
	// FirstRequestTimeout ends a stream whose client sends nothing within it.
	FirstRequestTimeout time.Duration
	// MaxRecvMsgSize is the server's grpc.MaxRecvMsgSize, for the log line of a message
	// gRPC refused for its size (it is counted here; gRPC enforces it).
	MaxRecvMsgSize int
	// Identity names a stream's peer for StreamsPerPeer. Nil: its address without the port.
	Identity func(context.Context) string
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
}

// Guard enforces StreamOptions as a gRPC stream interceptor (Intercept). It is safe for
// concurrent use.
type Guard struct {
	opts     StreamOptions
	log      *slog.Logger
	refusals *Refuser
	peers    *Peers // nil: no request limit

	mu      sync.Mutex
	total   int
	perPeer map[string]int
}

// NewGuard returns a Guard for opts.
func NewGuard(opts StreamOptions) *Guard {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Identity == nil {
		opts.Identity = peerHost
	}
	return &Guard{opts: opts, log: log.With("component", "limits"), refusals: NewRefuser(opts.Metrics), perPeer: map[string]int{},
		peers: NewPeers(opts.RequestsPerSecond, opts.RequestBurst)}
}

// Peers are the guard's per-peer request buckets, for the other entry points of a peer's
// requests (REST polls); nil without a request limit.
func (g *Guard) Peers() *Peers { return g.peers }

// InterceptUnary is a grpc.UnaryServerInterceptor: a unary call (CSDS FetchClientStatus, a
// health check) takes a token of its peer's bucket, as a stream's message does, and is
// refused ResourceExhausted without one.
func (g *Guard) InterceptUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if g.peers != nil {
		id := g.opts.Identity(ctx)
		if !g.peers.Take(id) {
			return nil, g.refusals.Refuse(g.log, RequestsPerSecond, g.overRate(id), "method", info.FullMethod, "peer", peerAddr(ctx), "identity", id)
		}
	}
	return handler(ctx, req)
}

// overRate is the refusal of a peer over its request bucket.
func (g *Guard) overRate(id string) string {
	return fmt.Sprintf("limits.requests_per_second: %q sent more than %d messages at once or %g a second, on all its streams and calls together",
		id, g.opts.RequestBurst, g.opts.RequestsPerSecond)
}

// Intercept is a grpc.StreamServerInterceptor: it refuses a stream over Streams or
// StreamsPerPeer before its handler runs, and ends one whose client is silent past
// FirstRequestTimeout or sends faster than its bucket allows, with ResourceExhausted.
func (g *Guard) Intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	id := g.opts.Identity(ctx)
	log := g.log.With("method", info.FullMethod, "peer", peerAddr(ctx), "identity", id)
	if err := g.acquire(id, log); err != nil {
		return err
	}
	defer g.release(id)
	ls := g.watch(ss, id, log)
	defer ls.stop()
	err := handler(srv, ls)
	if refused := ls.refused.Load(); refused != nil {
		// The handler saw a cancelled context or a failed receive; the client is told why.
		return *refused
	}
	return err
}

// acquire counts a new stream of peer id, or refuses it.
func (g *Guard) acquire(id string, log *slog.Logger) error {
	g.mu.Lock()
	total, mine := g.total, g.perPeer[id]
	overTotal := g.opts.Streams > 0 && total >= g.opts.Streams
	overPeer := g.opts.StreamsPerPeer > 0 && mine >= g.opts.StreamsPerPeer
	if !overTotal && !overPeer {
		g.total++
		g.perPeer[id]++
	}
	g.mu.Unlock()
	switch {
	case overTotal:
		return g.refusals.Refuse(log, Streams, fmt.Sprintf(
			"limits.streams: the bridge serves %d streams already, its limit; retry later or elsewhere", total))
	case overPeer:
		return g.refusals.Refuse(log, StreamsPerPeer, fmt.Sprintf(
			"limits.streams_per_peer: %q has %d streams open already, its limit", id, mine))
	}
	return nil
}

func (g *Guard) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.perPeer[id]--; g.perPeer[id] <= 0 {
		delete(g.perPeer, id) // a peer that left holds no memory
	}
}

// limitedStream is a server stream under a Guard: its context ends when a limit ends the
// stream, so that the handler stops however it waits.
type limitedStream struct {
	grpc.ServerStream
	g      *Guard
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	// id is the peer, pb its request bucket (nil: no request limit), held while the stream is.
	id string
	pb *peerBucket
	// spoke: a first message arrived; refused: the refusal that ended the stream.
	spoke   atomic.Bool
	refused atomic.Pointer[error]
	timer   *time.Timer // FirstRequestTimeout; nil without one
}

func (g *Guard) watch(ss grpc.ServerStream, id string, log *slog.Logger) *limitedStream {
	ctx, cancel := context.WithCancel(ss.Context())
	ls := &limitedStream{ServerStream: ss, g: g, log: log, ctx: ctx, cancel: cancel, id: id}
	if g.peers != nil {
		ls.pb = g.peers.acquire(id)
	}
	if d := g.opts.FirstRequestTimeout; d > 0 {
		ls.timer = time.AfterFunc(d, ls.silent)
	}
	return ls
}

func (s *limitedStream) Context() context.Context { return s.ctx }

// RecvMsg receives a message, then takes a token for it: a client over its rate ends its
// stream. A message gRPC refused for its size is counted as that limit's refusal.
func (s *limitedStream) RecvMsg(m any) error {
	if r := s.refused.Load(); r != nil {
		return *r
	}
	var err error
	if s.timer != nil && !s.spoke.Load() {
		err = s.firstRecv(m)
	} else {
		err = s.ServerStream.RecvMsg(m)
	}
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted && s.refused.Load() == nil {
			// gRPC enforces grpc.max_recv_msg_size (and ends the stream with this code);
			// it is counted and logged with the other limits.
			s.g.refusals.Refuse(s.log, MaxRecvMsgSize, status.Convert(err).Message(), "max_recv_msg_size", s.g.opts.MaxRecvMsgSize)
		}
		return err
	}
	s.spoke.Store(true)
	if s.pb != nil && !s.pb.take(time.Now()) {
		return s.end(RequestsPerSecond, s.g.overRate(s.id))
	}
	return nil
}

// firstRecv waits for the first message or the first-request timeout, whichever comes
// first. Until the first message the receive runs on a goroutine of its own: a handler
// blocked in RecvMsg that does not watch its context (gRPC's generated code for a
// server-streaming method, reflection) is then ended too; gRPC ends that receive when the
// handler returns. After the first message a stream costs no goroutine more.
func (s *limitedStream) firstRecv(m any) error {
	got := make(chan error, 1)
	go func() { got <- s.ServerStream.RecvMsg(m) }()
	select {
	case err := <-got:
		return err
	case <-s.ctx.Done():
		if r := s.refused.Load(); r != nil {
			return *r
		}
		return <-got // the stream itself ended: so does its receive
	}
}

// silent ends a stream that sent nothing within FirstRequestTimeout. ResourceExhausted like
// every limit (not DeadlineExceeded): the client held a stream slot it did not use.
func (s *limitedStream) silent() {
	if s.spoke.Load() {
		return
	}
	s.end(FirstRequestTimeout, fmt.Sprintf(
		"limits.first_request_timeout: no message on this stream within %s", s.g.opts.FirstRequestTimeout))
}

// end records a refusal and ends the stream: the handler's context is cancelled, and the
// interceptor returns the refusal whatever the handler returns.
func (s *limitedStream) end(limit, msg string) error {
	err := s.g.refusals.Refuse(s.log, limit, msg)
	if s.refused.CompareAndSwap(nil, &err) {
		s.cancel()
	}
	return *s.refused.Load()
}

func (s *limitedStream) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.cancel()
	if s.pb != nil {
		s.g.peers.release(s.id, s.pb)
	}
}

// peerAddr is a stream's peer address, for logs.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// peerHost is the peer's address without the port: a client's connections share it.
func peerHost(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return hostOf(p.Addr)
	}
	return ""
}
