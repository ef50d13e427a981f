package source

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// TTLs and heartbeats (xds-protocol.rst, "TTL" and "SotW TTL").
//
// A subscription with a TTL (Type.TTL, set by the adapter for clients that announce TTL
// support) sends every resource with that TTL, and renews it with a heartbeat every TTL/2: a
// response that names each resource the client holds, with the version it holds and the TTL,
// and no body, which the client takes as a renewal, not an update. A resource is heartbeated
// while its producer is connected (the store's owner presence: files, the translation and
// every owner never said absent are; a ResourceSink producer or an upstream whose streams all
// ended is not), so that when a producer goes away its resources run out at the clients TTL
// after the last renewal: fail closed, rather than served until sink.expiry. A derived
// resource (Options.Derived: the translation's Envoy resources) is heartbeated only while no
// disconnected producer holds any of the derivation's inputs.
//
// Heartbeats are due on a grid (multiples of TTL/2 of the wall clock), so that every stream
// renews the same state at the same moment and shares one reading and one encoding of it
// (frameKey); the machine tells its stream when the next is due, and a stream without TTLs
// has no timer at all. A heartbeat is a response like any other: it takes a nonce, and none
// goes while the type has a response in flight (at most one unacknowledged response per
// type); one due meanwhile goes once the client answered. It names only what the client is
// known to hold: resources unchanged since the last response (a newer version is on its way
// with its body), not refused by a NACK (the client holds an older version, which the bridge
// cannot name), and never a name the client was not sent. One that would name nothing is not
// sent (an empty state-of-the-world response would delete everything).
//
// When a producer comes back, the resources of its that clients may have dropped are sent
// again with their bodies (the subscription owes everything anew), not heartbeated.

// beatState is a subscription's heartbeat bookkeeping.
//
// Invariants: at is zero until the first response went, then the next grid point; owed is set
// only while a response is in flight or owed (the heartbeat waits for it); refused names only
// resources the client was sent and refused; parts are the rest of one round, consumed before
// the next round starts.
type beatState struct {
	at   time.Time // the next heartbeat due; zero until the first response went
	owed bool      // one fell due while a response was in flight
	// dead are the owners whose resources the last heartbeat left out (holding copies in
	// the subscription's collection), sorted; withheld counts those resources.
	dead     []string
	withheld int
	// inflight are the resources of the response in flight, or inflightAll when it replaces
	// the client's whole state of the type; a NACK makes them refused (the client keeps older
	// versions the bridge cannot name), an ACK of a later response carrying them clears them.
	inflight    []*store.Entry
	inflightAll bool
	refused     map[string]string // name → the version refused
	refusedAll  bool
	// parts are the rest of a heartbeat larger than the subscription's splitAt, sent one by
	// one as the client answers each (delta: a heartbeat may name any subset).
	parts [][]*store.Entry
}

// sent records a response (not a heartbeat) as in flight.
func (b *beatState) sent(p *pending) {
	b.inflight, b.inflightAll = p.msg.Resources, p.whole
}

// answered applies the client's ACK or NACK of the response in flight.
func (b *beatState) answered(nack bool) {
	switch {
	case nack && b.inflightAll:
		b.refusedAll = true
	case nack:
		for _, e := range b.inflight {
			if b.refused == nil {
				b.refused = map[string]string{}
			}
			b.refused[e.Name] = e.Version
		}
	case b.inflightAll:
		b.refused, b.refusedAll = nil, false
	default:
		for _, e := range b.inflight {
			delete(b.refused, e.Name)
		}
	}
	b.inflight, b.inflightAll = nil, false
}

// nextBeat is the first point of the TTL/2 grid after now.
func nextBeat(now time.Time, ttl time.Duration) time.Time {
	period := max(ttl/2, time.Millisecond)
	return now.Truncate(period).Add(period)
}

// liveness is which owners' resources are heartbeated, as of one view.
type liveness struct {
	// key names the dead owners: two livenesses with the same key give the same answers.
	key  string
	dead map[string][]string // dead owner → the collections it holds copies in
}

func (l *liveness) live(owner string) bool {
	_, dead := l.dead[owner]
	return !dead
}

// deadIn lists the dead owners that hold copies in a collection, sorted.
func (l *liveness) deadIn(collection string) []string {
	parts := []string{collection}
	if base, overlay, ok := store.LayerParts(collection); ok {
		parts = []string{base, overlay} // a layered collection holds copies of either part
	}
	var out []string
	for owner, colls := range l.dead {
		if slices.ContainsFunc(colls, func(c string) bool { return slices.Contains(parts, c) }) {
			out = append(out, owner)
		}
	}
	slices.Sort(out)
	return out
}

// livenessOf reads the owners' liveness from a view: an absent owner is dead, and so is a
// derived owner one of whose input collections an absent owner holds copies in.
func livenessOf(v *store.View, derived map[string][]string) *liveness {
	absent := v.AbsentOwners()
	l := &liveness{}
	if len(absent) == 0 {
		return l
	}
	l.dead = make(map[string][]string, len(absent))
	for _, o := range absent {
		l.dead[o] = v.OwnerCollections(o)
	}
	for owner, inputs := range derived {
		for _, o := range absent {
			if slices.ContainsFunc(l.dead[o], func(c string) bool { return slices.Contains(inputs, c) }) {
				l.dead[owner] = v.OwnerCollections(owner)
				break
			}
		}
	}
	names := make([]string, 0, len(l.dead))
	for o := range l.dead {
		names = append(names, o)
	}
	slices.Sort(names)
	l.key = strings.Join(names, "\x00")
	return l
}

// beatContent is what one heartbeat names: its first part, the parts that follow it when it
// is larger than the split size, and how many resources it left out because their owner is
// dead. It is a function of the heartbeat's frameKey alone, so streams renewing the same state
// share one reading of it (machineConfig.beats).
type beatContent struct {
	first    []*store.Entry
	rest     [][]*store.Entry
	withheld int
}

// heartbeats adds the heartbeats due at now to fx, after the responses. A producer that came
// back makes the subscriptions that left its resources out owe everything anew: those go as
// responses, flushed here.
func (m *machine) heartbeats(v *store.View, now time.Time, fx *effects) {
	if len(m.beating) == 0 {
		return
	}
	var l *liveness
	live := func() *liveness { // read at most once, when something is due
		if l == nil {
			l = livenessOf(v, m.derived)
		}
		return l
	}
	resend := false
	for _, sub := range m.beating {
		var p *pending
		if len(sub.beat.parts) > 0 {
			p = sub.partDue(v, now, live)
		} else {
			var owes bool
			p, owes = m.roundDue(sub, v, now, live, fx)
			if owes {
				m.dirty[sub] = struct{}{}
				resend = true
			}
		}
		if p != nil {
			nonce := m.nextNonce()
			sub.heartbeatSent(nonce)
			fx.sends = append(fx.sends, outgoing{sub: sub, p: p, nonce: nonce})
		}
	}
	if resend {
		// Cannot fail: what owes everything anew is sent whole, never from the revision log.
		if err := m.flush(v, fx); err != nil {
			fx.refuse = &refusal{code: codes.Unavailable, msg: err.Error(), kind: fellBehind}
		}
	}
}

// partDue is the next part of a split heartbeat, when the client answered the last: the rest
// of a round goes before anything else of heartbeats, and a round falling due meanwhile is
// the one being sent.
func (s *subscription) partDue(v *store.View, now time.Time, live func() *liveness) *pending {
	if !now.Before(s.beat.at) {
		s.beat.at = nextBeat(now, s.ttl())
	}
	if s.ex.phase != phaseIdle || len(s.owed.parts) > 0 || s.owed.anew() {
		return nil
	}
	return s.nextBeatPart(v, live())
}

// roundDue is the subscription's heartbeat when its grid point passed (or one fell due while
// a response was in flight, now answered); nil when none is due, it may not go now, or it
// would name nothing. A producer that came back makes the subscription owe everything instead
// (owes).
func (m *machine) roundDue(s *subscription, v *store.View, now time.Time, live func() *liveness, fx *effects) (p *pending, owes bool) {
	b := &s.beat
	switch {
	case b.at.IsZero():
		if s.ex.phase != phaseUnsent {
			b.at = nextBeat(now, s.ttl()) // the first response went: renew from the next grid point
		}
		return nil, false
	case !b.owed && now.Before(b.at):
		return nil, false
	}
	if !now.Before(b.at) {
		b.at = nextBeat(now, s.ttl())
	}
	if s.ex.phase != phaseIdle || len(s.owed.parts) > 0 || s.owed.anew() {
		b.owed = true // after the response in flight, or the one owed
		return nil, false
	}
	b.owed = false
	if b.refusedAll {
		return nil, false // the client refused the whole state: nothing it holds can be named
	}
	l := live()
	dead := l.deadIn(s.Collection)
	revive := revived(b.dead, dead)
	b.dead = dead
	if revive {
		// A producer came back: clients may have dropped its resources when their TTL ran
		// out, so they go again with their bodies.
		s.owesAll()
		s.owed.dead = dead
		return nil, true
	}
	p, c := s.heartbeat(v, m.protocol, l, m.beats)
	if c.withheld != b.withheld {
		fx.expiring = append(fx.expiring, expiring{sub: s, delta: c.withheld - b.withheld}) // resources newly left to expire
		b.withheld = c.withheld
	}
	b.parts = c.rest
	if len(c.first) == 0 {
		return nil, false
	}
	return p, false
}

// revived tells whether an owner of before is not in after (both sorted).
func revived(before, after []string) bool {
	for _, o := range before {
		if _, found := slices.BinarySearch(after, o); !found {
			return true
		}
	}
	return false
}

// nextBeatPart is the next non-empty part of a split heartbeat, read again against the view:
// a resource changed since (its new version went or goes with its body), refused, no longer
// wanted or whose owner left is dropped from it.
func (s *subscription) nextBeatPart(v *store.View, l *liveness) *pending {
	for len(s.beat.parts) > 0 {
		part := s.beat.parts[0]
		s.beat.parts = s.beat.parts[1:]
		if s.beat.refusedAll {
			continue
		}
		p := &pending{rev: s.ex.rev, heartbeat: true, continues: true, msg: wire.Message{Key: s.key, Version: s.ex.version, Heartbeat: true}}
		for _, e := range part {
			if _, no := s.beat.refused[e.Name]; no || !s.wants(e.Name) || !l.live(e.Owner) {
				continue
			}
			if cur := v.Get(s.Collection, e.Name); cur == nil || cur.Version != e.Version || cur.Revision > s.ex.rev {
				continue
			}
			p.msg.Resources = append(p.msg.Resources, e)
		}
		if len(p.msg.Resources) > 0 {
			return p
		}
	}
	return nil
}

// splitBeat divides a heartbeat's resources into parts of at most splitAt bytes: the first,
// and the rest.
func splitBeat(es []*store.Entry, splitAt int) ([]*store.Entry, [][]*store.Entry) {
	if splitAt <= 0 {
		return es, nil
	}
	var parts [][]*store.Entry
	start, size := 0, 0
	for i, e := range es {
		n := len(e.Name) + len(e.Version) + wire.TTLSize + 3*5
		if size > 0 && size+n > splitAt {
			parts = append(parts, es[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start == 0 {
		return es, nil
	}
	parts = append(parts, es[start:])
	return parts[0], parts[1:]
}

// heartbeatSent records a heartbeat as in flight.
func (s *subscription) heartbeatSent(nonce string) {
	s.ex.phase = phaseAwaiting
	s.ex.pending, s.ex.nonce = nonce, nonce
	s.beat.inflight, s.beat.inflightAll = nil, false
}

// nextHeartbeat is when the stream's next heartbeat is due; zero when none is scheduled.
// A heartbeat owed after a response in flight is sent when the client answers, not by time.
func (m *machine) nextHeartbeat() time.Time {
	var next time.Time
	for _, sub := range m.beating {
		if at := sub.beat.at; !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// heartbeat is the renewal of what the client holds: each resource it was sent and still
// holds in the version it was sent, whose owner is live. Streams renewing the same state
// (the same frameKey) share one reading of it through memo.
func (s *subscription) heartbeat(v *store.View, protocol string, l *liveness, memo *memo[beatContent]) (*pending, beatContent) {
	sentRev, refused := s.ex.rev, s.beat.refused
	p := &pending{rev: sentRev, heartbeat: true, msg: wire.Message{Key: s.key, Version: s.ex.version, Heartbeat: true}}
	read := func() beatContent {
		found, _ := s.current(v)
		var c beatContent
		kept := make([]*store.Entry, 0, len(found))
		for _, e := range found {
			if _, no := refused[e.Name]; no || e.Revision > sentRev {
				continue // the client holds another version, or its new one is on its way
			}
			if !l.live(e.Owner) {
				c.withheld++
				continue
			}
			kept = append(kept, e)
		}
		c.first, c.rest = splitBeat(kept, s.splitAt)
		return c
	}
	var c beatContent
	if len(refused) == 0 {
		p.share = s.withTTL(&frameKey{
			protocol: protocol, key: s.key, collection: shareCollection(v, s.Collection), form: s.Form, mode: s.Mode, from: sentRev, to: v.Collection(s.Collection).Revision,
			view: s.want.view, access: s.accessID(), wildcard: s.want.wildcard, heartbeat: true, dead: l.key, beatVersion: s.ex.version,
		})
		if s.want.count() > 0 {
			p.share.names = s.want.fingerprint()
		}
		c = memo.get(p.share, read)
	} else {
		c = read()
	}
	p.msg.Resources = c.first
	return p, c
}

// withTTL is a response's sharing key for this subscription: responses with a TTL or in the
// wrapper are encoded apart from those without.
func (s *subscription) withTTL(k *frameKey) *frameKey {
	if k == nil || s.ttl() <= 0 {
		return k
	}
	c := *k
	c.ttl, c.wrap = s.ttl(), s.wrap()
	return &c
}
