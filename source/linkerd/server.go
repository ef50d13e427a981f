// Package linkerd serves Linkerd's Destination API (Destination.Get) from the store: today's
// io.linkerd.proxy.destination and the seed's conduit.proxy.destination, whose Get messages
// are the same on the wire. A client asks for "host:port"; the answer follows the
// ServiceEntry that defines the host (its ports, STATIC endpoints and the WorkloadEntries its
// workloadSelector selects), as a stream of updates under the seed's rules: a first message at
// once (an `add` of every address, or no_endpoints{exists} when there is none), then an `add`
// and a `remove` for each change, and an empty `add` after every interval without one.
//
// Every stream asking for the same authority shares one subscription (hub.go): its answer is
// computed once per change of what it depends on, and the encoded updates once per step, for
// all of its streams.
package linkerd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	conduitcommon "github.com/mcpbridge/mcpbridge/api/linkerd/conduit/common"
	conduitpb "github.com/mcpbridge/mcpbridge/api/linkerd/conduit/destination"
	pb "github.com/mcpbridge/mcpbridge/api/linkerd/destination"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// Protocol names, as logs and metrics show them.
const (
	ProtocolLinkerd = "linkerd-destination"
	ProtocolConduit = "conduit-destination"
)

var protocols = [apiCount]string{apiLinkerd: ProtocolLinkerd, apiConduit: ProtocolConduit}

// Options configures a Server. The bridge passes KeepaliveInterval, DomainSuffix and
// SendTimeout from linkerd.keepalive_interval, translate.domain_suffix and xds.send_timeout;
// for the server's other users (its tests), a zero value is the key's default in
// app.DefaultConfig: 30s, cluster.local, 10s.
type Options struct {
	Store   *store.Store
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Authz, with rules, lets a peer resolve only services whose ServiceEntry it may consume
	// (the ServiceEntry collection in that namespace); nil allows everything.
	Authz *authz.Policy
	// KeepaliveInterval is the longest a stream goes without a message: then it is sent an
	// empty `add` (the seed's ADDRESS_UPDATE_INTERVAL).
	KeepaliveInterval time.Duration
	// DomainSuffix is the suffix of Kubernetes service hosts (NAME.NAMESPACE.svc.SUFFIX), for
	// the "service" metric label.
	DomainSuffix string
	// SendTimeout ends a stream whose one send takes longer (a client that stopped reading),
	// so that it holds nothing.
	SendTimeout time.Duration
	// Ready, when set, holds every stream's first message until it is closed (the bridge's
	// sources loaded): a client keeps its last answers until its first message, and a "does
	// not exist" sent before the store is loaded would make it drop them.
	Ready <-chan struct{}
	// CatchUp, when set, is called after Ready and before the first message: a replicated
	// store catches up with what it had committed (source.Options.CatchUp), so that a proxy
	// moving from another replica is not sent an older answer first.
	CatchUp func(context.Context)
}

// Server is the Destination service. Register it on a gRPC server whose codec is wire.Codec
// (the bridge's): it sends encoded updates as they are.
type Server struct {
	hub       *hub
	log       *slog.Logger
	metrics   *metrics.Metrics
	authz     *authz.Policy
	keepalive time.Duration
	timeout   time.Duration
	ready     <-chan struct{}
	catchUp   func(context.Context)
	stop      chan struct{}
	stopOnce  sync.Once
	authzLog  limits.RareLog
}

// New returns a Server over a store. Run must run for streams to follow changes.
func New(opts Options) *Server {
	s := &Server{log: opts.Logger, metrics: opts.Metrics, keepalive: opts.KeepaliveInterval, timeout: opts.SendTimeout,
		ready: opts.Ready, catchUp: opts.CatchUp, stop: make(chan struct{})}
	// Zero values: the defaults of app.DefaultConfig (Options says which).
	if s.timeout <= 0 {
		s.timeout = 10 * time.Second
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.keepalive <= 0 {
		s.keepalive = 30 * time.Second
	}
	if opts.Authz.Enabled() {
		s.authz = opts.Authz
	}
	suffix := opts.DomainSuffix
	if suffix == "" {
		suffix = "cluster.local"
	}
	s.hub = newHub(opts.Store, suffix)
	return s
}

// Register serves both Destination services on a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterDestinationServer(g, linkerdService{s: s})
	conduitpb.RegisterDestinationServer(g, conduitService{s: s})
}

// Run follows the store's changes until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.hub.run(ctx)
	return nil
}

// Stop ends every stream with Unavailable, now and for streams that start later.
func (s *Server) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

// Stats are counters for tests and benchmarks.
type Stats struct {
	// Resolves counts answers computed: one per authority per change of its inputs, however
	// many streams share it. Encodes counts update sets encoded (per step and API).
	Resolves, Encodes uint64
	// Authorities is the number of subscriptions open.
	Authorities int
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.hub.mu.Lock()
	n := len(s.hub.auths)
	s.hub.mu.Unlock()
	return Stats{Resolves: s.hub.resolves.Load(), Encodes: s.hub.encodes.Load(), Authorities: n}
}

type linkerdService struct {
	pb.UnimplementedDestinationServer
	s *Server
}

func (l linkerdService) Get(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.Update]) error {
	return l.s.serve(stream, req.GetPath(), apiLinkerd)
}

type conduitService struct {
	conduitpb.UnimplementedDestinationServer
	s *Server
}

func (c conduitService) Get(req *conduitcommon.Destination, stream grpc.ServerStreamingServer[conduitpb.Update]) error {
	return c.s.serve(stream, req.GetPath(), apiConduit)
}

var errStopping = status.Error(codes.Unavailable, "mcpbridge is shutting down")

// serve runs one Get stream until the client goes (nil), the bridge stops (Unavailable), a
// send fails, or the peer may no longer read the service (PermissionDenied).
func (s *Server) serve(ss grpc.ServerStream, path string, a api) error {
	ctx := ss.Context()
	protocol := protocols[a]
	grant, err := s.grant(ctx, protocol)
	if err != nil {
		return err
	}
	key, err := parsePath(path)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	m := s.metrics.Stream(metrics.RoleSource, protocol)
	defer m.Close()
	sub := s.hub.subscribe(key)
	defer s.hub.unsubscribe(sub)
	keep := time.NewTimer(s.keepalive)
	defer keep.Stop()
	var seen *snapshot // the last snapshot handled
	var told tellState // what the client was told
	for {
		if cur := sub.auth.cur.Load(); cur != seen {
			seen = cur
			frames := told.next(cur, s.visible(grant, key, cur.answer, protocol), a)
			for _, f := range frames {
				if err := s.send(ss, f, m); err != nil {
					return err
				}
			}
			if told.started && len(frames) > 0 {
				m.Pushed(time.Since(cur.changed).Seconds()) // a change, not a first answer
			}
			told.started = true
			if len(frames) > 0 {
				keep.Reset(s.keepalive)
			}
		}
		select {
		case <-sub.notify:
		case <-keep.C:
			if err := s.send(ss, keepalive, m); err != nil {
				return err
			}
			keep.Reset(s.keepalive)
		case <-s.stop:
			return errStopping
		case <-ctx.Done():
			return nil // the client went
		}
	}
}

// send sends one update, and gives up on a client that does not take it within the send
// timeout: a gRPC send blocked on a client that stopped reading ends only when the handler
// returns, so the send runs on a goroutine of its own while the handler waits for it.
func (s *Server) send(ss grpc.ServerStream, f *wire.Frame, m *metrics.Stream) error {
	done := make(chan error, 1)
	go func() { done <- ss.SendMsg(f) }()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			m.SendFailed(err)
		}
		return err
	case <-t.C:
		err := status.Errorf(codes.DeadlineExceeded, "send to this client took longer than %s", s.timeout)
		m.SendFailed(err)
		s.log.Warn("stream reset: a send took longer than the send timeout", "send_timeout", s.timeout)
		return err
	}
}

// waitReady holds a stream until the bridge is ready.
func (s *Server) waitReady(ctx context.Context) error {
	if s.ready == nil {
		return nil
	}
	select {
	case <-s.ready:
		if s.catchUp != nil {
			s.catchUp(ctx)
		}
		return nil
	case <-s.stop:
		return errStopping
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// grant is the peer's rights: nil without rules; PermissionDenied for a peer no rule matches
// or one that may not read ServiceEntries at all.
func (s *Server) grant(ctx context.Context, protocol string) (*authz.Grant, error) {
	if s.authz == nil {
		return nil, nil
	}
	g, err := s.authz.Grant(authz.PeerIdentity(ctx))
	if err != nil {
		return nil, s.refuse(protocol, metrics.RefusedNoRule, err.Error())
	}
	if !g.MayConsumeIn(ServiceEntries) {
		return nil, s.refuse(protocol, metrics.RefusedCollection, fmt.Sprintf(
			"identity %s may not consume %s, which Destination.Get reads (authz.rules consume)", g.Identity, ServiceEntries))
	}
	return g, nil
}

// visible reports whether the peer may read the ServiceEntry behind an answer: the namespace
// of the one that defines the host. One it may not read is answered as a service that does
// not exist (tellState), so that a client learns nothing of what it may not see, not even
// that it exists; the refusal is counted and logged here, for the operator.
func (s *Server) visible(g *authz.Grant, key authority, ans *answer, protocol string) bool {
	if g == nil || !ans.exists || g.MayConsumeNamespace(ServiceEntries, ans.namespace, true) {
		return true
	}
	s.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedCollection)
	s.authzLog.Log(s.log, slog.LevelWarn, "consumer refused; answered as a service that does not exist",
		"protocol", protocol, "error", fmt.Sprintf("identity %s may not read %s in namespace %s, where %s is defined (authz.rules consume)", g.Identity, ServiceEntries, ans.namespace, key))
	return false
}

// missing is the answer for a service that does not exist.
var missing = &answer{}

// tellState is what one stream told its client: the snapshot it holds, while that is what it
// was told (its shared encodings apply), and the answer it holds.
type tellState struct {
	sent    *snapshot // nil: none, or the client was told another answer (held)
	held    *answer   // nil: nothing yet
	started bool      // a first answer was sent
}

// next is the updates that take the client to cur, or, when it may not see cur, to the
// answer of a service that does not exist: the very bytes a missing service's stream is sent.
func (t *tellState) next(cur *snapshot, visible bool, a api) []*wire.Frame {
	to := cur.answer
	if !visible {
		to = missing
	}
	var frames []*wire.Frame
	switch {
	case visible && (t.held == nil || t.sent != nil):
		frames = cur.updatesFrom(t.sent, a) // encoded once for every stream at the same step
	default:
		frames = encode(diff(t.held, to), a) // rare: a hidden service, or one coming into view
	}
	t.held = to
	t.sent = nil
	if visible {
		t.sent = cur
	}
	return frames
}

func (s *Server) refuse(protocol, reason, msg string) error {
	s.metrics.AuthzRefused(metrics.RoleSource, reason)
	s.authzLog.Log(s.log, slog.LevelWarn, "consumer refused", "protocol", protocol, "error", msg)
	return status.Error(codes.PermissionDenied, msg)
}
