package rest

import (
	"context"
	"sync"
	"time"

	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/source/xds"
)

// classHolds keeps a poller's view built while it polls (a router node's gateway class, a
// sidecar's namespace, every host's proxyless outputs, every port's route configuration:
// xds.HoldView). A poller is not connected
// between two polls, so a view is released only linger after its last poll ended: a gateway
// polling every few seconds keeps its listeners, one that stopped lets them go.
type classHolds struct {
	classes xds.Views
	linger  time.Duration

	mu      sync.Mutex
	byClass map[string]*classHold
	stopped bool
	// quit ends with releaseAll: a poller still waiting for its view to be built stops
	// waiting (xds.HoldView); quitNow ends it.
	quit    context.Context
	quitNow context.CancelFunc
}

type classHold struct {
	polls   int
	release func()      // set once acquired
	timer   *time.Timer // set while no poll holds it: fires the release
	// acquired is closed once the view is acquired (and built, for the views HoldView waits
	// for): that happens outside mu, so that one poller waiting for its namespace's view to
	// be built holds no other poller up.
	acquired chan struct{}
}

// hold acquires the view of req's node (nothing for a node that holds none) and returns what
// gives it back when the poll ends. The first poller of a view acquires it; the others wait
// until it has. A poller whose request ends (ctx) stops waiting: the view may take long to
// build at a million services (xds.HoldView), and a poller gone counts against the poll
// limits until its handler returns.
func (h *classHolds) hold(ctx context.Context, req *source.Request) (done func()) {
	key := xds.ViewKey(req)
	if h.classes == nil || key == "" {
		return func() {}
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return func() {}
	}
	if h.byClass == nil {
		h.byClass = map[string]*classHold{}
	}
	if h.quit == nil {
		h.quit, h.quitNow = context.WithCancel(context.Background())
	}
	quit := h.quit
	c := h.byClass[key]
	first := c == nil
	if first {
		c = &classHold{acquired: make(chan struct{})}
		h.byClass[key] = c
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.polls++
	h.mu.Unlock()
	if first {
		release := h.acquire(ctx, quit, req) // may wait for the view to be built
		h.mu.Lock()
		c.release = release
		stopped := h.stopped // releaseAll ran before the release was known: give it back here
		h.mu.Unlock()
		close(c.acquired)
		if stopped {
			release()
		}
	} else {
		select {
		case <-c.acquired:
		case <-ctx.Done():
		}
	}
	return func() { h.done(key, c) }
}

// acquire is xds.HoldView until the view is built, the poller's request ends or the holds are
// released.
func (h *classHolds) acquire(ctx, quit context.Context, req *source.Request) (release func()) {
	waiting, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(quit, stop)()
	return xds.HoldView(h.classes, req, waiting.Done())
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

// releaseAll gives back every view, for Stop. A view still being acquired is given back by
// its acquirer once it is (hold).
func (h *classHolds) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.quitNow != nil {
		h.quitNow()
	}
	h.stopped = true
	for key, c := range h.byClass {
		if c.timer != nil {
			c.timer.Stop()
		}
		if c.release != nil {
			c.release()
		}
		delete(h.byClass, key)
	}
}
