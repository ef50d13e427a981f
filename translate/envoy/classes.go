package envoy

import (
	"sync"
	"time"

	"github.com/mcpbridge/mcpbridge/translate"
)

// DefaultGatewayClassGrace is how long a gateway class's outputs outlive its last proxy: a
// proxy that reconnects (a restart, a rollout) finds them built.
const DefaultGatewayClassGrace = 30 * time.Second

// holdRegistry counts the connected proxies of each view they hold (a gateway class, a
// namespace's scope), for the controller's goroutine to build the views that have some
// (acquire) and drop those that had none for the grace period. It is the one piece of the
// controller other goroutines call.
type holdRegistry[V any] struct {
	grace time.Duration
	wake  chan struct{} // a change is pending; buffered 1, shared by the controller's registries
	// max bounds the views held at once (0: no bound); a proxy over it holds nothing and is
	// served the mesh-wide view, and refused counts them.
	max     int
	refused uint64

	mu      sync.Mutex
	refs    map[string]*holdRef[V]
	pending map[string]*V // to apply: a view to build, or nil to drop
}

type holdRef[V any] struct {
	// built is closed once the view's outputs are written (markBuilt).
	built chan struct{}
	count int
	drop  *time.Timer // armed while count is 0
	armed uint64      // identifies the current drop timer
}

// classRegistry holds gateway classes.
type classRegistry = holdRegistry[translate.GatewayClass]

func newClassRegistry(grace time.Duration) *classRegistry {
	return newHoldRegistry[translate.GatewayClass](grace, make(chan struct{}, 1), 0)
}

func newHoldRegistry[V any](grace time.Duration, wake chan struct{}, max int) *holdRegistry[V] {
	if grace <= 0 {
		grace = DefaultGatewayClassGrace
	}
	return &holdRegistry[V]{grace: grace, wake: wake, max: max, refs: map[string]*holdRef[V]{}, pending: map[string]*V{}}
}

// acquire counts a proxy of a view and returns what to call when it goes, and a channel
// closed once the view is built; ok is false (release does nothing, built is nil) when the
// registry holds its maximum of views already.
func (r *holdRegistry[V]) acquire(id string, v V) (release func(), built <-chan struct{}, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.refs[id]
	if ref == nil {
		if r.max > 0 && len(r.refs) >= r.max {
			r.refused++
			return func() {}, nil, false
		}
		ref = &holdRef[V]{built: make(chan struct{})}
		r.refs[id] = ref
		r.pending[id] = &v
		r.notify()
	}
	ref.count++
	if ref.drop != nil {
		ref.drop.Stop()
		ref.drop = nil
	}
	var once sync.Once
	return func() { once.Do(func() { r.release(id) }) }, ref.built, true
}

// markBuilt closes the built channel of each view of ids still held: their outputs are
// written.
func (r *holdRegistry[V]) markBuilt(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if ref := r.refs[id]; ref != nil {
			select {
			case <-ref.built:
			default:
				close(ref.built)
			}
		}
	}
}

func (r *holdRegistry[V]) release(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.refs[id]
	if ref == nil {
		return
	}
	if ref.count--; ref.count > 0 {
		return
	}
	ref.armed++
	armed := ref.armed
	ref.drop = time.AfterFunc(r.grace, func() { r.expire(id, ref, armed) })
}

// expire drops a view whose last proxy left a grace period ago, if none came back since.
func (r *holdRegistry[V]) expire(id string, ref *holdRef[V], armed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs[id] != ref || ref.count > 0 || ref.armed != armed {
		return
	}
	delete(r.refs, id)
	r.pending[id] = nil
	r.notify()
}

func (r *holdRegistry[V]) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// apply hands the pending changes to the translator: set builds a view, remove drops one.
// It returns the IDs of the views set.
func (r *holdRegistry[V]) apply(set func(V), remove func(id string)) (setIDs []string) {
	r.mu.Lock()
	pending := r.pending
	r.pending = map[string]*V{}
	r.mu.Unlock()
	for _, id := range sortedKeys(pending) {
		if v := pending[id]; v == nil {
			remove(id)
		} else {
			set(*v)
			setIDs = append(setIDs, id)
		}
	}
	return setIDs
}

// held is how many views are held (built, or within their grace period).
func (r *holdRegistry[V]) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.refs)
}

// counts are the connected proxies of each view.
func (r *holdRegistry[V]) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.refs))
	for id, ref := range r.refs {
		out[id] = ref.count
	}
	return out
}

// stop disarms the drop timers.
func (r *holdRegistry[V]) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range r.refs {
		if ref.drop != nil {
			ref.drop.Stop()
		}
	}
}
