package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestForCallsEachIndexOnce: every index is called exactly once, whatever the split.
func TestForCallsEachIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, perWorker int }{{0, 1}, {1, 1}, {7, 1}, {1000, 64}, {1000, 1}, {5, 0}} {
		counts := make([]atomic.Int32, tc.n)
		For(tc.n, tc.perWorker, func(i int) { counts[i].Add(1) })
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Fatalf("n=%d perWorker=%d: index %d called %d times", tc.n, tc.perWorker, i, c)
			}
		}
	}
}

// TestForRangeCoversEachIndexOnce: the ranges cover [0, n) once each, whatever the chunk.
func TestForRangeCoversEachIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, chunk int }{{0, 4}, {1, 4}, {7, 3}, {4096, 4096}, {10000, 1000}, {10001, 1000}, {5, 0}} {
		counts := make([]atomic.Int32, tc.n)
		ForRange(tc.n, tc.chunk, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				counts[i].Add(1)
			}
		})
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Fatalf("n=%d chunk=%d: index %d covered %d times", tc.n, tc.chunk, i, c)
			}
		}
	}
}

// TestPipelineThenFollowsEachWorkInOrder: every index is worked once and then handed to then
// once, in order, after its own work, by Pipeline and by ForThen (then reads what work wrote: the race detector checks
// that the hand-over orders them).
func TestPipelineThenFollowsEachWorkInOrder(t *testing.T) {
	cases := []struct {
		n, chunk int
		run      func(n, chunk int, work, then func(int))
	}{{0, 4, Pipeline}, {1, 4, Pipeline}, {7, 3, Pipeline}, {1000, 64, Pipeline}, {1000, 1, Pipeline}, {5, 0, Pipeline}}
	forThen := func(n, chunk int, work, then func(int)) { ForThen(n, chunk, chunk, work, then) }
	for _, n := range []int{0, 7, pipelineMin - 1, pipelineMin + 5} { // both of ForThen's ways
		cases = append(cases, struct {
			n, chunk int
			run      func(n, chunk int, work, then func(int))
		}{n, 64, forThen})
	}
	for _, tc := range cases {
		worked := make([]int, tc.n)
		var calls atomic.Int32
		var order []int
		tc.run(tc.n, tc.chunk, func(i int) {
			worked[i]++
			calls.Add(1)
		}, func(i int) {
			if worked[i] != 1 {
				t.Fatalf("n=%d chunk=%d: then(%d) before its work", tc.n, tc.chunk, i)
			}
			order = append(order, i)
		})
		if int(calls.Load()) != tc.n || len(order) != tc.n {
			t.Fatalf("n=%d chunk=%d: %d works, %d thens", tc.n, tc.chunk, calls.Load(), len(order))
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("n=%d chunk=%d: then called with %v, not in order", tc.n, tc.chunk, order)
			}
		}
	}
}

// TestLongJobsLetWaitingGoroutinesRun: a worker of a large job yields its P as it goes
// (yieldAfter, here 0: every yieldCheck items), so that a goroutine waiting for a P (a stream's
// sender, woken by its client's answer) runs within a few items, not once the scheduler
// preempts the worker, after up to 10 ms; a small job does not. On one P, where the workers
// hold the only one; each item is a few nanoseconds, so that without yielding the whole job
// ends long before any preemption.
func TestLongJobsLetWaitingGoroutinesRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	defer func(d time.Duration) { yieldAfter = d }(yieldAfter)
	yieldAfter = 0
	const n, within = 100000, 2 * yieldCheck
	jobs := map[string]func(f func(i int)){
		"For":      func(f func(i int)) { For(n, 1, f) },
		"Pipeline": func(f func(i int)) { Pipeline(n, n, f, func(int) {}) }, // one chunk: the caller waits throughout
	}
	for name, job := range jobs {
		var done atomic.Int64
		ranAt := make(chan int64, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			runtime.Gosched() // runnable again, waiting for the P from here on
			ranAt <- done.Load()
		}()
		<-started
		job(func(int) { done.Add(1) })
		if at := <-ranAt; at > within {
			t.Errorf("%s: the waiting goroutine ran after %d items of %d, want within %d", name, at, n, within)
		}
	}
	// A small job runs through: the waiting goroutine runs once it is done.
	var done atomic.Int64
	ranAt := make(chan int64, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		runtime.Gosched()
		ranAt <- done.Load()
	}()
	<-started
	For(yieldMin-1, 1, func(int) { done.Add(1) })
	if at := <-ranAt; at != yieldMin-1 {
		t.Errorf("a job of %d items let a waiting goroutine run after %d of them", yieldMin-1, at)
	}
}
