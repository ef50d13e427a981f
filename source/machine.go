package source

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/mcpbridge/mcpbridge/store"
)

// machine is the state of one stream: its node, its subscriptions, and the order in which their
// responses go. It is pure: its one entry point, handle, takes an event (a request, store
// changes, a timer) and returns the effects the stream's loop carries out (responses and
// heartbeats to send, a collection to watch, a refusal that ends the stream, when to wake for
// the next heartbeat). It does no I/O, takes no locks and reads no clock: the time and the
// store view come with the event. docs/architecture.md draws it.
//
// Work is in proportion to what changed: a request touches its own subscription; a store
// change, the subscriptions of the collections it touched; a flush, the subscriptions marked
// dirty by either, plus those waiting on another type.
type machine struct {
	machineConfig
	access access

	// node is the stream's client, fixed by the first request that names one.
	node *Node
	// nodeMetadata (encoded: a few KiB for an Istio proxy, held compact rather than as a
	// decoded Struct) and nodeAnnotations describe the node to the status view only.
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
	// beating are the subscriptions with a TTL, whose clients are heartbeated (heartbeat.go).
	beating []*subscription
	// order is dirtyInOrder's list, reused from one flush to the next.
	order []*subscription
	// live is the liveness of the owners in the latest view it was read from (liveness).
	live struct {
		v *store.View
		l *liveness
	}
	// watched are the collections the stream watches for changes. A subscription's responses
	// are computed only once its collection is watched, from a view read after the watch
	// began: what was written before signals nothing, so an older view would miss it for good.
	watched map[string]bool
}

// machineConfig is what a machine is given when its stream opens; it never changes.
type machineConfig struct {
	protocol string
	// types resolves how a type is served (Adapter.Type), once per subscription.
	types func(req *Request, node *Node) Type
	// maxSubs bounds held (0: no bound); splitAt is the split size of splittable types.
	maxSubs, splitAt int
	// derived is Options.Derived: whose liveness follows its inputs' (heartbeat.go).
	derived map[string][]string
	// beats shares the content of heartbeats between streams (heartbeat.go); nil: not shared.
	beats *memo[beatContent]
}

// maxNodeMetadata bounds the encoded node metadata a stream keeps for the status view: an
// Istio proxy's is a few KiB; a larger one is not kept (the status view shows the node without
// metadata), so that a client cannot make each of its streams hold megabytes.
const maxNodeMetadata = 64 << 10

func newMachine(cfg machineConfig, a access) *machine {
	return &machine{
		machineConfig: cfg, access: a, subs: map[string]*subscription{},
		byCollection: map[string][]*subscription{}, dirty: map[*subscription]struct{}{}, watched: map[string]bool{},
	}
}

// event is what wakes a stream's machine: a request, collections whose changes the stream
// takes, a collection the stream now watches (as the machine asked), or none of these (a
// timer). view is the store the responses are computed from; now is the time, by which
// heartbeats fall due.
type event struct {
	req     *Request
	changed []string
	watched string
	view    *store.View
	now     time.Time
}

// effects are what the machine decided on an event. The loop carries them out in order: it
// sends each response, ends the stream on a refusal, arms its timer for the next heartbeat,
// and, when asked to watch a collection, watches it and hands the machine an event saying so,
// with a view read after the watch began.
type effects struct {
	// watch is a collection newly subscribed: the stream watches it from now on.
	watch string
	// sends are the responses and heartbeats to send, in order, each with its nonce.
	sends []outgoing
	// expiring are changes in how many resources heartbeats leave to expire (a metric).
	expiring []expiring
	// refuse ends the stream.
	refuse *refusal
	// beatAt is when the next heartbeat is due; zero when none is scheduled.
	beatAt time.Time
	// outcome is what the event's request did, and sub its subscription (nil when the
	// request was ignored before one existed), for the loop's logs and metrics.
	outcome outcome
	sub     *subscription
}

// outgoing is one response the machine decided to send.
type outgoing struct {
	sub   *subscription
	p     *pending
	nonce string
	// push: the response carries a change the client has not been sent (not a first
	// response, nor one that only answers new names), for the push-latency metric.
	push bool
}

type expiring struct {
	sub   *subscription
	delta int
}

// refusal ends a stream: the status it ends with, and what the loop counts and logs.
type refusal struct {
	code codes.Code
	msg  string
	// kind says which refusal it is, for the metrics (refusedNode, overLimit, fellBehind).
	kind refusalKind
}

type refusalKind uint8

const (
	// refusedNode: the node is not the peer's (authz) or not the stream's first.
	refusedNode refusalKind = iota
	// overLimit: limits.subscriptions_per_stream.
	overLimit
	// fellBehind: an incremental wildcard subscriber older than the tombstone retention.
	fellBehind
)

// outcome is what a request did, for the engine's logs and metrics.
type outcome uint8

const (
	// noRequest: the event carried none.
	noRequest outcome = iota
	// ignoredStale: the request's nonce is not the latest response's.
	ignoredStale
	// ignoredPhantom: an unsubscription from a type never subscribed.
	ignoredPhantom
	subscribed
	resubscribed
	acked
	nacked
)

// String names an outcome for the debug log.
func (o outcome) String() string {
	switch o {
	case ignoredStale:
		return "stale"
	case ignoredPhantom:
		return "phantom"
	case subscribed:
		return "subscribed"
	case resubscribed:
		return "resubscribed"
	case acked:
		return "acked"
	case nacked:
		return "nacked"
	}
	return "none"
}

// handle is the machine's one entry point: it applies the event and returns what to do.
func (m *machine) handle(ev event) effects {
	fx := effects{outcome: noRequest}
	defer func() { m.live.v, m.live.l = nil, nil }() // no view is kept between events
	if ev.req != nil {
		m.request(ev.req, ev.now, ev.view, &fx)
		if fx.refuse != nil {
			return fx // nothing of a refused request is answered
		}
	}
	if ev.watched != "" {
		m.watched[ev.watched] = true
		m.changed([]string{ev.watched})
	}
	m.changed(ev.changed)
	if err := m.flush(ev.view, &fx); err != nil {
		fx.refuse = &refusal{code: codes.Unavailable, msg: err.Error(), kind: fellBehind}
		return fx
	}
	m.heartbeats(ev.view, ev.now, &fx)
	fx.beatAt = m.nextHeartbeat()
	return fx
}

// request applies one client request.
func (m *machine) request(req *Request, now time.Time, v *store.View, fx *effects) {
	if fx.refuse = m.admitNode(req.Node); fx.refuse != nil {
		return
	}
	// A request changes one subscription at most: its type's.
	before := m.subs[req.Key].weight()
	fx.sub, fx.outcome = m.apply(req, now)
	m.held += m.subs[req.Key].weight() - before
	if m.maxSubs > 0 && m.held > m.maxSubs {
		if allowance := m.namesAllowance(v); m.held > m.maxSubs+allowance {
			fx.refuse = &refusal{code: codes.ResourceExhausted, kind: overLimit, msg: fmt.Sprintf(
				"limits.subscriptions_per_stream: this request (type %s) would take the stream to %d types and names, over the limit of %d and the %d names the store can hold of what it asks",
				req.Key, m.held, m.maxSubs, allowance)}
			return
		}
	}
	if fx.outcome == subscribed && !m.watched[fx.sub.Collection] {
		fx.watch = fx.sub.Collection
	}
}

// admitNode fixes the stream's node by the first request that names one, once the node is
// checked against the peer's identity; a later request naming another node is refused.
func (m *machine) admitNode(n *Node) *refusal {
	if n == nil || n.ID == "" {
		return nil
	}
	if m.node != nil {
		if n.ID != m.node.ID {
			return &refusal{code: codes.InvalidArgument, kind: refusedNode, msg: fmt.Sprintf(
				"this stream's node is %q, fixed by its first request; a request named node %q", m.node.ID, n.ID)}
		}
		return nil
	}
	if err := m.access.checkNode(n); err != nil {
		return &refusal{code: codes.PermissionDenied, kind: refusedNode, msg: err.Error()}
	}
	m.node = &Node{ID: n.ID, Labels: n.Labels, Namespaces: n.Namespaces, Features: n.Features, Generator: n.Generator}
	m.nodeAnnotations = n.Annotations
	if n.Metadata != nil {
		if b, _ := proto.Marshal(n.Metadata); len(b) <= maxNodeMetadata { // a Struct always encodes
			m.nodeMetadata = b
		}
	}
	return nil
}

// subscriptionCount is how many types the stream subscribed plus the names it subscribed
// explicitly (a wildcard counts as its type alone).
func (m *machine) subscriptionCount() int { return m.held }

// namesAllowance is what the store adds to limits.subscriptions_per_stream: for each
// subscription with explicit names, as many as its collection holds, at most its names; the
// limit scales with the mesh. It is meant against names that do not exist (state a client
// makes the bridge keep for nothing); an Envoy subscribing to every cluster's endpoints by
// name in a mesh larger than the limit names what exists, within what the store holds.
// Counted only when the plain count is over the limit: O(subscriptions), not names.
func (m *machine) namesAllowance(v *store.View) int {
	if v == nil {
		return 0
	}
	n := 0
	for _, s := range m.subs {
		if k := s.want.count(); k > 0 {
			n += min(k, v.Collection(store.BaseCollection(s.Collection)).Count)
		}
	}
	return n
}

func (m *machine) apply(req *Request, now time.Time) (*subscription, outcome) {
	sub := m.subs[req.Key]
	if sub == nil && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 {
		return nil, ignoredPhantom // not a (wildcard) subscription
	}
	if req.Nonce != "" && sub != nil {
		// Only the latest response's nonce counts. It may have been answered already: a client
		// then repeats it with a new set of names. (A nonce for a type this stream never
		// answered cannot be stale: nonces belong to a stream, so that is a new subscription.)
		if req.Nonce != sub.ex.nonce {
			return sub, ignoredStale
		}
		out := resubscribed
		if req.Nonce == sub.ex.pending {
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

// subscribe starts (or, for Restart, starts over) a subscription: its type is resolved here,
// once.
func (m *machine) subscribe(req *Request) *subscription {
	typ := m.types(req, m.node)
	sub := &subscription{policy: policy{key: req.Key, Type: typ, vis: m.access.visibility(typ.Collection)}, seq: m.nextSeq}
	if typ.Splittable && typ.Mode == Incremental {
		sub.splitAt = m.splitAt
	}
	m.nextSeq++
	asked := req.Names
	if typ.Mode == Incremental {
		asked = req.Subscribe
	}
	if typ.WildcardCapable {
		sub.want.legacy = len(asked) == 0
		sub.want.wildcard = sub.want.legacy || slices.Contains(asked, Wildcard)
	}
	sub.want.reserve(len(asked))
	for _, n := range asked {
		if n != Wildcard || !typ.WildcardCapable {
			sub.want.add(n)
		}
	}
	if typ.Mode == Incremental {
		sub.ex.resumed = req.InitialVersions
	}
	m.scope(sub)
	if old := m.subs[req.Key]; old != nil {
		m.forget(old)
	}
	m.subs[req.Key] = sub
	m.byCollection[typ.Collection] = append(m.byCollection[typ.Collection], sub)
	if sub.ttl() > 0 {
		m.beating = append(m.beating, sub)
	}
	m.dirty[sub] = struct{}{}
	return sub
}

func (m *machine) forget(sub *subscription) {
	delete(m.dirty, sub)
	m.beating = slices.DeleteFunc(m.beating, func(x *subscription) bool { return x == sub })
	m.byCollection[sub.Collection] = slices.DeleteFunc(m.byCollection[sub.Collection], func(x *subscription) bool { return x == sub })
	if len(m.byCollection[sub.Collection]) == 0 {
		delete(m.byCollection, sub.Collection)
	}
}

// scope narrows a wildcard subscription to the client's part of the type, from the stream's
// node (known from its first request, whichever type that asked for).
func (m *machine) scope(sub *subscription) {
	sub.want.view, sub.want.include = "", nil
	if sub.Scope != nil && sub.want.wildcard {
		var n Node
		if m.node != nil {
			n = *m.node
		}
		sub.want.view, sub.want.include = sub.Scope(n)
	}
}

// resubscribe applies the names of a follow-up request.
func (m *machine) resubscribe(sub *subscription, req *Request) {
	if sub.Mode == StateOfTheWorld {
		m.resubscribeStateOfTheWorld(sub, req.Names)
		return
	}
	for _, n := range req.Unsubscribe {
		if n == Wildcard && sub.WildcardCapable {
			if sub.want.wildcard && !sub.want.legacy {
				sub.want.wildcard = false
				// The client drops what the wildcard alone covered; what it asks for by name
				// it still holds, as a later part gave it.
				maps.DeleteFunc(sub.owed.given, func(n, _ string) bool { return !sub.wants(n) })
				m.scope(sub)
			}
			continue
		}
		// Phantom unsubscriptions are harmless. A name asked anew and unsubscribed is owed no
		// more; one the client no longer asks for at all it no longer holds, whatever it said
		// it held on resuming (resume looks only at what is asked for), or a later part carried.
		// One the wildcard still asks for it still holds: what a later part carried of it
		// stays given (sent again, it would renew a resource whose producer is away).
		sub.want.remove(n)
		delete(sub.owed.fresh, n)
		if !sub.wants(n) {
			delete(sub.owed.given, n)
			// Dropped, whatever it said it held on resuming: asked for again (by name or by
			// the wildcard) before the first response, it is sent.
			delete(sub.ex.resumed, n)
		}
	}
	sub.want.reserve(len(req.Subscribe))
	sub.owed.reserveFresh(len(req.Subscribe))
	for _, n := range req.Subscribe {
		if n == Wildcard && sub.WildcardCapable {
			m.enterWildcard(sub)
			continue
		}
		sub.want.add(n)
		sub.owed.addFresh(n) // sent even if the client should already have it
	}
}

// resubscribeStateOfTheWorld applies a state-of-the-world request: its names are the whole
// subscription. A wildcard entered by asking for nothing stays (xds-protocol.rst); an explicit
// "*" lasts while the requests name it.
func (m *machine) resubscribeStateOfTheWorld(sub *subscription, names []string) {
	if sub.want.legacy {
		return
	}
	if sub.WildcardCapable && slices.Contains(names, Wildcard) {
		m.enterWildcard(sub)
	} else if sub.want.wildcard {
		sub.want.wildcard = false
		m.scope(sub)
	}
	// The request's names, as the set the subscription will hold if they differ: built once.
	var next nameSet
	next.reserve(len(names))
	for _, n := range names {
		if n == Wildcard && sub.WildcardCapable {
			continue
		}
		k := nameKey(n) // once, for both sets: a state-of-the-world ACK repeats every name
		next.add(n, k)
		if !sub.want.names.has(n, k) {
			sub.owed.addFresh(n)
		}
	}
	for n := range sub.owed.fresh {
		if !next.has(n, nameKey(n)) {
			delete(sub.owed.fresh, n) // asked anew, then dropped before it went
		}
	}
	if next.len() != sub.want.count() || len(sub.owed.fresh) > 0 {
		// Names dropped need no response: the next one (on a change) simply omits them.
		sub.want.replace(next)
	}
}

func (m *machine) enterWildcard(sub *subscription) {
	if sub.want.wildcard {
		return
	}
	sub.want.wildcard, sub.owed.all = true, true // owes the whole type now
	m.scope(sub)
}

// changed marks the subscriptions of collections that changed in the store.
func (m *machine) changed(collections []string) {
	for _, c := range collections {
		for _, sub := range m.byCollection[c] {
			m.dirty[sub] = struct{}{}
		}
	}
}

// flush adds the responses due now to fx, in order, and records them as sent. A response of
// a type waits until the types it comes after are caught up with its revision (ADS: clusters
// before the endpoints and routes that use them); a deletion waits until the types that must
// stop referring to it first are caught up with the revision that made it.
func (m *machine) flush(v *store.View, fx *effects) error {
	defer clear(m.order) // holds nothing between events
	for progress := true; progress && len(m.dirty) > 0; {
		progress = false
		for _, sub := range m.dirtyInOrder() {
			sent, moved, err := m.step(v, sub)
			if err != nil {
				return err
			}
			if sent != nil {
				fx.sends = append(fx.sends, *sent)
			}
			progress = progress || moved
		}
	}
	return nil
}

// step evaluates one dirty subscription: it sends, catches up, or waits.
func (m *machine) step(v *store.View, sub *subscription) (sent *outgoing, moved bool, err error) {
	if sub.ex.phase == phaseAwaiting {
		delete(m.dirty, sub) // the client's answer marks it again
		return nil, false, nil
	}
	if !m.watched[sub.Collection] {
		return nil, false, nil // stays dirty: the stream is about to watch it (see watched)
	}
	info := v.Collection(sub.Collection)
	rev := info.Revision
	below, limited := "", false
	if !m.afterCaughtUp(v, sub, rev) {
		if below, limited = m.sentBelow(v, sub, rev); !limited {
			return nil, false, nil // stays dirty: re-examined when the types before it move
		}
	}
	p, advance, err := sub.next(v, rev, m.protocol, gates{removableThrough: m.removableThrough(v, sub), live: m.liveness(v)})
	if err != nil {
		return nil, false, err
	}
	if limited && !advance && p != nil && !p.carriesOnlyBelow(below) {
		return nil, false, nil // stays dirty: it names what the parts still to go carry
	}
	switch {
	case advance:
		moved = sub.ex.rev != rev || sub.heldChanged(p) || sub.owed.anew()
		sub.caughtUp(rev, p)
	case p != nil:
		// A push carries a change the client has not been sent: not the first response, nor
		// one that only answers new names.
		push := sub.ex.phase != phaseUnsent && p.rev > sub.ex.rev && !p.notPush
		p.changed = info.Changed
		if sub.vis != nil && sub.vis.denial != nil {
			p.msg.Errors = sub.vis.errors(sub.want.sortedNames())
		}
		nonce := m.nextNonce()
		sub.sent(p, nonce)
		sent, moved = &outgoing{sub: sub, p: p, nonce: nonce, push: push}, true
	}
	if len(sub.owed.held) == 0 || sub.ex.phase == phaseAwaiting {
		delete(m.dirty, sub) // held-back deletions keep it dirty until they may go
	}
	return sent, moved, nil
}

// liveness reads which owners are live in v, at most once per view (heartbeat.go).
func (m *machine) liveness(v *store.View) func() *liveness {
	return func() *liveness {
		if m.live.v != v {
			m.live.v, m.live.l = v, livenessOf(v, m.derived)
		}
		return m.live.l
	}
}

func (m *machine) nextNonce() string {
	m.nonce++
	return strconv.FormatUint(m.nonce, 10)
}

// dirtyInOrder lists the dirty subscriptions in response order.
func (m *machine) dirtyInOrder() []*subscription {
	m.order = inOrder(m.order[:0], maps.Keys(m.dirty))
	return m.order
}

// inOrder appends subscriptions to list and sorts it by priority, then by order of
// subscription.
func inOrder(list []*subscription, subs iter.Seq[*subscription]) []*subscription {
	for sub := range subs {
		list = append(list, sub)
	}
	slices.SortFunc(list, func(a, b *subscription) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return list
}

// caughtUpThrough is the store revision up to which a subscription's client has been sent
// every addition: math.MaxUint64 when it is current with the view.
func (m *machine) caughtUpThrough(v *store.View, sub *subscription) uint64 {
	if sub.ex.phase == phaseUnsent || sub.owed.anew() || len(sub.owed.parts) > 0 {
		// Owes a first response, names asked anew (the client does not hold them: a type
		// ordered after this one that names them waits for them), everything anew, or the
		// rest of a response sent in parts.
		return 0
	}
	if sub.owed.shortAnew {
		// A part left out what it owed anew, which the client may never have held: the types
		// that name it wait for the next response, which carries it.
		return 0
	}
	if sub.owed.short {
		return sub.owed.shortAt // a part left out what changed since: owed by the next response
	}
	if sub.ex.rev >= v.Collection(sub.Collection).Revision {
		return math.MaxUint64
	}
	return sub.ex.rev
}

// afterCaughtUp tells whether every type this one comes after is caught up to rev.
func (m *machine) afterCaughtUp(v *store.View, sub *subscription, rev uint64) bool {
	for _, key := range sub.After {
		if d := m.subs[key]; d != nil && m.caughtUpThrough(v, d) < rev {
			return false
		}
	}
	return true
}

// sentBelow lets a type whose resources refer only to the same-named resources of the types
// it comes after (AfterSameNames: a load assignment and its cluster) go while those types are
// midway through a response sent in parts, instead of after its last part: Envoy subscribes to
// the endpoints of the clusters of each part as it arrives, and a million clusters come in
// about seventy parts, each a round trip. It tells the name below which each type this one
// comes after, that is not caught up with rev, has been sent everything up to rev: one whose
// split response was read at rev or later, of which no part sent left anything out (owed.short)
// and which owes no names asked since (they go after the parts). Parts hold no name twice, so
// the names below the least of the parts still to go (pending.least) were sent in the parts
// before, or are not in the response: the client holds them as of the response's revision.
// ok is false when some type does not qualify: the response waits, as for any type.
func (m *machine) sentBelow(v *store.View, sub *subscription, rev uint64) (below string, ok bool) {
	if !sub.AfterSameNames || sub.owed.all || sub.want.wildcard && sub.ex.phase == phaseUnsent {
		return "", false // a whole state names everything: not computed to be set aside
	}
	for _, key := range sub.After {
		d := m.subs[key]
		if d == nil || m.caughtUpThrough(v, d) >= rev {
			continue
		}
		parts := d.owed.parts
		if len(parts) == 0 || d.owed.short || d.owed.anew() || parts[len(parts)-1].rev < rev {
			return "", false
		}
		if !ok || parts[0].least < below {
			below, ok = parts[0].least, true
		}
	}
	return below, ok
}

// removableThrough is the revision up to which deletions may be sent to this subscription's
// client: the least of what the types in its RemoveAfter are caught up to.
func (m *machine) removableThrough(v *store.View, sub *subscription) uint64 {
	through := uint64(math.MaxUint64)
	for _, key := range sub.RemoveAfter {
		if d := m.subs[key]; d != nil {
			through = min(through, m.caughtUpThrough(v, d))
		}
	}
	return through
}

// ordered lists every subscription in response order, for the debug view.
func (m *machine) ordered() []*subscription {
	return inOrder(make([]*subscription, 0, len(m.subs)), maps.Values(m.subs))
}

// nodeID is the stream's node ID ("" before a request named one).
func (m *machine) nodeID() string {
	if m.node == nil {
		return ""
	}
	return m.node.ID
}
