package parallel

import (
	"sync/atomic"
	"testing"
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
