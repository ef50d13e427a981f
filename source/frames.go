package source

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/mcpbridge/mcpbridge/store"
)

// frameCache shares encoded response bodies between streams. When a change reaches many
// subscribers at the same revision, the first stream encodes the response and the others reuse
// its bytes: the work per change is one encode, not one per subscriber.
//
// Responses are shared in the moments after a change, not replayed later, so the cache keeps
// only the most recent ones, bounded both in count and in bytes: a large collection sent whole
// after every change would otherwise pin one full copy per revision.
type frameCache struct {
	mu       sync.Mutex
	entries  map[frameKey]*list.Element // of *frameEntry, oldest first in fifo
	fifo     list.List
	maxCount int
	maxBytes int
	bytes    int // of the encoded entries still cached

	encodes, hits atomic.Uint64
}

// frameEntry is encoded once; streams that ask meanwhile wait for it rather than encode too.
type frameEntry struct {
	key    frameKey
	once   sync.Once
	body   []byte
	counts counts
	size   int // counted in frameCache.bytes once encoded, while cached
}

// counts are what an encoded body carries, for metrics: its resources and, for a heartbeat,
// the resources it left out because their producer is disconnected, and the parts that follow
// it when it was split (heartbeat.go).
type counts struct {
	resources, withheld int
	rest                [][]*store.Entry
}

func (c *frameCache) init(maxCount, maxBytes int) {
	c.entries = make(map[frameKey]*list.Element, maxCount)
	c.maxCount, c.maxBytes = maxCount, maxBytes
}

// get returns the body for key and what it carries, encoding it at most once. A nil key is
// not shared.
func (c *frameCache) get(key *frameKey, encode func() ([]byte, counts)) ([]byte, counts) {
	if key == nil {
		c.encodes.Add(1)
		return encode()
	}
	c.mu.Lock()
	el, ok := c.entries[*key]
	if !ok {
		el = c.fifo.PushBack(&frameEntry{key: *key})
		c.entries[*key] = el
		c.trim()
	}
	e := el.Value.(*frameEntry)
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	}
	e.once.Do(func() {
		c.encodes.Add(1)
		e.body, e.counts = encode()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[e.key] == el { // not evicted while it was being encoded
			e.size = len(e.body)
			c.bytes += e.size
			c.trim()
		}
	})
	return e.body, e.counts
}

// trim evicts the oldest entries while the cache is over either bound; the newest stays, even
// alone over the byte bound. Streams already holding an evicted body keep it until they sent it.
func (c *frameCache) trim() {
	for c.fifo.Len() > 1 && (c.fifo.Len() > c.maxCount || c.bytes > c.maxBytes) {
		oldest := c.fifo.Front()
		e := oldest.Value.(*frameEntry)
		c.fifo.Remove(oldest)
		delete(c.entries, e.key)
		c.bytes -= e.size
	}
}
