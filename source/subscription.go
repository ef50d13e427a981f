package source

import (
	"crypto/sha256"
	"errors"
	"fmt"
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

// phase is where a subscription stands in its exchange with the client.
type phase uint8

const (
	// phaseUnsent: subscribed, nothing sent yet; the first response is owed even when empty.
	phaseUnsent phase = iota
	// phaseIdle: the last response was answered (ACK or NACK); the next goes when something
	// the client asked for changes.
	phaseIdle
	// phaseAwaiting: a response is in flight; nothing more is sent until the client answers it.
	phaseAwaiting
)

func (p phase) String() string {
	return [...]string{"unsent", "idle", "awaiting"}[p]
}

// policy is how a type is served on a stream: fixed by the protocol and the type's owner when
// the subscription starts, never by the client's requests.
type policy struct {
	key             string
	collection      string
	mode            Mode
	form            wire.Form
	priority        int
	wildcardCapable bool
	fullOnLoss      bool // the protocol can say "full state" when changes were compacted away
	partialSotW     bool
	// after: types on the stream that must be caught up to a revision before this type's
	// response of that revision goes (their additions first). removeAfter: types that must be
	// caught up to the revision of a deletion before it is sent (their references gone first).
	after, removeAfter []string
	scope              func(node Node) (view string, include func(name string) bool)
	// vis is what of the type the client may see (nil: everything).
	vis *visibility
	// splitAt: an incremental response whose resources take more bytes than this is split
	// (see split); 0 never.
	splitAt int
}

// subscription is one stream's interest in one type: what it asked for, what it has been sent,
// and the response in flight. It is pure state: no I/O, no locks, no clock. Its state is O(1)
// for wildcard subscribers (the revision sent) plus the removals it is holding back; names are
// kept only for explicit subscriptions.
type subscription struct {
	policy
	phase phase
	seq   int // order of subscription, to order responses of equal priority

	// wildcard: every resource of the type (in the client's view) is wanted. legacyWildcard
	// entered it by asking for nothing and, as xds-protocol.rst says, never leaves it; an
	// explicit "*" can be taken back.
	wildcard, legacyWildcard bool
	// view and include narrow a wildcard subscription to the part of the type meant for the
	// client (Request.Scope); include nil means the whole type.
	view    string
	include func(name string) bool
	// names are the explicitly subscribed names, also alongside an explicit wildcard.
	names map[string]struct{}
	// Derived from names when first needed after a change (see namesChanged): the sorted
	// list (with the names added since it was sorted), and a fingerprint under which
	// streams with the same names share responses.
	sorted []string
	added  []string
	fp     *[sha256.Size]byte
	// fresh names were newly asked: sent even if unchanged; freshAll: every wanted resource
	// is owed again (wildcard newly entered).
	fresh    map[string]struct{}
	freshAll bool
	initial  map[string]string // initial_resource_versions, until the first response

	// held are deletions the client has not been told of yet (tombstones, with the revision of
	// the deletion), kept back until the types in removeAfter are caught up to it.
	held []*store.Entry
	// refusable are the deletions of the response in flight, and refusableMissing the names
	// it told do not exist, when it also carries resources: if the client refuses it, it
	// refused the resources, and the rest is owed again.
	refusable        []*store.Entry
	refusableMissing []string
	// parts are the rest of a response that was split, sent one by one as the client answers
	// each; the last carries the removals and moves sentRev.
	parts []*pending

	sentRev      uint64 // the collection revision whose additions the client has been sent
	sentNonce    string // the latest response's nonce: requests with any other are stale
	pendingNonce string // sentNonce while it is unacknowledged
	sentVer      string
	lastAck      *record
	lastNack     *record
	nacked       bool // the latest answer was a NACK: the client does not hold sentRev
	// ackedRev is the revision through which the client holds every addition it asked for:
	// the sentRev of its latest ACK, moved on while nothing it asked for changes. rejected
	// are the revision ranges of responses it refused and was not sent again (status.go):
	// what the status view (CSDS) reads; never read on the serving path.
	ackedRev uint64
	rejected []rejection
	// freshSent and freshAllSent are fresh and freshAll as the response in flight (all its
	// parts) consumed them: names the client did not hold by revision, until it ACKs.
	// freshSent is the old fresh map, never changed after.
	freshSent    map[string]struct{}
	freshAllSent bool

	label   string              // the collection as metrics label it
	metrics *metrics.Collection // nil without metrics
}

// pending is one computed response, before encoding, with the state it moves the
// subscription to once sent.
type pending struct {
	msg wire.Message
	rev uint64
	// changed is when the store made revision rev, for the push-latency metric.
	changed time.Time
	// share is set when every stream at the same revision would get the same bytes: the
	// encoded frame is then cached and shared.
	share *frameKey
	// fill, when set, reads msg's resources: a full state is read only if the response is
	// encoded here, not when another stream already encoded the same one (see materialize).
	fill func()
	// held is the subscription's held-back deletions after this response.
	held []*store.Entry
	// removed are the tombstones of the deletions an incremental response sends.
	removed []*store.Entry
	// A response split into parts (see split): rest are the parts after this one; continues
	// marks a part after the first (it consumes nothing the client asked anew); notPush marks
	// the last part of a first response (not a change pushed).
	rest      []*pending
	continues bool
	notPush   bool
}

// materialize reads the resources of a full state whose reading was deferred.
func (p *pending) materialize() {
	if p.fill != nil {
		p.fill()
		p.fill = nil
	}
}

func (p *pending) empty() bool {
	return len(p.msg.Resources)+len(p.msg.Removed)+len(p.msg.Missing) == 0 && p.fill == nil
}

// frameKey identifies a response that is the same for every subscriber of a type with the
// same names (or wildcard) at the same revisions.
type frameKey struct {
	protocol, key string
	form          wire.Form
	mode          Mode
	full          bool
	from, to      uint64
	names         [sha256.Size]byte // fingerprint of explicit names; zero for wildcard only
	view          string            // the part of a wildcard type (Request.Scope)
	access        string            // the client's view of the type (visibility.id)
	wildcard      bool
	part          int    // of a split response, 1-based; 0 when whole
	partAt        uint64 // the collection revision a later part was read at (see nextPart)
}

// gates are what the rest of the stream allows this subscription to send now.
type gates struct {
	// removableThrough: deletions made at or before this revision may be sent.
	removableThrough uint64
}

// wants tells whether the client asked for a resource of this name.
func (s *subscription) wants(name string) bool {
	if !s.vis.sees(name) {
		return false
	}
	if _, ok := s.names[name]; ok {
		return true
	}
	return s.wildcard && (s.include == nil || s.include(name))
}

// wanted returns the entries the client asked for, in order; es is sorted by name (a
// snapshot, or what changed since a revision).
func (s *subscription) wanted(es []*store.Entry) []*store.Entry {
	if s.wildcard && s.include == nil && s.vis == nil && len(s.names) == 0 {
		return es
	}
	if !s.wildcard && len(es) >= len(s.names)/16 {
		return s.wantedByMerge(es)
	}
	out := make([]*store.Entry, 0, len(es))
	for _, e := range es {
		if s.wants(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// wantedByMerge is wanted for explicit names, when the entries are not few next to the names:
// one walk of both sorted lists. Envoy subscribes to every endpoint assignment by name, so a
// change of 1,000 of them was 1,000 lookups of long names in a map on each of 200 streams:
// the largest part of the fan-out's own CPU.
func (s *subscription) wantedByMerge(es []*store.Entry) []*store.Entry {
	names := s.sortedNames()
	out := make([]*store.Entry, 0, min(len(es), len(names)))
	i := 0
	for _, e := range es {
		for i < len(names) && names[i] < e.Name {
			i++
		}
		if i == len(names) {
			break
		}
		if names[i] == e.Name && s.vis.sees(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// next computes the response due on this subscription at revision rev of its collection in
// view v, or nil when none is. advance is set when nothing is to be sent but the subscription
// has caught up with rev anyway (nothing it asked for changed); p, if set, then carries its
// held-back deletions. It does not change the subscription: the machine commits what it sends
// (sent) or catches up (caughtUp).
func (s *subscription) next(v *store.View, rev uint64, protocol string, g gates) (p *pending, advance bool, err error) {
	if s.phase == phaseAwaiting {
		return nil, false, nil
	}
	if len(s.parts) > 0 {
		return s.nextPart(v), false, nil // the rest of a split response
	}
	if s.phase == phaseUnsent {
		return s.split(s.first(v, rev, protocol)), false, nil
	}
	if rev == s.sentRev && len(s.fresh) == 0 && !s.freshAll && !s.holdsRemovable(g) {
		return nil, false, nil
	}
	ch, err := v.ChangesSince(s.collection, s.sentRev)
	if errors.Is(err, store.ErrCompacted) {
		return s.afterCompaction(v, rev, protocol)
	}
	switch {
	case s.mode == Incremental:
		p = s.nextIncremental(v, ch, rev, protocol, g)
	case s.partialSotW && !s.wildcard:
		p = s.nextPartial(v, ch, rev, protocol)
	default:
		p = s.nextStateOfTheWorld(v, ch, rev, protocol, g)
	}
	if p.empty() {
		// Nothing to tell the client; the held-back deletions p carries may still have
		// changed (a name came back, or a new deletion is held).
		return p, true, nil
	}
	return s.split(p), false, nil
}

// split divides an incremental response whose resources take more than splitAt bytes into
// parts of at most splitAt (a resource larger than that goes alone), in name order, so that a
// client with a receive limit (gRPC's default is 4 MiB) can take a large state. The parts go
// one after another, each once the client answered the one before (still one unacknowledged
// response per type). The first carries the removals and the names that do not exist, when
// they would have gone in the whole response, so that what the client is told to drop is
// told as soon as it would have been; only the last moves the subscription to the response's
// revision, so that types ordered after this one wait for the whole of it. Parts are computed
// once, from one view: a later change goes in the next response, as with any response in
// flight. Streams that would share the whole response share each part.
func (s *subscription) split(p *pending) *pending {
	if s.splitAt <= 0 || s.mode != Incremental || p == nil {
		return p
	}
	p.materialize()
	size := 0 // of the part being filled; the first also holds the names
	for _, name := range p.msg.Removed {
		size += len(name) + 8
	}
	for _, name := range p.msg.Missing {
		size += len(name) + 8
	}
	var chunks [][]*store.Entry
	var cur []*store.Entry
	for _, e := range p.msg.Resources {
		n := resourceSize(e)
		if size > 0 && size+n > s.splitAt {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, e)
		size += n
	}
	if len(chunks) == 0 {
		return p // fits in one
	}
	chunks = append(chunks, cur)
	parts := make([]*pending, len(chunks))
	for i, chunk := range chunks {
		part := &pending{
			rev: s.sentRev, held: p.held, continues: i > 0, share: partOf(p.share, i+1),
			msg: wire.Message{Key: p.msg.Key, Version: fmt.Sprintf("%s-part%d", p.msg.Version, i+1), Incremental: true, Resources: chunk},
		}
		if i == 0 {
			part.msg.Removed, part.msg.Missing, part.removed = p.msg.Removed, p.msg.Missing, p.removed
		}
		parts[i] = part
	}
	last := parts[len(parts)-1]
	last.rev, last.msg.Version, last.notPush = p.rev, p.msg.Version, s.phase == phaseUnsent
	for i := range parts {
		parts[i].rest = parts[i+1:]
	}
	return parts[0]
}

// nextPart is the next part of a split response, its resources as the view holds them now:
// one deleted since the split is left out (its removal follows in the next response), one
// changed goes in its newest version, and nothing the client no longer asks for is sent. So a
// part is never older than what the client was told meanwhile, and it goes, like any
// response, only once the types it comes after are caught up with the view. Parts left empty
// are skipped; the last goes even if empty, since it completes the response.
func (s *subscription) nextPart(v *store.View) *pending {
	at := v.Collection(s.collection).Revision
	for i, part := range s.parts {
		p := *part
		p.msg.Resources = nil
		for _, e := range part.msg.Resources {
			if cur := s.get(v, e.Name); cur != nil && s.wants(e.Name) {
				p.msg.Resources = append(p.msg.Resources, cur)
			}
		}
		if p.share != nil {
			key := *p.share
			key.partAt = at
			p.share = &key
		}
		if len(p.msg.Resources) > 0 || i == len(s.parts)-1 {
			p.rest = s.parts[i+1:]
			return &p
		}
	}
	return nil // not reached: the last part is always returned
}

// resourceSize bounds what one resource takes in a delta response: the wrapping Resource's
// name and version, and its body, which is at most the stored encoding in an Any: an Envoy
// resource's own Any is inside the encoding; an MCP resource's Any adds the Resource's type
// URL. Tags and lengths take at most 5 bytes each (messages are under 4 GiB), 8 of them.
func resourceSize(e *store.Entry) int {
	return len(e.Name) + len(e.Version) + len(wire.MCPResourceTypeURL) + len(e.Bytes) + 8*5
}

func partOf(k *frameKey, part int) *frameKey {
	if k == nil {
		return nil
	}
	c := *k
	c.part = part
	return &c
}

// heldChanged tells whether a response changes the held-back deletions.
func (s *subscription) heldChanged(p *pending) bool {
	return p != nil && !slices.Equal(s.held, p.held)
}

// holdsRemovable tells whether a held-back deletion may now be sent.
func (s *subscription) holdsRemovable(g gates) bool {
	for _, e := range s.held {
		if e.Revision <= g.removableThrough {
			return true
		}
	}
	return false
}

// first is the response to a new subscription: always sent, even when empty, so that a client
// waiting for every type it asked for (istiod) becomes ready.
func (s *subscription) first(v *store.View, rev uint64, protocol string) *pending {
	if s.mode == Incremental && s.initial != nil {
		return s.diffAgainstInitial(v, rev)
	}
	return s.full(v, rev, protocol)
}

// full is the whole subscribed state.
func (s *subscription) full(v *store.View, rev uint64, protocol string) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10)}}
	p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, full: true, to: rev, view: s.view, access: s.accessID(), wildcard: s.wildcard}
	if len(s.names) > 0 {
		p.share.names = s.fingerprint()
	}
	// Reading a whole collection is O(its size): deferred, so that of many streams sharing the
	// response only the one that encodes it reads it.
	p.fill = func() { p.msg.Resources, p.msg.Missing = s.current(v) }
	return p
}

// current returns what the client asked for as the view holds it, and the names it asked for
// that do not exist, both sorted.
func (s *subscription) current(v *store.View) (found []*store.Entry, missing []string) {
	if !s.wildcard {
		return s.lookup(v)
	}
	_, all := v.Snapshot(s.collection)
	found = s.wanted(all)
	for _, name := range s.sortedNames() {
		if s.get(v, name) == nil {
			missing = append(missing, name)
		}
	}
	return found, missing
}

// get returns the entry of a name as the client may see it: nil when there is none, or when
// it is outside the client's view.
func (s *subscription) get(v *store.View, name string) *store.Entry {
	if !s.vis.sees(name) {
		return nil
	}
	return v.Get(s.collection, name)
}

func (s *subscription) accessID() string {
	if s.vis == nil {
		return ""
	}
	return s.vis.id
}

// lookup returns the subscribed names' entries and the names that do not exist, both sorted.
// Many names are found with one ordered scan of the collection; few, one by one.
func (s *subscription) lookup(v *store.View) (found []*store.Entry, missing []string) {
	names := s.sortedNames()
	if len(names)*4 < v.Collection(s.collection).Count {
		for _, name := range names {
			if e := s.get(v, name); e != nil {
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
			if s.vis.sees(e.Name) {
				found = append(found, e)
			} else {
				missing = append(missing, e.Name) // outside the client's view: as if absent
			}
			i++
		}
	}
	return found, append(missing, names[i:]...)
}

// namesChanged drops what was derived from the explicit names; call it after changing them.
func (s *subscription) namesChanged() { s.sorted, s.added, s.fp = nil, nil, nil }

// nameAdded records a name added to the explicit names: the sorted list takes it in with the
// next read, merged in rather than sorted again (Envoy subscribes to endpoints in batches as
// clusters arrive: re-sorting 100,000 names per batch was most of a batch's cost).
func (s *subscription) nameAdded(n string) {
	s.fp = nil
	if s.sorted != nil {
		s.added = append(s.added, n)
	}
}

func (s *subscription) sortedNames() []string {
	switch {
	case s.sorted == nil:
		s.sorted = sortedNames(s.names)
	case len(s.added) > 0:
		slices.Sort(s.added)
		merged := make([]string, 0, len(s.sorted)+len(s.added))
		i, j := 0, 0
		for i < len(s.sorted) && j < len(s.added) {
			if s.sorted[i] < s.added[j] {
				merged = append(merged, s.sorted[i])
				i++
			} else {
				merged = append(merged, s.added[j])
				j++
			}
		}
		merged = append(append(merged, s.sorted[i:]...), s.added[j:]...)
		s.sorted = merged
	}
	s.added = nil
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
	current, missing := s.current(v)
	live := make(map[string]struct{}, len(current))
	for _, e := range current {
		live[e.Name] = struct{}{}
		if s.initial[e.Name] != e.Version {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	for _, name := range missing {
		if _, held := s.initial[name]; !held {
			p.msg.Missing = append(p.msg.Missing, name)
		}
	}
	for name := range s.initial {
		if _, ok := live[name]; !ok {
			p.msg.Removed = append(p.msg.Removed, name)
			// Owed again if the client refuses this response; revision 0: never held back.
			p.removed = append(p.removed, &store.Entry{Name: name, Deleted: true})
		}
	}
	slices.Sort(p.msg.Removed)
	sortEntries(p.removed)
	return p
}

// holdDeletions merges the deletions since the last response into the held-back ones and
// splits them into those that may go now and those still held. Names that exist again, or
// that the client no longer asks for, are dropped: the client is told of them otherwise.
func (s *subscription) holdDeletions(v *store.View, deleted []*store.Entry, g gates) (removable, held []*store.Entry) {
	byName := make(map[string]*store.Entry, len(s.held)+len(deleted))
	for _, e := range s.held {
		byName[e.Name] = e
	}
	for _, e := range deleted {
		byName[e.Name] = e // the newest tombstone
	}
	for _, e := range byName {
		if !s.wants(e.Name) || s.get(v, e.Name) != nil {
			continue
		}
		if !s.holdsBack() || e.Revision <= g.removableThrough {
			removable = append(removable, e)
		} else {
			held = append(held, e)
		}
	}
	sortEntries(removable)
	sortEntries(held)
	return removable, held
}

// holdsBack tells whether deletions wait for other types (make before break).
func (s *subscription) holdsBack() bool { return len(s.removeAfter) > 0 }

// nextStateOfTheWorld: listeners, clusters and MCP collections, always sent whole. Deletions
// held back stay in the response with their last version until they may go.
func (s *subscription) nextStateOfTheWorld(v *store.View, ch store.Changes, rev uint64, protocol string, g gates) *pending {
	upserts := s.wanted(ch.Upserts)
	removable, held := s.holdDeletions(v, s.wanted(ch.Deleted), g)
	p := &pending{rev: rev, held: held}
	asked := len(s.fresh) > 0 || s.freshAll
	if len(upserts) == 0 && len(removable) == 0 && !asked {
		return p // nothing the client holds changed
	}
	full := s.full(v, rev, protocol)
	full.held = held
	if len(held) > 0 {
		full.materialize()
		full.msg.Resources = mergeEntries(full.msg.Resources, held)
		full.share = nil
		// The version names the content: at one revision, the set held back only shrinks,
		// so a response that lets some go never repeats the version of one that kept them
		// (the client may have refused that one; its version is not resent).
		full.msg.Version = fmt.Sprintf("%d-held%d", rev, len(held))
	}
	return full
}

// nextPartial answers explicit names of a type that xDS groups like the incremental variants
// (endpoints, routes): only the subscribed resources that changed, and the newly asked ones.
// Deletions are not sent: in state of the world they follow from the parents that stop naming
// the resource.
func (s *subscription) nextPartial(v *store.View, ch store.Changes, rev uint64, protocol string) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10)}}
	for _, name := range sortedNames(s.fresh) {
		if e := s.get(v, name); e != nil {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	for _, e := range ch.Upserts {
		_, fresh := s.fresh[e.Name]
		if s.wants(e.Name) && !fresh {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	sortEntries(p.msg.Resources)
	if len(s.fresh) == 0 {
		p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, from: s.sentRev, to: rev, names: s.fingerprint(), access: s.accessID()}
	}
	return p
}

// nextIncremental: what changed, the names removed, and the newly asked names (sent whole, or
// as missing).
func (s *subscription) nextIncremental(v *store.View, ch store.Changes, rev uint64, protocol string, g gates) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10), Incremental: true}}
	removable, held := s.holdDeletions(v, s.wanted(ch.Deleted), g)
	p.held = held
	// A deletion still held back is not told as "missing" either, even to a name asked anew.
	heldBack := make(map[string]bool, len(held))
	for _, e := range held {
		heldBack[e.Name] = true
	}
	told := map[string]bool{}
	if s.freshAll { // wildcard entered anew: everything wanted, as a first response would
		current, missing := s.current(v)
		p.msg.Resources = current
		for _, name := range missing {
			if !heldBack[name] {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
		for _, e := range current {
			told[e.Name] = true
		}
	} else {
		for _, name := range sortedNames(s.fresh) {
			told[name] = true
			if e := s.get(v, name); e != nil {
				p.msg.Resources = append(p.msg.Resources, e)
			} else if !heldBack[name] {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
		for _, e := range s.wanted(ch.Upserts) {
			if !told[e.Name] {
				p.msg.Resources = append(p.msg.Resources, e)
			}
		}
		sortEntries(p.msg.Resources)
	}
	for _, e := range removable {
		if !slices.Contains(p.msg.Missing, e.Name) { // a name asked anew that is gone is told as missing
			p.msg.Removed = append(p.msg.Removed, e.Name)
			p.removed = append(p.removed, e)
		}
	}
	if len(s.fresh) == 0 && !s.freshAll && len(s.held) == 0 && len(p.held) == 0 {
		p.share = &frameKey{protocol: protocol, key: s.key, form: s.form, mode: s.mode, from: s.sentRev, to: rev, view: s.view, access: s.accessID(), wildcard: s.wildcard}
		if len(s.names) > 0 {
			p.share.names = s.fingerprint()
		}
	}
	return p
}

// afterCompaction handles a subscriber older than the tombstone retention.
func (s *subscription) afterCompaction(v *store.View, rev uint64, protocol string) (*pending, bool, error) {
	switch {
	case s.mode == StateOfTheWorld:
		// Whole types are resent whole; deletions that were held are lost with the tombstones.
		return s.full(v, rev, protocol), false, nil
	case s.fullOnLoss:
		return s.full(v, rev, protocol), false, nil // MCP: a full-state (incremental=false) response
	case !s.wildcard:
		// Explicit names: send each as it is now; a name that is gone is sent as missing,
		// which delta xDS clients take as "does not exist".
		p := s.full(v, rev, protocol)
		p.msg.Incremental, p.share = true, nil
		return p, false, nil
	default:
		return nil, false, errFellBehind
	}
}

// sent records a response as in flight.
func (s *subscription) sent(p *pending, nonce string) {
	s.phase = phaseAwaiting
	s.sentRev = p.rev
	if !p.continues { // a later part keeps what the first set, and what a NACK owed since
		s.held = p.held
	}
	s.refusable, s.refusableMissing = nil, nil
	if len(p.msg.Resources) > 0 && s.mode == Incremental {
		s.refusable, s.refusableMissing = p.removed, p.msg.Missing
	}
	s.pendingNonce = nonce
	s.sentNonce = nonce
	s.sentVer = p.msg.Version
	s.parts = p.rest
	if !p.continues {
		s.freshSent, s.freshAllSent = s.fresh, s.freshAll
		s.fresh, s.freshAll, s.initial = nil, false, nil
	}
}

// caughtUp records that nothing the client asked for changed up to rev (held-back deletions
// aside, which p carries when set).
func (s *subscription) caughtUp(rev uint64, p *pending) {
	s.sentRev = rev
	if s.phase == phaseIdle && !s.nacked && s.lastAck != nil {
		s.ackedRev = rev // nothing it asked for changed: it holds rev as it held the last
	}
	// Names asked anew that exist were sent; state of the world cannot say the others do not.
	s.fresh, s.freshAll = nil, false
	if p != nil {
		s.held = p.held
	}
}

// answered records the client's ACK (detail nil) or NACK of the response in flight.
func (s *subscription) answered(nonce string, detail string, nack bool, now time.Time) *record {
	rec := &record{Version: s.sentVer, Nonce: nonce, Time: now, Message: detail}
	s.pendingNonce = ""
	s.phase = phaseIdle
	defer func() { s.refusable, s.refusableMissing = nil, nil }()
	s.nacked = nack
	if nack {
		// A NACK refuses the response's resources, not the removals it carried: those are
		// owed again (the next look drops any that came back). A response that carried only
		// removals is not retried, so that a client refusing it cannot make a loop.
		s.held = mergeEntries(s.held, s.refusable)
		for _, name := range s.refusableMissing {
			if _, asked := s.names[name]; asked {
				s.addFresh(name) // told again that it does not exist
			} else if s.wants(name) { // asked by the wildcard meanwhile: a removal then
				s.held = mergeEntries(s.held, []*store.Entry{{Name: name, Deleted: true}})
			}
		}
		s.lastNack = rec
		// A refused part of a split response refused resources up to the revision of the
		// whole (its last part's): the range covers them, and the parts still to come.
		to := s.sentRev
		if n := len(s.parts); n > 0 {
			to = max(to, s.parts[n-1].rev)
		}
		s.rejected = rejectedAfter(s.rejected, rejection{from: s.ackedRev, to: to, rec: rec, names: s.freshSent, all: s.freshAllSent})
		s.freshSent, s.freshAllSent = nil, false
	} else {
		s.lastAck = rec
		s.ackedRev = s.sentRev
		if len(s.parts) == 0 { // the whole response is held: its fresh names too
			s.freshSent, s.freshAllSent = nil, false
		}
		if s.whole() {
			s.rejected = nil // a whole state replaced what the client refused before
		}
	}
	return rec
}

func mergeEntries(a, b []*store.Entry) []*store.Entry {
	out := make([]*store.Entry, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	sortEntries(out)
	return out
}

func sortEntries(es []*store.Entry) {
	slices.SortFunc(es, func(a, b *store.Entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
}

func sortedNames(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
