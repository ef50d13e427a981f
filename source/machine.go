package source

import (
	"cmp"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/store"
)

// machine is the state of one stream: its subscriptions, and the order in which their responses
// go. It is pure: the stream goroutine feeds it events (a request, collections that changed)
// and sends the responses it returns, in order; it does no I/O, takes no locks and reads no
// clock (times are passed in, for the debug view only). docs/architecture.md draws it.
//
// Work is in proportion to what changed: a request touches its own subscription; a store
// change, the subscriptions of the collections it touched; a flush, the subscriptions marked
// dirty by either, plus those waiting on another type.
type machine struct {
	protocol string
	node     string
	// nodeLabels and nodeNamespaces, from the first request that names the node, scope
	// wildcard subscriptions (Request.Scope).
	nodeLabels     map[string]string
	nodeNamespaces []string
	nodeSeen       bool
	// nodeMetadata (encoded: a few KiB for an Istio proxy, held compact rather than as a
	// decoded Struct) and nodeAnnotations, from the same request, for the status view only.
	nodeMetadata    []byte
	nodeAnnotations map[string]string

	subs         map[string]*subscription   // by the client's name for the type
	byCollection map[string][]*subscription // several keys may name one collection (aliases)
	// dirty subscriptions may owe a response: changed, asked again, answered, or waiting for
	// another type of the stream to catch up.
	dirty   map[*subscription]struct{}
	nextSeq int
	nonce   uint64
	// held counts the types subscribed and the names explicitly subscribed, what
	// limits.subscriptions_per_stream bounds; kept as requests change them, so that asking
	// costs nothing however many types a client names.
	held int
}

// maxNodeMetadata bounds the encoded node metadata a stream keeps for the status view: an
// Istio proxy's is a few KiB; a larger one is not kept (the status view shows the node without
// metadata), so that a client cannot make each of its streams hold megabytes.
const maxNodeMetadata = 64 << 10

func newMachine(protocol string) *machine {
	return &machine{
		protocol: protocol, subs: map[string]*subscription{},
		byCollection: map[string][]*subscription{}, dirty: map[*subscription]struct{}{},
	}
}

// outcome is what a request did, for the engine's logs and metrics.
type outcome uint8

const (
	// ignoredStale: the request's nonce is not the latest response's.
	ignoredStale outcome = iota
	// ignoredPhantom: an unsubscription from a type never subscribed.
	ignoredPhantom
	subscribed
	resubscribed
	acked
	nacked
)

// request applies one client request. It returns the subscription concerned (nil when
// ignored before one exists) and what happened.
func (m *machine) request(req *Request, now time.Time) (*subscription, outcome) {
	// A request changes one subscription at most: its type's.
	before := m.subs[req.Key].weight()
	sub, out := m.apply(req, now)
	m.held += m.subs[req.Key].weight() - before
	return sub, out
}

// subscriptionCount is how many types the stream subscribed plus the names it subscribed
// explicitly (a wildcard counts as its type alone).
func (m *machine) subscriptionCount() int { return m.held }

// weight is what one subscription counts in subscriptionCount: its type and its names.
func (s *subscription) weight() int {
	if s == nil {
		return 0
	}
	return 1 + len(s.names)
}

func (m *machine) apply(req *Request, now time.Time) (*subscription, outcome) {
	if req.Node != "" {
		m.node = req.Node
		if !m.nodeSeen {
			m.nodeSeen, m.nodeLabels, m.nodeNamespaces = true, req.NodeLabels, req.NodeNamespaces
			m.nodeAnnotations = req.NodeAnnotations
			if req.NodeMetadata != nil {
				if b, _ := proto.Marshal(req.NodeMetadata); len(b) <= maxNodeMetadata { // a Struct always encodes
					m.nodeMetadata = b
				}
			}
		}
	}
	sub := m.subs[req.Key]
	if sub == nil && req.Mode == Incremental && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 {
		return nil, ignoredPhantom // not a (wildcard) subscription
	}
	if req.Nonce != "" && sub != nil {
		// Only the latest response's nonce counts. It may have been answered already: a client
		// then repeats it with a new set of names. (A nonce for a type this stream never
		// answered cannot be stale: nonces belong to a stream, so that is a new subscription.)
		if req.Nonce != sub.sentNonce {
			return sub, ignoredStale
		}
		out := resubscribed
		if req.Nonce == sub.pendingNonce {
			out = acked
			if req.ErrorDetail != nil {
				out = nacked
			}
			sub.answered(req.Nonce, req.ErrorDetail.GetMessage(), out == nacked, now)
		}
		m.resubscribe(sub, req)
		m.dirty[sub] = struct{}{}
		return sub, out
	}
	if sub == nil || req.Restart {
		return m.subscribe(req), subscribed
	}
	m.resubscribe(sub, req)
	m.dirty[sub] = struct{}{}
	return sub, resubscribed
}

// subscribe starts (or, for Restart, starts over) a subscription.
func (m *machine) subscribe(req *Request) *subscription {
	sub := &subscription{policy: req.policy(), seq: m.nextSeq}
	m.nextSeq++
	asked := req.Names
	if req.Mode == Incremental {
		asked = req.Subscribe
	}
	if sub.wildcardCapable {
		sub.legacyWildcard = len(asked) == 0
		sub.wildcard = sub.legacyWildcard || slices.Contains(asked, Wildcard)
	}
	for _, n := range asked {
		if n != Wildcard || !sub.wildcardCapable {
			sub.addName(n)
		}
	}
	sub.fresh = nil // the first response carries everything
	sub.initial = req.InitialVersions
	m.scope(sub)
	if old := m.subs[req.Key]; old != nil {
		m.forget(old)
	}
	m.subs[req.Key] = sub
	m.byCollection[sub.collection] = append(m.byCollection[sub.collection], sub)
	m.dirty[sub] = struct{}{}
	return sub
}

func (m *machine) forget(sub *subscription) {
	delete(m.dirty, sub)
	m.byCollection[sub.collection] = slices.DeleteFunc(m.byCollection[sub.collection], func(x *subscription) bool { return x == sub })
	if len(m.byCollection[sub.collection]) == 0 {
		delete(m.byCollection, sub.collection)
	}
}

// scope narrows a wildcard subscription to the client's view of the type, from the stream's
// node (known from its first request, whichever type that asked for).
func (m *machine) scope(sub *subscription) {
	sub.view, sub.include = "", nil
	if sub.scope != nil && sub.wildcard {
		sub.view, sub.include = sub.scope(Node{ID: m.node, Labels: m.nodeLabels, Namespaces: m.nodeNamespaces})
	}
}

// resubscribe applies the names of a follow-up request.
func (m *machine) resubscribe(sub *subscription, req *Request) {
	if req.Mode == StateOfTheWorld {
		m.resubscribeStateOfTheWorld(sub, req.Names)
		return
	}
	for _, n := range req.Unsubscribe {
		if n == Wildcard && sub.wildcardCapable {
			if sub.wildcard && !sub.legacyWildcard {
				sub.wildcard = false
				m.scope(sub)
			}
			continue
		}
		sub.removeName(n) // phantom unsubscriptions are harmless
	}
	for _, n := range req.Subscribe {
		if n == Wildcard && sub.wildcardCapable {
			m.enterWildcard(sub)
			continue
		}
		sub.addName(n)
		sub.addFresh(n) // sent even if the client should already have it
	}
}

// resubscribeStateOfTheWorld applies a state-of-the-world request: its names are the whole
// subscription. A wildcard entered by asking for nothing stays (xds-protocol.rst); an explicit
// "*" lasts while the requests name it.
func (m *machine) resubscribeStateOfTheWorld(sub *subscription, names []string) {
	if sub.legacyWildcard {
		return
	}
	wild := sub.wildcardCapable && slices.Contains(names, Wildcard)
	if wild {
		m.enterWildcard(sub)
	} else if sub.wildcard {
		sub.wildcard = false
		m.scope(sub)
	}
	next := make(map[string]struct{}, len(names))
	for _, n := range names {
		if n == Wildcard && sub.wildcardCapable {
			continue
		}
		next[n] = struct{}{}
		if _, had := sub.names[n]; !had {
			sub.addFresh(n)
		}
	}
	if len(next) != len(sub.names) || len(sub.fresh) > 0 {
		// Names dropped need no response: the next one (on a change) simply omits them.
		sub.names = next
		sub.namesChanged()
	}
}

func (m *machine) enterWildcard(sub *subscription) {
	if sub.wildcard {
		return
	}
	sub.wildcard, sub.freshAll = true, true // owes the whole type now
	m.scope(sub)
}

func (s *subscription) addName(n string) {
	if s.names == nil {
		s.names = map[string]struct{}{}
	}
	if _, had := s.names[n]; had {
		return
	}
	s.names[n] = struct{}{}
	s.nameAdded(n)
}

func (s *subscription) removeName(n string) {
	if _, ok := s.names[n]; ok {
		delete(s.names, n)
		s.namesChanged()
	}
	delete(s.fresh, n)
}

func (s *subscription) addFresh(name string) {
	if s.fresh == nil {
		s.fresh = map[string]struct{}{}
	}
	s.fresh[name] = struct{}{}
}

// changed marks the subscriptions of collections that changed in the store.
func (m *machine) changed(collections []string) {
	for _, c := range collections {
		for _, sub := range m.byCollection[c] {
			m.dirty[sub] = struct{}{}
		}
	}
}

// response is one response the machine decided to send, with its nonce.
type response struct {
	sub   *subscription
	p     *pending
	nonce string
	push  bool
}

// due returns the responses to send now, in order, and records them as sent. A response of a
// type waits until the types it comes after are caught up with its revision (ADS: clusters
// before the endpoints and routes that use them); a deletion waits until the types that must
// stop referring to it first are caught up with the revision that made it.
func (m *machine) due(v *store.View) ([]response, error) {
	var out []response
	for progress := true; progress && len(m.dirty) > 0; {
		progress = false
		for _, sub := range m.dirtyInOrder() {
			sent, moved, err := m.step(v, sub)
			if err != nil {
				return out, err
			}
			if sent != nil {
				out = append(out, *sent)
			}
			progress = progress || moved
		}
	}
	return out, nil
}

// step evaluates one dirty subscription: it sends, catches up, or waits.
func (m *machine) step(v *store.View, sub *subscription) (sent *response, moved bool, err error) {
	if sub.phase == phaseAwaiting {
		delete(m.dirty, sub) // the client's answer marks it again
		return nil, false, nil
	}
	info := v.Collection(sub.collection)
	rev := info.Revision
	if !m.afterCaughtUp(v, sub, rev) {
		return nil, false, nil // stays dirty: re-examined when the types before it move
	}
	p, advance, err := sub.next(v, rev, m.protocol, gates{removableThrough: m.removableThrough(v, sub)})
	if err != nil {
		return nil, false, err
	}
	switch {
	case advance:
		moved = sub.sentRev != rev || sub.heldChanged(p) || sub.freshAll || len(sub.fresh) > 0
		sub.caughtUp(rev, p)
	case p != nil:
		m.nonce++
		nonce := strconv.FormatUint(m.nonce, 10)
		// A push carries a change the client has not been sent: not the first response, nor
		// one that only answers new names.
		push := sub.phase != phaseUnsent && p.rev > sub.sentRev && !p.notPush
		p.changed = info.Changed
		if sub.vis != nil && sub.vis.denial != nil {
			p.msg.Errors = sub.vis.errors(sub.sortedNames())
		}
		sub.sent(p, nonce)
		sent, moved = &response{sub: sub, p: p, nonce: nonce, push: push}, true
	}
	if len(sub.held) == 0 || sub.phase == phaseAwaiting {
		delete(m.dirty, sub) // held-back deletions keep it dirty until they may go
	}
	return sent, moved, nil
}

// dirtyInOrder lists the dirty subscriptions in response order.
func (m *machine) dirtyInOrder() []*subscription {
	return inOrder(maps.Keys(m.dirty), len(m.dirty))
}

// inOrder sorts subscriptions by priority, then by order of subscription.
func inOrder(subs iter.Seq[*subscription], n int) []*subscription {
	list := make([]*subscription, 0, n)
	for sub := range subs {
		list = append(list, sub)
	}
	slices.SortFunc(list, func(a, b *subscription) int {
		if c := cmp.Compare(a.priority, b.priority); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return list
}

// caughtUpThrough is the store revision up to which a subscription's client has been sent
// every addition: math.MaxUint64 when it is current with the view.
func (m *machine) caughtUpThrough(v *store.View, sub *subscription) uint64 {
	if sub.phase == phaseUnsent || sub.freshAll || len(sub.parts) > 0 {
		return 0 // owes a first response, everything anew, or the rest of one sent in parts
	}
	if sub.sentRev >= v.Collection(sub.collection).Revision {
		return math.MaxUint64
	}
	return sub.sentRev
}

// afterCaughtUp tells whether every type this one comes after is caught up to rev.
func (m *machine) afterCaughtUp(v *store.View, sub *subscription, rev uint64) bool {
	for _, key := range sub.after {
		if d := m.subs[key]; d != nil && m.caughtUpThrough(v, d) < rev {
			return false
		}
	}
	return true
}

// removableThrough is the revision up to which deletions may be sent to this subscription's
// client: the least of what the types in its removeAfter are caught up to.
func (m *machine) removableThrough(v *store.View, sub *subscription) uint64 {
	through := uint64(math.MaxUint64)
	for _, key := range sub.removeAfter {
		if d := m.subs[key]; d != nil {
			through = min(through, m.caughtUpThrough(v, d))
		}
	}
	return through
}

// ordered lists every subscription in response order, for the debug view.
func (m *machine) ordered() []*subscription { return inOrder(maps.Values(m.subs), len(m.subs)) }
