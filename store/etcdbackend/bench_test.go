package etcdbackend

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/internal/etcdtest"
	"github.com/mcpbridge/mcpbridge/store"
)

var restartN = flag.Int("etcd.n", 10_000, "resources in etcd for BenchmarkRestartToReady (make bench-scale: 100,000)")

// startBenchReplica is startReplica for benchmarks.
func startBenchReplica(b *testing.B, st *store.Store, cfg Options) *Backend {
	b.Helper()
	cfg.Store = st
	be, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() {
		cancel()
		be.Close()
	})
	if err := be.Start(ctx); err != nil {
		b.Fatal(err)
	}
	return be
}

// BenchmarkChangesThroughEtcd: producers on three replicas each push one-resource incremental
// changes, waiting for each ACK (as an MCP producer does); every replica applies every change.
// Reports accepted changes/s in total, and the latency from a push's start to the moment
// another replica serves it (p50, p99).
func BenchmarkChangesThroughEtcd(b *testing.B) {
	cluster := etcdtest.Start(b, 3)
	cli := cluster.Client()
	var replicas []*Backend
	var stores []*store.Store
	for i := range 3 {
		st := store.New(store.Options{})
		stores = append(stores, st)
		replicas = append(replicas, startBenchReplica(b, st, Options{Client: cli, Replica: fmt.Sprint("r", i), Prefix: "/bench-changes/"}))
	}
	const perProducer = 300
	var mu sync.Mutex
	var latencies []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var wg sync.WaitGroup
		for i, r := range replicas {
			other := stores[(i+1)%3]
			wg.Go(func() {
				w := other.Watch("bench/things")
				defer w.Close()
				for j := range perProducer {
					name := fmt.Sprintf("ns/p%d-%d", i, j%50)
					content := fmt.Sprintf("%d-%d-%d", i, j, start.UnixNano())
					pushed := time.Now()
					if _, err := r.Apply(fmt.Sprint("producer-", i), store.Update{Collection: "bench/things", Resources: []*mcpapi.Resource{resource(b, name, content)}}); err != nil {
						b.Error(err)
						return
					}
					for !servedWith(other, "bench/things", name, content) {
						<-w.C()
					}
					mu.Lock()
					latencies = append(latencies, time.Since(pushed))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(3*perProducer)/time.Since(start).Seconds(), "changes/s")
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "ms-p50-other-replica")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "ms-p99-other-replica")
}

func servedWith(st *store.Store, coll, name, content string) bool {
	e := st.View().Get(coll, name)
	if e == nil {
		return false
	}
	_, v := e.Body()
	return len(v) >= len(content) && string(v[len(v)-len(content):]) == content
}

// BenchmarkRestartToReady: etcd holds -etcd.n resources (100 producers); a replica starting
// with an empty store loads them and is ready. Reports the time to ready and the replica's
// heap in use once loaded.
func BenchmarkRestartToReady(b *testing.B) {
	cluster := etcdtest.Start(b, 1)
	cli := cluster.Client()
	writer := startBenchReplica(b, store.New(store.Options{}), Options{Client: cli, Replica: "writer", Prefix: "/bench-restart/"})
	const owners = 100
	per := *restartN / owners
	filled := time.Now()
	for o := range owners {
		rs := make([]*mcpapi.Resource, per)
		for i := range rs {
			rs[i] = serviceEntryLike(b, fmt.Sprintf("ns%d/se-%d", o, i), i)
		}
		if _, err := writer.Apply(fmt.Sprint("producer-", o), store.Update{Collection: "istio/networking/v1alpha3/serviceentries", Full: true, Resources: rs}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %d resources through the backend in %s", owners*per, time.Since(filled).Round(time.Millisecond))
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		st := store.New(store.Options{})
		start := time.Now()
		be := startBenchReplica(b, st, Options{Client: cli, Replica: "restarted", Prefix: "/bench-restart/"})
		took := time.Since(start)
		if ok, why := be.Ready(); !ok {
			b.Fatalf("not ready after Start: %s", why)
		}
		if _, es := st.View().Snapshot("istio/networking/v1alpha3/serviceentries"); len(es) != owners*per {
			b.Fatalf("loaded %d resources, want %d", len(es), owners*per)
		}
		b.StopTimer()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(took.Seconds(), "s-to-ready")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "MiB-heap-replica")
		b.ReportMetric(float64(owners*per), "resources")
		runtime.KeepAlive(st)
		b.StartTimer()
	}
}

// serviceEntryLike is a resource of a ServiceEntry's size (about 250 bytes).
func serviceEntryLike(b testing.TB, name string, i int) *mcpapi.Resource {
	return resource(b, name, fmt.Sprintf("hosts: [svc-%d.shop.svc.cluster.local] ports: [{number: 8080, name: http, protocol: HTTP}] resolution: STATIC endpoints: [{address: 10.%d.%d.%d, labels: {app: shop, version: v1}}]", i, i>>16&255, i>>8&255, i&255))
}
