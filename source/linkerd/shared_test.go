package linkerd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

// One subscription per authority: however many streams ask for it, an authority's answer is
// computed once per change, and its updates encoded once per API.
func TestLinkerdSharedSubscription(t *testing.T) {
	f := start(t, Options{})
	f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
	const n = 50
	var streams []*stream
	for i := range n {
		streams = append(streams, f.get(t, i%2 == 1, path))
	}
	for _, s := range streams {
		assertKind(t, s.next(), "add", "10.0.0.1:9080")
	}
	before := f.srv.Stats()
	if before.Authorities != 1 {
		t.Fatalf("%d subscriptions for one authority", before.Authorities)
	}
	if before.Encodes != 2 {
		t.Fatalf("%d encodings of the first answer for %d streams, want 2 (one per package)", before.Encodes, n)
	}

	f.put(t, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep("10.0.0.2", 0, nil)))
	for _, s := range streams {
		assertKind(t, s.next(), "add", "10.0.0.2:9080")
	}
	after := f.srv.Stats()
	if got := after.Resolves - before.Resolves; got != 1 {
		t.Fatalf("%d resolutions for one change of one authority with %d streams, want 1", got, n)
	}
	if got := after.Encodes - before.Encodes; got != 2 {
		t.Fatalf("%d encodings for one change with %d streams, want 2 (one per package)", got, n)
	}

	// A change of another host resolves nothing of this authority.
	f.put(t, seColl, "bookinfo/ratings", serviceEntry("ratings.bookinfo.svc.cluster.local", ep("10.0.9.1", 0, nil)))
	time.Sleep(onlyOne)
	if got := f.srv.Stats().Resolves - after.Resolves; got != 0 {
		t.Fatalf("%d resolutions after a change of a host nobody asked for", got)
	}

	// The last stream gone, the subscription ends.
	for _, s := range streams {
		s.close()
	}
	deadline := time.Now().Add(wait)
	for f.srv.Stats().Authorities != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the subscription outlived its streams")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkLinkerdFanout: 1,000 streams on one authority (over loopback, on 10 connections),
// one endpoint change: the time until the last stream received it.
func BenchmarkLinkerdFanout(b *testing.B) {
	const streams, conns = 1000, 10
	f := start(b, Options{KeepaliveInterval: time.Hour})
	f.put(b, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	adds, removes := make(chan struct{}, streams), make(chan struct{}, streams)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range conns {
		conn, err := grpc.NewClient(f.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		for range streams / conns {
			recv, err := Get(ctx, conn, i%2 == 1, path)
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				for {
					u, err := recv()
					if err != nil {
						return
					}
					if u.Kind == "add" {
						adds <- struct{}{}
					} else {
						removes <- struct{}{}
					}
				}
			})
		}
	}
	drain := func(got chan struct{}) {
		for range streams {
			select {
			case <-got:
			case <-time.After(wait):
				b.Fatal("a stream got nothing")
			}
		}
	}
	drain(adds) // the first answers
	b.ResetTimer()
	for i := range b.N {
		// A new endpoint in place of the last one: an add, then a remove, to every stream.
		f.put(b, seColl, seName, serviceEntry(host, ep("10.0.0.1", 0, nil), ep(fmt.Sprintf("10.0.%d.%d", 1+i/250%250, 1+i%250), 0, nil)))
		drain(adds)
		b.StopTimer()
		if i > 0 {
			drain(removes)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(f.srv.Stats().Resolves), "resolves")
}

// A client that stops reading is reset after the send timeout, and its subscription let go:
// it holds nothing back and nothing of the bridge.
func TestLinkerdStuckClientIsReset(t *testing.T) {
	f := start(t, Options{SendTimeout: 200 * time.Millisecond})
	big := func(n, offset int) *networking.ServiceEntry {
		var eps []*networking.WorkloadEntry
		for i := range n {
			eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", offset, i/250, 1+i%250), 0, map[string]string{"padding": strings.Repeat("x", 100)}))
		}
		return serviceEntry(host, eps...)
	}
	f.put(t, seColl, seName, big(1000, 0))
	// A fixed window of 64 KiB: the server blocks once the client holds that much unread.
	conn, err := grpc.NewClient(f.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Get(ctx, conn, false, path); err != nil { // never read
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for f.srv.Stats().Authorities != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not subscribe")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; f.srv.Stats().Authorities != 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the stuck stream was not reset")
		}
		f.put(t, seColl, seName, big(1000, i%200)) // every address changes: a large add and remove
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkLinkerdIndexBuild: what the first stream after none pays, building the index of
// 10,000 ServiceEntries (and resolving its authority).
func BenchmarkLinkerdIndexBuild(b *testing.B) {
	const n = 10_000
	f := start(b, Options{})
	var rs []*mcpapi.Resource
	for i := range n {
		h := fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%100)
		rs = append(rs, resource(fmt.Sprintf("ns-%d/svc-%d", i%100, i), serviceEntry(h, ep(fmt.Sprintf("10.%d.%d.1", i/250%250, i%250), 0, nil))))
	}
	if _, err := f.store.Apply("test", store.Update{Collection: seColl, Resources: rs}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		h := newHub(f.store, "cluster.local")
		h.unsubscribe(h.subscribe(authority{host: "svc-1.ns-1.svc.cluster.local", port: 9080}))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/serviceentry")
}
