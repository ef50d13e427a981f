package source

import (
	"crypto/sha256"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
)

// Mode is the response style of a subscription.
type Mode int

const (
	// StateOfTheWorld responses carry every subscribed resource, every time.
	StateOfTheWorld Mode = iota
	// Incremental responses carry what changed and the names removed.
	Incremental
)

func (m Mode) String() string {
	if m == Incremental {
		return "incremental"
	}
	return "state-of-the-world"
}

// Wildcard is the resource name by which a client asks for every resource of a type.
const Wildcard = "*"

// errFellBehind ends a stream whose incremental wildcard subscriber is older than the
// tombstone retention: without a name-by-name record of what it holds, the bridge cannot tell
// it what was deleted. The client reconnects with initial_resource_versions and gets an exact
// diff.
var errFellBehind = errors.New("subscriber fell behind the store's tombstone retention; reconnect to resynchronise")

// record is an ACK or a NACK as the debug endpoint shows it.
type record struct {
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time"`
}

// subscription is one stream's interest in one type: what it asked for, what it has been sent,
// and the response in flight. Its state is O(1) for wildcard subscribers (the revision sent);
// names are kept only for explicit subscriptions.
type subscription struct {
	key             string
	collection      string
	mode            Mode
	form            wire.Form
	priority        int
	removalPriority int
	makeBeforeBreak bool
	fullOnLoss      bool // the protocol can say "full state" when changes were compacted away

	wildcard    bool
	partialSotW bool
	// view and include narrow a wildcard subscription to the part of the type meant for the
	// client (Request.Scope); include nil means the whole type.
	view    string
	include func(name string) bool
	names   map[string]struct{}
	// Derived from names when first needed after a change (see namesChanged): the sorted
	// list, and a fingerprint under which streams with the same names share responses.
	sorted  []string
	fp      *[sha256.Size]byte
	fresh   map[string]struct{} // newly subscribed names: sent even if unchanged
	initial map[string]string   // initial_resource_versions, until the first response
	started bool

	// owesBreak: the last response kept removed resources for make-before-break; the removal
	// is due once it is acknowledged. owedRemovals are those names, for incremental clients.
	owesBreak    bool
	owedRemovals []string

	sentRev      uint64 // the collection revision the client has been sent
	sentNonce    string // the latest response's nonce: requests with any other are stale
	pendingNonce string // sentNonce while it is unacknowledged
	sentVer      string
	lastAck      *record
	lastNack     *record
	nacked       bool // the latest answer was a NACK: the client does not hold sentRev

	label   string              // the collection as metrics label it
	metrics *metrics.Collection // nil without metrics
}

// pending is one computed response, before encoding.
type pending struct {
	msg wire.Message
	rev uint64
	// changed is when the store made revision rev, for the push-latency metric.
	changed time.Time
	// share is set when every stream at the same revision would get the same bytes: the
	// encoded frame is then cached and shared.
	share *frameKey
	// removes is set when the response takes resources away from the client.
	removes bool
	// fill, when set, reads msg's resources: a full state is read only if the response is
	// encoded here, not when another stream already encoded the same one (see materialize).
	fill func()
}

// materialize reads the resources of a full state whose reading was deferred.
func (p *pending) materialize() {
	if p.fill != nil {
		p.fill()
		p.fill = nil
	}
}

// frameKey identifies a response that is the same for every subscriber of a type with the
// same names (or wildcard) at the same revisions.
type frameKey struct {
	protocol, key string
	form          wire.Form
	mode          Mode
	full          bool
	from, to      uint64
	names         [sha256.Size]byte // fingerprint of explicit names; zero for wildcard
	view          string            // the part of a wildcard type (Request.Scope)
}

// next computes the response due on this subscription, or nil when none is: one is in flight
// (at most one unacknowledged response per type), or nothing the client holds or asked for
// changed.
func (s *subscription) next(v *store.View, protocol string) (*pending, error) {
	if s.pendingNonce != "" {
		return nil, nil
	}
	info := v.Collection(s.collection)
	p, err := s.nextAt(v, info.Revision, protocol)
	if p != nil {
		p.changed = info.Changed
	}
	return p, err
}

func (s *subscription) nextAt(v *store.View, rev uint64, protocol string) (*pending, error) {
	if !s.started {
		return s.first(v, rev, protocol), nil
	}
	if s.owesBreak {
		return s.breakResponse(v, rev, protocol)
	}
	if s.mode == StateOfTheWorld {
		return s.nextStateOfTheWorld(v, rev, protocol), nil
	}
	return s.nextIncremental(v, rev, protocol)
}

// first is the response to a new subscription: always sent, even when empty, so that a client
// waiting for every type it asked for (istiod) becomes ready.
func (s *subscription) first(v *store.View, rev uint64, protocol string) *pending {
	if s.mode == Incremental && s.initial != nil {
		return s.diffAgainstInitial(v, rev)
	}
	p := s.full(v, rev, protocol)
	return p
}

// full is the whole subscribed state.
func (s *subscription) full(v *store.View, rev uint64, protocol string) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10)}}
	p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, full: true, to: rev, view: s.view}
	// Reading a whole collection is O(its size): deferred, so that of many streams sharing the
	// response only the one that encodes it reads it.
	if s.wildcard {
		p.fill = func() {
			_, all := v.Snapshot(s.collection)
			p.msg.Resources = s.visible(all)
		}
		return p
	}
	p.share.names = s.fingerprint()
	p.fill = func() { p.msg.Resources, p.msg.Missing = s.lookup(v) }
	return p
}

// visible keeps the entries of a wildcard subscription's view.
func (s *subscription) visible(es []*store.Entry) []*store.Entry {
	if s.include == nil {
		return es
	}
	out := make([]*store.Entry, 0, len(es))
	for _, e := range es {
		if s.include(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// lookup returns the subscribed names' entries and the names that do not exist, both sorted.
// Many names are found with one ordered scan of the collection; few, one by one.
func (s *subscription) lookup(v *store.View) (found []*store.Entry, missing []string) {
	names := s.sortedNames()
	if len(names)*4 < v.Collection(s.collection).Count {
		for _, name := range names {
			if e := v.Get(s.collection, name); e != nil {
				found = append(found, e)
			} else {
				missing = append(missing, name)
			}
		}
		return found, missing
	}
	_, all := v.Snapshot(s.collection)
	i := 0
	for _, e := range all { // both sorted by name: a merge
		for i < len(names) && names[i] < e.Name {
			missing = append(missing, names[i])
			i++
		}
		if i < len(names) && names[i] == e.Name {
			found = append(found, e)
			i++
		}
	}
	return found, append(missing, names[i:]...)
}

// namesChanged drops what was derived from the explicit names; call it after changing them.
func (s *subscription) namesChanged() { s.sorted, s.fp = nil, nil }

func (s *subscription) sortedNames() []string {
	if s.sorted == nil {
		s.sorted = sortedNames(s.names)
	}
	return s.sorted
}

// fingerprint identifies the set of explicit names: streams asking for the same names share
// encoded responses. A cryptographic hash, so that two different sets never share.
func (s *subscription) fingerprint() [sha256.Size]byte {
	if s.fp == nil {
		h := sha256.New()
		for _, n := range s.sortedNames() {
			h.Write([]byte(n))
			h.Write([]byte{0})
		}
		var fp [sha256.Size]byte
		h.Sum(fp[:0])
		s.fp = &fp
	}
	return *s.fp
}

// diffAgainstInitial answers a reconnecting incremental client with only what differs from
// the versions it says it holds, plus the removals: a one-off name-by-name diff.
func (s *subscription) diffAgainstInitial(v *store.View, rev uint64) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10), Incremental: true}}
	var current []*store.Entry
	if s.wildcard {
		_, all := v.Snapshot(s.collection)
		current = s.visible(all)
	} else {
		for _, name := range s.sortedNames() {
			if e := v.Get(s.collection, name); e != nil {
				current = append(current, e)
			} else if _, held := s.initial[name]; !held {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
	}
	live := make(map[string]struct{}, len(current))
	for _, e := range current {
		live[e.Name] = struct{}{}
		if s.initial[e.Name] != e.Version {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	for name := range s.initial {
		if _, ok := live[name]; !ok {
			p.msg.Removed = append(p.msg.Removed, name)
		}
	}
	slices.Sort(p.msg.Removed)
	return p
}

func (s *subscription) nextStateOfTheWorld(v *store.View, rev uint64, protocol string) *pending {
	if s.partialSotW && !s.wildcard {
		return s.partialStateOfTheWorld(v, rev, protocol)
	}
	if len(s.fresh) > 0 {
		return s.full(v, rev, protocol)
	}
	if rev == s.sentRev {
		return nil
	}
	if s.wildcard {
		// The collection's revision moves only when a served entry changed; with a view, the
		// change must be in it.
		if s.include != nil && !s.viewChanged(v) {
			s.sentRev = rev
			return nil
		}
		p := s.full(v, rev, protocol)
		if s.makeBeforeBreak {
			s.keepRemovedOnce(v, p)
		}
		return p
	}
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if err != nil || s.touches(ch) {
		return s.full(v, rev, protocol)
	}
	s.sentRev = rev // nothing this client asked for changed
	return nil
}

// partialStateOfTheWorld answers explicit names of a type that xDS groups like the incremental
// variants (endpoints, routes): only the subscribed resources that changed, and the newly asked
// ones. Deletions are not sent: in state of the world they follow from the parents that stop
// naming the resource.
func (s *subscription) partialStateOfTheWorld(v *store.View, rev uint64, protocol string) *pending {
	if rev == s.sentRev && len(s.fresh) == 0 {
		return nil
	}
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if err != nil {
		return s.full(v, rev, protocol)
	}
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10)}}
	for _, name := range sortedNames(s.fresh) {
		if e := v.Get(s.collection, name); e != nil {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	for _, e := range ch.Upserts {
		_, asked := s.names[e.Name]
		if _, fresh := s.fresh[e.Name]; asked && !fresh {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	if len(p.msg.Resources) == 0 {
		s.sentRev, s.fresh = rev, nil
		return nil
	}
	if len(s.fresh) == 0 {
		p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, from: s.sentRev, to: rev, names: s.fingerprint()}
	}
	return p
}

// viewChanged tells whether anything in a wildcard subscription's view changed since the
// revision sent.
func (s *subscription) viewChanged(v *store.View) bool {
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if err != nil {
		return true
	}
	return len(s.visible(ch.Upserts))+len(s.visible(ch.Deleted)) > 0
}

func (s *subscription) touches(ch store.Changes) bool {
	for _, list := range [][]*store.Entry{ch.Upserts, ch.Deleted} {
		for _, e := range list {
			if _, ok := s.names[e.Name]; ok {
				return true
			}
		}
	}
	return false
}

func (s *subscription) nextIncremental(v *store.View, rev uint64, protocol string) (*pending, error) {
	if rev == s.sentRev && len(s.fresh) == 0 {
		return nil, nil
	}
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if errors.Is(err, store.ErrCompacted) {
		return s.afterCompaction(v, rev, protocol)
	}
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10), Incremental: true}}
	if s.wildcard {
		p.msg.Resources = s.visible(ch.Upserts)
		p.msg.Removed = names(s.visible(ch.Deleted))
		p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, from: s.sentRev, to: rev, view: s.view}
	} else {
		sent := map[string]bool{}
		for _, name := range sortedNames(s.fresh) {
			sent[name] = true
			if e := v.Get(s.collection, name); e != nil {
				p.msg.Resources = append(p.msg.Resources, e)
			} else {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
		for _, e := range ch.Upserts {
			if _, ok := s.names[e.Name]; ok && !sent[e.Name] {
				p.msg.Resources = append(p.msg.Resources, e)
			}
		}
		for _, e := range ch.Deleted {
			if _, ok := s.names[e.Name]; ok && !sent[e.Name] {
				p.msg.Removed = append(p.msg.Removed, e.Name)
			}
		}
	}
	if len(p.msg.Resources)+len(p.msg.Removed)+len(p.msg.Missing) == 0 {
		s.sentRev = rev
		return nil, nil
	}
	if len(s.owedRemovals) > 0 { // held back, then the additions were NACKed: they go now
		seen := make(map[string]bool, len(p.msg.Removed))
		for _, n := range p.msg.Removed {
			seen[n] = true
		}
		for _, n := range s.stillGone(v) {
			if !seen[n] {
				p.msg.Removed = append(p.msg.Removed, n)
			}
		}
		p.share = nil
	}
	if s.makeBeforeBreak && len(p.msg.Removed) > 0 && len(p.msg.Resources) > 0 {
		// Additions now, removals after the ACK.
		s.owesBreak, s.owedRemovals = true, p.msg.Removed
		p.msg.Removed, p.share = nil, nil
	}
	p.removes = len(p.msg.Removed) > 0
	return p, nil
}

// keepRemovedOnce adds to a state-of-the-world response the resources removed since the last
// one (their last versions, from the tombstones), so that the client keeps them until what
// used them has moved on; the removal follows the ACK.
func (s *subscription) keepRemovedOnce(v *store.View, p *pending) {
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if err != nil || len(ch.Deleted) == 0 {
		return
	}
	deleted := s.visible(ch.Deleted)
	if len(deleted) == 0 {
		return
	}
	p.materialize()
	p.msg.Resources = append(slices.Clip(p.msg.Resources), deleted...)
	p.share = nil
	s.owesBreak = true
}

// breakResponse is the second half of a make-before-break update: the removals.
func (s *subscription) breakResponse(v *store.View, rev uint64, protocol string) (*pending, error) {
	s.owesBreak = false
	var p *pending
	if s.mode == StateOfTheWorld {
		p = s.full(v, rev, protocol)
	} else {
		gone := s.stillGone(v)
		if len(gone) == 0 {
			return nil, nil // every held-back name came back meanwhile: nothing to remove
		}
		p = &pending{rev: s.sentRev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(s.sentRev, 10), Removed: gone, Incremental: true}}
	}
	p.removes = true
	return p, nil
}

// stillGone takes the held-back removals, keeping those that are still deleted: a name that
// came back meanwhile must not be taken from the client.
func (s *subscription) stillGone(v *store.View) []string {
	var gone []string
	for _, name := range s.owedRemovals {
		if v.Get(s.collection, name) == nil {
			gone = append(gone, name)
		}
	}
	s.owedRemovals = nil
	return gone
}

// afterCompaction handles an incremental subscriber older than the tombstone retention.
func (s *subscription) afterCompaction(v *store.View, rev uint64, protocol string) (*pending, error) {
	switch {
	case s.fullOnLoss:
		return s.full(v, rev, protocol), nil // MCP: a full-state (incremental=false) response
	case !s.wildcard:
		// Explicit names: send each as it is now; a name that is gone is sent as missing,
		// which delta xDS clients take as "does not exist".
		p := s.full(v, rev, protocol)
		p.msg.Incremental, p.share = true, nil
		return p, nil
	default:
		return nil, errFellBehind
	}
}

// sent records a response as in flight.
func (s *subscription) sent(p *pending, nonce string) {
	s.started = true
	s.sentRev = p.rev
	s.pendingNonce = nonce
	s.sentNonce = nonce
	s.sentVer = p.msg.Version
	s.fresh = nil
	s.initial = nil
}

func names(es []*store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func sortedNames(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
