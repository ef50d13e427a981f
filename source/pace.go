package source

import (
	"slices"
	"time"

	"github.com/mcpbridge/mcpbridge/store"
)

// pacer paces how a stream takes store changes (Options.PushInterval): each collection's
// changes at most once per interval. The first change of a collection after a quiet interval
// is taken at once; later ones wait for the rest of the interval and are taken together. Each
// collection has its own interval, so that a change to one (the Envoy resources a
// ServiceEntry's edit derives) never waits because another (the ServiceEntry) was just sent.
// It is pure: the stream's loop passes the time and arms the timer.
type pacer struct {
	interval time.Duration
	last     []taken  // when each collection's changes were last taken
	held     []string // collections changed and waiting for their interval to end
}

type taken struct {
	collection string
	at         time.Time
}

// take returns, of the collections that changed and those held, the ones to take now, and
// how long until the next held one is due (0 when none is held).
func (p *pacer) take(now time.Time, changed []string) (ready []string, next time.Duration) {
	if p.interval <= 0 {
		return changed, 0
	}
	for _, c := range changed {
		if !slices.Contains(p.held, c) {
			p.held = append(p.held, c)
		}
	}
	held := p.held[:0]
	for _, c := range p.held {
		i := slices.IndexFunc(p.last, func(t taken) bool { return t.collection == c })
		if i >= 0 {
			if wait := p.interval - now.Sub(p.last[i].at); wait > 0 {
				held = append(held, c)
				if next == 0 || wait < next {
					next = wait
				}
				continue
			}
			p.last[i].at = now
		} else {
			p.last = append(p.last, taken{c, now})
		}
		ready = append(ready, c)
	}
	p.held = held
	return ready, next
}

// pacing is a stream's pacer with its timer, and the view of the store its responses are
// computed from: the view as of the last take, also for responses that answer requests, so
// that nothing held back slips out early. Only the stream's loop uses it.
type pacing struct {
	pacer
	timer *time.Timer
	C     <-chan time.Time // fires when a held collection falls due; nil when none waits
	due   time.Time        // when C fires
	view  *store.View
}

// take takes what is ready of the changed and held collections, and returns it (the machine
// marks their subscriptions): it reads the view; what must wait is muted in the stream's watch
// (looked at when the timer fires, not at each change) and the timer armed for the first to
// fall due.
func (p *pacing) take(s *stream, now time.Time, changed []string) (ready []string) {
	ready, next := p.pacer.take(now, changed)
	if len(ready) > 0 {
		// The view after what changed was read: a write in between is in the view, and marks
		// the watch again.
		p.view = s.engine.store.View()
	}
	if len(p.held) > 0 {
		s.watch.Mute(p.held...)
	}
	if next > 0 && (p.C == nil || now.Add(next).Before(p.due)) {
		if p.timer == nil {
			p.timer = time.NewTimer(next)
		} else {
			p.timer.Reset(next) // Go 1.23 timers: Reset discards a pending fire
		}
		p.C, p.due = p.timer.C, now.Add(next)
	}
	return ready
}

func (p *pacing) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
