package scale

import (
	"flag"
	"testing"
	"time"
)

var (
	idleStreams  = flag.Int("scale.streams", 10000, "idle streams in BenchmarkIdleStreams")
	profilesInto = flag.String("scale.profiles", "", "save the bridge's heap and goroutine profiles into this directory once the streams are idle (BenchmarkScaleFromFiles: once both clients hold everything, and its allocations up to /readyz 200 as allocs-at-ready, to diff with)")
)

// BenchmarkIdleStreams holds many idle delta ADS streams, each subscribed by wildcard to 1,000
// ServiceEntries and holding them, on a real mcpbridge process, and reports its resident memory
// per stream and in all (from outside: /proc, VmRSS) against the same process with no stream.
func BenchmarkIdleStreams(b *testing.B) {
	bin := buildBridge(b)
	n := *idleStreams
	for range b.N {
		dir := b.TempDir()
		if err := Write(dir, 1000, 10); err != nil {
			b.Fatal(err)
		}
		p := startBridge(b, bin, dir)
		c := dialClient(b, p.grpcAddr)
		p.waitReady(b, time.Minute)
		c.waitHolding(b, 1000, nil, time.Minute)
		c.close()
		time.Sleep(time.Second) // let the load's garbage go before the baseline
		base, err := RSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		fleet := startDeltaFleet(b, p.grpcAddr, n)
		time.Sleep(2 * time.Second) // ACKs processed; idle
		// At rest the runtime collects at least every two minutes, shrinking stacks and
		// freeing the load's garbage; two collections now stand for that wait, so that the
		// figure is what idle streams hold, not what setting them up left behind.
		p.collectGarbage(b)
		p.collectGarbage(b)
		time.Sleep(time.Second)
		rss, err := RSS(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		if *profilesInto != "" {
			p.saveProfiles(b, *profilesInto, "heap", "goroutine")
			p.saveMetrics(b, *profilesInto)
		}
		b.ReportMetric(float64(rss-base)/float64(n)/1024, "KiB/stream")
		b.ReportMetric(float64(rss)/(1<<20), "MiB-RSS")
		fleet.stop()
		p.stop(b)
	}
}
