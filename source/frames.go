package source

import (
	"sync"
	"sync/atomic"
)

// frameCache shares encoded response bodies between streams. When a change reaches many
// wildcard subscribers at the same revision, the first stream encodes the response and the
// others reuse its bytes: the work per change is one encode, not one per subscriber.
//
// It holds the most recent entries only (a ring of keys): responses are shared in the moments
// after a change, not replayed later.
type frameCache struct {
	mu      sync.Mutex
	entries map[frameKey]*frameEntry
	ring    []frameKey
	next    int

	encodes, hits atomic.Uint64
}

// frameEntry is encoded once; streams that ask meanwhile wait for it rather than encode too.
type frameEntry struct {
	once sync.Once
	body []byte
}

func (c *frameCache) init(size int) {
	c.entries = make(map[frameKey]*frameEntry, size)
	c.ring = make([]frameKey, size)
}

// get returns the body for key, encoding it at most once. A nil key is not shared.
func (c *frameCache) get(key *frameKey, encode func() []byte) []byte {
	if key == nil {
		c.encodes.Add(1)
		return encode()
	}
	c.mu.Lock()
	e, ok := c.entries[*key]
	if !ok {
		e = &frameEntry{}
		if old := c.ring[c.next]; old != (frameKey{}) {
			delete(c.entries, old)
		}
		c.ring[c.next] = *key
		c.next = (c.next + 1) % len(c.ring)
		c.entries[*key] = e
	}
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	}
	e.once.Do(func() {
		c.encodes.Add(1)
		e.body = encode()
	})
	return e.body
}
