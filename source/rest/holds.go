package rest

import (
	"sync"
	"time"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

// classHolds keeps a router node's gateway class built while it polls. A poller is not
// connected between two polls, so a class is released only linger after its last poll ended:
// a gateway polling every few seconds keeps its listeners, one that stopped lets them go.
type classHolds struct {
	classes xds.Views
	linger  time.Duration

	mu      sync.Mutex
	byClass map[string]*classHold
	stopped bool
}

type classHold struct {
	polls   int
	release func()
	timer   *time.Timer // set while no poll holds it: fires the release
}

// hold acquires the class of req's node (nothing for a node that is no router) and returns
// what gives it back when the poll ends.
func (h *classHolds) hold(req *source.Request) (done func()) {
	key := xds.ViewKey(req)
	if h.classes == nil || key == "" {
		return func() {}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return func() {}
	}
	if h.byClass == nil {
		h.byClass = map[string]*classHold{}
	}
	c := h.byClass[key]
	if c == nil {
		c = &classHold{release: xds.HoldView(h.classes, req)}
		h.byClass[key] = c
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.polls++
	return func() { h.done(key, c) }
}

func (h *classHolds) done(key string, c *classHold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.polls--
	if c.polls > 0 || h.stopped {
		return
	}
	c.timer = time.AfterFunc(h.linger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.byClass[key] == c && c.polls == 0 && c.timer != nil {
			delete(h.byClass, key)
			c.release()
		}
	})
}

// releaseAll gives back every class, for Stop.
func (h *classHolds) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for key, c := range h.byClass {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.release()
		delete(h.byClass, key)
	}
}
