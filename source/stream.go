package source

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
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/mcpbridge/mcpbridge/internal/authz"
	"github.com/mcpbridge/mcpbridge/internal/limits"
	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// stream is one client stream: its machine (the protocol state) and the goroutines that move
// bytes. The loop waits for an event, hands it to the machine, and carries out the effects the
// machine returns; it decides nothing of the protocol. Only the loop changes the machine; mu
// guards it against the debug and status views.
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
	sent     chan error
	metrics  *metrics.Stream // nil without metrics
	identity string          // the peer's, with authz rules
	// beatTimer fires when the next TTL heartbeat is due; nil until the machine schedules
	// one. beatC is its channel, nil while none.
	beatTimer *time.Timer
	beatC     <-chan time.Time
	// pc paces the store changes the stream takes and holds the view responses are computed
	// from (pace.go).
	pc *pacing
	// prefetching counts the goroutines encoding a next part ahead of its send
	// (prefetchNextPart); the stream waits for them as it ends.
	prefetching sync.WaitGroup

	mu sync.Mutex
	m  *machine
}

// open registers a new stream.
//
//go:noinline
func (e *Engine) open(a Adapter, protocol, peer string, grant *authz.Grant) *stream {
	s := &stream{
		engine: e, adapter: a, protocol: protocol, peer: peer, id: e.nextID.Add(1),
		m: e.machineFor(protocol, a.Type, grant), watch: e.store.Watch(placeholderCollection), connected: time.Now(),
		sent: make(chan error, 1), metrics: e.metrics.Stream(metrics.RoleSource, protocol),
	}
	s.pc = &pacing{pacer: pacer{interval: e.pushInterval}, view: e.store.View()}
	s.log = e.log.With("protocol", protocol, "peer", peer)
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
	s.pc.stop()
	s.prefetching.Wait()
	s.dropAhead()
	s.engine.streams.Delete(s.id)
	s.watch.Close()
	s.metrics.Close()
}

// dropAhead gives up the parts the stream's subscriptions had encoded ahead and will not send,
// so that their bytes can be recycled once the frame memo evicts them.
func (s *stream) dropAhead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range s.m.subs {
		if sub.ahead != nil {
			s.engine.frames.drop(sub.ahead.el)
			sub.ahead = nil
		}
	}
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

type received struct {
	req *Request
	err error
}

func (s *stream) loop(ctx context.Context) error {
	requests := make(chan received)
	go s.receive(ctx, requests)
	for {
		ev, r := s.wait(ctx, requests)
		if err := s.step(ctx, ev, r); err != nil {
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

// wakeup is what woke a stream's loop.
type wakeup uint8

const (
	wokeRequest wakeup = iota
	wokeChange         // the store changed collections the stream watches
	wokePaced          // held changes fell due
	wokeStop           // the engine stops
	wokeDone           // the stream's context ended
	wokeBeat           // TTL heartbeats fell due
)

// wait is where an idle stream waits: a leaf with a small frame (see Serve).
//
//go:noinline
func (s *stream) wait(ctx context.Context, requests <-chan received) (wakeup, received) {
	select {
	case r := <-requests:
		return wokeRequest, r
	case <-s.watch.C():
		return wokeChange, received{}
	case <-s.pc.C:
		return wokePaced, received{}
	case <-s.beatC:
		return wokeBeat, received{}
	case <-s.engine.stop:
		return wokeStop, received{}
	case <-ctx.Done():
		return wokeDone, received{}
	}
}

// step turns what woke the loop into the machine's event, and carries out its effects.
//
//go:noinline
func (s *stream) step(ctx context.Context, w wakeup, r received) error {
	var ev event
	now := time.Now()
	switch w {
	case wokeRequest:
		if r.err != nil {
			if cleanEnd(r.err) {
				return errClientEnded
			}
			return r.err
		}
		ev.req = r.req
	case wokeChange:
		ev.changed = s.pc.take(s, now, s.watch.Changed())
	case wokePaced:
		s.pc.C = nil
		s.watch.Unmute()
		ev.changed = s.pc.take(s, now, s.watch.Changed())
	case wokeStop:
		return errStopping
	case wokeDone:
		return ctx.Err()
	}
	select {
	case <-s.engine.stop: // a timer may fire as the engine stops: send nothing more
		return errStopping
	default:
	}
	return s.run(ev, now)
}

// run hands one event to the machine and carries out its effects; when the machine asks for a
// collection to be watched, the stream watches it and tells the machine, with a view read
// after the watch began.
func (s *stream) run(ev event, now time.Time) error {
	ev.view, ev.now = s.view(), now
	s.mu.Lock()
	fx := s.m.handle(ev)
	s.mu.Unlock()
	if err := s.carry(ev.req, fx); err != nil {
		return err
	}
	if fx.watch == "" {
		return nil
	}
	s.watch.Add(fx.watch)
	s.pc.view = s.engine.store.View()
	return s.run(event{watched: fx.watch}, now)
}

// view is the store the stream's responses are computed from: the view as of the last take of
// changes when pushes are paced (so that nothing held back slips out early), else the newest.
func (s *stream) view() *store.View {
	if s.engine.pushInterval <= 0 {
		return s.engine.store.View()
	}
	return s.pc.view
}

// cleanEnd tells a client that closed its stream from a failure.
func cleanEnd(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
}

// carry carries out the machine's effects of one event (req is its request, if any): logs
// and counts what the request did, sends the responses in order, ends the stream on a
// refusal, and arms the heartbeat timer.
func (s *stream) carry(req *Request, fx effects) error {
	if req != nil {
		s.noteRequest(req, fx)
	}
	for _, x := range fx.expiring {
		x.sub.metrics.Expiring(x.delta)
	}
	for _, o := range fx.sends {
		if err := s.send(o); err != nil {
			return err
		}
	}
	if fx.refuse != nil {
		return s.refuse(req, fx.refuse)
	}
	s.armBeat(fx.beatAt)
	return nil
}

// refuse is the error that ends a stream the machine refused, counted and logged.
func (s *stream) refuse(req *Request, r *refusal) error {
	switch r.kind {
	case overLimit:
		return s.engine.refusals.Refuse(s.log, limits.SubscriptionsPerStream, r.msg, "node", s.nodeID(), "type", req.Key)
	case refusedNode:
		s.engine.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedNodeIdentity)
		s.engine.authzLog.Log(s.log, slog.LevelWarn, "consumer refused", "error", r.msg)
	default:
		s.log.Warn("ending stream", "error", r.msg)
	}
	return status.Error(r.code, r.msg)
}

// noteRequest logs and counts what a request did.
func (s *stream) noteRequest(req *Request, fx effects) {
	sub := fx.sub
	if fx.outcome == subscribed && s.engine.metrics != nil {
		sub.label = s.engine.collectionLabel(sub.Type)
		sub.metrics = s.engine.metrics.Collection(metrics.RoleSource, sub.label)
	}
	s.countRequest(req, sub)
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		// With "sent", the two sides of each exchange: at scale, where a response waits on the
		// client (the parts of a large response go one after another).
		s.log.Debug("received", "type", req.Key, "nonce", req.Nonce, "subscribe", len(req.Subscribe),
			"unsubscribe", len(req.Unsubscribe), "outcome", fx.outcome)
	}
	node := s.nodeID()
	switch fx.outcome {
	case ignoredPhantom:
		s.log.Debug("ignoring an unsubscription from a type never subscribed", "type", req.Key)
	case ignoredStale:
		s.log.Debug("ignoring request with a stale nonce", "type", req.Key, "nonce", req.Nonce)
	case subscribed:
		if !sub.Known {
			s.engine.unknownTypes.Log(s.log, slog.LevelInfo, "subscription to an unknown type, served as empty", "type", req.Key, "node", node)
		}
		if sub.vis != nil && sub.vis.denial != nil {
			s.engine.metrics.AuthzRefused(metrics.RoleSource, metrics.RefusedCollection)
			s.engine.authzLog.Log(s.log, slog.LevelWarn, "subscription refused; the type is served as empty",
				"type", req.Key, "node", node, "error", sub.vis.denial.Message)
		}
	case acked:
		s.engine.stats.acks.Add(1)
		sub.metrics.ACK()
	case nacked:
		s.engine.stats.nacks.Add(1)
		s.engine.metrics.NACK(metrics.RoleSource, sub.label, codes.Code(req.ErrorDetail.GetCode()))
		s.log.Warn("client rejected a response (NACK); that version will not be resent",
			"type", req.Key, "version", sub.ex.lastNack.Version, "node", node, "error", sub.ex.lastNack.Message)
	}
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
	s.engine.metrics.Collection(metrics.RoleSource, s.engine.collectionLabel(s.adapter.Type(req, nil))).Request()
}

// send encodes (or reuses the encoding another stream made of) one response and transmits it.
func (s *stream) send(o outgoing) error {
	layout := s.adapter.Layout()
	sub, p := o.sub, o.p
	key, made := sub.withTTL(p.share), sub.ahead
	sub.ahead = nil
	encode := func() frame {
		p.materialize()
		return encodeFrame(layout, &sub.policy, p.msg)
	}
	f, ok := s.engine.frames.take(made, key, encode)
	if !ok {
		f = s.engine.frames.get(key, encode)
	}
	out := &wire.Frame{Body: f.body, Buf: f.buf, Tail: layout.Tail(o.nonce)}
	if out.Size() > s.engine.maxSize {
		if p.heartbeat { // state of the world: not split (delta is, at splitAt); every TTL/2 on every stream
			s.engine.bigBeats.Log(s.log, slog.LevelWarn, "heartbeat is larger than the client's likely receive limit",
				"type", sub.key, "bytes", out.Size(), "limit", s.engine.maxSize, "resources", f.resources)
		} else {
			s.log.Warn("response is larger than the client's likely receive limit",
				"type", sub.key, "version", p.msg.Version, "bytes", out.Size(), "limit", s.engine.maxSize, "resources", f.resources)
		}
	}
	if err := s.transmit(out); err != nil {
		return err // counted by transmit
	}
	sub.metrics.Size(out.Size())
	s.prefetchNextPart(sub, p, layout)
	if p.heartbeat {
		s.engine.stats.heartbeats.Add(1)
		sub.metrics.Heartbeat()
		return nil
	}
	s.engine.stats.responses.Add(1)
	s.engine.stats.resources.Add(uint64(f.resources))
	if o.push && !p.changed.IsZero() {
		s.metrics.Pushed(time.Since(p.changed).Seconds())
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // spare the fan-out path the arguments
		s.log.Debug("sent", "type", sub.key, "version", p.msg.Version, "nonce", o.nonce,
			"resources", f.resources, "removed", len(p.msg.Removed), "bytes", out.Size())
	}
	return nil
}

// encodeFrame encodes a response as a subscription of this policy is sent it. A large body
// goes into pooled bytes, with one reference, its holder's (frame).
func encodeFrame(layout *wire.Layout, pol *policy, msg wire.Message) frame {
	msg.TTL, msg.Wrap, msg.AliasMissing = pol.ttl(), pol.wrap(), pol.Namespaced
	f := frame{resources: len(msg.Resources)}
	hint := layout.SizeHint(&msg, pol.Form)
	if hint < minPooledFrame || grpc.EnableTracing { // gRPC's traces keep the message past the write
		f.body = layout.AppendEncoded(make([]byte, 0, hint), &msg, pol.Form)
		return f
	}
	b := frameBuffers.Get(max(hint, smallestPooled))
	*b = layout.AppendEncoded((*b)[:0], &msg, pol.Form) // outgrown: not taken back (Put)
	f.body, f.buf = *b, mem.NewBuffer(b, &frameBuffers)
	return f
}

// prefetchNextPart has the next part of a split response encoded while the client reads the
// one just sent. Unless something it carries changes, or the client stops asking for some of
// it, before the client answers, that part is what nextPart computes then, under the key
// predicted here (read at the revision the parts were cut, which nextPart sets when nothing
// changed since); its send then takes it, made or being made. Otherwise the part nextPart
// computes has another key, or none, and is encoded when sent. At a million resources the
// encoding is most of the bridge's time between two parts (cache misses reading each
// entry's bytes), and the client's round trip now hides it. The frame goes into the memo, so
// that streams sending the same parts share it, and the subscription holds it until its next
// send, so that the memo's bounds do not drop it first.
func (s *stream) prefetchNextPart(sub *subscription, p *pending, layout *wire.Layout) {
	if len(p.rest) == 0 || p.rest[0].share == nil || p.heartbeat {
		return
	}
	next, whole := p.rest[0], p.rest[len(p.rest)-1].rev
	if s.view().Collection(sub.Collection).Revision != whole {
		return // changed since the split: nextPart's key will not be this one
	}
	key := readAt(next.share, whole)
	// What the goroutine reads is fixed here: the part's message (parts are never changed
	// once cut) and the subscription's policy as of now.
	msg, pol := next.msg, sub.policy
	sub.ahead = s.engine.frames.prefetch(*sub.withTTL(key), func() frame {
		return encodeFrame(layout, &pol, msg)
	}, &s.prefetching)
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

// armBeat sets the stream's timer for the next heartbeat (none when at is zero). Streams
// without TTLs never have a timer.
func (s *stream) armBeat(at time.Time) {
	if at.IsZero() {
		if s.beatTimer != nil {
			s.beatTimer.Stop()
		}
		return
	}
	d := max(time.Until(at), 0)
	if s.beatTimer == nil {
		s.beatTimer = time.NewTimer(d)
		s.beatC = s.beatTimer.C
		return
	}
	s.beatTimer.Reset(d)
}

func (s *stream) nodeID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.nodeID()
}

func (s *stream) String() string {
	return fmt.Sprintf("%s stream %d from %s", s.protocol, s.id, s.peer)
}
