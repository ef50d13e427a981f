package source

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// framePool recycles the bytes of large response bodies. A delivery of a large collection is
// a sequence of parts of a few megabytes each, each sent once or to a few streams and then
// garbage; at a million resources they were most of what the bridge allocated after a load,
// so the heap grew by the whole delivery before the collector reclaimed any of it. The pool
// hands a part's bytes to the next part instead, once gRPC has written every copy (the frame's
// references, frames.go).
//
// Buffers come in size classes, eight to each doubling, so that a buffer is at most an eighth
// larger than asked; a class is a sync.Pool, which the collector empties, so that idle
// buffers do not outlive a burst. It implements gRPC's mem.BufferPool.
type framePool struct {
	classes [poolClasses]sync.Pool // of *[]byte
	// reused counts the buffers handed out again; fresh, those allocated.
	reused, fresh atomic.Uint64
}

const (
	// minPoolBits: the pool's smallest class holds 2^minPoolBits bytes, and it takes buffers
	// of more than half that, more than gRPC's threshold for counting references
	// (mem.IsBelowBufferPoolingThreshold, 1 KiB).
	minPoolBits   = 11
	maxPoolBits   = 30 // buffers of up to 1 GiB
	classesPerBit = 8
	poolClasses   = (maxPoolBits - minPoolBits + 1) * classesPerBit
	// smallestPooled is the least a pooled buffer holds.
	smallestPooled = 1<<(minPoolBits-1) + 1
)

// frameBuffers is the pool every engine's frames come from.
var frameBuffers framePool

// sizeClass is the class of a buffer of at least n bytes, and that class's size; ok is false
// for sizes the pool does not take.
func sizeClass(n int) (class, size int, ok bool) {
	if n <= 1<<(minPoolBits-1) {
		return 0, 0, false
	}
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	if k > maxPoolBits {
		return 0, 0, false
	}
	step := 1 << (k - 4) // 2^k in sixteenths: n rounds up to one of the upper eight
	steps := (n + step - 1) / step
	return (k-minPoolBits)*classesPerBit + steps - 9, steps * step, true
}

// Get returns a buffer of length n, from the pool when it holds one of n's class.
func (p *framePool) Get(n int) *[]byte {
	class, size, ok := sizeClass(n)
	if !ok {
		b := make([]byte, n)
		return &b
	}
	if b, _ := p.classes[class].Get().(*[]byte); b != nil {
		p.reused.Add(1)
		*b = (*b)[:n]
		return b
	}
	p.fresh.Add(1)
	b := make([]byte, n, size)
	return &b
}

// Put takes back a buffer whose last reference was freed. One whose capacity is not exactly a
// class's size (an encoding that outgrew its buffer) is left to the collector.
func (p *framePool) Put(b *[]byte) {
	class, size, ok := sizeClass(cap(*b))
	if !ok || size != cap(*b) {
		return
	}
	if poisonFreedFrames {
		poison(*b)
	}
	*b = (*b)[:0]
	p.classes[class].Put(b)
}

// poison overwrites freed bytes, so that a test that reads a frame after its last free reads
// garbage, not the old body by luck.
func poison(b []byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = 0xEE
	}
}
