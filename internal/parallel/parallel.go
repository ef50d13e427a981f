// Package parallel runs independent pieces of one job on every CPU.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// For calls f(0) … f(n-1) and returns when all have returned. It uses up to GOMAXPROCS
// goroutines, one per perWorker items at least, so that small jobs run on the caller's
// goroutine without the cost of starting others. f must be safe to call concurrently.
func For(n, perWorker int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/max(perWorker, 1))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}
