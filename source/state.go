package source

import (
	"crypto/sha256"
	"slices"
	"time"

	"github.com/mcpbridge/mcpbridge/store"
)

// A subscription's state is four small parts, each with its own invariants: what the client
// wants (want), where the exchange with it stands (exchange), what the bridge owes it (owed),
// and its heartbeats (beatState, heartbeat.go). The type's policy is fixed beside them when the
// subscription starts (policy). Only the machine changes them, through the methods here and in
// subscription.go; none of them does I/O or reads a clock.

// policy is how a type is served on a stream: its Type, resolved once by the adapter when the
// client first subscribed, plus what the stream adds to it (the client's view of the type and
// the split size). Requests never change it.
type policy struct {
	key string
	Type
	// vis is what of the type the client may see (nil: everything).
	vis *visibility
	// splitAt: an incremental response whose resources take more bytes than this is split
	// (see split); 0 never.
	splitAt int
}

// holdsBack tells whether deletions wait for other types (make before break).
func (p *policy) holdsBack() bool { return len(p.RemoveAfter) > 0 }

// ttl is the TTL the subscription's resources carry (0: none); wrap, whether state-of-the-world
// resources go in the Resource wrapper that carries it.
func (p *policy) ttl() time.Duration { return max(p.TTL, 0) }
func (p *policy) wrap() bool         { return p.Wrap && p.TTL > 0 }

// want is what the client asked for of the type.
//
// Invariants: names never holds Wildcard for a wildcard-capable type (the wildcard is the
// flag); legacy implies wildcard (the wildcard entered by asking for nothing, which stays);
// view and include are set only while wildcard (the node's part of the type, Type.Scope);
// digest is always the digest of names; sorted and added are derived from names and dropped
// or extended whenever names change.
type want struct {
	wildcard, legacy bool
	view             string
	include          func(name string) bool
	names            nameSet
	// digest identifies names, so that streams with the same names share responses; kept
	// with each name added or removed.
	digest namesDigest
	// sorted is names in order (with added, the names added since it was sorted, still to
	// merge in).
	sorted []string
	added  []string
}

// reserve makes room for n names when none are held: a first request that names a million
// (an Envoy's endpoints) fills the set without growing it step by step.
func (w *want) reserve(n int) {
	if n > 8 {
		w.names.reserve(n)
	}
}

// add adds an explicit name and reports whether it was new.
func (w *want) add(n string) bool {
	if !w.names.add(n, nameKey(n)) {
		return false
	}
	w.digest.addHash(nameHash(n))
	switch {
	case w.sorted == nil:
	case len(w.added) >= len(w.sorted):
		// More names added than were sorted: sorting the set afresh at the next read costs
		// what sorting these and merging would, and holds no list meanwhile. An Envoy
		// subscribing to a million endpoints in batches, read once early, had its list of
		// additions grow to the million, 80 MB of copies as it grew, for no read.
		w.sorted, w.added = nil, nil
	default:
		// Merged in with the next read rather than sorted again: Envoy subscribes to
		// endpoints in batches as clusters arrive, and re-sorting 100,000 names per batch
		// was most of a batch's cost.
		w.added = append(w.added, n)
	}
	return true
}

// remove removes an explicit name and reports whether it was there.
func (w *want) remove(n string) bool {
	if !w.names.remove(n, nameKey(n)) {
		return false
	}
	w.digest.removeHash(nameHash(n))
	w.sorted, w.added = nil, nil
	return true
}

// replace makes next the explicit names (the set itself: the caller keeps no use of it).
func (w *want) replace(next nameSet) {
	w.names, w.digest = next, namesDigest{}
	for n := range next.all() {
		w.digest.addHash(nameHash(n))
	}
	w.sorted, w.added = nil, nil
}

func (w *want) has(n string) bool { return w.names.len() > 0 && w.names.has(n, nameKey(n)) }

// count is the number of explicit names.
func (w *want) count() int { return w.names.len() }

// sortedNames is the explicit names in order.
func (w *want) sortedNames() []string {
	switch {
	case w.sorted == nil:
		w.sorted = w.names.sorted()
	case len(w.added) > 0:
		slices.Sort(w.added)
		merged := make([]string, 0, len(w.sorted)+len(w.added))
		i, j := 0, 0
		for i < len(w.sorted) && j < len(w.added) {
			if w.sorted[i] < w.added[j] {
				merged = append(merged, w.sorted[i])
				i++
			} else {
				merged = append(merged, w.added[j])
				j++
			}
		}
		w.sorted = append(append(merged, w.sorted[i:]...), w.added[j:]...)
	}
	w.added = nil
	return w.sorted
}

// fingerprint identifies the set of explicit names: streams asking for the same names share
// encoded responses.
func (w *want) fingerprint() [sha256.Size]byte { return w.digest.fingerprint() }

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

// record is an ACK or a NACK as the debug endpoint shows it.
type record struct {
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time"`
}

// exchange is where the subscription stands with its client: what it was sent, and how it
// answered.
//
// Invariants: phase is awaiting exactly when pending is set, and pending is then nonce (at
// most one unacknowledged response per type); a request whose nonce is not nonce is stale;
// rev only grows, except when a subscription starts over (a new exchange); resumed is set
// only before the first response, and holds only names the client still asks for (a name
// unsubscribed since was dropped by the client, whatever version it said it held);
// carried and carriedAll are set only while a response that carried names asked anew is in
// flight or was refused.
type exchange struct {
	phase phase
	// rev is the collection revision whose additions the client has been sent (or been
	// brought up to, when nothing it asked for changed).
	rev     uint64
	nonce   string // the latest response's: requests with any other are stale
	pending string // nonce, while unacknowledged
	version string // the latest response's
	// resumed are the versions a reconnecting client says it holds
	// (initial_resource_versions), until its first response.
	resumed map[string]string

	lastAck, lastNack *record
	nacked            bool // the latest answer was a NACK: the client does not hold rev
	// ackedRev is the revision through which the client holds every addition it asked for:
	// the rev of its latest ACK, moved on while nothing it asked for changes. rejected are the
	// revision ranges of responses it refused and was not sent again (status.go): what the
	// status view (CSDS) reads; never read on the serving path.
	ackedRev uint64
	rejected []rejection
	// carried and carriedAll are owed.fresh and owed.all as the response in flight (all its
	// parts) consumed them: names the client did not hold by revision, until it ACKs.
	// carried is the old fresh map, never changed after.
	carried    map[string]struct{}
	carriedAll bool
}

// owed is what the bridge owes the client beyond what changed in the store.
//
// Invariants: fresh holds only names the client asks for explicitly (unsubscribing drops
// one); held is sorted by name, one tombstone per name, each a name the client was told of
// and not yet told is gone (make before break holds it back); refusable and refusableMissing
// are set only while an incremental response carrying resources is in flight; parts are set
// only while a split response is being sent, one part in flight at a time; short is set only
// from a part that left something out until the next response (or a catch-up) goes.
type owed struct {
	// fresh names were newly asked: sent even if unchanged; all: every wanted resource is owed
	// again (a wildcard newly entered, a producer that came back). revive: they are owed
	// because a producer came back (heartbeat.go), not because the client asked: a version
	// the client refused is not among them, nor a resource of an owner still away (dead,
	// sorted: sent with its body, it would be renewed).
	fresh  map[string]struct{}
	all    bool
	revive bool
	dead   []string
	// given are what later parts of a split response carried while all was owed, or, of a
	// Namespaced type, as the entry of a name asked anew: the client holds them at these
	// versions (or refused them), so neither all nor the name owes them again.
	given map[string]string
	// held are deletions the client has not been told of yet (tombstones, with the revision of
	// the deletion), kept back until the types in RemoveAfter are caught up to it.
	held []*store.Entry
	// refusable are the deletions of the response in flight, and refusableMissing the names
	// it told do not exist, when it also carries resources: if the client refuses it, it
	// refused the resources, and the rest is owed again.
	refusable        []*store.Entry
	refusableMissing []string
	// parts are the rest of a response that was split, sent one by one as the client answers
	// each; the last moves exchange.rev.
	parts []*pending
	// short: a part left out a resource changed or deleted since it was cut; until a response
	// goes whole without leaving anything out (it carries what changed since), the client
	// holds everything only through shortAt, the earliest revision it had been sent before
	// such a split (subscription.nextPart). cutShort: the response being sent left
	// something out.
	short, cutShort bool
	shortAt         uint64
	// shortAnew: what a part left out was owed anew (a name asked anew, everything owed):
	// the client may hold nothing of it, even as of shortAt. Set and cleared with short.
	shortAnew bool
}

// reserveFresh makes room for n names asked anew when none are owed yet: each response
// hands the owed names over (carried) and starts afresh, and an Envoy subscribes to its
// endpoints in batches of thousands, so the set would otherwise grow from nothing each time.
func (o *owed) reserveFresh(n int) {
	if o.fresh == nil && n > 8 {
		o.fresh = make(map[string]struct{}, n)
	}
}

// isFresh tells whether a name asked anew is still owed.
func (o *owed) isFresh(name string) bool {
	_, ok := o.fresh[name]
	return ok
}

// addFresh owes a name asked anew. A later part that carried it while everything was owed
// (given) no longer counts: the client may have dropped it since, when it unsubscribed it.
func (o *owed) addFresh(name string) {
	if o.fresh == nil {
		o.fresh = map[string]struct{}{}
	}
	o.fresh[name] = struct{}{}
	delete(o.given, name)
}

// give records that a later part of a split response carried a resource at its version.
func (o *owed) give(e *store.Entry) {
	if o.given == nil {
		o.given = map[string]string{}
	}
	o.given[e.Name] = e.Version
}

// anew tells whether names asked anew are owed.
func (o *owed) anew() bool { return len(o.fresh) > 0 || o.all }

// holdsRemovable tells whether a held-back deletion may now be sent.
func (o *owed) holdsRemovable(through uint64) bool {
	for _, e := range o.held {
		if e.Revision <= through {
			return true
		}
	}
	return false
}
