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
	ready   chan struct{} // closed when a condition met leaves none pending
	closed  bool
	// checks are conditions that can be lost again (a replica cut off from etcd): each says
	// why it is not met, or "" when it is. Ready does not wait for them: they come and go.
	checks map[string]func() string
}

// NewReadiness returns a tracker with nothing pending.
func NewReadiness() *Readiness {
	return &Readiness{pending: map[string]bool{}, checks: map[string]func() string{}, ready: make(chan struct{})}
}

// Check registers a condition that is asked each time readiness is: check returns why it is
// not met ("" when it is). Unlike Wait's, it can be met and lost again.
func (r *Readiness) Check(name string, check func() string) {
	r.mu.Lock()
	r.checks[name] = check
	r.mu.Unlock()
}

// Ready is closed the first time a met condition leaves none pending: for what must not
// run on a partial state (the file exports, Linkerd's first answers), not only answer /readyz.
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
	for name, check := range r.checks {
		if why := check(); why != "" {
			out = append(out, name+" ("+why+")")
		}
	}
	slices.Sort(out)
	return out
}
