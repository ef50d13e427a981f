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
