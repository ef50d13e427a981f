package limits

import (
	"sync"
	"time"
)

// Peers holds one token bucket per peer identity, shared by all its streams, its unary calls
// and its REST polls: a client that opens a new stream, or calls instead of streaming, draws
// on the same budget, so reopening streams does not reset it. A bucket lives while the peer
// uses it and, after its last use, until it would be full again (then it is the same as a new
// one): a peer that comes back within that time finds it as it left it. It is safe for
// concurrent use. A nil *Peers allows everything.
type Peers struct {
	rate  float64
	burst int

	mu sync.Mutex
	m  map[string]*peerBucket
}

type peerBucket struct {
	mu sync.Mutex
	b  bucket
	// users counts the streams holding it; guarded by Peers.mu.
	users int
	// idle is the timer that forgets it after its last user; guarded by Peers.mu.
	idle *time.Timer
}

// NewPeers returns per-peer buckets of burst tokens refilled at rate a second; nil (no
// limit) when either is not positive.
func NewPeers(rate float64, burst int) *Peers {
	if rate <= 0 || burst <= 0 {
		return nil
	}
	return &Peers{rate: rate, burst: burst, m: map[string]*peerBucket{}}
}

// acquire returns the peer's bucket, held until release.
func (p *Peers) acquire(id string) *peerBucket {
	p.mu.Lock()
	defer p.mu.Unlock()
	pb := p.m[id]
	if pb == nil {
		pb = &peerBucket{b: newBucket(p.rate, p.burst, time.Now())}
		p.m[id] = pb
	}
	pb.users++
	if pb.idle != nil {
		pb.idle.Stop()
		pb.idle = nil
	}
	return pb
}

// release lets go of a bucket; the last user arms its forgetting.
func (p *Peers) release(id string, pb *peerBucket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pb.users--; pb.users > 0 {
		return
	}
	pb.mu.Lock()
	refill := time.Duration((pb.b.burst - pb.b.tokens) / p.rate * float64(time.Second))
	pb.mu.Unlock()
	if refill <= 0 {
		delete(p.m, id)
		return
	}
	pb.idle = time.AfterFunc(refill, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if pb.users == 0 && p.m[id] == pb {
			delete(p.m, id)
		}
	})
}

// take takes a token from a held bucket.
func (pb *peerBucket) take(now time.Time) bool {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return pb.b.take(now)
}

// Take takes one token of a peer's bucket for a one-off request (a unary call, a REST poll),
// and reports whether there was one.
func (p *Peers) Take(id string) bool {
	if p == nil {
		return true
	}
	pb := p.acquire(id)
	defer p.release(id, pb)
	return pb.take(time.Now())
}

// Len is the number of peers whose buckets are kept, for tests.
func (p *Peers) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
