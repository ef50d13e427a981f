package source

import (
	"container/list"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
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
//
// A value may hold a reference-counted buffer (a frame's, whose bytes go back to a pool when
// the last reference is freed). Then compute returns it with one reference, the entry's; each
// caller of get and take gets a reference of its own (retain), taken while its use of the
// entry keeps the entry's reference alive; and the entry's reference is freed (release) once
// the entry is evicted and no caller is still using it. A reference that is never freed
// leaves its bytes to the garbage collector, so only a free too many could hand out bytes
// still in use: every free follows the last read of what it frees.
type memo[V any] struct {
	mu       sync.Mutex
	entries  map[frameKey]*list.Element // of *memoEntry[V], oldest first in fifo
	fifo     list.List
	maxCount int
	maxBytes int
	size     func(V) int // of a value, counted against maxBytes
	bytes    int         // of the computed entries still kept
	// retain takes a reference to a value for a caller; release frees the entry's own. Both
	// nil for values that hold nothing to recycle.
	retain, release func(V)

	computes, hits, prefetches atomic.Uint64
}

// memoEntry is computed once; streams that ask meanwhile wait for it rather than compute too.
type memoEntry[V any] struct {
	key  frameKey
	once sync.Once
	val  V
	size int // counted in memo.bytes once computed, while kept
	// Under memo.mu: users counts the callers between finding the entry and taking their
	// reference to its value (get, or a prefetch until its take or drop); the entry's own
	// reference is released once it is computed, evicted and unused.
	users                       int
	computed, evicted, released bool
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
	v, el, ok := c.find(*key)
	if ok {
		c.hits.Add(1)
	}
	if el == nil {
		return v // computed already: one lock, as every stream after the first finds it
	}
	return c.use(el, compute)
}

// find returns, for a key whose value is computed, that value with a reference of the
// caller's own; otherwise the entry to compute or wait for (entry). ok tells whether the memo
// had the key.
func (c *memo[V]) find(key frameKey) (v V, el *list.Element, ok bool) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		if e := el.Value.(*memoEntry[V]); e.computed {
			if c.retain != nil {
				c.retain(e.val)
			}
			c.mu.Unlock()
			return e.val, nil, true
		}
	}
	c.mu.Unlock()
	el, ok = c.entry(key)
	return v, el, ok
}

// entry returns the memo's entry for key, added (to be computed) if the memo had none, and
// whether it had one. The caller is one of its users until it calls use or drop.
func (c *memo[V]) entry(key frameKey) (*list.Element, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		el = c.fifo.PushBack(&memoEntry[V]{key: key})
		c.entries[key] = el
	}
	el.Value.(*memoEntry[V]).users++
	if !ok {
		c.trim()
	}
	return el, ok
}

// use returns the value of an entry the caller found (entry), computed or waited for, with a
// reference of the caller's own, and ends the caller's use of the entry.
func (c *memo[V]) use(el *list.Element, compute func() V) V {
	v := c.fill(el, compute)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retain != nil {
		c.retain(v)
	}
	c.done(el.Value.(*memoEntry[V]))
	return v
}

// drop ends the use of an entry whose value the caller no longer wants.
func (c *memo[V]) drop(el *list.Element) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done(el.Value.(*memoEntry[V]))
}

// done ends one use of e; c.mu is held.
func (c *memo[V]) done(e *memoEntry[V]) {
	e.users--
	c.releaseUnused(e)
}

// releaseUnused frees the entry's reference to its value once nothing can hand it out any
// more: the entry is computed, no longer in the memo, and no caller is between finding it and
// taking a reference of its own. c.mu is held.
func (c *memo[V]) releaseUnused(e *memoEntry[V]) {
	if e.computed && e.evicted && e.users == 0 && !e.released {
		e.released = true
		if c.release != nil {
			c.release(e.val)
		}
	}
}

// fill computes the value of an entry once; callers that come meanwhile wait for it.
func (c *memo[V]) fill(el *list.Element, compute func() V) V {
	e := el.Value.(*memoEntry[V])
	e.once.Do(func() {
		c.computes.Add(1)
		v := compute()
		c.mu.Lock()
		defer c.mu.Unlock()
		e.val, e.computed = v, true
		if !e.evicted { // not evicted while it was being computed
			if c.size != nil {
				e.size = c.size(e.val)
			}
			c.bytes += e.size
			c.trim()
		}
		c.releaseUnused(e) // evicted meanwhile, and its prefetch dropped
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

// take returns the value of an entry made ahead, made or waited for, with a reference of the
// caller's own, if it is the one for key; otherwise it drops the entry, and the caller gets
// the value from the memo.
func (c *memo[V]) take(a *ahead, key *frameKey, compute func() V) (V, bool) {
	var none V
	if c == nil || a == nil {
		return none, false
	}
	if key == nil || a.key != *key {
		c.drop(a.el)
		return none, false
	}
	c.hits.Add(1)
	return c.use(a.el, compute), true
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
		e.evicted = true
		c.releaseUnused(e)
	}
}

// frame is an encoded response body and how many resources it carries (for metrics). A large
// body is held by buf, a reference of its holder's to pooled bytes (framePool); buf is nil
// for a small one, left to the garbage collector.
type frame struct {
	body      []byte
	buf       mem.Buffer
	resources int
}

func frameSize(f frame) int { return len(f.body) }

// retainFrame takes a reference to a frame's pooled bytes; releaseFrame frees one.
func retainFrame(f frame) {
	if f.buf != nil {
		f.buf.Ref()
	}
}

func releaseFrame(f frame) {
	if f.buf != nil {
		f.buf.Free()
	}
}
