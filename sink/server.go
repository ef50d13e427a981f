package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/rpcpeer"
	"github.com/mcpbridge/mcpbridge/store"
)

// Options configures a Server.
type Options struct {
	// Store is read for what producers hold (resumption, authorization).
	Store *store.Store
	// Writer takes the producers' writes: a replicated backend in front of Store
	// (store.backend: etcd). Nil: Store itself.
	Writer store.Writer
	// Collections are what the bridge asks every producer for, in this order. Empty means
	// DefaultCollections.
	Collections []Collection
	// SinkNode is sent in every request.
	SinkNode SinkNode
	// Expiry deletes the resources of a producer that has had no open stream for this long.
	// Zero keeps them until the producer's next full state replaces them.
	Expiry time.Duration
	// AnonymousExpiry is the expiry of a producer known only by its IP address (neither
	// mcp-producer-id nor a certificate), when Expiry is zero or longer. Zero: Expiry.
	AnonymousExpiry time.Duration
	Logger          *slog.Logger
	// Metrics, if set, counts streams, Resources received, ACKs and NACKs sent. Nil: none.
	Metrics *metrics.Metrics
	// Authz, if set, decides what each producer may write, by the identity of its verified
	// client certificate: a producer no rule matches is refused its stream, and a message
	// outside its rights is NACKed PermissionDenied with nothing of it applied. Nil: no rules.
	Authz *authz.Policy
	// MaxResourcesPerProducer bounds the resources one producer (owner) holds in all
	// collections together (limits.resources_per_producer): a message that would take it
	// over is NACKed with ResourceExhausted and nothing of it applied. Zero: no limit.
	MaxResourcesPerProducer int
	// DomainSuffix is the mesh's domain suffix (translate.domain_suffix): short hosts are
	// completed with it, and authorization gives each namespace its service domains under it.
	// Empty: DefaultDomainSuffix.
	DomainSuffix string
}

// Server is the istio.mcp.v1alpha1.ResourceSink service: producers dial in and push. Register
// it with mcp.RegisterResourceSinkServer. It is safe for concurrent use.
type Server struct {
	mcp.UnimplementedResourceSinkServer

	applier   applier
	authz     *authz.Policy
	presence  *presence
	producers producers
	metrics   *metrics.Metrics
	refusals  *limits.Refuser
	log       *slog.Logger
	stopped   chan struct{}
	stopOnce  sync.Once
}

// NewServer checks the options and returns a Server.
func NewServer(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("sink: Options.Store is nil")
	}
	if opts.Expiry < 0 {
		return nil, fmt.Errorf("sink: expiry %s is negative", opts.Expiry)
	}
	a, err := newAsked(opts.Collections)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "resource-sink")
	if opts.MaxResourcesPerProducer < 0 {
		return nil, fmt.Errorf("sink: resources per producer %d is negative", opts.MaxResourcesPerProducer)
	}
	w := writerOr(opts.Writer, opts.Store)
	ap := newApplier(opts.Store, w, a, opts.SinkNode, opts.Metrics, opts.DomainSuffix)
	ap.maxOwned = opts.MaxResourcesPerProducer
	return &Server{
		applier:  ap,
		authz:    opts.Authz,
		presence: newPresence(w, opts.Expiry, opts.AnonymousExpiry, log),
		metrics:  opts.Metrics,
		refusals: limits.NewRefuser(opts.Metrics),
		log:      log,
		stopped:  make(chan struct{}),
	}, nil
}

// Stop ends every stream with Unavailable, now and for streams that open later, and disarms
// pending expiries. Producers' resources stay in the store.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.presence.stop()
	})
}

var errStopping = status.Error(codes.Unavailable, "mcpbridge is shutting down")

// EstablishResourceStream serves one producer's stream: it asks for every configured
// collection (an incremental one with the versions the producer's copies have, so that a
// reconnecting producer sends the removals of what it deleted while away), then applies and
// answers each Resources message in order of arrival.
func (s *Server) EstablishResourceStream(stream grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources]) error {
	select {
	case <-s.stopped:
		return errStopping
	default:
	}
	ctx := stream.Context()
	grant, err := s.authz.Grant(authz.PeerIdentity(ctx))
	if err != nil {
		s.log.Warn("producer refused", "peer", rpcpeer.Addr(ctx), "error", err)
		s.metrics.AuthzRefused(metrics.RoleSink, metrics.RefusedNoRule)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	rights := producerRights{grant: grant}
	owner := ProducerOwner(ctx, s.authz.Enabled())
	log := s.log.With("owner", owner, "peer", rpcpeer.Addr(ctx))
	s.presence.open(owner)
	defer s.presence.close(owner)
	s.producers.open(owner, rpcpeer.Addr(ctx))
	defer s.producers.close(owner)
	sm := s.metrics.Stream(metrics.RoleSink, ProtocolResourceSink)
	defer sm.Close()
	log.Info("producer stream opened")

	for _, req := range s.applier.openingRequests(owner, rights) {
		if err := stream.Send(req); err != nil {
			sm.SendFailed(err)
			return err
		}
	}
	err = s.serve(ctx, stream, owner, rights, log, sm)
	log.Info("producer stream ended; its resources stay served", "reason", err)
	return err
}

func (s *Server) serve(ctx context.Context, stream grpc.BidiStreamingServer[mcp.Resources, mcp.RequestResources], owner string, rights producerRights, log *slog.Logger, sm *metrics.Stream) error {
	msgs := receive(ctx, stream.Recv, sm)
	for {
		select {
		case r := <-msgs:
			if r.err != nil {
				return endOfStream(r.err)
			}
			if ctx.Err() != nil {
				// The producer is gone (it gave up on this message): nothing of it is applied.
				return endOfStream(status.FromContextError(ctx.Err()).Err())
			}
			o := s.applier.handle(owner, rights, r.msg)
			s.logOutcome(log, r.msg, o)
			s.producers.answered(owner, o, r.msg.GetNonce())
			if err := stream.Send(o.reply); err != nil {
				sm.SendFailed(err)
				return err
			}
		case <-ctx.Done():
			// The producer went away; the receiver may have seen it first and given up.
			return endOfStream(status.FromContextError(ctx.Err()).Err())
		case <-s.stopped:
			return errStopping
		}
	}
}

type received[T any] struct {
	msg T
	err error
}

// receive reads a stream on its own goroutine, so that the handler can also wait for Stop.
// The goroutine ends with the stream: gRPC cancels ctx when the handler returns, which ends
// Recv.
//
// A receive failure is counted here: it may also cancel ctx, which the handler may see first.
func receive[T any](ctx context.Context, recv func() (T, error), sm *metrics.Stream) <-chan received[T] {
	ch := make(chan received[T])
	go func() {
		for {
			m, err := recv()
			if err != nil && endOfStream(err) != nil {
				sm.RecvFailed(err)
			}
			select {
			case ch <- received[T]{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// endOfStream is nil for a producer that closed its side, and the error otherwise.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// logOutcome logs a producer's message as logOutcome does, except a refusal by a limit: that
// is counted and logged at most once a second, so that a producer pushing over its limit in a
// loop costs a line a second.
func (s *Server) logOutcome(log *slog.Logger, m *mcp.Resources, o outcome) {
	if o.limit != "" {
		s.refusals.Refuse(log, o.limit, o.err.Error(), "collection", m.GetCollection(), "nonce", m.GetNonce())
		return
	}
	logOutcome(log, m, o)
}

func logOutcome(log *slog.Logger, m *mcp.Resources, o outcome) {
	if !o.acked() {
		level := slog.LevelWarn
		if o.reply.GetErrorDetail().GetCode() == int32(codes.Unimplemented) {
			level = slog.LevelDebug // the trigger of Istio's source clients: expected, not a fault
		}
		log.Log(context.Background(), level, "rejected a Resources message (NACK); nothing of it was applied",
			"collection", m.GetCollection(), "nonce", m.GetNonce(), "code", codes.Code(o.reply.GetErrorDetail().GetCode()), "error", o.err)
		return
	}
	log.Debug("applied a Resources message (ACK)",
		"collection", m.GetCollection(), "nonce", m.GetNonce(), "incremental", m.GetIncremental(),
		"resources", len(m.GetResources()), "removed", len(m.GetRemovedResources()),
		"changed", o.result.Changed, "revision", o.result.Revision)
}
