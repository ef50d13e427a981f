// Package source is the bridge's source side: one subscription engine, and the wire protocols
// that are thin adapters over it (MCP ResourceSource and downstream push,
// AggregatedMeshConfigService state of the world and incremental; the xDS server adapts the
// same engine in package source/xds).
//
// The rules live once, here: the first response carries the full state (or, for a reconnecting
// incremental client, the diff against initial_resource_versions); at most one unacknowledged
// response per type per stream; changes that arrive meanwhile coalesce into the next response;
// nothing is sent when nothing changed; a NACK is recorded and its version not resent; stale
// nonces are ignored; an unknown type is answered as an empty one and never ends the stream.
// Streams wake on the store's per-collection topics, never by polling, and read only what
// changed since the revision they were last sent.
//
// The rules are a pure state machine (machine.go, subscription.go, state.go, heartbeat.go):
// an event in, effects out. A stream's loop (stream.go) only waits for events and carries out
// the effects.
package source

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/store"
)

// Options configures an Engine.
type Options struct {
	Store  *store.Store
	Logger *slog.Logger
	// SendTimeout resets a stream whose one send takes longer (a stuck client), so that it holds
	// nothing back. The bridge passes xds.send_timeout; zero means 10s, its default in
	// app.DefaultConfig, for the engine's other users (the tests of its adapters).
	SendTimeout time.Duration
	// PushInterval is the shortest time between two takes of store changes on one stream:
	// changes that come sooner go together in the next response. Under a stream of changes
	// it bounds each stream's responses per second, so that producers are not starved of CPU
	// by the fan-out; a change after a quiet interval goes at once. Zero: every change at once.
	PushInterval time.Duration
	// MaxResponseSize is the client's likely receive limit (gRPC's default is 4 MiB): a
	// splittable response larger than it is split, any other is sent whole and logged. The
	// bridge passes xds.max_response_size; zero means 4 MiB, its default in app.DefaultConfig.
	MaxResponseSize int
	// FrameCacheBytes bounds the encoded responses kept for sharing between streams. Zero
	// means 16 MiB: four parts of the largest response, enough for the streams that take a
	// change together (a frame is shared in the moments after a change, not replayed later),
	// and little held at rest.
	FrameCacheBytes int
	// Metrics, if set, counts streams, requests, ACKs, NACKs, failures, response sizes and
	// push latency. Nil: no metrics.
	Metrics *metrics.Metrics
	// Authz, if it has rules, decides what each consumer may read, by the identity of its
	// verified client certificate: a peer no rule matches is refused its stream
	// (PermissionDenied); a type it may not read is served as empty, with a PermissionDenied
	// resource error where the protocol has the field (xDS v3), while the stream's other types
	// go on; a consumer limited to namespaces sees only theirs. Nil: everything is allowed.
	Authz *authz.Policy
	// NamespaceOf is the namespace of a resource, for views: by default the "namespace/" of
	// its name. The bridge gives the Envoy resources theirs.
	NamespaceOf NamespaceFunc
	// MaxSubscriptions bounds the types and explicitly subscribed names one stream holds
	// (limits.subscriptions_per_stream): a request that takes a stream over it ends that
	// stream with ResourceExhausted. Zero: no limit.
	MaxSubscriptions int
	// Derived maps an owner whose resources are derived from others to the collections it
	// reads (the translation: its Istio input collections). Its resources are heartbeated
	// only while no disconnected producer holds resources in those collections: they inherit
	// the liveness of their inputs (heartbeat.go). Other owners are live while connected.
	Derived map[string][]string
	// CatchUp, if set, is called when a stream opens, before its first request is read: a
	// replicated store (store.backend: etcd) waits there until it has applied what its
	// source of truth had committed, so that a client coming from another replica with
	// initial versions is not told to remove what this replica has not applied yet.
	CatchUp func(context.Context)
}

// Engine serves subscriptions on any number of streams. It is safe for concurrent use.
type Engine struct {
	store   *store.Store
	log     *slog.Logger
	timeout time.Duration
	maxSize int
	// pushInterval is Options.PushInterval.
	pushInterval time.Duration
	stop         chan struct{}
	once         sync.Once

	frames  *memo[frame]
	beats   *memo[beatContent]
	streams sync.Map // uint64 → *stream
	nextID  atomic.Uint64
	stats   counters
	metrics *metrics.Metrics
	// unknownTypes logs subscriptions to unknown types, at most one line a second.
	unknownTypes limits.RareLog
	// bigBeats logs state-of-the-world heartbeats larger than maxSize, at most one line a
	// second (they go every TTL/2 on every stream).
	bigBeats limits.RareLog
	// authz is Options.Authz when it has rules, else nil; namespaceOf Options.NamespaceOf.
	authz       *authz.Policy
	namespaceOf NamespaceFunc
	// authzLog logs authorization refusals, at most one line a second; nackLog the NACKs of
	// clients that poll (Polled).
	authzLog, nackLog limits.RareLog
	// maxSubs is Options.MaxSubscriptions; refusals counts and logs its refusals.
	maxSubs  int
	refusals *limits.Refuser
	// derived is Options.Derived.
	derived map[string][]string
	catchUp func(context.Context)
	// drive, set only by tests (export_test.go), takes over a stream's loop: Serve hands it
	// the opened stream and returns what it returns.
	drive func(*stream) error
}

// New returns an engine over a store.
func New(opts Options) *Engine {
	e := &Engine{store: opts.Store, log: opts.Logger, timeout: opts.SendTimeout, maxSize: opts.MaxResponseSize,
		pushInterval: opts.PushInterval, stop: make(chan struct{}), metrics: opts.Metrics, namespaceOf: opts.NamespaceOf,
		maxSubs: opts.MaxSubscriptions, refusals: limits.NewRefuser(opts.Metrics), derived: opts.Derived,
		catchUp: opts.CatchUp}
	if opts.Authz.Enabled() {
		e.authz = opts.Authz
	}
	if e.namespaceOf == nil {
		e.namespaceOf = namespaceByName
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	// Zero values: the defaults of xds.send_timeout and xds.max_response_size in
	// app.DefaultConfig, for users of the engine other than the bridge, which passes its own.
	if e.timeout <= 0 {
		e.timeout = 10 * time.Second
	}
	if e.maxSize <= 0 {
		e.maxSize = 4 << 20
	}
	frameBytes := opts.FrameCacheBytes
	if frameBytes <= 0 {
		frameBytes = 16 << 20
	}
	e.frames = newMemo(256, frameBytes, frameSize)
	e.frames.retain, e.frames.release = retainFrame, releaseFrame
	e.beats = newMemo[beatContent](256, 0, nil)
	return e
}

// CatchUp waits, as a stream opening does, until a replicated store has applied what its
// source of truth had committed (Options.CatchUp); it returns at once without one.
func (e *Engine) CatchUp(ctx context.Context) {
	if e.catchUp != nil {
		e.catchUp(ctx)
	}
}

// Stop ends every stream with Unavailable, now and for streams that start later.
func (e *Engine) Stop() { e.once.Do(func() { close(e.stop) }) }

// errStopping is what streams end with when the bridge stops.
var errStopping = status.Error(codes.Unavailable, "mcpbridge is shutting down")

// Serve runs one stream until the client ends it (nil), it fails, or the engine stops
// (Unavailable). protocol names the protocol for logs and debugging; peer is the client's
// address.
//
// An idle stream holds two goroutines: the handler's, which runs the stream's loop and is the
// one that can end the stream, and a receiver. Both wait in small frames, so that the runtime
// can shrink their stacks to a few KiB: at 10,000 streams, stacks are most of the memory.
func (e *Engine) Serve(ctx context.Context, a Adapter, protocol, peer string) error {
	grant, err := e.grant(ctx, protocol, peer)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.CatchUp(ctx)
	s := e.open(a, protocol, peer, grant)
	defer s.close()
	if e.drive != nil {
		return e.drive(s)
	}
	return s.end(s.loop(ctx))
}

// grant is the rights of the stream's peer: nil without rules; PermissionDenied for a peer
// no rule matches.
func (e *Engine) grant(ctx context.Context, protocol, peer string) (*authz.Grant, error) {
	if e.authz == nil {
		return nil, nil
	}
	g, err := e.authz.Grant(authz.PeerIdentity(ctx))
	if err != nil {
		e.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedNoRule)
		e.authzLog.Log(e.log, slog.LevelWarn, "consumer refused", "protocol", protocol, "peer", peer, "error", err)
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return g, nil
}

// machineFor is the machine of a stream (or a poll) of protocol for a peer with grant.
func (e *Engine) machineFor(protocol string, types func(*Request, *Node) Type, grant *authz.Grant) *machine {
	return newMachine(machineConfig{
		protocol: protocol, types: types, maxSubs: e.maxSubs, splitAt: max(e.maxSize-responseEnvelope, 1),
		derived: e.derived, beats: e.beats,
	}, access{grant: grant, namespaceOf: e.namespaceOf})
}

// responseEnvelope is what a response holds besides its resources, at most: the type URL,
// the version, the nonce and their tags.
const responseEnvelope = 4 << 10

// counters are the engine's totals, for tests, benchmarks and metrics.
type counters struct {
	responses, resources, acks, nacks, heartbeats atomic.Uint64
}

// Stats are the engine's counters.
type Stats struct {
	Responses, Resources, ACKs, NACKs uint64
	// Encodes counts response bodies encoded (as each encoding starts); FrameHits, sends that
	// found theirs made, or being made, by another stream or ahead of the send; Prefetches,
	// encodings of the next part of a split response started while the client read the part
	// before (in Encodes too; one whose part changed before its send is never sent).
	Encodes, FrameHits, Prefetches uint64
	// Heartbeats counts TTL heartbeats sent (not in Responses).
	Heartbeats uint64
	// FrameBuffersReused counts large bodies encoded into the bytes of one already written
	// (framePool), FrameBuffersAllocated those that needed new bytes. The pool serves every
	// engine of the process, so these two count for all of them.
	FrameBuffersReused, FrameBuffersAllocated uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		Responses: e.stats.responses.Load(), Resources: e.stats.resources.Load(),
		ACKs: e.stats.acks.Load(), NACKs: e.stats.nacks.Load(),
		Encodes: e.frames.computes.Load(), FrameHits: e.frames.hits.Load(), Prefetches: e.frames.prefetches.Load(),
		Heartbeats:         e.stats.heartbeats.Load(),
		FrameBuffersReused: frameBuffers.reused.Load(), FrameBuffersAllocated: frameBuffers.fresh.Load(),
	}
}

// collectionLabel is the collection as metrics label it: the store collection when the
// naming table or the store knows it, else "unknown", so that clients asking for arbitrary
// type names cannot grow the label set.
func (e *Engine) collectionLabel(typ Type) string {
	if typ.Known || e.store.View().Collection(typ.Collection).Revision > 0 {
		return store.BaseCollection(typ.Collection) // a namespace's view counts as the type's
	}
	return metrics.UnknownCollection
}
