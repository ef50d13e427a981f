package source

import (
	"cmp"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/mcpbridge/mcpbridge/store"
)

// The status view (CSDS, mcpbridge status, the status page): where each connected client
// stands with each type and each resource it asked for, from the bridge's side.
//
// Nothing of it is kept per resource while serving. A subscription keeps what it keeps
// anyway (the revision it sent, the answer to it) plus the revision its client last ACKed and
// the revision ranges of the responses it refused; the per-resource view is computed here,
// when asked, by comparing each wanted resource's store revision (the revision at which its
// current version was written) with those:
//
//   - ERROR: the resource's current version went in a response the client refused (NACK),
//     and it was not sent again (incremental and partial state of the world do not resend;
//     a whole state of the world that the client ACKs afterwards clears it).
//   - SYNCED: the client ACKed a response that carried it, or every one since.
//   - STALE: it went in the response in flight, which the client has not answered yet.
//   - NOT_SENT: its current version has not been sent to this client (the subscription is
//     new, the name was asked anew, or the change is about to go).
//
// Names newly asked (or a wildcard entered anew) go in a response whatever their revision:
// the response in flight records them, STALE until ACKed, ERROR if refused.
//
// The view errs towards alarm, never towards calm: a resource is SYNCED only when the client
// is known to hold its current version (TestMachineAgainstModel holds it to the model client
// at every step). It may say ERROR of a resource the client got again after refusing it (a
// name unsubscribed and asked again in delta), until the resource changes, and it keeps at
// most maxRejections ranges per subscription.
//
// A type's state is the worst of its resources' and of its latest exchange's (never answered
// at all: NOT_SENT; in flight: STALE; refused: ERROR), in the order ERROR, STALE, NOT_SENT,
// SYNCED.

// ConfigState is where a resource or a type stands with one client (CSDS's ConfigStatus).
type ConfigState uint8

const (
	StateUnknown ConfigState = iota
	StateSynced
	StateNotSent
	StateStale
	StateError
)

func (s ConfigState) String() string {
	return [...]string{"UNKNOWN", "SYNCED", "NOT_SENT", "STALE", "ERROR"}[s]
}

// Worse returns the worse of two states (ERROR over STALE over NOT_SENT over SYNCED): the
// constants are declared in that order.
func Worse(a, b ConfigState) ConfigState { return max(a, b) }

// Answer is a client's ACK or NACK of one response.
type Answer = record

// StatusClient is one connected stream as the status view names it.
type StatusClient struct {
	ID        uint64
	Protocol  string
	Peer      string
	Identity  string // the peer's SPIFFE ID, with authz rules
	Node      string
	Connected time.Time
	// Metadata is the node's metadata (xDS node.metadata; MCP sink_node.annotations as
	// string fields); nil when the client sent none.
	Metadata *structpb.Struct
}

// ClientStatus is one stream's state, type by type, in response order.
type ClientStatus struct {
	StatusClient
	Types []TypeStatus
}

// TypeStatus is one subscribed type on a stream.
type TypeStatus struct {
	Type       string // the client's name for it (type URL, collection)
	Collection string
	State      ConfigState
	// SentVersion is the version of the latest response sent (empty before the first);
	// LastACK and LastNACK are the client's latest answers of each kind.
	SentVersion       string
	LastACK, LastNACK *Answer
	// Resources, when asked for (StatusOptions.Resources), are the resources the client
	// asked for, sorted by name, then the names it asked for that do not exist.
	Resources []ResourceStatus
}

// ResourceStatus is one resource a client asked for.
type ResourceStatus struct {
	Name  string
	State ConfigState
	// Missing: asked for by name, and not in the store (or outside the client's view).
	Missing bool
	// Version is the version of the response the state is about: the ACKed one for SYNCED,
	// the one in flight for STALE, the last ACKed one for ERROR and NOT_SENT (what the
	// client holds; empty if nothing).
	Version string
	// Rejected is the NACK that refused the resource's current version, for ERROR.
	Rejected *Answer
}

// StatusOptions select what Status computes.
type StatusOptions struct {
	// Include, if set, selects the streams reported; it sees the stream before any
	// per-resource work is done for it.
	Include func(*StatusClient) bool
	// Resources lists each resource; without it only the types' states are computed (the
	// same work, without keeping the list).
	Resources bool
}

// Status reports every connected stream Include selects, ordered by ID, read from one view
// of the store. Each stream is locked only while its subscriptions' few fields are copied;
// resources are read from the store view afterwards, a collection's snapshot shared by every
// stream of one call.
func (e *Engine) Status(opts StatusOptions) []ClientStatus {
	var out []ClientStatus
	snaps := &snapshots{v: e.store.View()}
	e.streams.Range(func(_, x any) bool {
		s := x.(*stream)
		client := s.statusClient()
		if opts.Include != nil && !opts.Include(&client) {
			return true // before its subscriptions are copied: a fetch of one node is cheap
		}
		subs := s.statusSubs()
		cs := ClientStatus{StatusClient: client, Types: make([]TypeStatus, 0, len(subs))}
		for i := range subs {
			cs.Types = append(cs.Types, subs[i].evaluate(snaps, opts.Resources))
		}
		out = append(out, cs)
		return true
	})
	slices.SortFunc(out, func(a, b ClientStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// statusClient is the stream as the status view names it.
func (s *stream) statusClient() StatusClient {
	s.mu.Lock()
	c := StatusClient{ID: s.id, Protocol: s.protocol, Peer: s.peer, Identity: s.identity, Node: s.m.nodeID(), Connected: s.connected}
	meta, ann := s.m.nodeMetadata, s.m.nodeAnnotations // set once, never changed
	s.mu.Unlock()
	c.Metadata = decodeMetadata(meta, ann)
	return c
}

// statusSubs copies what the status view reads of the stream's subscriptions, under its lock.
func (s *stream) statusSubs() []subState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.statusState()
}

// decodeMetadata is a node's metadata as a Struct: the encoded xDS metadata, or MCP
// annotations as string fields; nil for neither.
func decodeMetadata(encoded []byte, annotations map[string]string) *structpb.Struct {
	switch {
	case encoded != nil:
		st := &structpb.Struct{}
		if proto.Unmarshal(encoded, st) == nil {
			return st
		}
	case len(annotations) > 0:
		st := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(annotations))}
		for k, v := range annotations {
			st.Fields[k] = structpb.NewStringValue(v)
		}
		return st
	}
	return nil
}

// subState is a copy of what the status view reads of one subscription: the stream goes on
// while it is evaluated.
type subState struct {
	key, collection   string
	phase             phase
	nacked            bool
	wildcard          bool
	namespaced        bool // Type.Namespaced: a name also asks for NAME/REST
	include           func(string) bool
	vis               *visibility
	names             []string // sorted
	fresh             []string // sorted: asked anew, not sent yet
	freshAll          bool
	freshSent         map[string]struct{} // asked anew, in the response in flight (immutable)
	freshAllSent      bool
	sentRev, ackedRev uint64
	sentVer           string
	lastAck, lastNack *record
	rejected          []rejection // never changed in place (rejectedAfter copies)
}

// statusState copies each subscription's status fields, in response order.
func (m *machine) statusState() []subState {
	subs := m.ordered()
	out := make([]subState, len(subs))
	for i, sub := range subs {
		out[i] = subState{
			key: sub.key, collection: sub.Collection, phase: sub.ex.phase, nacked: sub.ex.nacked,
			wildcard: sub.want.wildcard, namespaced: sub.Namespaced, include: sub.want.include, vis: sub.vis,
			names: sub.want.names.sorted(), freshAll: sub.owed.all, freshSent: sub.ex.carried, freshAllSent: sub.ex.carriedAll,
			sentRev: sub.ex.rev, ackedRev: sub.ex.ackedRev, sentVer: sub.ex.version,
			lastAck: sub.ex.lastAck, lastNack: sub.ex.lastNack, rejected: sub.ex.rejected,
		}
		if len(sub.owed.fresh) > 0 {
			out[i].fresh = sortedNames(sub.owed.fresh)
		}
	}
	return out
}

// snapshots shares each collection's snapshot among the streams of one Status call.
type snapshots struct {
	v *store.View
	m map[string][]*store.Entry
}

func (s *snapshots) get(collection string) []*store.Entry {
	if es, ok := s.m[collection]; ok {
		return es
	}
	if s.m == nil {
		s.m = map[string][]*store.Entry{}
	}
	_, es := s.v.Snapshot(collection)
	s.m[collection] = es
	return es
}

// evaluate computes a type's state and, with resources, each resource's.
func (st *subState) evaluate(snaps *snapshots, resources bool) TypeStatus {
	ts := TypeStatus{Type: st.key, Collection: store.DisplayName(st.collection), LastACK: st.lastAck, LastNACK: st.lastNack}
	if st.phase != phaseUnsent {
		ts.SentVersion = st.sentVer
	}
	ts.State = st.exchangeState()
	add := func(rs ResourceStatus) {
		ts.State = Worse(ts.State, rs.State)
		if resources {
			ts.Resources = append(ts.Resources, rs)
		}
	}
	var missing []string
	if resources {
		n := len(st.names)
		if st.wildcard {
			n = len(snaps.get(st.collection)) // at most: sized once rather than grown
		}
		ts.Resources = make([]ResourceStatus, 0, n)
	}
	if st.wildcard {
		for _, e := range snaps.get(st.collection) {
			if st.wants(e.Name) {
				add(st.resource(e))
			}
		}
		for _, name := range st.names {
			if snaps.v.Get(st.collection, name) == nil || !st.vis.sees(name) {
				missing = append(missing, name)
			}
		}
	} else if st.namespaced {
		st.eachAsked(snaps.v, add, &missing)
	} else {
		for _, name := range st.names {
			if e := snaps.v.Get(st.collection, name); e != nil && st.vis.sees(name) {
				add(st.resource(e))
			} else {
				missing = append(missing, name)
			}
		}
	}
	if resources {
		for _, name := range missing {
			// Nothing to send: not part of the type's state.
			ts.Resources = append(ts.Resources, ResourceStatus{Name: name, Missing: true, State: StateNotSent, Version: st.ackedVersion()})
		}
	}
	return ts
}

// exchangeState is the state of the type's latest exchange, before its resources are looked at.
func (st *subState) exchangeState() ConfigState {
	switch {
	case st.phase == phaseUnsent:
		return StateNotSent
	case st.phase == phaseAwaiting:
		return StateStale
	case st.nacked:
		return StateError
	}
	return StateSynced
}

// eachAsked adds the state of each resource a Namespaced type's names ask for (a name's own,
// and its namespace's: subscription.asked), once each, and the names that ask for nothing
// to missing.
func (st *subState) eachAsked(v *store.View, add func(ResourceStatus), missing *[]string) {
	seen := map[string]bool{}
	for _, name := range st.names {
		asked := askedEntries(v, st.collection, st.vis, true, name)
		if len(asked) == 0 {
			*missing = append(*missing, name)
		}
		for _, e := range asked {
			if !seen[e.Name] {
				seen[e.Name] = true
				add(st.resource(e))
			}
		}
	}
}

// askedIn tells whether a resource was asked for by a name in: its own, or for a Namespaced
// type its namespace (askedBy).
func (st *subState) askedIn(name string, in func(string) bool) bool {
	return askedBy(name, st.namespaced, in)
}

// wants is subscription.wants for a wildcard subscription's copy.
func (st *subState) wants(name string) bool {
	if !st.vis.sees(name) {
		return false
	}
	if _, ok := slices.BinarySearch(st.names, name); ok {
		return true
	}
	return st.include == nil || st.include(name)
}

// resource is the state of one wanted resource (see the comment at the top).
func (st *subState) resource(e *store.Entry) ResourceStatus {
	rs := ResourceStatus{Name: e.Name, Version: st.ackedVersion()}
	if st.phase == phaseUnsent || st.freshAll {
		rs.State = StateNotSent
		return rs
	}
	if st.askedIn(e.Name, func(n string) bool { _, ok := slices.BinarySearch(st.fresh, n); return ok }) {
		rs.State = StateNotSent
		return rs
	}
	for _, r := range st.rejected {
		if r.covers(e, st.namespaced) {
			rs.State, rs.Rejected = StateError, r.rec
			return rs
		}
	}
	if st.freshAllSent || st.askedIn(e.Name, func(n string) bool { _, ok := st.freshSent[n]; return ok }) {
		// Newly asked: sent whatever its revision, and held only once ACKed.
		rs.State = StateNotSent
		if st.phase == phaseAwaiting {
			rs.State, rs.Version = StateStale, st.sentVer
		}
		return rs
	}
	switch {
	case e.Revision <= st.ackedRev:
		rs.State = StateSynced
	case e.Revision <= st.sentRev && st.phase == phaseAwaiting:
		rs.State, rs.Version = StateStale, st.sentVer
	default:
		rs.State = StateNotSent
	}
	return rs
}

func (st *subState) ackedVersion() string {
	if st.lastAck == nil {
		return ""
	}
	return st.lastAck.Version
}

// rejection is a response the client refused: it carried the resources written in
// (from, to], and the names newly asked (names, or all for a wildcard entered anew) as they
// were at to; the client holds none of them in that version. rec is the NACK.
type rejection struct {
	from, to uint64
	rec      *record
	names    map[string]struct{} // immutable
	all      bool
}

// covers tells whether the refused response carried the current version of a resource
// (namespaced: of a Namespaced type, whose names asked anew ask for their namespaces).
func (r *rejection) covers(e *store.Entry, namespaced bool) bool {
	if e.Revision > r.to {
		return false
	}
	if e.Revision > r.from || r.all {
		return true
	}
	return askedBy(e.Name, namespaced, func(n string) bool { _, ok := r.names[n]; return ok })
}

// maxRejections bounds the ranges a subscription keeps: a client that refuses response
// after response has its oldest two merged, the gap between them then counted as refused too
// (reported ERROR rather than SYNCED: the view errs towards alarm, never towards calm).
const maxRejections = 8

// rejectedAfter returns the ranges with r added, as a new slice: the status view reads the
// old one without the stream's lock.
func rejectedAfter(rs []rejection, r rejection) []rejection {
	out := make([]rejection, 0, min(len(rs)+1, maxRejections))
	if len(rs) >= maxRejections {
		out = append(out, rejection{from: rs[0].from, to: rs[1].to, rec: rs[1].rec, names: union(rs[0].names, rs[1].names), all: rs[0].all || rs[1].all})
		rs = rs[2:]
	}
	return append(append(out, rs...), r)
}

func union(a, b map[string]struct{}) map[string]struct{} {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make(map[string]struct{}, len(a)+len(b))
	for n := range a {
		out[n] = struct{}{}
	}
	for n := range b {
		out[n] = struct{}{}
	}
	return out
}
