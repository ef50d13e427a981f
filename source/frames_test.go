package source

import (
	"bytes"
	"testing"
)

func TestFrameCacheEncodesOnceAndStaysWithinItsBounds(t *testing.T) {
	c := newMemo(100, 1000, frameSize)
	encodes := 0
	body := func(b byte) func() frame {
		return func() frame { encodes++; return frame{body: bytes.Repeat([]byte{b}, 300), resources: 1} }
	}
	key := func(to uint64) *frameKey { return &frameKey{key: "k", to: to} }

	first := c.get(key(1), body('a'))
	if again := c.get(key(1), body('x')); !bytes.Equal(first.body, again.body) || again.resources != 1 || encodes != 1 {
		t.Fatalf("a cached response was encoded %d times", encodes)
	}
	for to := uint64(2); to <= 10; to++ {
		c.get(key(to), body(byte('a'+to)))
	}
	if c.bytes > 1000 || c.fifo.Len() != 3 || len(c.entries) != 3 {
		t.Fatalf("cache holds %d entries, %d bytes; want at most 1000 bytes (3 of 300)", c.fifo.Len(), c.bytes)
	}
	// The newest survive; the oldest was evicted and is encoded again if asked.
	before := encodes
	c.get(key(10), body('z'))
	c.get(key(1), body('a'))
	if encodes != before+1 {
		t.Fatalf("encodes %d -> %d: want the newest reused and the evicted one encoded again", before, encodes)
	}
	// One response larger than the byte bound is still shared while it is the newest.
	big := func() frame { encodes++; return frame{body: make([]byte, 5000), resources: 1} }
	c.get(key(99), big)
	before = encodes
	c.get(key(99), big)
	if encodes != before {
		t.Fatal("the newest response was evicted for being large")
	}
	// Unshared responses are encoded every time.
	c.get(nil, body('n'))
	c.get(nil, body('n'))
	if encodes != before+2 {
		t.Fatal("unshared responses were cached")
	}
}
