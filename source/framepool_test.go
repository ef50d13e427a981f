package source

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/mem"
)

// Every size the pool takes gets a class whose buffers hold it and waste at most an eighth,
// and a buffer of a class's size is taken back into that class.
func TestSizeClassHoldsTheSizeAndWastesAtMostAnEighth(t *testing.T) {
	if _, _, ok := sizeClass(1 << 10); ok {
		t.Fatal("a body of gRPC's threshold for counting references was pooled")
	}
	if _, _, ok := sizeClass(1<<maxPoolBits + 1); ok {
		t.Fatal("a body over the largest class was pooled")
	}
	check := func(n int) {
		class, size, ok := sizeClass(n)
		if !ok || class < 0 || class >= poolClasses {
			t.Fatalf("sizeClass(%d) = %d, %d, %v: want a class in [0, %d)", n, class, size, ok, poolClasses)
		}
		if size < n || size-n > n/8 {
			t.Fatalf("sizeClass(%d) gives buffers of %d bytes: want at least %d, at most an eighth more", n, size, n)
		}
		if c, s, _ := sizeClass(size); c != class || s != size {
			t.Fatalf("a buffer of %d bytes (class %d of %d) is put back as class %d of %d", size, class, n, c, s)
		}
		if next, _, ok := sizeClass(size + 1); ok && next != class+1 {
			t.Fatalf("%d bytes are class %d, one more class %d: want the next class", size, class, next)
		}
	}
	for n := 1<<10 + 1; n <= 1<<maxPoolBits; n = n + n/7 + 1 {
		check(n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(1<<10 + 1 + r.IntN(64<<20))
	}
	check(1 << maxPoolBits)
}

// The pool gives back a buffer that was put, with the length asked, and refuses one whose
// capacity is not its class's (an encoding that outgrew the buffer it was given).
func TestFramePoolReusesOnlyItsOwnSizes(t *testing.T) {
	var p framePool
	b := p.Get(100_000)
	if len(*b) != 100_000 || p.fresh.Load() != 1 {
		t.Fatalf("Get(100000): len %d, %d allocated", len(*b), p.fresh.Load())
	}
	// sync.Pool drops some of what is put under the race detector, and all of it at a
	// collection: a few tries.
	reused := false
	for range 100 {
		first := &(*b)[:1][0]
		p.Put(b)
		b = p.Get(99_000)
		if len(*b) != 99_000 {
			t.Fatalf("Get(99000) after a Put: len %d", len(*b))
		}
		if &(*b)[:1][0] == first {
			reused = true
			break
		}
	}
	if !reused || p.reused.Load() == 0 {
		t.Fatalf("a buffer put back was not handed out again in 100 tries (reused %d)", p.reused.Load())
	}
	odd := make([]byte, 0, 100_001)
	p.Put(&odd)
	if got := p.Get(100_001); cap(*got) == 100_001 {
		t.Fatal("a buffer of no class's size was taken back")
	}
}

// countingPool is a framePool that counts the buffers it holds out.
type countingPool struct {
	framePool
	out atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte { p.out.Add(1); return p.framePool.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.out.Add(-1); p.framePool.Put(b) }

func pooledFrame(p *countingPool, content byte) frame {
	b := p.Get(testFrameSize)
	for i := range *b {
		(*b)[i] = content
	}
	return frame{body: *b, buf: mem.NewBuffer(b, p), resources: 1}
}

func frameMemo(maxCount int) *memo[frame] {
	c := newMemo(maxCount, 0, frameSize)
	c.retain, c.release = retainFrame, releaseFrame
	return c
}

// A frame's bytes go back to the pool only when the memo has evicted it and every stream that
// got it has freed its reference (as gRPC does once the send is written), never before.
func TestAFrameIsRecycledOnlyAfterItsLastSend(t *testing.T) {
	p := &countingPool{}
	c := frameMemo(1)
	key := func(to uint64) *frameKey { return &frameKey{key: "k", to: to} }
	a := c.get(key(1), func() frame { return pooledFrame(p, 'a') })
	b := c.get(key(1), func() frame { t.Fatal("encoded twice"); return frame{} })
	c.get(key(2), func() frame { return frame{body: []byte("small")} }) // evicts key 1
	if p.out.Load() != 1 {
		t.Fatal("an evicted frame went back to the pool while two sends held it")
	}
	a.buf.Free()
	if p.out.Load() != 1 {
		t.Fatal("a frame went back to the pool while a send held it")
	}
	if !bytes.Equal(b.body, bytes.Repeat([]byte{'a'}, testFrameSize)) {
		t.Fatal("the frame's bytes changed under its last send")
	}
	b.buf.Free()
	if p.out.Load() != 0 {
		t.Fatal("a frame no one holds was not recycled")
	}

	// Made ahead and then not wanted (the part changed): recycled once evicted.
	var running sync.WaitGroup
	ah := c.prefetch(*key(3), func() frame { return pooledFrame(p, 'c') }, &running)
	running.Wait()
	if _, ok := c.take(ah, key(4), nil); ok {
		t.Fatal("took a frame made ahead for another key")
	}
	c.get(key(5), func() frame { return frame{body: []byte("small")} })
	if p.out.Load() != 0 {
		t.Fatal("a frame made ahead, dropped and evicted, was not recycled")
	}

	// Made ahead and evicted before its send: the stream's hold keeps it until the take.
	ah = c.prefetch(*key(6), func() frame { return pooledFrame(p, 'd') }, &running)
	running.Wait()
	c.get(key(7), func() frame { return frame{body: []byte("small")} })
	if p.out.Load() != 1 {
		t.Fatal("a frame made ahead was recycled before its send took it")
	}
	d, ok := c.take(ah, key(6), nil)
	if !ok || d.body[0] != 'd' || p.out.Load() != 1 {
		t.Fatalf("take: ok %v, frame recycled %v", ok, p.out.Load() == 0)
	}
	d.buf.Free()
	if p.out.Load() != 0 {
		t.Fatal("a frame made ahead was not recycled after its send")
	}
}

// Streams get, prefetch, take and free frames (of 4 KiB) of a few keys in random order,
// through a memo that evicts often, over pooled bytes that are poisoned as they are freed:
// every stream reads the bytes of its own key until it frees them, and in the end every frame
// but the memo's newest has gone back to the pool.
func TestRecycledFramesAreNeverReadByAStreamStillHoldingThem(t *testing.T) {
	p := &countingPool{}
	c := frameMemo(2)
	body := func(to uint64) []byte { return bytes.Repeat([]byte{byte(to)}, 4<<10) }
	encode := func(to uint64) func() frame {
		return func() frame {
			b := p.Get(4 << 10)
			copy(*b, body(to))
			return frame{body: *b, buf: mem.NewBuffer(b, p)}
		}
	}
	var running sync.WaitGroup
	var streams sync.WaitGroup
	for s := range 8 {
		streams.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 7))
			var ah *ahead
			var aheadTo uint64
			for range 1000 {
				to := 1 + r.Uint64N(5)
				key := &frameKey{key: "k", to: to}
				f, ok := c.take(ah, key, encode(to))
				if !ok {
					f = c.get(key, encode(to))
				}
				ah = nil
				if r.IntN(2) == 0 { // the next part, made ahead
					aheadTo = 1 + r.Uint64N(5)
					ah = c.prefetch(frameKey{key: "k", to: aheadTo}, encode(aheadTo), &running)
				}
				if !bytes.Equal(f.body, body(to)) {
					panic(fmt.Sprintf("stream %d read frame %d as %d: its bytes were recycled under it", s, to, f.body[0]))
				}
				f.buf.Free()
			}
			if ah != nil {
				c.drop(ah.el)
			}
		})
	}
	streams.Wait()
	running.Wait()
	if out := p.out.Load(); out != int64(c.fifo.Len()) {
		t.Fatalf("%d frames out of the pool, want the memo's %d", out, c.fifo.Len())
	}
	if p.reused.Load() == 0 {
		t.Fatal("no frame's bytes were reused")
	}
}

// testFrameSize is the size of the frames these tests pool.
const testFrameSize = 64 << 10
