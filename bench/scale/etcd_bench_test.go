package scale

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
)

// BenchmarkScaleRestartFromEtcd is the warm restart, black box: a bridge with store.backend
// etcd ingests N ServiceEntries from files into a real etcd and stops; a second bridge
// process, with no files and no producer, starts on the same etcd. It reports that second
// process's time to /readyz and to a client holding every ServiceEntry, cluster and
// endpoint assignment, and its peak RSS.
func BenchmarkScaleRestartFromEtcd(b *testing.B) {
	bin := buildBridge(b)
	n, files := *scaleN, *scaleFiles
	cluster := etcdtest.Start(b, 1)
	for i := range b.N {
		store := fmt.Sprintf("store:\n  backend: etcd\n  etcd:\n    endpoints: [%s]\n    prefix: /scale-%d/\n",
			strings.Join(cluster.Endpoints(), ", "), i)
		dir := b.TempDir()
		if err := Write(dir, n, files); err != nil {
			b.Fatal(err)
		}
		first := startBridgeWith(b, bin, dir, store, false)
		c := dialClient(b, first.grpcAddr)
		first.waitReady(b, 5*time.Minute)
		c.waitHolding(b, n, nil, 5*time.Minute)
		b.Logf("first bridge: %d ServiceEntries from files into etcd, held by a client after %s", n, time.Since(first.started).Round(time.Millisecond))
		c.close()
		first.stop(b)

		second := startBridgeWith(b, bin, "", store, false)
		c = dialClient(b, second.grpcAddr)
		ready := second.waitReady(b, 5*time.Minute)
		c.waitHolding(b, n, nil, 5*time.Minute)
		held := time.Since(second.started)
		rss, _ := PeakRSS(second.cmd.Process.Pid)
		b.ReportMetric(ready.Seconds(), "s-to-ready")
		b.ReportMetric(held.Seconds(), "s-to-held")
		b.ReportMetric(float64(rss)/(1<<20), "MiB-peak-RSS")
		c.close()
		second.stop(b)
	}
}
