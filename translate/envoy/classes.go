package envoy

import (
	"sync"
	"time"

	"github.com/mcpbridge/mcpbridge/translate"
)

// DefaultGatewayClassGrace is how long a gateway class's outputs outlive its last proxy: a
// proxy that reconnects (a restart, a rollout) finds them built.
const DefaultGatewayClassGrace = 30 * time.Second

// classRegistry counts the connected gateway proxies of each class, for the controller's
// goroutine to build the classes that have some (Acquire) and drop those that had none for
// the grace period. It is the one piece of the controller other goroutines call.
type classRegistry struct {
	grace time.Duration
	wake  chan struct{} // a change is pending; buffered 1

	mu      sync.Mutex
	refs    map[string]*classRef
	pending map[string]*translate.GatewayClass // to apply: a class to build, or nil to drop
}

type classRef struct {
	class translate.GatewayClass
	count int
	drop  *time.Timer // armed while count is 0
	armed uint64      // identifies the current drop timer
}

func newClassRegistry(grace time.Duration) *classRegistry {
	if grace <= 0 {
		grace = DefaultGatewayClassGrace
	}
	return &classRegistry{grace: grace, wake: make(chan struct{}, 1), refs: map[string]*classRef{}, pending: map[string]*translate.GatewayClass{}}
}

// acquire counts a proxy of a class and returns what to call when it goes.
func (r *classRegistry) acquire(c translate.GatewayClass) (release func()) {
	id := c.ID()
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.refs[id]
	if ref == nil {
		ref = &classRef{class: c}
		r.refs[id] = ref
		cc := c
		r.pending[id] = &cc
		r.notify()
	}
	ref.count++
	if ref.drop != nil {
		ref.drop.Stop()
		ref.drop = nil
	}
	var once sync.Once
	return func() { once.Do(func() { r.release(id) }) }
}

func (r *classRegistry) release(id string) {
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

// expire drops a class whose last proxy left a grace period ago, if none came back since.
func (r *classRegistry) expire(id string, ref *classRef, armed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refs[id] != ref || ref.count > 0 || ref.armed != armed {
		return
	}
	delete(r.refs, id)
	r.pending[id] = nil
	r.notify()
}

func (r *classRegistry) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// apply hands the pending changes to the translator.
func (r *classRegistry) apply(t *Translator) {
	r.mu.Lock()
	pending := r.pending
	r.pending = map[string]*translate.GatewayClass{}
	r.mu.Unlock()
	for id, c := range pending {
		if c == nil {
			t.RemoveGatewayClass(id)
		} else {
			t.SetGatewayClass(*c)
		}
	}
}

// counts are the connected proxies of each class.
func (r *classRegistry) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.refs))
	for id, ref := range r.refs {
		out[id] = ref.count
	}
	return out
}

// stop disarms the drop timers.
func (r *classRegistry) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range r.refs {
		if ref.drop != nil {
			ref.drop.Stop()
		}
	}
}
