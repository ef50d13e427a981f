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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// MakeBeforeBreak splits a response that both adds and removes resources: first the
	// additions (state of the world: the new set plus the removed ones, once more), then,
	// after the client's ACK, the removals with RemovalPriority. ADS uses it for clusters, so
	// that routes stop using a cluster before it goes.
	MakeBeforeBreak bool
	RemovalPriority int
	// WildcardCapable types (LDS, CDS, MCP collections) enter wildcard mode when the first
	// request names nothing or names "*"; once entered, it stays.
	WildcardCapable bool
	// FullOnLoss: the protocol can send a full state in place of an increment (MCP).
	FullOnLoss bool
	// PartialStateOfTheWorld lets a state-of-the-world response to explicit names carry only
	// what changed. xDS groups every type but listeners and clusters this way (endpoints,
	// routes); listeners, clusters and MCP collections are always sent whole.
	PartialStateOfTheWorld bool
	// Scope, if set, narrows a wildcard subscription to the part of the type meant for this
	// client, from its node ID (xDS: a sidecar's listeners are not a gateway's). view names
	// the part, so that clients of one kind share responses; include nil means everything.
	Scope func(node string) (view string, include func(name string) bool)

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
	// Node identifies the client (xDS node id, MCP sink node id), for debugging.
	Node string
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
	// nothing back. Zero means 10s.
	SendTimeout time.Duration
	// MaxResponseSize is the size above which a response is logged as likely to exceed the
	// client's receive limit (gRPC's default is 4 MiB). Zero means 4 MiB.
	MaxResponseSize int
	// FrameCacheBytes bounds the encoded responses kept for sharing between streams. Zero
	// means 64 MiB.
	FrameCacheBytes int
	// Metrics, if set, counts streams, requests, ACKs, NACKs, failures, response sizes and
	// push latency. Nil: no metrics.
	Metrics *metrics.Metrics
}

// Engine serves subscriptions on any number of streams. It is safe for concurrent use.
type Engine struct {
	store   *store.Store
	log     *slog.Logger
	timeout time.Duration
	maxSize int
	stop    chan struct{}
	once    sync.Once

	frames  frameCache
	streams sync.Map // uint64 → *stream
	nextID  atomic.Uint64
	stats   counters
	metrics *metrics.Metrics
}

// New returns an engine over a store.
func New(opts Options) *Engine {
	e := &Engine{store: opts.Store, log: opts.Logger, timeout: opts.SendTimeout, maxSize: opts.MaxResponseSize, stop: make(chan struct{}), metrics: opts.Metrics}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.timeout <= 0 {
		e.timeout = 10 * time.Second
	}
	if e.maxSize <= 0 {
		e.maxSize = 4 << 20
	}
	frameBytes := opts.FrameCacheBytes
	if frameBytes <= 0 {
		frameBytes = 64 << 20
	}
	e.frames.init(256, frameBytes)
	return e
}

// Stop ends every stream with Unavailable, now and for streams that start later.
func (e *Engine) Stop() { e.once.Do(func() { close(e.stop) }) }

// errStopping is what streams end with when the bridge stops.
var errStopping = status.Error(codes.Unavailable, "mcpbridge is shutting down")

// Serve runs one stream until the client ends it (nil), it fails, or the engine stops
// (Unavailable). protocol names the protocol for logs and debugging; peer is the client's
// address.
func (e *Engine) Serve(ctx context.Context, a Adapter, protocol, peer string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &stream{
		engine: e, adapter: a, protocol: protocol, peer: peer, id: e.nextID.Add(1),
		subs: map[string]*subscription{}, watch: e.store.Watch(placeholderCollection), connected: time.Now(),
		log: e.log.With("protocol", protocol, "peer", peer), reset: make(chan struct{}),
		metrics: e.metrics.Stream(metrics.RoleSource, protocol),
	}
	defer s.metrics.Close()
	defer s.watch.Close()
	e.streams.Store(s.id, s)
	defer e.streams.Delete(s.id)

	done := make(chan error, 1)
	go func() { done <- s.loop(ctx) }()
	select {
	case err := <-done:
		return err
	case <-s.reset:
		// The loop is blocked in a send to a stuck client. Returning ends the stream, which
		// unblocks the send and lets the loop go.
		s.log.Warn("stream reset: a send took longer than the send timeout", "send_timeout", e.timeout, "node", s.nodeID())
		return status.Errorf(codes.DeadlineExceeded, "send to this client took longer than %s", e.timeout)
	}
}

// placeholderCollection starts a stream's watch with no real collection; subscriptions add
// theirs. (A Watch with no collection would watch everything.)
const placeholderCollection = "\x00mcpbridge/none"

// stream is one client stream's state. Only its loop goroutine mutates it; mu guards what the
// debug view reads.
type stream struct {
	engine    *Engine
	adapter   Adapter
	protocol  string
	peer      string
	id        uint64
	log       *slog.Logger
	watch     *store.Watch
	connected time.Time
	reset     chan struct{}
	metrics   *metrics.Stream // nil without metrics

	mu    sync.Mutex
	node  string
	subs  map[string]*subscription
	order []*subscription // by priority, then key
	nonce uint64
}

type received struct {
	req *Request
	err error
}

func (s *stream) loop(ctx context.Context) error {
	requests := make(chan received)
	go func() {
		for {
			req, err := s.adapter.Recv()
			if err != nil && !cleanEnd(err) {
				// Counted here, not where the loop sees it: a failed receive may also cancel
				// the stream, and the loop may see that first.
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
	}()
	for {
		select {
		case r := <-requests:
			if r.err != nil {
				if cleanEnd(r.err) {
					return nil
				}
				return r.err
			}
			if r.req != nil {
				s.handle(r.req)
			}
		case <-s.watch.C():
		case <-s.engine.stop:
			return errStopping
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.flush(); err != nil {
			return err
		}
	}
}

// cleanEnd tells a client that closed its stream from a failure.
func cleanEnd(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
}

// handle applies one request to the stream's subscriptions.
func (s *stream) handle(req *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Node != "" {
		s.node = req.Node
	}
	sub := s.subs[req.Key]
	defer s.countRequest(req)
	if sub == nil && req.Mode == Incremental && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 {
		s.log.Debug("ignoring an unsubscription from a type never subscribed", "type", req.Key)
		return // a phantom unsubscription, not a (wildcard) subscription
	}
	if req.Nonce != "" && sub != nil {
		// Only the latest response's nonce counts. It may have been acknowledged already: a
		// client then repeats it with a new set of names. (A nonce for a type this stream never
		// answered cannot be stale: nonces belong to a stream, so that is a new subscription.)
		if req.Nonce != sub.sentNonce {
			s.log.Debug("ignoring request with a stale nonce", "type", req.Key, "nonce", req.Nonce)
			return
		}
		if req.Nonce == sub.pendingNonce {
			s.acknowledge(sub, req)
		}
		s.resubscribe(sub, req)
		return
	}
	if sub == nil || req.Restart {
		s.subscribe(req)
		return
	}
	s.resubscribe(sub, req)
}

func (s *stream) acknowledge(sub *subscription, req *Request) {
	rec := &record{Version: sub.sentVer, Nonce: req.Nonce, Time: time.Now()}
	sub.pendingNonce = ""
	if req.ErrorDetail != nil {
		rec.Message = req.ErrorDetail.GetMessage()
		sub.lastNack = rec
		sub.nacked = true
		// The client refused the make half of a make-before-break pair: its break is not sent
		// now (that would resend the refused version); held-back removals go with the next change.
		sub.owesBreak = false
		s.engine.stats.nacks.Add(1)
		s.engine.metrics.NACK(metrics.RoleSource, sub.label, codes.Code(req.ErrorDetail.GetCode()))
		s.log.Warn("client rejected a response (NACK); that version will not be resent",
			"type", req.Key, "version", rec.Version, "node", s.node, "error", rec.Message)
		return
	}
	sub.lastAck = rec
	sub.nacked = false
	s.engine.stats.acks.Add(1)
	sub.metrics.ACK()
}

// countRequest counts a request under its subscription's collection label, resolved when the
// subscription started; a stale request for a type never subscribed pays the lookup.
func (s *stream) countRequest(req *Request) {
	if s.engine.metrics == nil {
		return
	}
	if sub := s.subs[req.Key]; sub != nil {
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

// subscribe starts (or, for Restart, starts over) a subscription.
func (s *stream) subscribe(req *Request) {
	sub := &subscription{
		key: req.Key, collection: req.Collection, mode: req.Mode, form: req.Form,
		priority: req.Priority, removalPriority: req.RemovalPriority, makeBeforeBreak: req.MakeBeforeBreak, fullOnLoss: req.FullOnLoss,
		partialSotW: req.PartialStateOfTheWorld, initial: req.InitialVersions,
		names: map[string]struct{}{},
	}
	if s.engine.metrics != nil {
		sub.label = s.engine.collectionLabel(req)
		sub.metrics = s.engine.metrics.Collection(metrics.RoleSource, sub.label)
	}
	asked := req.Names
	if req.Mode == Incremental {
		asked = req.Subscribe
	}
	sub.wildcard = req.WildcardCapable && (len(asked) == 0 || slices.Contains(asked, Wildcard))
	if !sub.wildcard {
		for _, n := range asked {
			sub.names[n] = struct{}{}
		}
	}
	sub.namesChanged()
	s.scope(sub, req)
	if old := s.subs[req.Key]; old != nil {
		s.order = slices.DeleteFunc(s.order, func(x *subscription) bool { return x == old })
	}
	s.subs[req.Key] = sub
	s.order = append(s.order, sub)
	slices.SortStableFunc(s.order, func(a, b *subscription) int {
		if a.priority != b.priority {
			return a.priority - b.priority
		}
		if a.key < b.key {
			return -1
		}
		return 1
	})
	s.watch.Add(req.Collection)
	if !req.Known {
		s.log.Info("subscription to an unknown type, served as empty", "type", req.Key, "node", s.node)
	}
}

// scope narrows a wildcard subscription to the client's view of the type, from the stream's
// node (known from its first request, whichever type that asked for).
func (s *stream) scope(sub *subscription, req *Request) {
	if req.Scope != nil && sub.wildcard {
		sub.view, sub.include = req.Scope(s.node)
	}
}

// resubscribe applies the names of a follow-up request.
func (s *stream) resubscribe(sub *subscription, req *Request) {
	if sub.wildcard {
		return // once wildcard, names in later requests are ignored
	}
	if req.Mode == StateOfTheWorld {
		if slices.Contains(req.Names, Wildcard) && req.WildcardCapable {
			sub.wildcard, sub.names, sub.fresh = true, nil, nil
			sub.started = false // owes the whole type now
			s.scope(sub, req)
			return
		}
		next := make(map[string]struct{}, len(req.Names))
		added := false
		for _, n := range req.Names {
			next[n] = struct{}{}
			if _, had := sub.names[n]; !had {
				sub.addFresh(n)
				added = true
			}
		}
		if added || len(next) != len(sub.names) {
			// Names dropped need no response: the next one (on a change) simply omits them.
			sub.names = next
			sub.namesChanged()
		}
		return
	}
	for _, n := range req.Unsubscribe {
		delete(sub.names, n) // phantom unsubscriptions are harmless
		delete(sub.fresh, n)
	}
	sub.namesChanged()
	for _, n := range req.Subscribe {
		if n == Wildcard && req.WildcardCapable {
			sub.wildcard, sub.names, sub.fresh = true, nil, nil
			sub.started = false // owes the whole type now
			s.scope(sub, req)
			return
		}
		sub.names[n] = struct{}{}
		sub.addFresh(n) // sent even if the client should already have it
	}
}

func (s *subscription) addFresh(name string) {
	if s.fresh == nil {
		s.fresh = map[string]struct{}{}
	}
	s.fresh[name] = struct{}{}
}

// due is a response computed for a subscription, waiting for its turn.
type due struct {
	sub *subscription
	p   *pending
}

// flush sends every response that is due, from one view of the store, in priority order.
func (s *stream) flush() error {
	v := s.engine.store.View()
	var ready []due
	s.mu.Lock()
	for _, sub := range s.order {
		p, err := sub.next(v, s.protocol)
		if err != nil {
			s.mu.Unlock()
			s.log.Warn("ending stream", "type", sub.key, "error", err)
			return status.Error(codes.Unavailable, err.Error())
		}
		if p != nil {
			ready = append(ready, due{sub, p})
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(ready, func(a, b due) int { return a.priority() - b.priority() })
	for _, d := range ready {
		if err := s.send(d.sub, d.p); err != nil {
			return err
		}
	}
	return nil
}

func (d due) priority() int {
	if d.p.removes && d.sub.removalPriority != 0 {
		return d.sub.removalPriority
	}
	return d.sub.priority
}

func (s *stream) send(sub *subscription, p *pending) error {
	layout := s.adapter.Layout()
	body, resources := s.engine.frames.get(p.share, func() ([]byte, int) {
		p.materialize()
		return layout.Encode(&p.msg, sub.form), len(p.msg.Resources)
	})
	s.mu.Lock()
	s.nonce++
	nonce := strconv.FormatUint(s.nonce, 10)
	// A push is a response that carries a change the client has not been sent: not the first
	// response, nor one that only answers a new subscription.
	push := sub.started && p.rev > sub.sentRev
	sub.sent(p, nonce)
	s.mu.Unlock()
	frame := &wire.Frame{Body: body, Tail: layout.Tail(nonce)}
	if frame.Size() > s.engine.maxSize {
		s.log.Warn("response is larger than the client's likely receive limit",
			"type", sub.key, "version", p.msg.Version, "bytes", frame.Size(), "limit", s.engine.maxSize, "resources", resources)
	}
	timer := time.AfterFunc(s.engine.timeout, func() { close(s.reset) })
	err := s.adapter.Send(frame)
	if !timer.Stop() {
		s.metrics.SendFailed(status.Error(codes.DeadlineExceeded, "send timed out"))
		return errors.New("send timed out")
	}
	if err != nil {
		s.metrics.SendFailed(err)
		return err
	}
	s.engine.stats.responses.Add(1)
	s.engine.stats.resources.Add(uint64(resources))
	sub.metrics.Size(frame.Size())
	if push && !p.changed.IsZero() {
		s.metrics.Pushed(time.Since(p.changed).Seconds())
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // spare the fan-out path the arguments
		s.log.Debug("sent", "type", sub.key, "version", p.msg.Version, "nonce", nonce,
			"resources", resources, "removed", len(p.msg.Removed), "bytes", frame.Size())
	}
	return nil
}

func (s *stream) nodeID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// counters are the engine's totals, for tests, benchmarks and metrics.
type counters struct {
	responses, resources, acks, nacks atomic.Uint64
}

// Stats are the engine's counters.
type Stats struct {
	Responses, Resources, ACKs, NACKs uint64
	// Encodes counts response bodies encoded; FrameHits, those reused from another stream.
	Encodes, FrameHits uint64
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		Responses: e.stats.responses.Load(), Resources: e.stats.resources.Load(),
		ACKs: e.stats.acks.Load(), NACKs: e.stats.nacks.Load(),
		Encodes: e.frames.encodes.Load(), FrameHits: e.frames.hits.Load(),
	}
}

func (s *stream) String() string {
	return fmt.Sprintf("%s stream %d from %s", s.protocol, s.id, s.peer)
}
