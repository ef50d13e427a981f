package limits

import "time"

// bucket is a token bucket: it holds at most burst tokens, gains rate tokens a second, and
// each message takes one. A client may send burst messages at once, then rate a second.
// (Twenty lines, not golang.org/x/time/rate: one stream's goroutine owns it, so it needs no
// lock, and it is all the bridge needs of one.)
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate float64, burst int, now time.Time) bucket {
	return bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: now}
}

// take takes a token at now, and reports whether there was one.
func (b *bucket) take(now time.Time) bool {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
