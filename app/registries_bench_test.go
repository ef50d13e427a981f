package app

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/internal/kubetest"
)

// BenchmarkBridgeServesTenThousandKubernetesObjects measures a bridge reading 10,000 Istio
// objects from an API server (ServiceEntries, VirtualServices, DestinationRules in 10
// namespaces): from its start to /readyz 200, which waits for the Kubernetes source's first
// full read and for its translation, reported as s-ready; then checks the store holds them
// all. The target is 5 s.
func BenchmarkBridgeServesTenThousandKubernetesObjects(b *testing.B) {
	namespaces := make([]string, 10)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("bench-%d", i)
	}
	srv := kubetest.Start(b, namespaces...)
	srv.InstallIstioCRDs(b)
	want := srv.CreateIstioObjects(b, namespaces, 10000)
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		cfg := DefaultConfig()
		cfg.GRPC.ShutdownGrace = time.Second
		cfg.Sources.Files = nil
		cfg.Sources.Kubernetes = &KubernetesSourceConfig{Kubeconfig: srv.Kubeconfig}
		start := time.Now()
		r, stop := serveOnLoopback(b, cfg)
		for {
			if code, _ := httpGet(b, r.httpURL+"/readyz"); code == 200 {
				break
			}
			if time.Since(start) > time.Minute {
				b.Fatal("not ready after a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		total += time.Since(start)
		b.StopTimer()
		for coll, n := range want {
			if got := r.Store().View().Collection(coll).Count; got != n {
				b.Fatalf("%s: %d served, want %d", coll, got, n)
			}
		}
		stop()
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-ready")
}
