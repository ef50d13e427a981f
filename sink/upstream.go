package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/dial"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
)

// UpstreamOptions configures an Upstream.
type UpstreamOptions struct {
	// Target is the remote ResourceSource.
	Target dial.Target
	Store  *store.Store
	// Writer takes the upstream's writes (see Options.Writer). Nil: Store itself.
	Writer store.Writer
	// Collections are what the bridge asks the upstream for. Empty means DefaultCollections.
	Collections []Collection
	// SinkNode is sent in every request.
	SinkNode SinkNode
	// Backoff paces reconnects. Its zero value is dial.Backoff's defaults.
	Backoff dial.Backoff
	Logger  *slog.Logger
	// Metrics, if set, counts the stream, what it receives and answers, reconnections, and
	// reports the connection state (mcpbridge_peer_connected, the status page). Nil: none.
	Metrics *metrics.Metrics
	// DomainSuffix is as Options.DomainSuffix.
	DomainSuffix string
}

// Upstream subscribes the bridge to a remote ResourceSource: it dials it, asks for every
// configured collection, and applies and answers what it sends exactly as the ResourceSink
// server does, under the owner UpstreamOwner(Target.Address). It reconnects with exponential
// backoff and jitter, and resumes incremental collections with initial_resource_versions, so
// that the upstream resends only what changed meanwhile.
type Upstream struct {
	target  dial.Target
	owner   string
	rights  producerRights // Target.Authz
	applier applier
	backoff dial.Backoff
	log     *slog.Logger
	metrics *metrics.Metrics
	peer    *metrics.Peer // nil without metrics

	running   atomic.Bool
	connected atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
	synced    map[string]bool // canonical collections applied at least once; Run's goroutine only
	asking    int             // how many collections it is asked for: those within its rights
}

// NewUpstream checks the options and returns an Upstream; Run starts it.
func NewUpstream(opts UpstreamOptions) (*Upstream, error) {
	if opts.Store == nil {
		return nil, errors.New("upstream: UpstreamOptions.Store is nil")
	}
	if opts.Target.Address == "" {
		return nil, errors.New("upstream: address is empty")
	}
	a, err := newAsked(opts.Collections)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", opts.Target.Address, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rights producerRights
	if opts.Target.Authz != nil {
		g, err := authz.ScopeGrant("upstream "+opts.Target.Address, *opts.Target.Authz, kinds.CollectionOf)
		if err != nil {
			return nil, fmt.Errorf("authz.%w", err)
		}
		rights = producerRights{grant: g}
	}
	asking := 0
	for canonical := range a.byCanonical {
		if rights.in(canonical) {
			asking++
		}
	}
	if asking == 0 {
		return nil, fmt.Errorf("upstream %s: authz grants none of the collections the bridge asks for", opts.Target.Address)
	}
	return &Upstream{
		target:  opts.Target,
		owner:   UpstreamOwner(opts.Target.Address),
		rights:  rights,
		asking:  asking,
		applier: newApplier(opts.Store, writerOr(opts.Writer, opts.Store), a, opts.SinkNode, opts.Metrics, opts.DomainSuffix),
		backoff: opts.Backoff,
		metrics: opts.Metrics,
		peer:    opts.Metrics.Peer(metrics.Upstream, opts.Target.Address),
		log:     log.With("component", "upstream", "upstream", opts.Target.Address),
		ready:   make(chan struct{}),
		synced:  map[string]bool{},
	}, nil
}

// Owner is the store owner ID of what this upstream delivers.
func (u *Upstream) Owner() string { return u.owner }

// Ready is closed once every configured collection has had its first state applied: a full
// state, or the first answer to a resumed subscription, which is complete as well. It stays
// closed across reconnects: the last good state is still served meanwhile.
func (u *Upstream) Ready() <-chan struct{} { return u.ready }

// Connected reports whether a stream to the upstream is open (the requests were sent and the
// stream has not ended).
func (u *Upstream) Connected() bool { return u.connected.Load() }

// Run keeps a stream to the upstream open until ctx ends, then returns nil. It returns an
// error at once for a target it cannot dial at all (bad TLS files, a malformed address), or
// when called a second time.
func (u *Upstream) Run(ctx context.Context) error {
	if !u.running.CompareAndSwap(false, true) {
		return fmt.Errorf("upstream %s: Run called twice", u.target.Address)
	}
	opts, err := dial.Options(u.target)
	if err != nil {
		return fmt.Errorf("upstream %s: %w", u.target.Address, err)
	}
	conn, err := grpc.NewClient(u.target.Address, opts...)
	if err != nil {
		return fmt.Errorf("upstream %s: %w", u.target.Address, err)
	}
	defer conn.Close()
	client := mcp.NewResourceSourceClient(conn)
	for {
		applied, err := u.session(ctx, client)
		if ctx.Err() != nil {
			u.peer.Down(nil)
			return nil
		}
		u.peer.Down(err)
		if errors.Is(err, errResync) {
			u.log.Info("upstream stream resumed", "reason", err)
			continue
		}
		if applied {
			u.backoff.Reset() // the upstream worked: come back quickly
		}
		wait := u.backoff.Next()
		u.log.Warn("upstream stream ended; reconnecting", "error", err, "in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// session runs one stream. applied tells whether anything was ACKed on it.
func (u *Upstream) session(ctx context.Context, client mcp.ResourceSourceClient) (applied bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	stream, err := client.EstablishResourceStream(ctx)
	if err != nil {
		return false, err
	}
	sm := u.metrics.Stream(metrics.RoleSink, ProtocolUpstream)
	defer sm.Close()
	for _, req := range u.requests() {
		if err := stream.Send(req); err != nil {
			sm.SendFailed(err)
			return false, err
		}
	}
	u.connected.Store(true)
	defer u.connected.Store(false)
	u.peer.Up()
	u.log.Info("upstream stream opened")
	present := false
	refused := map[string]bool{} // incremental collections with a message NACKed on this stream
	defer func() {
		if present { // gone: its copies lose conflicts to present owners' until it is back
			u.setPresent(false)
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				sm.RecvFailed(err)
			}
			return applied, err
		}
		if !present {
			present = true
			u.setPresent(true)
		}
		o := u.applier.handle(u.owner, u.rights, m)
		logOutcome(u.log, m, o)
		c, canonical, _ := u.applier.asked.lookup(m.GetCollection())
		resync := false
		switch {
		case !o.acked() && c.Incremental:
			refused[canonical] = true
		case o.acked() && refused[canonical]:
			resync = true
		case o.acked():
			applied = true
			u.markSynced(o.canonical)
		}
		if err := stream.Send(o.reply); err != nil {
			sm.SendFailed(err)
			return applied, err
		}
		if resync {
			return true, errResync
		}
	}
}

// errResync ends a session to resume it at once: an incremental collection had a message
// refused, and the upstream does not resend what it carried (a NACK is not retried), so the
// bridge may lack part of its state. The first message after the refusal that the bridge
// could apply shows that the upstream's state changed; a resumed stream then gets the whole
// difference against what the bridge holds. Reconnecting, rather than a new request on the
// stream, makes the next answer unambiguously the complete one.
var errResync = errors.New("resuming after a refused incremental message, to receive what it carried")

func (u *Upstream) setPresent(present bool) {
	if _, err := u.applier.writer.SetOwnerPresent(u.owner, present); err != nil {
		u.log.Error("could not record the upstream's presence", "present", present, "error", err)
	}
}

// requests opens every collection, resumed from what this upstream holds (openingRequests).
func (u *Upstream) requests() []*mcp.RequestResources {
	return u.applier.openingRequests(u.owner, u.rights)
}

func (u *Upstream) markSynced(canonical string) {
	if u.synced[canonical] {
		return
	}
	u.synced[canonical] = true
	if len(u.synced) == u.asking {
		u.readyOnce.Do(func() {
			close(u.ready)
			u.log.Info("upstream delivered every collection's first state")
		})
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
