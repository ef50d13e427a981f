// Package parallel runs independent pieces of one job on every CPU.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// For calls f(0) … f(n-1) and returns when all have returned. It uses up to GOMAXPROCS
// goroutines, one per perWorker items at least, so that small jobs run on the caller's
// goroutine without the cost of starting others. f must be safe to call concurrently.
func For(n, perWorker int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/max(perWorker, 1))
	if workers <= 1 {
		y := newYielder(n) // one P, perhaps: its other goroutines wait for this one
		for i := range n {
			f(i)
			y.item()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			y := newYielder(n)
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
				y.item()
			}
		})
	}
	wg.Wait()
}

// ForRange calls f(lo, hi) over [0, n) cut into ranges of chunk items (the last shorter), on
// up to GOMAXPROCS goroutines: For for work too small per item to be handed out item by
// item. f must be safe to call concurrently.
func ForRange(n, chunk int, f func(lo, hi int)) {
	chunk = max(chunk, 1)
	For((n+chunk-1)/chunk, 1, func(c int) { f(c*chunk, min((c+1)*chunk, n)) })
}

// Pipeline calls work(0) … work(n-1) on every CPU, in chunks of chunk items, and then(i) for
// each i in order on the caller's goroutine, as soon as work(i) and every work before it have
// returned: a serial step that follows a parallel one overlaps it instead of waiting for all
// of it. work must be safe to call concurrently, and must not touch what then changes; then
// sees what work(i) wrote. It returns when every then has returned.
func Pipeline(n, chunk int, work, then func(i int)) {
	chunk = max(chunk, 1)
	chunks := (n + chunk - 1) / chunk
	done := make([]chan struct{}, chunks)
	for c := range done {
		done[c] = make(chan struct{})
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			y := newYielder(n)
			for c := int(next.Add(1)) - 1; c < chunks; c = int(next.Add(1)) - 1 {
				for i := c * chunk; i < min((c+1)*chunk, n); i++ {
					work(i)
					y.item()
				}
				close(done[c])
			}
		})
	}
	for c := range chunks {
		<-done[c]
		for i := c * chunk; i < min((c+1)*chunk, n); i++ {
			then(i)
		}
	}
	wg.Wait()
}

// ForThen is For(n, perWorker, work) followed by then(i) for each i in order on the caller's
// goroutine; a job of pipelineMin items or more is a Pipeline of chunks of chunk items
// instead, so that the serial thens overlap the work still to do.
func ForThen(n, perWorker, chunk int, work, then func(i int)) {
	if n < pipelineMin {
		For(n, perWorker, work)
		for i := range n {
			then(i)
		}
		return
	}
	Pipeline(n, chunk, work, then)
}

// pipelineMin is the size of a job from which ForThen overlaps the thens with the work: below
// it, waiting for all of the work costs less than the hand-over of each chunk.
const pipelineMin = 4096

// A worker of a job of yieldMin items or more that has run for yieldAfter without blocking lets
// the goroutines waiting for a P run (runtime.Gosched), checking the clock every yieldCheck
// items. The workers hold every P while a large job runs, and a goroutine the network wakes (a
// stream's sender, given its client's answer to the part before) otherwise waits for the
// scheduler to preempt one of them, up to 10 ms: at a million ServiceEntries the MCP client's
// delivery, about a hundred parts each sent once the one before is answered, runs alongside
// the translation, and took 2.9–6.0 s after the files were applied; yielding, 2.5–3.1 s, for no
// measurable CPU. Smaller jobs, such as a producer's write of a thousand resources, do not
// yield: they end within a few milliseconds anyway, and letting the streams in meanwhile made
// the write and its fan-out 5–10% slower (BenchmarkCompareEDS).
const (
	yieldMin   = 16384
	yieldCheck = 64
)

var yieldAfter = time.Millisecond // a variable for the tests

// yielder counts a worker's items and yields once yieldAfter has passed since it last did; of
// a job of fewer than yieldMin items, never.
type yielder struct {
	items int
	last  time.Time
	off   bool
}

func newYielder(n int) yielder {
	if n < yieldMin {
		return yielder{off: true}
	}
	return yielder{last: time.Now()}
}

// item notes an item done, and yields when it is time to.
func (y *yielder) item() {
	if y.off {
		return
	}
	if y.items++; y.items%yieldCheck != 0 {
		return
	}
	if now := time.Now(); now.Sub(y.last) >= yieldAfter {
		runtime.Gosched()
		y.last = now
	}
}
