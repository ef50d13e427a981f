package source

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	mcpapi "istio.io/api/mcp/v1alpha1"

	mcp "github.com/mcpbridge/mcpbridge/api/mcp/v1alpha1"
	"github.com/mcpbridge/mcpbridge/store"
)

// fleet is n ResourceSource sinks over a few loopback connections, each ACKing every response
// and reporting when it received a given resource version.
type fleet struct {
	streams  []grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources]
	received chan time.Time
	want     atomic.Value // string: the version of ns/changed to report
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

func startFleet(tb testing.TB, addr string, n, conns int) *fleet {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{received: make(chan time.Time, n), cancel: cancel}
	f.want.Store("")
	var cc []*grpc.ClientConn
	for range conns {
		cc = append(cc, dialTB(tb, addr))
	}
	firsts := make(chan struct{}, n)
	for i := range n {
		stream, err := mcp.NewResourceSourceClient(cc[i%conns]).EstablishResourceStream(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		stream.Send(&mcp.RequestResources{Collection: seColl, Incremental: true, SinkNode: &mcp.SinkNode{Id: fmt.Sprint("sink-", i)}})
		f.streams = append(f.streams, stream)
		f.wg.Go(func() { f.serve(stream, firsts) })
	}
	for range n {
		select {
		case <-firsts:
		case <-time.After(30 * time.Second):
			tb.Fatal("fleet did not receive its first responses")
		}
	}
	return f
}

func (f *fleet) serve(stream grpc.BidiStreamingClient[mcp.RequestResources, mcp.Resources], firsts chan<- struct{}) {
	first := true
	for {
		m, err := stream.Recv()
		if err != nil {
			return
		}
		want := f.want.Load().(string)
		for _, r := range m.Resources {
			if want != "" && r.Metadata.Version == want {
				f.received <- time.Now()
			}
		}
		stream.Send(&mcp.RequestResources{Collection: m.Collection, ResponseNonce: m.Nonce})
		if first {
			first = false
			firsts <- struct{}{}
		}
	}
}

func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
}

func dialTB(tb testing.TB, addr string) *grpc.ClientConn { return dialTest(tb, addr) }

// Each body is marshalled once per version (by the store), and each response once per
// revision range, however many streams receive it.
func TestEachChangeIsEncodedOnceForEveryStream(t *testing.T) {
	b := startBridge(t)
	b.put(t, seColl, "ns/a")
	const n = 50
	f := startFleet(t, b.addr, n, 5)
	defer f.stop()
	waitIdle(t, b.engine, n)

	before, storeBefore := b.engine.Stats(), b.store.Stats()
	r := b.store
	res := serviceEntry("ns/changed", "changed.example")
	f.want.Store(versionOf(t, res))
	if _, err := r.Apply("test", store.Update{Collection: seColl, Resources: []*mcpapi.Resource{res}}); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case <-f.received:
		case <-time.After(10 * time.Second):
			t.Fatal("not every stream received the change")
		}
	}
	after, storeAfter := b.engine.Stats(), b.store.Stats()
	if got := storeAfter.Marshals - storeBefore.Marshals; got != 1 {
		t.Errorf("the changed resource was marshalled %d times, want once", got)
	}
	if got := after.Encodes - before.Encodes; got != 1 {
		t.Errorf("the response was encoded %d times for %d streams, want once", got, n)
	}
	if got := after.FrameHits - before.FrameHits; got != n-1 {
		t.Errorf("%d streams reused the encoded response, want %d", got, n-1)
	}
}

// versionOf is the version the store gives a resource without one: its content hash.
func versionOf(t testing.TB, r *mcpapi.Resource) string {
	t.Helper()
	s := store.New(store.Options{})
	res, err := s.Apply("x", store.Update{Collection: "c", Resources: []*mcpapi.Resource{{Metadata: &mcpapi.Metadata{Name: r.Metadata.Name}, Body: r.Body}}})
	if err != nil || res.Changed != 1 {
		t.Fatal(err)
	}
	return s.View().Get("c", r.Metadata.Name).Version
}

// waitIdle waits until n streams are connected with nothing unacknowledged.
func waitIdle(tb testing.TB, eng *Engine, n int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		clients := eng.Clients()
		idle := 0
		for _, c := range clients {
			if len(c.Subscriptions) == 1 && c.Subscriptions[0].Pending == "" && c.Subscriptions[0].SentVersion != "" {
				idle++
			}
		}
		if idle == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.Fatalf("streams not idle within 30s")
}

// BenchmarkFanOut1000Streams: one change delivered to 1,000 subscribed ResourceSource streams
// over loopback gRPC. Reports p50, p99 and the last stream's delivery time. Allocations and
// bytes are the whole process's (server and the 1,000 clients decoding) per delivered resource.
func BenchmarkFanOut1000Streams(b *testing.B) {
	br := startBridge(b)
	const n = 1000
	br.put(b, seColl, "ns/a")
	f := startFleet(b, br.addr, n, 20)
	defer f.stop()
	waitIdle(b, br.engine, n)

	var p50s, p99s, lasts []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res := serviceEntry("ns/changed", fmt.Sprintf("changed-%d.example", i))
		b.StopTimer()
		f.want.Store(versionOf(b, res))
		b.StartTimer()
		start := time.Now()
		if _, err := br.store.Apply("test", store.Update{Collection: seColl, Resources: []*mcpapi.Resource{res}}); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, n)
		for range n {
			select {
			case at := <-f.received:
				lat = append(lat, at.Sub(start))
			case <-time.After(30 * time.Second):
				b.Fatal("not every stream received the change")
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		p50s, p99s, lasts = append(p50s, lat[n/2]), append(p99s, lat[n*99/100]), append(lasts, lat[n-1])
		waitIdle(b, br.engine, n) // every ACK in before the next change
		b.StartTimer()
	}
	b.ReportMetric(ms(median(p50s)), "p50-ms")
	b.ReportMetric(ms(median(p99s)), "p99-ms")
	b.ReportMetric(ms(median(lasts)), "last-ms")
	b.ReportMetric(0, "ns/op") // the per-op time includes the waits; the latencies above are the figures
}

// BenchmarkFirstFullState10k: the first full state of 10,000 ServiceEntries to one new stream:
// time to the response, and the peak heap growth while it is built and sent.
func BenchmarkFirstFullState10k(b *testing.B) {
	br := startBridge(b)
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%d/svc-%d", i%50, i)
	}
	br.put(b, seColl, names...)
	conn := dialTest(b, br.addr)
	var peak uint64
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		stopSampling := sampleHeap(&peak)
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx, grpc.MaxCallRecvMsgSize(64<<20))
		if err != nil {
			b.Fatal(err)
		}
		stream.Send(&mcp.RequestResources{Collection: seColl})
		m, err := stream.Recv()
		if err != nil || len(m.Resources) != 10000 {
			b.Fatalf("first response: %d resources, %v", len(m.GetResources()), err)
		}
		cancel()
		stopSampling()
		if peak > base.HeapAlloc {
			b.ReportMetric(float64(peak-base.HeapAlloc)/(1<<20), "peak-heap-MiB")
		}
	}
}

// sampleHeap records the highest HeapAlloc until stopped. (A benchmark's own measurement; no
// part of the bridge polls.)
func sampleHeap(peak *uint64) func() {
	*peak = 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > *peak {
				*peak = ms.HeapAlloc
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkIdleStreamMemory: memory held per idle subscribed stream, once 1,000 ResourceSource
// streams have their first response ACKed. The figure is process-wide, so it is an upper bound
// for the bridge: it includes both ends of each stream (the client and its gRPC buffers live in
// this process too).
func BenchmarkIdleStreamMemory(b *testing.B) {
	const n = 1000
	for b.Loop() {
		br := startBridge(b)
		br.put(b, seColl, "ns/a", "ns/b", "ns/c")
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		f := startFleet(b, br.addr, n, 20)
		waitIdle(b, br.engine, n)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/idle-stream")
		// Goroutine stacks are not heap: the bridge runs three per stream (handler, loop, receiver).
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-bytes/idle-stream")

		f.stop()
	}
}
