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
package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// Request is one wire request for one type, in the engine's terms. Adapters build it.
type Request struct {
	// Key is the client's name for the type (collection, alias or type URL); responses echo it.
	Key string
	// Collection is the store collection behind Key.
	Collection string
	// Known is false when neither the naming table nor the store knows the type: it is served
	// as an empty collection, and logged.
	Known bool
	Mode  Mode
	Form  wire.Form
	// Priority orders the responses due at once on one stream: lower first.
	Priority int
	// After lists the types (keys) on the same stream whose additions must reach the client
	// before a response of this type: a response made at store revision r waits until each of
	// them has been sent everything up to r. RemoveAfter lists those that must be caught up to
	// the revision of a deletion before the deletion is sent (they stop referring to it
	// first). The owner of the types declares them (translate.EnvoyOrder for Envoy's).
	After, RemoveAfter []string
	// WildcardCapable types (LDS, CDS, MCP collections) enter wildcard mode when the first
	// request names nothing (a wildcard that stays, as xds-protocol.rst says) or a request
	// names "*" (which a later request can take back).
	WildcardCapable bool
	// FullOnLoss: the protocol can send a full state in place of an increment (MCP).
	FullOnLoss bool
	// PartialStateOfTheWorld lets a state-of-the-world response to explicit names carry only
	// what changed. xDS groups every type but listeners and clusters this way (endpoints,
	// routes); listeners, clusters and MCP collections are always sent whole.
	PartialStateOfTheWorld bool
	// Splittable: an incremental response larger than Options.MaxResponseSize may be split
	// into several, sent one after another as the client answers each (xds-protocol.rst,
	// "Grouping Resources into Responses": in the incremental variants a response carries any
	// subset of the resources, and the client keeps the others). A state-of-the-world
	// response is never split: it would replace the client's state with a part.
	Splittable bool
	splitAt    int // set by the engine from MaxResponseSize
	// Scope, if set, narrows a wildcard subscription to the part of the type meant for this
	// client, from its node (xDS: a sidecar's listeners are not a gateway's, and a gateway's
	// are its class's). view names the part, so that clients of one kind share responses;
	// include nil means everything.
	Scope func(node Node) (view string, include func(name string) bool)

	// Names is the whole subscription of a state-of-the-world request.
	Names []string
	// Subscribe and Unsubscribe change an incremental subscription.
	Subscribe, Unsubscribe []string
	// InitialVersions are the versions a reconnecting incremental client holds.
	InitialVersions map[string]string

	// Nonce is the response_nonce: set, it ACKs (or with ErrorDetail NACKs) that response.
	Nonce       string
	ErrorDetail *rpcstatus.Status
	// Restart makes a request without a nonce start the subscription over (MCP: a new
	// RequestResources for a collection already subscribed).
	Restart bool
	// Node identifies the client (xDS node id, MCP sink node id), for debugging and the
	// node identity check.
	Node string
	// NodeNamespaces narrow the client's view to these namespaces (sorted), from its node
	// metadata (NodeNamespacesKey, ParseNodeNamespaces); nil: no narrowing. Read from the
	// first request that names a node.
	NodeNamespaces []string
	// NodeLabels are the client's workload labels, from its node metadata (xDS: LABELS);
	// read from the first request that names a node.
	NodeLabels map[string]string
	// NodeMetadata (xDS: node.metadata) or NodeAnnotations (MCP: sink_node.annotations)
	// describe the node to the status view (CSDS), whose node matchers read them; read
	// from the first request that names a node, as sent (no copy).
	NodeMetadata    *structpb.Struct
	NodeAnnotations map[string]string
	// TTL, when positive, is set on every resource the subscription sends, and the stream
	// heartbeats what the client holds every TTL/2 while the resource's producer is
	// connected (heartbeat.go). The adapter sets it only for clients that announce TTL
	// support (xds-protocol.rst, "TTL"); fixed when the subscription starts.
	TTL time.Duration
	// Wrap writes a state-of-the-world response's resources in the Resource wrapper, which
	// carries the TTL ("SotW TTL": clients announcing they unwrap it).
	Wrap bool

	vis *visibility // set by the stream when the request starts a subscription
}

// Node is what a client says of itself on its first request.
type Node struct {
	ID         string
	Labels     map[string]string
	Namespaces []string // its own narrowing (NodeNamespacesKey); nil: none
}

// Adapter is one wire protocol on one stream.
type Adapter interface {
	// Recv blocks for the next request. It must return when the stream ends.
	Recv() (*Request, error)
	// Send sends one encoded response.
	Send(*wire.Frame) error
	// Layout is where this protocol's response message keeps each part.
	Layout() *wire.Layout
}

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

	frames  frameCache
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
	e.frames.init(256, frameBytes)
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

// open registers a new stream.
//
//go:noinline
func (e *Engine) open(a Adapter, protocol, peer string, grant *authz.Grant) *stream {
	s := &stream{
		engine: e, adapter: a, protocol: protocol, peer: peer, id: e.nextID.Add(1),
		m: newMachine(protocol), watch: e.store.Watch(placeholderCollection), connected: time.Now(),
		sent: make(chan error, 1), metrics: e.metrics.Stream(metrics.RoleSource, protocol),
	}
	s.log = e.log.With("protocol", protocol, "peer", peer)
	s.access = access{grant: grant, namespaceOf: e.namespaceOf}
	if grant != nil {
		s.identity = grant.Identity
	}
	e.streams.Store(s.id, s)
	return s
}

// close unregisters an ended stream.
func (s *stream) close() {
	if s.beatTimer != nil {
		s.beatTimer.Stop()
	}
	s.engine.streams.Delete(s.id)
	s.watch.Close()
	s.metrics.Close()
}

// end is the error a stream ends with.
//
//go:noinline
func (s *stream) end(err error) error {
	if errors.Is(err, errSendTimeout) {
		// The send is still blocked on the stuck client: returning ends the stream, which
		// unblocks it.
		s.log.Warn("stream reset: a send took longer than the send timeout", "send_timeout", s.engine.timeout, "node", s.nodeID())
		return status.Errorf(codes.DeadlineExceeded, "send to this client took longer than %s", s.engine.timeout)
	}
	return err
}

// errSendTimeout ends a stream whose send took longer than Options.SendTimeout.
var errSendTimeout = errors.New("send timed out")

// placeholderCollection starts a stream's watch with no real collection; subscriptions add
// theirs. (A Watch with no collection would watch everything.)
const placeholderCollection = "\x00mcpbridge/none"

// stream is one client stream: its machine (the protocol state) and the goroutines that move
// bytes. Only the loop goroutine mutates the machine; mu guards it against the debug view.
type stream struct {
	engine    *Engine
	adapter   Adapter
	protocol  string
	peer      string
	id        uint64
	log       *slog.Logger
	watch     *store.Watch
	connected time.Time
	// sent receives the result of the send in flight (transmit); buffered, so that a send
	// that ends after its stream gave up on it does not block.
	sent    chan error
	metrics *metrics.Stream // nil without metrics
	// access is what the peer may read. Only the loop uses it.
	access   access
	identity string // the peer's, with authz rules
	// beatTimer fires when the next TTL heartbeat is due (heartbeat.go); nil until a
	// subscription has a TTL. beatC is its channel, nil while none.
	beatTimer *time.Timer
	beatC     <-chan time.Time

	mu sync.Mutex
	m  *machine
}

type received struct {
	req *Request
	err error
}

func (s *stream) loop(ctx context.Context) error {
	requests := make(chan received)
	go s.receive(ctx, requests)
	// Store changes are paced (see pacing); responses are computed from its view.
	pc := &pacing{pacer: pacer{interval: s.engine.pushInterval}, view: s.engine.store.View()}
	defer pc.stop()
	for {
		ev, r := s.wait(ctx, requests, pc)
		if err := s.step(ctx, ev, r, pc); err != nil {
			if err == errClientEnded {
				return nil
			}
			return err
		}
	}
}

// errClientEnded is how step says the client closed its stream: the loop returns nil.
var errClientEnded = errors.New("the client ended the stream")

// receive hands the client's requests to the loop until the stream ends.
func (s *stream) receive(ctx context.Context, requests chan<- received) {
	for {
		req, err := s.adapter.Recv()
		if err != nil && !cleanEnd(err) {
			// Counted here, not where the loop sees it: a failed receive may also cancel the
			// stream, and the loop may see that first.
			s.metrics.RecvFailed(err)
		}
		select {
		case requests <- received{req, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// event is what woke a stream's loop.
type event uint8

const (
	eventRequest event = iota
	eventChange        // the store changed collections the stream watches
	eventPaced         // held changes fell due
	eventStop          // the engine stops
	eventDone          // the stream's context ended
	eventBeat          // TTL heartbeats fell due
)

// wait is where an idle stream waits: a leaf with a small frame (see Serve).
//
//go:noinline
func (s *stream) wait(ctx context.Context, requests <-chan received, pc *pacing) (event, received) {
	select {
	case r := <-requests:
		return eventRequest, r
	case <-s.watch.C():
		return eventChange, received{}
	case <-pc.C:
		return eventPaced, received{}
	case <-s.beatC:
		return eventBeat, received{}
	case <-s.engine.stop:
		return eventStop, received{}
	case <-ctx.Done():
		return eventDone, received{}
	}
}

// step handles one event, then sends what is due.
//
//go:noinline
func (s *stream) step(ctx context.Context, ev event, r received, pc *pacing) error {
	switch ev {
	case eventRequest:
		if r.err != nil {
			if cleanEnd(r.err) {
				return errClientEnded
			}
			return r.err
		}
		if r.req == nil {
			break
		}
		if err := s.admit(r.req); err != nil {
			return err
		}
		started, err := s.handle(r.req)
		if err != nil {
			return err
		}
		if started {
			// A collection newly watched: what was written to it before the watch began
			// signals nothing, so it is read from the store as it is now.
			pc.view = s.engine.store.View()
		}
	case eventChange:
		pc.take(s, s.watch.Changed())
	case eventPaced:
		pc.C = nil
		s.watch.Unmute()
		pc.take(s, s.watch.Changed())
	case eventStop:
		return errStopping
	case eventDone:
		return ctx.Err()
	}
	select {
	case <-s.engine.stop: // a timer may fire as the engine stops: send nothing more
		return errStopping
	default:
	}
	v := pc.view
	if s.engine.pushInterval <= 0 {
		v = s.engine.store.View()
	}
	if err := s.flush(v); err != nil {
		return err
	}
	return s.beat(v)
}

// cleanEnd tells a client that closed its stream from a failure.
func cleanEnd(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
}

// admit checks a request against the peer's rights before the machine sees it: the first
// that names a node has it checked against the peer's identity and sets the node's own
// narrowing; a request for a type gets the view the stream has of it.
func (s *stream) admit(req *Request) error {
	if err := s.access.admit(req); err != nil {
		s.engine.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedNodeIdentity)
		s.engine.authzLog.Log(s.log, slog.LevelWarn, "consumer refused", "error", err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// handle applies one request to the machine, then logs and counts what it did.
// It reports whether the request started a subscription (and so watches a collection more),
// or the error that ends a stream over limits.subscriptions_per_stream: nothing of that
// request is answered.
func (s *stream) handle(req *Request) (started bool, err error) {
	if req.Splittable && req.Mode == Incremental && s.engine.maxSize > 0 {
		// Room for what a response holds besides its resources: type URL, version, nonce.
		req.splitAt = max(s.engine.maxSize-responseEnvelope, 1)
	}
	s.mu.Lock()
	sub, out := s.m.request(req, time.Now())
	node, held := s.m.node, s.m.subscriptionCount()
	if s.engine.maxSubs > 0 && held > s.engine.maxSubs {
		s.mu.Unlock()
		return false, s.overSubscribed(req, held, node)
	}
	if out == subscribed {
		s.watch.Add(sub.collection)
		if s.engine.metrics != nil {
			sub.label = s.engine.collectionLabel(req)
			sub.metrics = s.engine.metrics.Collection(metrics.RoleSource, sub.label)
		}
	}
	s.mu.Unlock()
	s.countRequest(req, sub)
	switch out {
	case ignoredPhantom:
		s.log.Debug("ignoring an unsubscription from a type never subscribed", "type", req.Key)
	case ignoredStale:
		s.log.Debug("ignoring request with a stale nonce", "type", req.Key, "nonce", req.Nonce)
	case subscribed:
		if !req.Known {
			s.engine.unknownTypes.Log(s.log, slog.LevelInfo, "subscription to an unknown type, served as empty", "type", req.Key, "node", node)
		}
		if req.vis != nil && req.vis.denial != nil {
			s.engine.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedCollection)
			s.engine.authzLog.Log(s.log, slog.LevelWarn, "subscription refused; the type is served as empty",
				"type", req.Key, "node", node, "error", req.vis.denial.Message)
		}
	case acked:
		s.engine.stats.acks.Add(1)
		sub.metrics.ACK()
	case nacked:
		s.engine.stats.nacks.Add(1)
		s.engine.metrics.NACK(metrics.RoleSource, sub.label, codes.Code(req.ErrorDetail.GetCode()))
		s.log.Warn("client rejected a response (NACK); that version will not be resent",
			"type", req.Key, "version", sub.lastNack.Version, "node", node, "error", sub.lastNack.Message)
	}
	return out == subscribed, nil
}

// overSubscribed is the refusal of a request that took the stream to held subscriptions.
func (s *stream) overSubscribed(req *Request, held int, node string) error {
	return s.engine.refusals.Refuse(s.log, limits.SubscriptionsPerStream, fmt.Sprintf(
		"limits.subscriptions_per_stream: this request (type %s) would take the stream to %d types and names, over the limit of %d",
		req.Key, held, s.engine.maxSubs), "node", node, "type", req.Key)
}

// countRequest counts a request under its subscription's collection label, resolved when the
// subscription started; a request ignored before any subscription pays the lookup.
func (s *stream) countRequest(req *Request, sub *subscription) {
	if s.engine.metrics == nil {
		return
	}
	if sub != nil {
		sub.metrics.Request()
		return
	}
	s.engine.metrics.Collection(metrics.RoleSource, s.engine.collectionLabel(req)).Request()
}

// collectionLabel is the collection as metrics label it: the store collection when the
// naming table or the store knows it, else "unknown", so that clients asking for arbitrary
// type names cannot grow the label set.
func (e *Engine) collectionLabel(req *Request) string {
	if req.Known || e.store.View().Collection(req.Collection).Revision > 0 {
		return req.Collection
	}
	return metrics.UnknownCollection
}

// responseEnvelope is what a response holds besides its resources, at most: the type URL,
// the version, the nonce and their tags.
const responseEnvelope = 4 << 10

// policy is how the type of a request is served, fixed when its subscription starts.
func (req *Request) policy() policy {
	return policy{
		key: req.Key, collection: req.Collection, mode: req.Mode, form: req.Form, priority: req.Priority,
		wildcardCapable: req.WildcardCapable, fullOnLoss: req.FullOnLoss, partialSotW: req.PartialStateOfTheWorld,
		after: req.After, removeAfter: req.RemoveAfter, scope: req.Scope, splitAt: req.splitAt, vis: req.vis,
		ttl: max(req.TTL, 0), wrap: req.Wrap && req.TTL > 0,
	}
}

// flush sends every response that is due, from one view of the store, in the machine's order.
func (s *stream) flush(v *store.View) error {
	s.mu.Lock()
	ready, err := s.m.due(v)
	s.mu.Unlock()
	for _, r := range ready {
		if err := s.send(r); err != nil {
			return err
		}
	}
	if err != nil {
		s.log.Warn("ending stream", "error", err)
		return status.Error(codes.Unavailable, err.Error())
	}
	return nil
}

func (s *stream) send(r response) error {
	layout := s.adapter.Layout()
	sub, p := r.sub, r.p
	body, n := s.engine.frames.get(sub.withTTL(p.share), func() ([]byte, counts) {
		p.materialize()
		p.msg.TTL, p.msg.Wrap = sub.ttl, sub.wrap
		return layout.Encode(&p.msg, sub.form), counts{resources: len(p.msg.Resources)}
	})
	resources := n.resources
	frame := &wire.Frame{Body: body, Tail: layout.Tail(r.nonce)}
	if frame.Size() > s.engine.maxSize {
		s.log.Warn("response is larger than the client's likely receive limit",
			"type", sub.key, "version", p.msg.Version, "bytes", frame.Size(), "limit", s.engine.maxSize, "resources", resources)
	}
	if err := s.transmit(frame); err != nil {
		return err // counted by transmit
	}
	s.engine.stats.responses.Add(1)
	s.engine.stats.resources.Add(uint64(resources))
	sub.metrics.Size(frame.Size())
	if r.push && !p.changed.IsZero() {
		s.metrics.Pushed(time.Since(p.changed).Seconds())
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // spare the fan-out path the arguments
		s.log.Debug("sent", "type", sub.key, "version", p.msg.Version, "nonce", r.nonce,
			"resources", resources, "removed", len(p.msg.Removed), "bytes", frame.Size())
	}
	return nil
}

// transmit sends a frame, and gives up on a client that does not take it within the send
// timeout. A gRPC send blocked on a client that stopped reading ends only when the stream
// does, which takes the handler's return: so the send runs on a goroutine of its own, started
// for it, while the stream's goroutine (the handler's) waits for it or for the timeout. An
// idle stream then holds two goroutines, its handler and its receiver, not three.
func (s *stream) transmit(frame *wire.Frame) error {
	done := s.sent
	go func() { done <- s.adapter.Send(frame) }()
	timer := time.NewTimer(s.engine.timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			s.metrics.SendFailed(err)
		}
		return err
	case <-timer.C:
		s.metrics.SendFailed(status.Error(codes.DeadlineExceeded, "send timed out"))
		return errSendTimeout
	}
}

func (s *stream) nodeID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.node
}

// counters are the engine's totals, for tests, benchmarks and metrics.
type counters struct {
	responses, resources, acks, nacks, heartbeats atomic.Uint64
}

// Stats are the engine's counters.
type Stats struct {
	Responses, Resources, ACKs, NACKs uint64
	// Encodes counts response bodies encoded; FrameHits, those reused from another stream.
	Encodes, FrameHits uint64
	// Heartbeats counts TTL heartbeats sent (not in Responses).
	Heartbeats uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		Responses: e.stats.responses.Load(), Resources: e.stats.resources.Load(),
		ACKs: e.stats.acks.Load(), NACKs: e.stats.nacks.Load(),
		Encodes: e.frames.encodes.Load(), FrameHits: e.frames.hits.Load(), Heartbeats: e.stats.heartbeats.Load(),
	}
}

func (s *stream) String() string {
	return fmt.Sprintf("%s stream %d from %s", s.protocol, s.id, s.peer)
}
