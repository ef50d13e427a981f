// Package admin serves the operator's HTTP endpoints: health, readiness, Prometheus metrics,
// the JSON debug views and the status page.
package admin

import (
	"slices"
	"sync"
)

// Readiness tracks what must happen before the bridge is ready: the gRPC port serving and each
// configured source's first full state. It is safe for concurrent use.
type Readiness struct {
	mu      sync.Mutex
	pending map[string]bool
	ready   chan struct{} // closed when the last pending condition is first met
	closed  bool
}

// NewReadiness returns a tracker with nothing pending.
func NewReadiness() *Readiness {
	return &Readiness{pending: map[string]bool{}, ready: make(chan struct{})}
}

// Ready is closed the first time a met condition leaves none pending: for what must not
// run on a partial state (the file exports), not only answer /readyz.
func (r *Readiness) Ready() <-chan struct{} { return r.ready }

// Wait registers a condition and returns the function that marks it met. Calling that
// function more than once is harmless.
func (r *Readiness) Wait(name string) (done func()) {
	r.mu.Lock()
	r.pending[name] = true
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.pending, name)
		if len(r.pending) == 0 && !r.closed {
			r.closed = true
			close(r.ready)
		}
		r.mu.Unlock()
	}
}

// Pending returns the unmet conditions, sorted; none means ready.
func (r *Readiness) Pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.pending))
	for name := range r.pending {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
