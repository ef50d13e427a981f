package linkerd

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/mcpbridge/mcpbridge/store"
)

// hub holds one subscription per authority, shared by every stream that asks for it. It
// watches the ServiceEntry and WorkloadEntry collections (the store's change notification),
// brings its index up to date by the changes alone, and recomputes the answer of the
// authorities whose host a change touched, once each, whatever the number of their streams;
// a new answer is published to the authority's streams by a non-blocking signal, so the
// store's writers never wait for a client.
//
// The index exists only while some stream is subscribed: a bridge without Linkerd clients
// keeps no decoded copy of anything.
type hub struct {
	store        *store.Store
	domainSuffix string

	mu     sync.Mutex
	idx    *index // nil while nobody is subscribed
	auths  map[authority]*authEntry
	byHost map[string]map[*authEntry]struct{}

	resolves atomic.Uint64 // answers computed
	encodes  atomic.Uint64 // update sets encoded
}

// authEntry is the subscription of one authority.
type authEntry struct {
	key  authority
	cur  atomic.Pointer[snapshot]
	subs map[*subscriber]struct{} // guarded by hub.mu
}

// subscriber is one stream's hold on an authority.
type subscriber struct {
	auth   *authEntry
	notify chan struct{} // capacity one: changes coalesce
}

func newHub(st *store.Store, domainSuffix string) *hub {
	return &hub{store: st, domainSuffix: ".svc." + domainSuffix, auths: map[authority]*authEntry{}, byHost: map[string]map[*authEntry]struct{}{}}
}

// run follows the store until ctx ends.
func (h *hub) run(ctx context.Context) {
	w := h.store.Watch(ServiceEntries, WorkloadEntries)
	defer w.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.C():
			w.Changed() // the index reads the changes of both collections anyway
			h.mu.Lock()
			h.refresh()
			h.mu.Unlock()
		}
	}
}

// refresh brings the index to the store as it is now and publishes the answers that changed.
// It returns the resolver of that state (nil while nobody is subscribed). Caller holds mu.
func (h *hub) refresh() *resolver {
	if h.idx == nil {
		return nil // nobody subscribed: nothing to keep up to date
	}
	v := h.store.View()
	hosts, all := h.idx.sync(v)
	r := &resolver{idx: h.idx, view: v, domainSuffix: h.domainSuffix}
	if all {
		for _, a := range h.auths {
			h.publish(a, r)
		}
		return r
	}
	for host := range hosts {
		for a := range h.byHost[host] {
			h.publish(a, r)
		}
	}
	return r
}

// publish computes an authority's answer and, if it changed, makes it the current snapshot
// and wakes its streams. Caller holds mu.
func (h *hub) publish(a *authEntry, r *resolver) {
	ans := r.resolve(a.key)
	h.resolves.Add(1)
	old := a.cur.Load()
	if old != nil && old.answer.equal(ans) {
		return
	}
	next := &snapshot{answer: ans, prev: old, encodes: &h.encodes, version: 1, changed: r.changed()}
	if old != nil {
		next.version = old.version + 1
		old.mu.Lock()
		old.prev = nil // only the latest step is shared; older snapshots are let go
		old.mu.Unlock()
	}
	a.cur.Store(next)
	for s := range a.subs {
		select {
		case s.notify <- struct{}{}:
		default: // a wake-up is pending; it will read the latest snapshot
		}
	}
}

// subscribe adds a stream to an authority's subscription, creating it (and its first answer,
// from the store as it is now) for the first stream.
func (h *hub) subscribe(key authority) *subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idx == nil {
		h.idx = newIndex()
	}
	// Read what the store holds now, so that a fresh subscription's first answer is never
	// older than the subscription: no "does not exist" for a service just written.
	r := h.refresh()
	a := h.auths[key]
	if a == nil {
		a = &authEntry{key: key, subs: map[*subscriber]struct{}{}}
		h.auths[key] = a
		if h.byHost[key.host] == nil {
			h.byHost[key.host] = map[*authEntry]struct{}{}
		}
		h.byHost[key.host][a] = struct{}{}
		h.publish(a, r)
	}
	s := &subscriber{auth: a, notify: make(chan struct{}, 1)}
	a.subs[s] = struct{}{}
	return s
}

// unsubscribe ends a stream's hold; the last stream of an authority ends its subscription,
// and the last of all lets the index go.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := s.auth
	delete(a.subs, s)
	if len(a.subs) > 0 {
		return
	}
	delete(h.auths, a.key)
	delete(h.byHost[a.key.host], a)
	if len(h.byHost[a.key.host]) == 0 {
		delete(h.byHost, a.key.host)
	}
	if len(h.auths) == 0 {
		h.idx = nil
	}
}
