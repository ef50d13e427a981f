package scale

import (
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/bridgetest"
)

// BenchmarkScaleInProcess is BenchmarkScaleFromFiles with the bridge in the test's process, so
// that -cpuprofile and -memprofile show where the time and memory go:
//
//	go test -run '^$' -bench ScaleInProcess -benchtime 1x ./internal/scale -scale.n=100000 -cpuprofile cpu.out
func BenchmarkScaleInProcess(b *testing.B) {
	n, files := *scaleN, *scaleFiles
	for range b.N {
		dir := b.TempDir()
		if err := Write(dir, n, files); err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		br := bridgetest.Start(b, bridgetest.WithFiles(dir), bridgetest.WithWaitTimeout(5*time.Minute))
		ready := time.Since(started)
		c := dialClient(b, br.GRPCAddr())
		c.waitHolding(b, n, nil, 5*time.Minute)
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(time.Since(started).Seconds(), "s-to-held")
		before := c.versions()
		edited := time.Now()
		count, err := WriteFile(dir, n, files, 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		c.waitHolding(b, n, func(h *holdings) bool { return h.changedIn(before, 0, files, n) == count }, time.Minute)
		b.ReportMetric(time.Since(edited).Seconds()*1000, "ms-edit-to-served")
		c.close()
	}
}
