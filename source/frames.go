package source

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// memo shares what streams compute alike: the encoded bodies of responses (frames) and what
// heartbeats name. When a change reaches many subscribers at the same revision, the first
// stream computes the value and the others reuse it: the work per change is one encode, not
// one per subscriber. A value is a function of its frameKey alone, so sharing it changes
// nothing a stream decides.
//
// Values are shared in the moments after a change, not replayed later, so the memo keeps only
// the most recent ones, bounded both in count and in bytes: a large collection sent whole
// after every change would otherwise pin one full copy per revision.
type memo[V any] struct {
	mu       sync.Mutex
	entries  map[frameKey]*list.Element // of *memoEntry[V], oldest first in fifo
	fifo     list.List
	maxCount int
	maxBytes int
	size     func(V) int // of a value, counted against maxBytes
	bytes    int         // of the computed entries still kept

	computes, hits, prefetches atomic.Uint64
}

// memoEntry is computed once; streams that ask meanwhile wait for it rather than compute too.
type memoEntry[V any] struct {
	key  frameKey
	once sync.Once
	val  V
	size int // counted in memo.bytes once computed, while kept
}

func newMemo[V any](maxCount, maxBytes int, size func(V) int) *memo[V] {
	return &memo[V]{entries: make(map[frameKey]*list.Element, maxCount), maxCount: maxCount, maxBytes: maxBytes, size: size}
}

// get returns the value for key, computing it at most once while it is kept. A nil key, or a
// nil memo, is not shared.
func (c *memo[V]) get(key *frameKey, compute func() V) V {
	if c == nil {
		return compute()
	}
	if key == nil {
		c.computes.Add(1)
		return compute()
	}
	el, ok := c.entry(*key)
	if ok {
		c.hits.Add(1)
	}
	return c.fill(el, compute)
}

// entry returns the memo's entry for key, added (to be computed) if the memo had none, and
// whether it had one.
func (c *memo[V]) entry(key frameKey) (*list.Element, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		el = c.fifo.PushBack(&memoEntry[V]{key: key})
		c.entries[key] = el
		c.trim()
	}
	return el, ok
}

// fill computes the value of an entry once; callers that come meanwhile wait for it.
func (c *memo[V]) fill(el *list.Element, compute func() V) V {
	e := el.Value.(*memoEntry[V])
	e.once.Do(func() {
		c.computes.Add(1)
		e.val = compute()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.entries[e.key] == el { // not evicted while it was being computed
			if c.size != nil {
				e.size = c.size(e.val)
			}
			c.bytes += e.size
			c.trim()
		}
	})
	return e.val
}

// prefetch computes the value for key on a goroutine of its own, unless the memo already
// holds it or is computing it, and returns its entry: the caller keeps it until it uses it
// (take), so that the memo's bounds, which other streams' values press on, cannot drop it
// before. Other streams that get the key meanwhile share it, or wait for it. The goroutine is
// counted in running, so that its stream can wait for it as it ends.
func (c *memo[V]) prefetch(key frameKey, compute func() V, running *sync.WaitGroup) *ahead {
	if c == nil {
		return nil
	}
	el, ok := c.entry(key)
	if !ok {
		c.prefetches.Add(1)
		running.Go(func() { c.fill(el, compute) })
	}
	return &ahead{key: key, el: el}
}

// ahead is an entry a stream had made ahead of its send (prefetch).
type ahead struct {
	key frameKey
	el  *list.Element // of a *memoEntry
}

// take returns the value of an entry made ahead, made or waited for, if it is the one for
// key; otherwise the caller gets it from the memo.
func (c *memo[V]) take(a *ahead, key *frameKey, compute func() V) (V, bool) {
	if c == nil || a == nil || key == nil || a.key != *key {
		var none V
		return none, false
	}
	c.hits.Add(1)
	return c.fill(a.el, compute), true
}

// trim evicts the oldest entries while the memo is over either bound; the newest stays, even
// alone over the byte bound. Streams already holding an evicted value keep it until they used it.
func (c *memo[V]) trim() {
	for c.fifo.Len() > 1 && (c.fifo.Len() > c.maxCount || (c.maxBytes > 0 && c.bytes > c.maxBytes)) {
		oldest := c.fifo.Front()
		e := oldest.Value.(*memoEntry[V])
		c.fifo.Remove(oldest)
		delete(c.entries, e.key)
		c.bytes -= e.size
	}
}

// frame is an encoded response body and how many resources it carries (for metrics).
type frame struct {
	body      []byte
	resources int
}

func frameSize(f frame) int { return len(f.body) }
