package source

import (
	"slices"
	"time"
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
