package scale

import (
	"flag"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/bridgetest"
)

// BenchmarkScaleInProcess is BenchmarkScaleFromFiles with the bridge in the test's process, so
// that -cpuprofile and -memprofile show where the time and memory go:
//
//	go test -run '^$' -bench ScaleInProcess -benchtime 1x ./bench/scale -scale.n=100000 -cpuprofile cpu.out
//
// -scale.heapprofile writes a heap profile once the client holds everything (the test's
// -memprofile is written after the bridge has stopped).
var (
	heapProfile = flag.String("scale.heapprofile", "", "write a heap profile here once everything is held")
	showLog     = flag.Bool("scale.log", false, "print the bridge's log (info and above)")
	editProfile = flag.String("scale.editprofile", "", "write a CPU profile of the edit (from the write to served) here")
)

func BenchmarkScaleInProcess(b *testing.B) {
	n, files := *scaleN, *scaleFiles
	for range b.N {
		dir := b.TempDir()
		if err := Write(dir, n, files); err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		opts := []bridgetest.Option{bridgetest.WithFiles(dir), bridgetest.WithWaitTimeout(5 * time.Minute)}
		if *showLog {
			opts = append(opts, bridgetest.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		}
		br := bridgetest.Start(b, opts...)
		ready := time.Since(started)
		c := dialClient(b, br.GRPCAddr())
		c.waitHolding(b, n, nil, 5*time.Minute)
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(time.Since(started).Seconds(), "s-to-held")
		if *heapProfile != "" {
			writeHeapProfile(b, *heapProfile)
		}
		if *editProfile != "" {
			f, err := os.Create(*editProfile)
			if err != nil {
				b.Fatal(err)
			}
			pprof.StartCPUProfile(f)
		}
		editAndWait(b, []*client{c}, dir, n, files)
		if *editProfile != "" {
			pprof.StopCPUProfile()
		}
		c.close()
	}
}

func writeHeapProfile(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
