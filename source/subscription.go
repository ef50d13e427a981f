package source

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/internal/wire"
	"github.com/mcpbridge/mcpbridge/store"
	"google.golang.org/protobuf/encoding/protowire"
)

// errFellBehind ends a stream whose incremental wildcard subscriber is older than the
// tombstone retention: without a name-by-name record of what it holds, the bridge cannot tell
// it what was deleted. The client reconnects with initial_resource_versions and gets an exact
// diff.
var errFellBehind = errors.New("subscriber fell behind the store's tombstone retention; reconnect to resynchronise")

// subscription is one stream's interest in one type: its policy and the four parts of its
// state (state.go). It is pure state: no I/O, no locks, no clock. Its state is O(1) for
// wildcard subscribers (the revision sent) plus the removals it is holding back; names are
// kept only for explicit subscriptions.
type subscription struct {
	policy
	seq int // order of subscription, to order responses of equal priority

	want want
	ex   exchange
	owed owed
	beat beatState // TTL heartbeats, when the policy has a TTL (heartbeat.go)

	// The stream loop's, set when the subscription starts; the machine never reads them.
	label   string              // the collection as metrics label it
	metrics *metrics.Collection // nil without metrics
	// ahead is the next part of a split response, encoded ahead of its send
	// (prefetchNextPart); the next send takes it, or drops it.
	ahead *ahead
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
	// It reads the view and nothing of the subscription's state that may change.
	fill func()
	// held is the subscription's held-back deletions after this response.
	held []*store.Entry
	// removed are the tombstones of the deletions an incremental response sends.
	removed []*store.Entry
	// A response split into parts (see split): rest are the parts after this one; continues
	// marks a part after the first (it consumes nothing the client asked anew); notPush marks
	// the last part of a first response (not a change pushed). from is the revision the
	// client had been sent before the response; short, that a part (this or one skipped
	// before it) left out what changed since the split (see nextPart).
	rest      []*pending
	continues bool
	// least is the least name of the resources of this part and of the parts after it: the
	// names below it have been sent once this part is next (see machine.sentBelow).
	least   string
	notPush bool
	from    uint64
	short   bool
	// revive: the response resends what a producer's return made owed (owed.revive); all: it
	// carries everything wanted (a first response, a wildcard entered anew), not only what
	// changed and the names asked anew.
	revive bool
	all    bool
	// fresh, of a part: the names asked anew the response answers (owed.fresh at the split,
	// a map never changed after): the client holds nothing of them, revive or not.
	// shortAnew: short, and what the part left out was owed anew (see nextPart).
	fresh     map[string]struct{}
	shortAnew bool
	// whole: the response carries everything the client asked for (it replaces the client's
	// whole state of the type), read from the view by fill or listed.
	whole bool
	// heartbeat: the response renews the TTL of what the client holds (heartbeat.go).
	heartbeat bool
}

// asked tells whether a part answers a name asked anew.
func (p *pending) asked(name string) bool {
	_, ok := p.fresh[name]
	return ok
}

// carriesOnlyBelow tells whether every resource the response sends, and every removal it
// tells, is named below name (a removal of endpoints may not overtake the part that changes
// their cluster). Names that do not exist refer to nothing.
func (p *pending) carriesOnlyBelow(name string) bool {
	p.materialize()
	for _, e := range p.msg.Resources {
		if e.Name >= name {
			return false
		}
	}
	for _, n := range p.msg.Removed {
		if n >= name {
			return false
		}
	}
	return true
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
	// key is the type asked for; collection the one read for it, which may differ between
	// clients of one key (a proxyless client's clusters, a namespace's view).
	protocol, key, collection string
	form                      wire.Form
	mode                      Mode
	full                      bool
	from, to                  uint64
	names                     [sha256.Size]byte // fingerprint of explicit names; zero for wildcard only
	view                      string            // the part of a wildcard type (Type.Scope)
	access                    string            // the client's view of the type (visibility.id)
	wildcard                  bool
	part                      int    // of a split response, 1-based; 0 when whole
	partAt                    uint64 // the collection revision a later part was read at (see nextPart)
	// TTLs (heartbeat.go): the TTL and wrapper the resources carry; a heartbeat, with the
	// owners whose resources it leaves out.
	ttl       time.Duration
	wrap      bool
	heartbeat bool
	dead      string
	// beatVersion is a heartbeat's version: the version of the stream's last response.
	beatVersion string
}

// gates are what the rest of the stream allows this subscription to send now.
type gates struct {
	// removableThrough: deletions made at or before this revision may be sent.
	removableThrough uint64
	// live reads which owners are live in the view (heartbeat.go), for what a producer's
	// return made owed; nil: everyone is.
	live func() *liveness
}

// wants tells whether the client asked for a resource of this name (and may see it).
func (s *subscription) wants(name string) bool {
	if !s.vis.sees(name) {
		return false
	}
	// Directly, not through askedAs: this runs for each change on each stream, and has
	// inlines where a function value would not.
	if s.want.has(name) {
		return true
	}
	if s.Namespaced && s.want.count() > 0 {
		if ns, ok := namespaceOf(name); ok && s.want.has(ns) {
			return true
		}
	}
	return s.want.wildcard && (s.want.include == nil || s.want.include(name))
}

// askedAs tells whether a resource's name is among names (has): the name itself, or for a
// Namespaced type its namespace, by which the client asked for it.
func (s *subscription) askedAs(name string, has func(string) bool) bool {
	return askedBy(name, s.Namespaced, has)
}

// askedBy tells whether a resource's name is among names (has): the name itself, or, of a
// namespaced type, its namespace.
func askedBy(name string, namespaced bool, has func(string) bool) bool {
	if has(name) {
		return true
	}
	if ns, ok := namespaceOf(name); ok && namespaced {
		return has(ns)
	}
	return false
}

// namespaceOf is the namespace of a resource name of a Namespaced type: what comes before
// its last '/' (a route configuration's name may hold '/', a host may not).
func namespaceOf(name string) (string, bool) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", false
	}
	return name[:i], true
}

// wanted returns the entries the client asked for, in order; es is sorted by name (a
// snapshot, or what changed since a revision).
func (s *subscription) wanted(es []*store.Entry) []*store.Entry {
	if s.want.wildcard && s.want.include == nil && s.vis == nil && s.want.count() == 0 {
		return es
	}
	if !s.want.wildcard && !s.Namespaced && len(es) >= s.want.count()/16 {
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
	names := s.want.sortedNames()
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
	if s.ex.phase == phaseAwaiting {
		return nil, false, nil
	}
	if len(s.owed.parts) > 0 {
		return s.nextPart(v, g), false, nil // the rest of a split response
	}
	if s.ex.phase == phaseUnsent {
		return s.split(s.first(v, rev, protocol, g)), false, nil
	}
	if rev == s.ex.rev && !s.owed.anew() && !s.owed.holdsRemovable(g.removableThrough) {
		return nil, false, nil
	}
	ch, err := v.ChangesSince(s.Collection, s.ex.rev)
	if errors.Is(err, store.ErrCompacted) {
		return s.afterCompaction(v, rev, protocol)
	}
	switch {
	case s.Mode == Incremental:
		p = s.nextIncremental(v, ch, rev, protocol, g)
	case s.PartialStateOfTheWorld && !s.want.wildcard:
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
	if s.splitAt <= 0 || s.Mode != Incremental || p == nil {
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
	// Each part is a stretch of the response's list, not a copy (capped, so that nothing
	// appended to one part spills into the next).
	var chunks [][]*store.Entry
	rs, start := p.msg.Resources, 0
	for i, e := range rs {
		n := resourceSize(e, s.Form)
		if s.ttl() > 0 {
			n += wire.TTLSize // the TTL each resource carries
		}
		if size > 0 && size+n > s.splitAt {
			chunks = append(chunks, rs[start:i:i])
			start, size = i, 0
		}
		size += n
	}
	if len(chunks) == 0 {
		return p // fits in one
	}
	chunks = append(chunks, rs[start:len(rs):len(rs)])
	parts := make([]*pending, len(chunks))
	for i, chunk := range chunks {
		part := &pending{
			rev: s.ex.rev, from: s.ex.rev, held: p.held, continues: i > 0, share: partOf(p.share, i+1),
			revive: s.owed.revive, all: p.whole || s.owed.all, fresh: s.owed.fresh,
			msg: wire.Message{Key: p.msg.Key, Version: fmt.Sprintf("%s-part%d", p.msg.Version, i+1), Incremental: true, Resources: chunk},
		}
		if i == 0 {
			part.msg.Removed, part.msg.Missing, part.removed = p.msg.Removed, p.msg.Missing, p.removed
		}
		parts[i] = part
	}
	last := parts[len(parts)-1]
	last.rev, last.msg.Version, last.notPush = p.rev, p.msg.Version, s.ex.phase == phaseUnsent
	for i := range parts {
		parts[i].rest = parts[i+1:]
	}
	least := ""
	for i := len(parts) - 1; i >= 0; i-- {
		for j, e := range parts[i].msg.Resources {
			if (i == len(parts)-1 && j == 0) || e.Name < least {
				least = e.Name
			}
		}
		parts[i].least = least
	}
	return parts[0]
}

// nextPart is the next part of a split response, read again from the view: a resource deleted
// or changed since the split is left out (its removal, or its new version, follows in the next
// response, which carries what changed since the response's revision), and nothing the client
// no longer asks for is sent. So a part carries only versions of its response's revision: what
// a NACK of it refuses is never sent again, and what it sends is never older than the view.
// A part that left out something changed since is short: until the next response, the client
// holds that resource as it was before the split, and the subscription counts as caught up
// only through the revision it had before (owed.short), so that no type ordered after it
// takes it for current (a cluster is not removed while a route the part left out still names
// it). A part that left out what the client no longer asks for is not shared: its content is
// this client's. It goes, like any response, only once the types it comes after are caught
// up with the view. Parts left empty are skipped; the last goes even if empty, since it
// completes the response.
func (s *subscription) nextPart(v *store.View, g gates) *pending {
	at := v.Collection(s.Collection).Revision
	whole := s.owed.parts[len(s.owed.parts)-1].rev
	// Nothing in the collection changed since the parts were cut: each resource is as its
	// part holds it, and is not looked up again (at a million, a walk of the store's index for
	// each name, on the stream's goroutine between two parts).
	unchanged := at == whole
	short, shortAnew := false, false
	for i, part := range s.owed.parts {
		p := *part
		p.msg.Resources = make([]*store.Entry, 0, len(part.msg.Resources))
		own := false
		for _, e := range part.msg.Resources {
			cur := e
			switch {
			case !unchanged:
				cur = s.get(v, e.Name)
			case !s.vis.sees(e.Name):
				cur = nil
			}
			switch {
			case !s.wants(e.Name):
				own = true
			case cur == nil || cur.Revision > whole:
				short = true
				// In the part as owed anew, the client may hold nothing of it: that it holds
				// the type as of an earlier revision does not cover it (shortAnew).
				shortAnew = shortAnew || part.all || s.askedAs(e.Name, part.asked)
			case !part.all && cur.Revision <= part.from && !s.askedAs(e.Name, s.want.has):
				// Unchanged: in the part only because its name was asked anew, which the
				// client took back since (the wildcard may still cover it: it holds it).
				own = true
			case part.revive && g.live != nil && !g.live().live(cur.Owner) && !s.askedAs(e.Name, part.asked) && !s.askedAs(e.Name, s.owed.isFresh):
				// Owed because its producer came back, which has left again: the client holds
				// it, and sending it with its body would renew it (heartbeat.go). Not a name
				// asked anew: the client holds nothing of it, and is sent it as when nothing
				// is owed but the names asked.
				own = true
			default:
				p.msg.Resources = append(p.msg.Resources, cur)
			}
		}
		p.short, p.shortAnew = short, shortAnew
		switch {
		case own:
			p.share = nil
		case p.share != nil:
			p.share = readAt(p.share, at)
		}
		if len(p.msg.Resources) > 0 || i == len(s.owed.parts)-1 {
			p.rest = s.owed.parts[i+1:]
			return &p
		}
	}
	return nil // not reached: the last part is always returned
}

// resourceSize bounds what one resource takes in a delta response written in form: the
// wrapping Resource's name and version, and its body. An Envoy resource's body is its own Any
// as stored (FormAnyBody), sized as it is written: the stored encoding also holds the name
// and version, and counting them twice left a part of small resources a third empty, a
// third more round trips for a client taking a million (TestDeltaPartsOfSmallClustersFillThem).
// Any other body is at most the stored encoding in an Any (an MCP resource's adds the
// Resource's type URL; one written under the client's type URL may be re-encoded), and its
// tags and lengths take at most 5 bytes each (messages are under 4 GiB), 8 of them.
func resourceSize(e *store.Entry, form wire.Form) int {
	if form == wire.FormAnyBody {
		typeURL, value := e.BodySize()
		return deltaResourceSize(len(e.Name), len(e.Version), typeURL, value)
	}
	return len(e.Name) + len(e.Version) + len(wire.MCPResourceTypeURL) + e.ResourceSize() + 8*5
}

// deltaResourceSize is the size of a delta response's resources field holding a Resource of
// the name, version and Any(type URL, value) of these lengths, each field of the Resource and
// the Any numbered under 16 (a tag of one byte), plus 8 bytes to spare.
func deltaResourceSize(name, version, typeURL, value int) int {
	anyLen := 1 + protowire.SizeBytes(typeURL) + 1 + protowire.SizeBytes(value)
	wrapper := 1 + protowire.SizeBytes(name) + 1 + protowire.SizeBytes(version) + 1 + protowire.SizeBytes(anyLen)
	return 1 + protowire.SizeBytes(wrapper) + 8
}

// readAt is the key of a later part read at the collection revision at (nextPart); the
// encoding made ahead of a part is keyed by it too (prefetchNextPart).
func readAt(k *frameKey, at uint64) *frameKey {
	c := *k
	c.partAt = at
	return &c
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
	return p != nil && !slices.Equal(s.owed.held, p.held)
}

// first is the response to a new subscription: always sent, even when empty, so that a client
// waiting for every type it asked for (istiod) becomes ready.
func (s *subscription) first(v *store.View, rev uint64, protocol string, g gates) *pending {
	if s.Mode == Incremental && s.ex.resumed != nil {
		return s.resume(v, rev, g)
	}
	return s.full(v, rev, protocol)
}

// shareCollection is the collection a shared response is keyed by: the one read, except a
// layered one whose overlay was never written (a namespace with nothing particular in this
// type), which reads exactly as its base: its proxies share the base's responses.
func shareCollection(v *store.View, coll string) string {
	if base, overlay, ok := store.LayerParts(coll); ok && v.Collection(overlay).Revision == 0 {
		return base
	}
	return coll
}

// full is the whole subscribed state.
func (s *subscription) full(v *store.View, rev uint64, protocol string) *pending {
	p := &pending{rev: rev, whole: true, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10)}}
	p.share = &frameKey{protocol: protocol, key: s.key, collection: shareCollection(v, s.Collection), form: s.Form, mode: s.Mode, full: true, to: rev,
		view: s.want.view, access: s.accessID(), wildcard: s.want.wildcard}
	if s.want.count() > 0 {
		p.share.names = s.want.fingerprint()
	}
	// Reading a whole collection is O(its size): deferred, so that of many streams sharing the
	// response only the one that encodes it reads it. What it reads of the subscription (the
	// names, the view) does not change before the response is encoded.
	p.fill = func() { p.msg.Resources, p.msg.Missing = s.current(v) }
	return p
}

// current returns what the client asked for as the view holds it, and the names it asked for
// that do not exist, both sorted.
func (s *subscription) current(v *store.View) (found []*store.Entry, missing []string) {
	if !s.want.wildcard {
		return s.lookup(v)
	}
	_, all := v.Snapshot(s.Collection)
	found = s.wanted(all)
	for _, name := range s.want.sortedNames() {
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
	return v.Get(s.Collection, name)
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
	if s.Namespaced {
		return s.lookupNamespaced(v)
	}
	names := s.want.sortedNames()
	if len(names)*4 < v.Collection(s.Collection).Count {
		for _, name := range names {
			if e := s.get(v, name); e != nil {
				found = append(found, e)
			} else {
				missing = append(missing, name)
			}
		}
		return found, missing
	}
	_, all := v.Snapshot(s.Collection)
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

// lookupNamespaced is lookup for a Namespaced type: what each name asks for (asked), once
// each, sorted; the names that ask for nothing are missing.
func (s *subscription) lookupNamespaced(v *store.View) (found []*store.Entry, missing []string) {
	for _, name := range s.want.sortedNames() {
		asked := s.asked(v, name)
		if len(asked) == 0 {
			missing = append(missing, name)
		}
		found = append(found, asked...)
	}
	sortEntries(found)
	return slices.CompactFunc(found, func(a, b *store.Entry) bool { return a.Name == b.Name }), missing
}

// asked returns what a name asks for, as the client may see it: its entry, and for a
// Namespaced type every entry of its namespace (NAME/REST, REST without a '/'), read as a
// range of the collection's names.
func (s *subscription) asked(v *store.View, name string) []*store.Entry {
	return askedEntries(v, s.Collection, s.vis, s.Namespaced, name)
}

// askedEntries is what a name asks for in a collection, as a client of visibility vis may
// see it: its entry, and, of a namespaced type, every entry NAME/REST (REST without a '/'),
// read as a range of the collection's names. The subscription and its status view both read
// it so.
func askedEntries(v *store.View, collection string, vis *visibility, namespaced bool, name string) []*store.Entry {
	var out []*store.Entry
	if e := v.Get(collection, name); e != nil && vis.sees(name) {
		out = append(out, e)
	}
	if !namespaced {
		return out
	}
	for _, e := range v.WithPrefix(collection, name+"/") {
		if !strings.Contains(e.Name[len(name)+1:], "/") && vis.sees(e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// resume answers a reconnecting incremental client with only what differs from the versions
// it says it holds, plus the removals: a one-off name-by-name diff. A name asked anew since
// the client's first request is sent whatever version it said it held (xds-protocol.rst,
// "Subscribing to Resources": the server must still provide it).
//
// The removals are deletions made while the client was away, at some revision up to rev: they
// are tombstones of rev, held back like any deletion until the types that must stop naming
// them first (RemoveAfter) are caught up to rev. A type with such types holds them all in
// this first response: the client resumes every type it holds in one burst of requests, but
// the bridge may answer the first before it reads the others, and until it reads them it
// cannot know what of theirs still names what is removed. The client's answer to this
// response comes after that burst on the stream, so the removals go in a later response,
// once the types then subscribed are caught up.
func (s *subscription) resume(v *store.View, rev uint64, g gates) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10), Incremental: true}}
	current, missing := s.current(v)
	live := make(map[string]struct{}, len(current))
	for _, e := range current {
		live[e.Name] = struct{}{}
		// Asked anew since resuming (of a Namespaced type, also through its namespace): the
		// client may have dropped it meanwhile, whatever it said it held.
		fresh := s.askedAs(e.Name, s.owed.isFresh)
		if held, ok := s.ex.resumed[e.Name]; fresh || !ok || held != e.Version {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	for _, name := range missing {
		_, fresh := s.owed.fresh[name]
		if _, held := s.ex.resumed[name]; fresh || !held {
			p.msg.Missing = append(p.msg.Missing, name)
		}
	}
	told := make(map[string]struct{}, len(p.msg.Missing))
	for _, name := range p.msg.Missing {
		told[name] = struct{}{}
	}
	var gone []*store.Entry
	for name := range s.ex.resumed {
		if !s.wants(name) {
			continue // no longer asked for: the client dropped it
		}
		_, isLive := live[name]
		if _, isTold := told[name]; !isLive && !isTold {
			gone = append(gone, &store.Entry{Name: name, Deleted: true, Revision: rev})
		}
	}
	sortEntries(gone)
	if s.holdsBack() {
		g.removableThrough = 0 // this first response removes nothing (see above)
	}
	for _, e := range gone {
		if e.Revision <= g.removableThrough {
			p.msg.Removed = append(p.msg.Removed, e.Name)
			p.removed = append(p.removed, e)
		} else {
			p.held = append(p.held, e)
		}
	}
	return p
}

// holdDeletions merges the deletions since the last response into the held-back ones and
// splits them into those that may go now and those still held. Names that exist again, or
// that the client no longer asks for, are dropped: the client is told of them otherwise.
// shown: held deletions are shown in the response with their last version (state of the
// world), so one without its last bytes cannot be held.
func (s *subscription) holdDeletions(v *store.View, deleted []*store.Entry, g gates, shown bool) (removable, held []*store.Entry) {
	byName := make(map[string]*store.Entry, len(s.owed.held)+len(deleted))
	for _, e := range s.owed.held {
		byName[e.Name] = e
	}
	for _, e := range deleted {
		if old, ok := byName[e.Name]; !ok || old.Revision < e.Revision {
			byName[e.Name] = e // the newest tombstone
		}
	}
	for _, e := range byName {
		if !s.wants(e.Name) || s.get(v, e.Name) != nil {
			continue
		}
		// A tombstone without its last bytes (a layered collection's name its overlay served
		// and hid: store.Layered) cannot be shown while held back: in a state-of-the-world
		// response it goes at once. An incremental one shows nothing of what it holds back, so
		// it holds those too, and the removals a resumed client is owed (resume), which have
		// no bytes either, wait for the types that must stop naming them first.
		if !s.holdsBack() || e.Revision <= g.removableThrough || shown && len(e.Bytes) == 0 {
			removable = append(removable, e)
		} else {
			held = append(held, e)
		}
	}
	sortEntries(removable)
	sortEntries(held)
	return removable, held
}

// nextStateOfTheWorld: listeners, clusters and MCP collections, always sent whole. Deletions
// held back stay in the response with their last version until they may go.
func (s *subscription) nextStateOfTheWorld(v *store.View, ch store.Changes, rev uint64, protocol string, g gates) *pending {
	upserts := s.wanted(ch.Upserts)
	removable, held := s.holdDeletions(v, s.wanted(ch.Deleted), g, true)
	p := &pending{rev: rev, held: held}
	if len(upserts) == 0 && len(removable) == 0 && !s.owed.anew() {
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
	for _, name := range sortedNames(s.owed.fresh) {
		if e := s.get(v, name); e != nil {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	p.msg.Resources = s.notRefused(p.msg.Resources)
	for _, e := range ch.Upserts {
		_, fresh := s.owed.fresh[e.Name]
		if s.wants(e.Name) && !fresh {
			p.msg.Resources = append(p.msg.Resources, e)
		}
	}
	sortEntries(p.msg.Resources)
	if len(s.owed.fresh) == 0 {
		p.share = &frameKey{protocol: protocol, key: s.key, collection: shareCollection(v, s.Collection), form: s.Form, mode: s.Mode, from: s.ex.rev, to: rev,
			names: s.want.fingerprint(), access: s.accessID()}
	}
	return p
}

// nextIncremental: what changed, the names removed, and the newly asked names (sent whole, or
// as missing).
func (s *subscription) nextIncremental(v *store.View, ch store.Changes, rev uint64, protocol string, g gates) *pending {
	p := &pending{rev: rev, msg: wire.Message{Key: s.key, Version: strconv.FormatUint(rev, 10), Incremental: true}}
	removable, held := s.holdDeletions(v, s.wanted(ch.Deleted), g, false)
	p.held = held
	// A deletion still held back is not told as "missing" either, even to a name asked anew.
	heldBack := make(map[string]bool, len(held))
	for _, e := range held {
		heldBack[e.Name] = true
	}
	if s.owed.all { // everything wanted, as a first response would carry it
		current, missing := s.current(v)
		p.msg.Resources = s.notRefused(current)
		for _, name := range missing {
			if !heldBack[name] {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
	} else if changed := s.wanted(ch.Upserts); len(s.owed.fresh) == 0 {
		// The changes alone, in name order as read: a first response at a million is the
		// list as the store made it, neither copied nor sorted again.
		p.msg.Resources = changed
	} else {
		// The names asked anew, then the changes that are not among them. (Everything wanted
		// holds every change already.)
		p.msg.Resources = make([]*store.Entry, 0, len(s.owed.fresh)+len(changed))
		told := s.addAsked(v, p, heldBack)
		for _, e := range changed {
			if !told(e.Name) {
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
	if !s.owed.anew() && len(s.owed.held) == 0 && len(p.held) == 0 {
		p.share = &frameKey{protocol: protocol, key: s.key, collection: shareCollection(v, s.Collection), form: s.Form, mode: s.Mode, from: s.ex.rev, to: rev,
			view: s.want.view, access: s.accessID(), wildcard: s.want.wildcard}
		if s.want.count() > 0 {
			p.share.names = s.want.fingerprint()
		}
	}
	return p
}

// addAsked adds to p what the names asked anew ask for, each entry once and unless a later
// part carried it already, and the names that ask for nothing as missing (unless a deletion
// of theirs is held back). It returns whether an entry was told so, for the changes that
// follow not to tell it twice.
func (s *subscription) addAsked(v *store.View, p *pending, heldBack map[string]bool) (told func(name string) bool) {
	names := sortedNames(s.owed.fresh)
	if !s.Namespaced {
		// A name asks for its own entry alone: an entry is told exactly when its name is
		// asked anew and the client sees it, and a change is an entry the client sees. No
		// set of told names: at a million endpoints asked in batches it was 35 MB.
		for _, name := range names {
			if e := s.get(v, name); e != nil {
				if s.owed.given[name] != e.Version { // not carried by a later part (sent)
					p.msg.Resources = append(p.msg.Resources, e)
				}
			} else if !heldBack[name] {
				p.msg.Missing = append(p.msg.Missing, name)
			}
		}
		return s.owed.isFresh
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		asked := s.asked(v, name)
		for _, e := range asked {
			if seen[e.Name] { // a namespace's entry may be asked by its own name too: once
				continue
			}
			seen[e.Name] = true
			if s.owed.given[e.Name] != e.Version { // not carried by a later part (sent)
				p.msg.Resources = append(p.msg.Resources, e)
			}
		}
		if len(asked) == 0 && !heldBack[name] {
			p.msg.Missing = append(p.msg.Missing, name)
		}
	}
	return func(name string) bool { return seen[name] }
}

// afterCompaction handles a subscriber older than the tombstone retention.
func (s *subscription) afterCompaction(v *store.View, rev uint64, protocol string) (*pending, bool, error) {
	switch {
	case s.Mode == StateOfTheWorld:
		// Whole types are resent whole; deletions that were held are lost with the tombstones.
		return s.full(v, rev, protocol), false, nil
	case s.FullOnLoss:
		return s.full(v, rev, protocol), false, nil // MCP: a full-state (incremental=false) response
	case !s.want.wildcard:
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
	s.ex.phase = phaseAwaiting
	s.ex.rev = p.rev
	s.ex.pending, s.ex.nonce = nonce, nonce
	s.ex.version = p.msg.Version
	if !p.continues { // a later part keeps what the first set, and what a NACK owed since
		s.owed.held = p.held
	}
	s.owed.refusable, s.owed.refusableMissing = nil, nil
	if len(p.msg.Resources) > 0 && s.Mode == Incremental {
		s.owed.refusable, s.owed.refusableMissing = p.removed, p.msg.Missing
	}
	s.owed.parts = p.rest
	if p.continues {
		// A later part provides what it carries: a name asked anew since the response was
		// cut, carried here at its current version, is owed no more (if the client refuses
		// this part, that version is not sent again). Of a Namespaced type the name stays
		// owed, since it also asks for its namespace, which the part does not carry; its own
		// entry is given, and the response that answers the name leaves that version out.
		for _, e := range p.msg.Resources {
			if s.Namespaced && s.owed.isFresh(e.Name) {
				s.owed.give(e)
				continue
			}
			delete(s.owed.fresh, e.Name)
			if s.owed.all {
				s.owed.give(e)
			}
		}
	} else {
		s.ex.carried, s.ex.carriedAll = s.owed.fresh, s.owed.all
		s.owed.fresh, s.owed.all, s.owed.revive, s.owed.dead, s.owed.given, s.ex.resumed = nil, false, false, nil, nil, nil
		s.owed.cutShort = false
	}
	if p.short { // the client holds what the part left out as it was before the response
		if !s.owed.short || p.from < s.owed.shortAt {
			s.owed.shortAt = p.from
		}
		s.owed.short, s.owed.cutShort = true, true
		s.owed.shortAnew = s.owed.shortAnew || p.shortAnew
	}
	if len(p.rest) == 0 && !s.owed.cutShort {
		// A whole response went without leaving anything out: it carried what changed
		// since the one before, and so what an earlier part left out.
		s.owed.short, s.owed.shortAnew = false, false
	}
	if s.ttl() > 0 {
		s.beat.sent(p)
	}
}

// caughtUp records that nothing the client asked for changed up to rev (held-back deletions
// aside, which p carries when set).
func (s *subscription) caughtUp(rev uint64, p *pending) {
	s.ex.rev = rev
	if s.ex.phase == phaseIdle && !s.ex.nacked && s.ex.lastAck != nil {
		s.ex.ackedRev = rev // nothing it asked for changed: it holds rev as it held the last
	}
	// Names asked anew that exist were sent; state of the world cannot say the others do not.
	// Nothing wanted changed since the last response: what a part of it left out is no
	// longer wanted.
	s.owed.fresh, s.owed.all, s.owed.revive, s.owed.dead, s.owed.given, s.owed.short, s.owed.shortAnew = nil, false, false, nil, nil, false, false
	if p != nil {
		s.owed.held = p.held
	}
}

// answered records the client's ACK (nack false) or NACK of the response in flight.
func (s *subscription) answered(nonce string, detail string, nack bool, now time.Time) *record {
	rec := &record{Version: s.ex.version, Nonce: nonce, Time: now, Message: detail}
	s.ex.pending = ""
	s.ex.phase = phaseIdle
	defer func() { s.owed.refusable, s.owed.refusableMissing = nil, nil }()
	s.ex.nacked = nack
	if s.ttl() > 0 {
		s.beat.answered(nack)
	}
	if nack {
		// A NACK refuses the response's resources, not the removals it carried: those are
		// owed again (the next look drops any that came back). A response that carried only
		// removals is not retried, so that a client refusing it cannot make a loop.
		s.owed.held = mergeHeld(s.owed.held, s.owed.refusable)
		for _, name := range s.owed.refusableMissing {
			if s.want.has(name) {
				s.owed.addFresh(name) // told again that it does not exist
			} else if s.wants(name) { // asked by the wildcard meanwhile: a removal then
				s.owed.held = mergeHeld(s.owed.held, []*store.Entry{{Name: name, Deleted: true}})
			}
		}
		s.ex.lastNack = rec
		// A refused part of a split response refused resources up to the revision of the
		// whole (its last part's): the range covers them, and the parts still to come.
		to := s.ex.rev
		if n := len(s.owed.parts); n > 0 {
			to = max(to, s.owed.parts[n-1].rev)
		}
		s.ex.rejected = rejectedAfter(s.ex.rejected, rejection{from: s.ex.ackedRev, to: to, rec: rec, names: s.ex.carried, all: s.ex.carriedAll})
		s.ex.carried, s.ex.carriedAll = nil, false
	} else {
		s.ex.lastAck = rec
		s.ex.ackedRev = s.ex.rev
		if len(s.owed.parts) == 0 { // the whole response is held: its fresh names too
			s.ex.carried, s.ex.carriedAll = nil, false
		}
		if s.whole() {
			s.ex.rejected = nil // a whole state replaced what the client refused before
		}
	}
	return rec
}

// whole tells whether each response of the subscription carries its whole state: after the
// client ACKs one, it holds everything it asked for, whatever it refused before.
func (s *subscription) whole() bool {
	return s.Mode == StateOfTheWorld && !(s.PartialStateOfTheWorld && !s.want.wildcard)
}

// weight is what one subscription counts against limits.subscriptions_per_stream: its type
// and its explicit names.
func (s *subscription) weight() int {
	if s == nil {
		return 0
	}
	return 1 + s.want.count()
}

// owesAll makes the subscription send everything the client asked for, with bodies: a
// producer came back, and its resources may have run out at the client (heartbeat.go).
func (s *subscription) owesAll() {
	s.owed.all, s.owed.revive = true, true
	// A partial state-of-the-world response is answered from fresh names alone. Only there:
	// in delta, names owed fresh are names the client asked for anew, which a later part
	// sends whatever their owner (nextPart).
	if s.Mode == StateOfTheWorld && s.PartialStateOfTheWorld && !s.want.wildcard {
		for n := range s.want.names.all() {
			s.owed.addFresh(n)
		}
	}
}

func mergeEntries(a, b []*store.Entry) []*store.Entry {
	out := make([]*store.Entry, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	sortEntries(out)
	return out
}

// notRefused leaves out, of everything owed anew, what the client already got since it was
// owed (a later part of a split response carried it) and, when a producer's return made it
// owed, the versions the client refused: it holds older ones, and a refused version is not
// sent again (a change is).
func (s *subscription) notRefused(es []*store.Entry) []*store.Entry {
	refused, dead := s.beat.refused, s.owed.dead
	if !s.owed.revive {
		refused, dead = nil, nil
	}
	if len(refused) == 0 && len(dead) == 0 && len(s.owed.given) == 0 {
		return es
	}
	out := make([]*store.Entry, 0, len(es))
	for _, e := range es {
		_, away := slices.BinarySearch(dead, e.Owner)
		if !away && (refused == nil || refused[e.Name] != e.Version) && s.owed.given[e.Name] != e.Version {
			out = append(out, e)
		}
	}
	return out
}

// mergeHeld adds tombstones to the held-back deletions, keeping one per name (the newer).
func mergeHeld(held, more []*store.Entry) []*store.Entry {
	out := mergeEntries(held, more) // sorted by name; equal names side by side
	kept := out[:0]
	for _, e := range out {
		if n := len(kept); n > 0 && kept[n-1].Name == e.Name {
			if e.Revision > kept[n-1].Revision {
				kept[n-1] = e
			}
			continue
		}
		kept = append(kept, e)
	}
	return kept
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
