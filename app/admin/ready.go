// Package admin serves the operator's HTTP endpoints: health, readiness, Prometheus metrics,
// the JSON debug views and the status page.
package admin

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
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

	log     *slog.Logger
	started time.Time
	// lastSaid is what the log last said of readiness: "" before anything, "ready", or the
	// reasons it was not, so that a change is logged once, not at every probe.
	lastSaid string
	wasReady bool // "ready" has been logged once
}

// NewReadiness returns a tracker with nothing pending; it logs becoming ready, and becoming
// not ready again (with the reasons), to log (nil: nowhere).
func NewReadiness(log *slog.Logger) *Readiness {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Readiness{
		pending: map[string]bool{}, checks: map[string]func() string{}, ready: make(chan struct{}),
		log: log, started: time.Now(),
	}
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
			r.sayLocked(r.unmetLocked())
		}
		r.mu.Unlock()
	}
}

// Pending returns the unmet conditions, sorted; none means ready. A change from what the log
// last said, once the bridge has been ready, is logged: a check lost (not ready, and why) or
// met again (ready).
func (r *Readiness) Pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.unmetLocked()
	if r.closed {
		r.sayLocked(out)
	}
	return out
}

// sayLocked logs readiness when it differs from what was last logged; r.mu is held.
func (r *Readiness) sayLocked(unmet []string) {
	said := "ready"
	if len(unmet) > 0 {
		said = strings.Join(unmet, "; ")
	}
	if said == r.lastSaid {
		return
	}
	r.lastSaid = said
	switch {
	case len(unmet) == 0 && !r.wasReady:
		r.wasReady = true
		r.log.Info("ready", "after", time.Since(r.started).Round(time.Millisecond))
	case len(unmet) == 0:
		r.log.Info("ready again")
	default:
		r.log.Warn("not ready", "waiting_for", said)
	}
}

// unmetLocked are the unmet conditions, sorted; r.mu is held.
func (r *Readiness) unmetLocked() []string {
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
